DELETE FROM sessions WHERE token = $1 -- gone
