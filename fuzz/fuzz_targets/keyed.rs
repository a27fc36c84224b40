//! Generated keyed reads, updates and deletes (`batchpool_fuzz::grammar::
//! keyed_statement`: mostly the forms the rewrite covers, with every kind of
//! name, literal, comment and placeholder, often a near miss) through the
//! keyed check for both dialects (`check_keyed`: on PostgreSQL the
//! many-caller rewrite checked by tokens against the text and read by
//! sqlparser's parser; on MySQL the reads' `OR` and `UNION ALL` rewrites,
//! the deletes' `OR` one, and the updates' `CASE`, family and mask-read
//! ones, checked by tokens), and through every text-only path of the pool.
#![no_main]

use batchpool::fuzzing::{Dialect, check_keyed, exercise};
use batchpool_fuzz::{Reached, grammar};
use libfuzzer_sys::fuzz_target;

static REACHED: Reached = Reached::new();

fuzz_target!(|data: &[u8]| {
    let Ok(text) = grammar::keyed_statement(data) else {
        return;
    };
    let mut keyed = None;
    let mut batchable = Vec::new();
    for dialect in Dialect::ALL {
        match check_keyed(dialect, &text) {
            Ok(kind) => keyed = keyed.or(kind),
            Err(why) => panic!("{dialect:?}: {text:?}: {why}"),
        }
        if exercise(dialect, &text) {
            batchable.push(dialect);
        }
    }
    REACHED.record("keyed", &batchable, keyed);
});
