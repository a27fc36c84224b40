/* lead $3 */ INSERT /* c */ INTO -- c $4
 t (a) VALUES /* $9 */ ($1 -- $5
) /* end $2 */ ; -- after