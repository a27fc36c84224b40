//! A generator of single-row INSERT texts, driven by the fuzzer's bytes, so
//! that the render check runs on batchable statements far more often than
//! on random bytes: the PostgreSQL or the MySQL form (verbs, `INTO`, schema
//! and alias, quoted and Unicode names, column lists), a VALUES tuple of
//! nested expressions (every literal form of the dialect, casts, calls,
//! arrays, sub-queries, operators), `ON CONFLICT` / `ON DUPLICATE KEY
//! UPDATE`, `RETURNING`, a terminator — with whitespace and comments of
//! every kind between the tokens. Now and then it writes what the
//! classifier must decline (a placeholder out of place, a second row, a
//! modifier, a raw fragment of SQL punctuation), so both sides are explored.
//!
//! [`keyed_statement`] writes keyed reads, updates and deletes the same way:
//! `SELECT <list> FROM t [alias] WHERE k = $n [AND ...]`, `UPDATE t SET c =
//! <expression>, ... WHERE ...`, `DELETE FROM t WHERE ...`, with select
//! lists of columns, stars, casts, literals and arithmetic, conditions
//! either way round, and the names the rewrite uses, quoted or written
//! `U&"..."`; and their near misses: `ORDER BY`, `LIMIT`, `FOR UPDATE`,
//! `RETURNING`, `OR`, `IN`, subqueries (also `(TABLE t)`), calls in a
//! select list, `DEFAULT`, `ONLY`, joins and `USING` lists, a `WITH`
//! prefix, placeholders in the select list, the table or `LIMIT`, and a
//! second statement.

use libfuzzer_sys::arbitrary::{Result, Unstructured};

/// Deepest expression nesting generated.
const MAX_DEPTH: usize = 5;

/// Builds a keyed read, update or delete text (or a near miss) from `data`.
pub fn keyed_statement(data: &[u8]) -> Result<String> {
    let mut u = Unstructured::new(data);
    let mysql = u.ratio(1, 8)?;
    let mut g = Gen {
        u: &mut u,
        mysql,
        out: String::new(),
        params: 0,
    };
    g.keyed()?;
    Ok(g.out)
}

/// Builds the statement text from `data`.
pub fn statement(data: &[u8]) -> Result<String> {
    let mut u = Unstructured::new(data);
    let mysql = u.arbitrary::<bool>()?;
    let mut g = Gen {
        u: &mut u,
        mysql,
        out: String::new(),
        params: 0,
    };
    g.insert()?;
    Ok(g.out)
}

/// Plain names, some of them keywords the parser must not take for clauses.
const NAMES: &[&str] = &[
    "t",
    "users",
    "a",
    "b",
    "Id",
    "name",
    "value",
    "returning",
    "conflict",
    "do",
    "nothing",
    "excluded",
    "key",
    "update",
    "ümlaut",
    "x_1",
    "public",
    "where",
];

/// Names the keyed forms use, or that a reader of them might take for a
/// clause or for the rewrite's own names.
const KEYED_NAMES: &[&str] = &[
    "id",
    "k",
    "v",
    "Id",
    "\"Id\"",
    "set",
    "from",
    "only",
    "using",
    "unnest",
    "ordinality",
    "ord",
    "batchpool",
    "\"batchpool\"",
    "a$1",
    "\"a\"\"b\"",
    "\"x y\"",
];

/// The rewrite's own names, quoted in the ways the server reads them.
const REWRITE_NAMES: &[&str] = &[
    "\"batchpool keys\"",
    "\"batchpool 1\"",
    "\"batchpool ord\"",
    "\"Batchpool keys\"",
    "\"batchpool\"",
    "U&\"batchpool\\0020keys\"",
    "u&\"batchpool\\0020ord\"",
    "U&\"batchpool!0020keys\" UESCAPE '!'",
    "U&\"batchpool\\+0000201\"",
    "U&\"d\\0061t\"",
];

/// Values of an update the rewrite does not cover (a subquery in one of
/// its forms, `DEFAULT`, a row) or that hide a placeholder.
const ODD_VALUES: &[&str] = &[
    "DEFAULT",
    "(TABLE u)",
    "coalesce((TABLE u), 0)",
    "1 + (TABLE t)",
    "(VALUES (1))",
    "ARRAY(SELECT 1)",
    "(WITH x AS (SELECT 1) SELECT 1)",
    "EXISTS (SELECT 1)",
    "ROW(1, 2)",
    "$a$ $1 $a$",
    "$1$x$1$",
    "'$1'",
    "E'\\'$1'",
    "a$1",
    "U&\"batchpool\\0020keys\".x",
    "u&\"batchpool\\0020ord\"",
    "v IN (VALUES (1))",
];

/// Clauses after the WHERE conditions that the keyed forms do not have.
const KEYED_TAILS: &[&str] = &[
    "ORDER BY id",
    "LIMIT 1",
    "OFFSET 1",
    "FOR UPDATE",
    "FOR SHARE",
    "FOR NO KEY UPDATE SKIP LOCKED",
    "RETURNING *",
    "RETURNING v",
    "GROUP BY id",
    "HAVING true",
    "UNION SELECT 1",
    "FETCH FIRST 1 ROW ONLY",
    "WINDOW w AS ()",
    "IS TRUE",
    "COLLATE \"C\"",
];

/// Function names.
const FUNCTIONS: &[&str] = &[
    "lower",
    "now",
    "coalesce",
    "concat",
    "nextval",
    "gen_random_uuid",
    "IFNULL",
    "json_build_object",
    "VALUES",
    "ROW",
    "pg_catalog.upper",
];

/// Type names for casts.
const TYPES: &[&str] = &[
    "int",
    "text",
    "jsonb",
    "numeric(10, 2)",
    "varchar(3)",
    "int[]",
    "SIGNED",
    "CHAR",
    "timestamp with time zone",
    "\"MyType\"",
];

/// Binary operators of both dialects (some only one understands).
const OPERATORS: &[&str] = &[
    "+", "-", "*", "/", "%", "||", "=", "<>", "!=", "<=", ">=", "<", ">", "AND", "OR", "->>", "->",
    "#>", "@>", "<@", "~", "~*", "!~", "&&", "|", "&", "^", "<<", ">>", "IS NOT", "LIKE", "DIV",
    "MOD", ":=", "<=>", "-/", "~-", "?", "?|",
];

/// Characters comment and string bodies are made of: ordinary text and
/// every character that ends or starts something in one of the lexers.
const BODY: &[char] = &[
    'a', 'b', ' ', ' ', '1', '$', '?', '\'', '"', '`', '\\', '*', '/', '-', '#', '!', 'M', ';',
    '(', ')', ',', '\n', '\r', '\t', 'é', '😀', '\u{a0}', 'x', 'E', 'N', '_',
];

struct Gen<'a, 'b> {
    u: &'a mut Unstructured<'b>,
    mysql: bool,
    out: String,
    /// Highest PostgreSQL `$k` so far (MySQL: `?` count).
    params: usize,
}

impl Gen<'_, '_> {
    /// True once in `n` draws (false once the input has run out, when
    /// `Unstructured` answers every draw with the low end of its range).
    fn one_in(&mut self, n: u8) -> Result<bool> {
        Ok(self.u.int_in_range(1..=n)? == n)
    }

    fn pick<'s>(&mut self, from: &[&'s str]) -> Result<&'s str> {
        Ok(*self.u.choose(from)?)
    }

    /// A short body of [`BODY`] characters; with `avoid`, none of those.
    fn body(&mut self, avoid: &[char]) -> Result<String> {
        let len = self.u.int_in_range(0..=12)?;
        let mut s = String::new();
        for _ in 0..len {
            let c = *self.u.choose(BODY)?;
            if !avoid.contains(&c) {
                s.push(c);
            }
        }
        Ok(s)
    }

    /// Whitespace or a comment between two tokens (never nothing: tokens
    /// that touch are [`Gen::glued`]).
    fn gap(&mut self) -> Result<()> {
        let gap = match self.u.int_in_range(0..=15)? {
            0..=7 => " ".to_owned(),
            8 => "\n".to_owned(),
            9 => "\t  ".to_owned(),
            10 => "\r\n".to_owned(),
            11 => format!(" /*{}*/ ", self.body(&['*', '/'])?),
            12 => format!(" -- {}\n", self.body(&['\n', '\r'])?),
            13 if self.mysql => format!(" # {}\n", self.body(&['\n', '\r'])?),
            13 => format!(" /* a /* {} */ b */ ", self.body(&['*', '/'])?),
            14 => format!("/*{}*/", self.body(&[])?),
            _ => match self.u.int_in_range(0..=5)? {
                0 => "\u{a0}".to_owned(),
                1 => format!("--{}\n", self.body(&['\n'])?),
                2 => "/*!  */".to_owned(),
                3 => "/*M! */".to_owned(),
                4 => "\u{b}".to_owned(),
                _ => format!("#{}\n", self.body(&['\n'])?),
            },
        };
        self.out.push_str(&gap);
        Ok(())
    }

    /// A token after a gap.
    fn tok(&mut self, text: &str) -> Result<()> {
        self.gap()?;
        self.out.push_str(text);
        Ok(())
    }

    /// Punctuation, usually glued to what precedes it.
    fn glued(&mut self, text: &str) -> Result<()> {
        if self.one_in(3)? {
            self.gap()?;
        }
        self.out.push_str(text);
        Ok(())
    }

    /// A keyword in one of its spellings.
    fn kw(&mut self, word: &str) -> Result<()> {
        let spelled = match self.u.int_in_range(0..=3)? {
            0 => word.to_ascii_lowercase(),
            1 => {
                let mut s = word.to_ascii_lowercase();
                if let Some(first) = s.get_mut(..1) {
                    first.make_ascii_uppercase();
                }
                s
            }
            _ => word.to_owned(),
        };
        self.tok(&spelled)
    }

    /// A name: plain, quoted (with doubled quotes inside) or a keyword.
    fn name(&mut self) -> Result<()> {
        let quote = if self.mysql { '`' } else { '"' };
        let name = match self.u.int_in_range(0..=5)? {
            0..=3 => self.pick(NAMES)?.to_owned(),
            4 => {
                let body = self.body(&[quote, '\n'])?;
                let body = if body.is_empty() {
                    "q".to_owned()
                } else {
                    body
                };
                format!("{quote}{body}{quote}{quote}x{quote}")
            }
            _ => format!("{quote}{}{quote}", self.pick(NAMES)?),
        };
        self.tok(&name)
    }

    fn insert(&mut self) -> Result<()> {
        if self.one_in(4)? {
            self.gap()?;
        }
        if self.mysql {
            match self.u.int_in_range(0..=5)? {
                0..=3 => self.kw("INSERT")?,
                4 => {
                    self.kw("INSERT")?;
                    self.kw("IGNORE")?;
                }
                _ => self.kw("REPLACE")?,
            }
            if !self.one_in(4)? {
                self.kw("INTO")?;
            }
        } else {
            self.kw("INSERT")?;
            self.kw("INTO")?;
        }
        if self.one_in(24)? {
            let modifier = self.pick(&["LOW_PRIORITY", "DELAYED", "ONLY"])?;
            self.kw(modifier)?;
        }
        if self.one_in(3)? {
            self.name()?;
            self.glued(".")?;
        }
        self.name()?;
        if self.one_in(24)? {
            self.kw("PARTITION")?;
            self.glued("(p0)")?;
        }
        if !self.mysql && self.one_in(6)? {
            self.kw("AS")?;
            self.name()?;
        }

        let elements = if self.mysql {
            self.u.int_in_range(0..=6)?
        } else {
            self.u.int_in_range(1..=6)?
        };
        if !self.one_in(4)? {
            let columns = if self.one_in(16)? {
                elements + 1
            } else {
                elements
            };
            self.glued("(")?;
            for i in 0..columns {
                if i > 0 {
                    self.glued(",")?;
                }
                self.name()?;
            }
            self.glued(")")?;
        }
        if self.one_in(24)? {
            self.kw("OVERRIDING SYSTEM VALUE")?;
        }
        if self.mysql && self.one_in(4)? {
            self.kw("VALUE")?;
        } else {
            self.kw("VALUES")?;
        }
        self.tuple(elements)?;
        if self.one_in(24)? {
            self.glued(",")?;
            self.tuple(elements)?;
        }
        if self.mysql && self.one_in(24)? {
            self.kw("AS")?;
            self.tok("new")?;
        }

        if self.one_in(3)? {
            if self.mysql {
                self.duplicate_key()?;
            } else {
                self.on_conflict()?;
            }
        }
        if self.one_in(3)? {
            self.kw("RETURNING")?;
            if self.one_in(3)? {
                self.tok("*")?;
            } else {
                self.list(1, false)?;
            }
        }
        if self.one_in(24)? {
            let raw = self.body(&[])?;
            self.tok(&raw)?;
        }
        self.end()
    }

    /// The end of a statement: a `;`, spaces or comments, nothing, and
    /// sometimes a second statement.
    fn end(&mut self) -> Result<()> {
        match self.u.int_in_range(0..=7)? {
            0 => self.glued(";")?,
            1 => {
                self.glued(";")?;
                self.gap()?;
            }
            2 => self.gap()?,
            3 if self.one_in(4)? => {
                self.glued(";")?;
                self.tok("SELECT 1")?;
            }
            _ => {}
        }
        Ok(())
    }

    /// A keyed read, update or delete, now and then with a clause or a
    /// prefix the rewrite does not cover.
    fn keyed(&mut self) -> Result<()> {
        if self.one_in(4)? {
            self.gap()?;
        }
        if self.one_in(32)? {
            self.kw("WITH")?;
            self.tok("x")?;
            self.kw("AS")?;
            self.glued("(SELECT 1)")?;
        }
        match self.u.int_in_range(0..=2)? {
            0 => self.keyed_read()?,
            1 => self.keyed_update()?,
            _ => self.keyed_delete()?,
        }
        if self.one_in(8)? {
            match self.u.int_in_range(0..=3)? {
                0 => {
                    self.kw("LIMIT")?;
                    self.placeholder()?;
                }
                1 => {
                    let raw = self.body(&[])?;
                    self.tok(&raw)?;
                }
                _ => {
                    let tail = self.pick(KEYED_TAILS)?;
                    self.kw(tail)?;
                }
            }
        }
        self.end()
    }

    /// `SELECT <list> FROM <table> WHERE <conditions>`.
    fn keyed_read(&mut self) -> Result<()> {
        self.kw("SELECT")?;
        if self.one_in(24)? {
            let modifier = self.pick(&["DISTINCT", "ALL", "DISTINCT ON (id)"])?;
            self.kw(modifier)?;
        }
        let items = self.u.int_in_range(1..=4)?;
        for i in 0..items {
            if i > 0 {
                self.glued(",")?;
            }
            self.select_item()?;
        }
        if self.one_in(32)? {
            self.kw("INTO")?;
            self.name()?;
        }
        self.kw("FROM")?;
        self.keyed_table()?;
        self.keyed_where()
    }

    /// `UPDATE <table> SET c = <expression>, ... WHERE <conditions>`.
    fn keyed_update(&mut self) -> Result<()> {
        self.kw("UPDATE")?;
        self.keyed_table()?;
        self.kw("SET")?;
        let assignments = self.u.int_in_range(1..=3)?;
        for i in 0..assignments {
            if i > 0 {
                self.glued(",")?;
            }
            match self.u.int_in_range(0..=15)? {
                0..=9 => {
                    self.keyed_name()?;
                    self.tok("=")?;
                    self.expr(0, true)?;
                }
                10 | 11 => {
                    self.keyed_name()?;
                    self.tok("=")?;
                    self.placeholder()?;
                }
                12 => {
                    self.keyed_name()?;
                    self.tok("=")?;
                    let value = self.pick(ODD_VALUES)?;
                    self.tok(value)?;
                }
                13 => {
                    self.glued("(")?;
                    self.keyed_name()?;
                    self.glued(",")?;
                    self.keyed_name()?;
                    self.glued(")")?;
                    self.tok("=")?;
                    self.glued("(")?;
                    self.placeholder()?;
                    self.glued(",")?;
                    self.expr(1, true)?;
                    self.glued(")")?;
                }
                14 => {
                    self.column()?;
                    self.tok("=")?;
                    self.expr(1, true)?;
                }
                _ => {
                    self.keyed_name()?;
                    self.glued("[1]")?;
                    self.tok("=")?;
                    self.expr(1, true)?;
                }
            }
        }
        if self.one_in(24)? {
            self.kw("FROM")?;
            self.name()?;
        }
        self.keyed_where()
    }

    /// `DELETE FROM <table> WHERE <conditions>`.
    fn keyed_delete(&mut self) -> Result<()> {
        self.kw("DELETE")?;
        if !self.one_in(32)? {
            self.kw("FROM")?;
        }
        self.keyed_table()?;
        if self.one_in(24)? {
            self.kw("USING")?;
            self.name()?;
        }
        self.keyed_where()
    }

    /// A name of a keyed statement: the INSERT grammar's, the keyed
    /// forms' own, and now and then one of the rewrite's.
    fn keyed_name(&mut self) -> Result<()> {
        match self.u.int_in_range(0..=15)? {
            0..=7 => self.name(),
            8..=13 => {
                let name = self.pick(KEYED_NAMES)?;
                self.tok(name)
            }
            14 => {
                let name = self.pick(REWRITE_NAMES)?;
                self.tok(name)
            }
            _ => self.placeholder_or_name(),
        }
    }

    /// Rarely a placeholder where a name belongs, else a plain name.
    fn placeholder_or_name(&mut self) -> Result<()> {
        if self.one_in(4)? {
            self.placeholder()
        } else {
            self.tok("id")
        }
    }

    /// A column, sometimes qualified (by one or two names).
    fn column(&mut self) -> Result<()> {
        match self.u.int_in_range(0..=7)? {
            0..=4 => self.keyed_name(),
            5 | 6 => {
                self.keyed_name()?;
                self.glued(".")?;
                self.keyed_name()
            }
            _ => {
                self.keyed_name()?;
                self.glued(".")?;
                self.keyed_name()?;
                self.glued(".")?;
                self.keyed_name()
            }
        }
    }

    /// One item of a read's select list: mostly what the rewrite covers
    /// (stars, columns, aliases, casts, literals, arithmetic), now and then
    /// any expression (calls, subqueries, placeholders).
    fn select_item(&mut self) -> Result<()> {
        match self.u.int_in_range(0..=15)? {
            0..=2 => self.tok("*"),
            3..=5 => self.column(),
            6 => {
                self.keyed_name()?;
                self.glued(".*")
            }
            7 => {
                self.column()?;
                if self.u.arbitrary::<bool>()? {
                    self.kw("AS")?;
                }
                self.keyed_name()
            }
            8 => {
                let literal = self.pick(&["1", "0.5", "-1", "NULL", "TRUE", "1e3"])?;
                self.tok(literal)
            }
            9 => self.string(),
            10 => {
                self.column()?;
                self.glued("::")?;
                let ty = self.pick(&["text", "int", "int[]", "\"MyType\"", "pg_catalog.int8"])?;
                self.out.push_str(ty);
                Ok(())
            }
            11 | 12 => {
                self.column()?;
                let op = self.pick(&["+", "-", "*", "/", "%", "||", "^", "->>"])?;
                self.tok(op)?;
                if self.u.arbitrary::<bool>()? {
                    self.column()
                } else {
                    self.tok("2")
                }
            }
            13 => {
                self.tok("-")?;
                self.column()
            }
            14 => {
                self.column()?;
                self.glued("[1]")
            }
            _ => {
                let params = self.one_in(4)?;
                self.expr(1, params)
            }
        }
    }

    /// The table of a keyed statement: `[schema.]name [[AS] alias]`, now
    /// and then with `ONLY`, a join, a second table or a sample.
    fn keyed_table(&mut self) -> Result<()> {
        if self.one_in(24)? {
            self.kw("ONLY")?;
        }
        if self.one_in(4)? {
            self.keyed_name()?;
            self.glued(".")?;
        }
        self.keyed_name()?;
        match self.u.int_in_range(0..=15)? {
            0..=3 => {
                self.kw("AS")?;
                self.keyed_name()?;
            }
            4..=6 => self.keyed_name()?,
            7 => {
                let other = self.pick(&[
                    ", u",
                    "JOIN u ON true",
                    "LEFT JOIN u USING (id)",
                    "TABLESAMPLE SYSTEM (1)",
                    "*",
                    "NATURAL JOIN u",
                ])?;
                self.tok(other)?;
            }
            _ => {}
        }
        Ok(())
    }

    /// `WHERE <condition> [AND <condition> ...]` (now and then no WHERE at
    /// all, or another connective).
    fn keyed_where(&mut self) -> Result<()> {
        if self.one_in(32)? {
            return Ok(());
        }
        self.kw("WHERE")?;
        let conditions = self.u.int_in_range(1..=3)?;
        for i in 0..conditions {
            if i > 0 {
                if self.one_in(16)? {
                    let connective = self.pick(&["OR", "AND NOT", ","])?;
                    self.kw(connective)?;
                } else {
                    self.kw("AND")?;
                }
            }
            self.keyed_condition()?;
        }
        Ok(())
    }

    /// One condition: mostly `column = $n` either way round, now and then
    /// a form the rewrite does not cover.
    fn keyed_condition(&mut self) -> Result<()> {
        match self.u.int_in_range(0..=15)? {
            0..=9 => {
                self.column()?;
                self.tok("=")?;
                self.placeholder()
            }
            10 | 11 => {
                self.placeholder()?;
                self.tok("=")?;
                self.column()
            }
            12 => {
                self.glued("(")?;
                self.column()?;
                self.tok("=")?;
                self.placeholder()?;
                self.glued(")")
            }
            13 => {
                self.column()?;
                let op = self.pick(&["<>", "<", "IS NOT DISTINCT FROM", "LIKE", "= ANY", "IN"])?;
                self.tok(op)?;
                self.glued("(")?;
                self.placeholder()?;
                self.glued(")")
            }
            14 => {
                self.column()?;
                self.tok("=")?;
                self.expr(1, true)
            }
            _ => {
                self.column()?;
                self.tok("=")?;
                self.placeholder()?;
                let after = self.pick(&["::int", "+ 1", "[1]", " IS NULL", ".x"])?;
                self.glued(after)
            }
        }
    }

    /// `( e1, ..., en )`.
    fn tuple(&mut self, elements: usize) -> Result<()> {
        self.glued("(")?;
        for i in 0..elements {
            if i > 0 {
                self.glued(",")?;
            }
            self.expr(0, true)?;
        }
        if self.one_in(32)? {
            self.glued(",")?;
        }
        self.glued(")")
    }

    /// `n` or more comma-separated expressions (placeholders only when
    /// `params` or, rarely, by mistake).
    fn list(&mut self, n: usize, params: bool) -> Result<()> {
        let extra = self.u.int_in_range(0..=2)?;
        for i in 0..n + extra {
            if i > 0 {
                self.glued(",")?;
            }
            self.expr(1, params)?;
        }
        Ok(())
    }

    /// A placeholder: usually the next one or an earlier one again, rarely
    /// one the classifier must decline.
    fn placeholder(&mut self) -> Result<()> {
        let text = if self.mysql {
            if self.one_in(32)? {
                self.pick(&["?1", "??", ":a", "$1"])?.to_owned()
            } else {
                self.params += 1;
                "?".to_owned()
            }
        } else {
            match self.u.int_in_range(0..=31)? {
                31 => self
                    .pick(&["$0", "$65536", "$1abc", "$x", "?", "$1$"])?
                    .to_owned(),
                30 => format!("${}", self.params + 2),
                20..=29 if self.params > 0 => {
                    format!("${}", self.u.int_in_range(1..=self.params)?)
                }
                _ => {
                    self.params += 1;
                    format!("${}", self.params)
                }
            }
        };
        self.tok(&text)
    }

    /// A string literal of one of the dialect's forms.
    fn string(&mut self) -> Result<()> {
        let text = if self.mysql {
            match self.u.int_in_range(0..=6)? {
                0 => format!("'{}'", self.body(&['\'', '\\'])?),
                1 => format!("'{}'''", self.body(&['\'', '\\'])?),
                2 => format!("'{}\\''", self.body(&['\'', '\\'])?),
                3 => format!("\"{}\"", self.body(&['"', '\\'])?),
                4 => format!("_utf8mb4'{}'", self.body(&['\'', '\\'])?),
                5 => format!("N'{}'", self.body(&['\'', '\\'])?),
                _ => self.pick(&["x'0A'", "b'01'", "0x1F", "X''"])?.to_owned(),
            }
        } else {
            match self.u.int_in_range(0..=6)? {
                0 => format!("'{}'", self.body(&['\''])?),
                1 => format!("'{}''s'", self.body(&['\''])?),
                2 => format!("E'{}\\''", self.body(&['\'', '\\'])?),
                3 => format!("$${}$$", self.body(&['$'])?),
                4 => format!("$q$ {} $q$", self.body(&['$'])?),
                5 => format!("U&'{}'", self.body(&['\'', '\\'])?),
                _ => self
                    .pick(&["B'101'", "X'1F'", "'a' 'b'", "'{1,2}'"])?
                    .to_owned(),
            }
        };
        self.tok(&text)
    }

    /// An expression; placeholders only where `params`.
    fn expr(&mut self, depth: usize, params: bool) -> Result<()> {
        let leaf = depth >= MAX_DEPTH;
        let choice = if leaf {
            self.u.int_in_range(0..=3)?
        } else {
            self.u.int_in_range(0..=12)?
        };
        match choice {
            0 | 1 if params => self.placeholder(),
            0 | 1 if self.one_in(32)? => self.placeholder(),
            0 | 1 => self.tok("1"),
            2 => self.string(),
            3 => {
                let literal = self.pick(&[
                    "1",
                    "0.5",
                    ".5",
                    "1e3",
                    "-1",
                    "NULL",
                    "DEFAULT",
                    "TRUE",
                    "now()",
                    "CURRENT_TIMESTAMP",
                    "x",
                    "t.a",
                ])?;
                self.tok(literal)
            }
            4 => {
                let function = self.pick(FUNCTIONS)?;
                self.tok(function)?;
                self.glued("(")?;
                let args = self.u.int_in_range(0..=3)?;
                for i in 0..args {
                    if i > 0 {
                        self.glued(",")?;
                    }
                    self.expr(depth + 1, params)?;
                }
                self.glued(")")
            }
            5 if !self.mysql => {
                self.expr(depth + 1, params)?;
                self.glued("::")?;
                let ty = self.pick(TYPES)?;
                self.out.push_str(ty);
                Ok(())
            }
            5 | 6 => {
                self.kw("CAST")?;
                self.glued("(")?;
                self.expr(depth + 1, params)?;
                self.kw("AS")?;
                let ty = self.pick(TYPES)?;
                self.tok(ty)?;
                self.glued(")")
            }
            7 | 8 => {
                self.expr(depth + 1, params)?;
                let op = self.pick(OPERATORS)?;
                self.tok(op)?;
                self.expr(depth + 1, params)
            }
            9 => {
                self.glued("(")?;
                self.expr(depth + 1, params)?;
                self.glued(")")
            }
            10 if !self.mysql => {
                self.kw("ARRAY")?;
                self.glued("[")?;
                self.expr(depth + 1, params)?;
                self.glued(",")?;
                self.expr(depth + 1, params)?;
                self.glued("]")
            }
            10 | 11 => {
                self.glued("(")?;
                self.kw("SELECT")?;
                self.expr(depth + 1, params)?;
                self.kw("FROM")?;
                self.name()?;
                self.kw("WHERE")?;
                self.name()?;
                self.tok("=")?;
                self.expr(depth + 1, params)?;
                self.glued(")")
            }
            _ => {
                if self.one_in(4)? {
                    let raw = self.body(&[])?;
                    self.tok(&raw)
                } else {
                    self.tok("-")?;
                    self.expr(depth + 1, params)
                }
            }
        }
    }

    /// PostgreSQL `ON CONFLICT ...` (placeholders only by mistake).
    fn on_conflict(&mut self) -> Result<()> {
        self.kw("ON")?;
        self.kw("CONFLICT")?;
        match self.u.int_in_range(0..=3)? {
            0 => {}
            1 => {
                self.kw("ON")?;
                self.kw("CONSTRAINT")?;
                self.name()?;
            }
            _ => {
                self.glued("(")?;
                let n = self.u.int_in_range(1..=3)?;
                for i in 0..n {
                    if i > 0 {
                        self.glued(",")?;
                    }
                    self.name()?;
                }
                self.glued(")")?;
                if self.one_in(4)? {
                    self.kw("WHERE")?;
                    self.expr(1, false)?;
                }
            }
        }
        self.kw("DO")?;
        if self.u.arbitrary::<bool>()? {
            return self.kw("NOTHING");
        }
        self.kw("UPDATE")?;
        self.kw("SET")?;
        self.assignments()?;
        if self.one_in(3)? {
            self.kw("WHERE")?;
            self.expr(1, false)?;
        }
        Ok(())
    }

    /// MySQL `ON DUPLICATE KEY UPDATE ...`.
    fn duplicate_key(&mut self) -> Result<()> {
        self.kw("ON")?;
        self.kw("DUPLICATE")?;
        self.kw("KEY")?;
        self.kw("UPDATE")?;
        self.assignments()
    }

    /// `a = expr, ...` (the value sometimes `VALUES(a)` / `EXCLUDED.a`).
    fn assignments(&mut self) -> Result<()> {
        let n = self.u.int_in_range(1..=3)?;
        for i in 0..n {
            if i > 0 {
                self.glued(",")?;
            }
            self.name()?;
            self.tok("=")?;
            match self.u.int_in_range(0..=2)? {
                0 if self.mysql => {
                    self.kw("VALUES")?;
                    self.glued("(")?;
                    self.name()?;
                    self.glued(")")?;
                }
                0 => {
                    self.kw("EXCLUDED")?;
                    self.glued(".")?;
                    self.name()?;
                }
                _ => self.expr(1, false)?,
            }
        }
        Ok(())
    }
}
