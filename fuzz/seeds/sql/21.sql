INSERT /* ? */ INTO t # ? comment
 (a) -- ? also
 VALUES (? /* ? */);