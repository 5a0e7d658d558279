//! Replays every file of the committed fuzz corpora (`fuzz/corpus/<target>`)
//! through the same code the fuzz targets run, so a crash once found (and
//! its input kept there) stays fixed.

use std::path::Path;

fn replay(target: &str, run: fn(&[u8])) -> usize {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(target);
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        let data = std::fs::read(&path).unwrap();
        let outcome = std::panic::catch_unwind(|| run(&data));
        assert!(outcome.is_ok(), "{} crashes the target", path.display());
        n += 1;
    }
    n
}

#[test]
fn the_request_corpus_replays_cleanly() {
    assert!(replay("request", podns_server::fuzzing::request) >= 30);
}

#[test]
fn the_decode_corpus_replays_cleanly() {
    assert!(replay("decode", podns_server::fuzzing::decode) >= 10);
}

#[test]
fn the_pb_corpus_replays_cleanly() {
    assert!(replay("pb", podns_server::fuzzing::pb) >= 7);
}

#[test]
fn the_encoders_corpus_replays_cleanly() {
    assert!(replay("encoders", podns_server::fuzzing::encoders) >= 30);
}

#[test]
fn the_compact_corpus_replays_cleanly() {
    assert!(replay("compact", podns_server::fuzzing::compact) >= 5);
}

#[test]
fn the_mux_corpus_replays_cleanly() {
    assert!(replay("mux", podns_server::fuzzing::mux) >= 6);
}
