//! Any bytes (as UTF-8 when valid, lossily decoded otherwise) classified for
//! both dialects; a batchable text is rendered at 1, 2, 3 and 4..=64 rows
//! and checked by tokens against the original (`check_render`): the
//! VALUES tuple repeated, placeholders renumbered, everything else
//! unchanged; a keyed read, update or delete goes through the keyed check
//! (`check_keyed`). Best run with the SQL dictionary and the seed corpus
//! (CONTRIBUTING).
#![no_main]

use batchpool::fuzzing::{Dialect, check_keyed, check_render};
use batchpool_fuzz::{Reached, sizes};
use libfuzzer_sys::fuzz_target;

static REACHED: Reached = Reached::new();

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let sizes = sizes(data);
    let mut batchable = Vec::new();
    let mut keyed = None;
    for dialect in Dialect::ALL {
        match check_render(dialect, &text, &sizes) {
            Ok(true) => batchable.push(dialect),
            Ok(false) => {}
            Err(why) => panic!("{dialect:?}: {text:?}: {why}"),
        }
        match check_keyed(dialect, &text) {
            Ok(kind) => keyed = keyed.or(kind),
            Err(why) => panic!("{dialect:?}: {text:?}: {why}"),
        }
    }
    REACHED.record("render", &batchable, keyed);
});
