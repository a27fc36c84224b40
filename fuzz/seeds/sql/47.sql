update "T" x set "V" = $1 -- set it
 where x."K" = $2 ;