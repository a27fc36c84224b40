//! Generated INSERT statements (`batchpool_fuzz::grammar`: mostly the
//! batchable forms of either dialect, with every kind of literal, comment,
//! quoting and clause, sometimes a form that must be declined) through the
//! same render check as `render`, for both dialects (and the keyed check,
//! which none of them may pass as a keyed statement).
#![no_main]

use batchpool::fuzzing::{Dialect, check_keyed, check_render, exercise};
use batchpool_fuzz::{Reached, grammar, sizes};
use libfuzzer_sys::fuzz_target;

static REACHED: Reached = Reached::new();

fuzz_target!(|data: &[u8]| {
    let Ok(text) = grammar::statement(data) else {
        return;
    };
    let sizes = sizes(data);
    let mut batchable = Vec::new();
    for dialect in Dialect::ALL {
        match check_render(dialect, &text, &sizes) {
            Ok(true) => batchable.push(dialect),
            Ok(false) => {
                exercise(dialect, &text);
            }
            Err(why) => panic!("{dialect:?}: {text:?}: {why}"),
        }
        match check_keyed(dialect, &text) {
            Ok(None) => {}
            Ok(Some(kind)) => panic!("{dialect:?}: {text:?}: an INSERT text read as keyed {kind}"),
            Err(why) => panic!("{dialect:?}: {text:?}: {why}"),
        }
    }
    REACHED.record("render_structured", &batchable, None);
});
