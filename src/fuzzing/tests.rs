//! The fuzz targets' checks on the committed seed corpus (`fuzz/seeds/sql`),
//! so `cargo test` runs them on every fixture the fuzzers start from.

use std::path::Path;

use super::{Dialect, check_keyed, check_render, exercise};

/// Every seed file: name and text.
fn seeds() -> Vec<(String, String)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/seeds/sql");
    let mut seeds: Vec<(String, String)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| {
            let path = entry.expect("seed directory entry").path();
            let text = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            (path.display().to_string(), text)
        })
        .collect();
    seeds.sort();
    seeds
}

/// The render check holds on every seed, in both dialects, at the sizes the
/// fuzzers use (and a large one); most seeds are batchable in their dialect.
#[test]
fn render_check_holds_on_the_seed_corpus() {
    let seeds = seeds();
    assert!(seeds.len() >= 30, "{} seeds", seeds.len());
    let mut batchable = [0usize; 2];
    for (name, text) in &seeds {
        for (i, dialect) in Dialect::ALL.into_iter().enumerate() {
            exercise(dialect, text);
            match check_render(dialect, text, &[1, 2, 3, 17, 200]) {
                Ok(true) => batchable[i] += 1,
                Ok(false) => {}
                Err(why) => panic!("{name}: {dialect:?}: {why}"),
            }
        }
    }
    // 17 PostgreSQL and 13 MySQL seeds are batchable forms (some of each
    // also read as the other dialect).
    assert!(batchable[0] >= 17, "postgres batchable: {}", batchable[0]);
    assert!(batchable[1] >= 13, "mysql batchable: {}", batchable[1]);
}

/// The keyed check holds on every seed, in both dialects; the keyed seeds
/// of each kind are coalesced on PostgreSQL (and never on MySQL).
#[test]
fn keyed_check_holds_on_the_seed_corpus() {
    let mut keyed = 0;
    for (name, text) in &seeds() {
        for dialect in Dialect::ALL {
            match check_keyed(dialect, text) {
                Ok(Some(_)) => keyed += 1,
                Ok(None) => {}
                Err(why) => panic!("{name}: {dialect:?}: {why}"),
            }
        }
    }
    // 11 seeds are keyed reads, updates and deletes.
    assert!(keyed >= 11, "keyed: {keyed}");
}
