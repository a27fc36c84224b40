-- wrk script for `http_load --serve-only`: POST /events with the JSON body
-- the built-in clients send ({"key": ..., "data": "event N payload 000...N"}),
-- each key unique: the script's argument (a run tag), the wrk thread, a counter.
--
--   wrk -t2 -c256 -d15s --latency -s benches/http_load.lua http://127.0.0.1:18080 -- run1

local threads = {}

function setup(thread)
   table.insert(threads, thread)
   thread:set("thread_id", #threads)
end

function init(args)
   tag = args[1] or "wrk"
   counter = 0
   headers = { ["Content-Type"] = "application/json" }
end

function request()
   counter = counter + 1
   local body = string.format(
      '{"key":"%s-%d-%d","data":"event %d payload %064d"}',
      tag, thread_id, counter, counter, counter)
   return wrk.format("POST", "/events", headers, body)
end
