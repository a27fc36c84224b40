SELECT "a""b", 'it''s $1' FROM t WHERE id = $1 -- $2
