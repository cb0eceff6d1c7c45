// Regression: `Engine::close` refused (NotIdle) whenever any chain was live, on any file; the
// server dropped the error and lost a registered-file slot and its descriptor each time.

mod common;

use common::*;
use storefn_io::{Engine, EngineConfig, IoMode, NoFunction, SubmitError};

#[test]
fn closing_a_file_while_another_files_reads_are_in_flight_frees_its_slot_now() {
    let f = tmp_file("close_other", &vec![5u8; 64 << 10]);
    let mut e = Engine::new(EngineConfig::default()).unwrap();
    let busy = e.open(&f.path, IoMode::Buffered).unwrap();
    let start = e.files_open();
    // Far more opens and closes than the engine has slots, each while reads of `busy` are live.
    for round in 0..(3 * storefn_io::limits::MAX_FILES) {
        for i in 0..8u64 {
            e.submit_read(busy, i * 4096, 512, i).unwrap();
        }
        let idle = e.open(&f.path, IoMode::Buffered).unwrap();
        assert!(e.live() > 0, "round {round}: reads of another file are live");
        e.close(idle).unwrap();
        assert_eq!(e.files_open(), start, "round {round}: the idle file's slot is free at once");
        e.wait(8, &mut NoFunction, |c| assert!(c.result.is_ok(), "{:?}", c.result)).unwrap();
    }
    assert_eq!(e.files_closing(), 0);
}

#[test]
fn closing_a_file_with_its_own_reads_in_flight_is_deferred_to_the_last_one() {
    let f = tmp_file("close_own", &vec![9u8; 64 << 10]);
    let mut e = Engine::new(EngineConfig::default()).unwrap();
    let start = e.files_open();
    for round in 0..(2 * storefn_io::limits::MAX_FILES) {
        let id = e.open(&f.path, IoMode::Buffered).unwrap();
        for i in 0..4u64 {
            e.submit_read(id, i * 4096, 64, i).unwrap();
        }
        e.close(id).unwrap();
        // Still registered for its reads, but closed to new ones.
        assert_eq!(e.files_closing(), 1, "round {round}");
        assert_eq!(e.submit_read(id, 0, 8, 9), Err(SubmitError::Closing { file: id.index() }));
        let mut got = 0;
        e.wait(4, &mut NoFunction, |c| {
            assert_eq!(c.data, &[9u8; 64][..], "reads finish on the file they started on");
            got += 1;
        })
        .unwrap();
        assert_eq!(got, 4);
        assert_eq!((e.files_open(), e.files_closing()), (start, 0), "round {round}");
        // A second close of the released id does nothing.
        e.close(id).unwrap();
    }
}
