//! Any bytes (as UTF-8 when valid, lossily decoded otherwise) through every
//! text-only path of the pool, for both dialects: the statement-kind reader,
//! the classifier, its `explain` text and, for a batchable text, the
//! renderer (for a keyed read, update or delete, its many-caller rewrite).
//! Checks: no panic.
#![no_main]

use batchpool::fuzzing::{Dialect, exercise};
use batchpool_fuzz::Reached;
use libfuzzer_sys::fuzz_target;

static REACHED: Reached = Reached::new();

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let batchable: Vec<Dialect> = Dialect::ALL
        .into_iter()
        .filter(|&d| exercise(d, &text))
        .collect();
    REACHED.record("classify", &batchable, None);
});
