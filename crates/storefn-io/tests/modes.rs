//! O_DIRECT refusal, buffered mode, SQPOLL and IOPOLL: each either works or says why by name.

mod common;

use common::*;
use storefn_io::{Engine, EngineConfig, EngineError, IoMode};

#[test]
fn tmpfs_refuses_o_direct_with_a_clear_error_and_buffered_mode_works() {
    let dir = std::path::Path::new("/dev/shm");
    if !dir.is_dir() {
        common::skip("no /dev/shm (tmpfs) on this machine");
        return;
    }
    let lists = random_lists(11, 200, 4, 512);
    let path = dir.join(format!("storefn-io-modes-{}", std::process::id()));
    std::fs::write(&path, &lists.bytes).unwrap();
    let f = TmpFile { path };
    let mut e = Engine::new(EngineConfig::default()).unwrap();
    let err = e.open(&f.path, IoMode::Direct).unwrap_err();
    assert!(matches!(err, EngineError::DirectRefused { .. }), "{err}");
    assert!(err.to_string().contains("refuses O_DIRECT"), "{err}");
    let id = e.open(&f.path, IoMode::Buffered).unwrap();
    assert_eq!(e.file_align(id), Some(1));
    for &head in &lists.heads {
        let mut scratch = [0u8; 16];
        e.read_xrp(id, head, 16, &mut list_walker(), &mut scratch).unwrap();
        assert_eq!((get_u64(&scratch, 0), get_u64(&scratch, 8)), walk_list(&lists.bytes, head));
    }
}

#[test]
fn sqpoll_runs_chains_or_says_it_is_unavailable() {
    let lists = random_lists(12, 400, 8, 512);
    let f = tmp_file("sqpoll", &lists.bytes);
    let cfg = EngineConfig { sqpoll_idle_ms: Some(10), ..EngineConfig::default() };
    let mut e = match Engine::new(cfg) {
        Ok(e) => e,
        Err(EngineError::SqpollUnavailable { errno }) => {
            println!("skipped: SQPOLL unavailable here ({errno})");
            return;
        }
        Err(other) => panic!("{other}"),
    };
    let id = e.open(&f.path, IoMode::Direct).unwrap();
    for &head in &lists.heads {
        let mut scratch = [0u8; 16];
        e.read_xrp(id, head, 16, &mut list_walker(), &mut scratch).unwrap();
        assert_eq!((get_u64(&scratch, 0), get_u64(&scratch, 8)), walk_list(&lists.bytes, head));
    }
}

#[test]
fn iopoll_works_or_open_reports_the_device_cannot_poll() {
    let lists = random_lists(13, 400, 8, 512);
    let f = tmp_file("iopoll", &lists.bytes);
    let cfg = EngineConfig { iopoll: true, ..EngineConfig::default() };
    let mut e = Engine::new(cfg).unwrap();
    match e.open(&f.path, IoMode::Direct) {
        Ok(id) => {
            for &head in &lists.heads {
                let mut scratch = [0u8; 16];
                e.read_xrp(id, head, 16, &mut list_walker(), &mut scratch).unwrap();
                let got = (get_u64(&scratch, 0), get_u64(&scratch, 8));
                assert_eq!(got, walk_list(&lists.bytes, head));
            }
        }
        // The virtio disk here has no poll queues: EOPNOTSUPP, reported by name.
        Err(err @ EngineError::IopollUnsupported { .. }) => {
            assert!(err.to_string().contains("no poll queues"), "{err}");
        }
        Err(other) => panic!("{other}"),
    }
}

#[test]
fn bad_configs_are_refused_by_name() {
    let cfg = EngineConfig { buffers: 512, ring_depth: 256, ..EngineConfig::default() };
    let err = Engine::new(cfg).unwrap_err();
    assert!(err.to_string().contains("buffers = 512"), "{err}");
    let err = Engine::new(EngineConfig { max_hops: 0, ..EngineConfig::default() }).unwrap_err();
    assert!(err.to_string().contains("max_hops = 0"), "{err}");
}

#[test]
fn missing_file_is_an_open_error_with_the_path() {
    let mut e = Engine::new(EngineConfig::default()).unwrap();
    let err = e.open(std::path::Path::new("/nonexistent/x.db"), IoMode::Direct).unwrap_err();
    assert_eq!(err.to_string(), "/nonexistent/x.db: open failed: ENOENT (no such file)");
}

#[test]
fn file_table_fills_up_by_name_and_close_frees_a_slot() {
    let f = tmp_file("table", &[3u8; 4096]);
    let mut e = Engine::new(EngineConfig::default()).unwrap();
    let ids: Vec<_> = (0..storefn_io::limits::MAX_FILES)
        .map(|_| e.open(&f.path, IoMode::Direct).unwrap())
        .collect();
    let err = e.open(&f.path, IoMode::Direct).unwrap_err();
    assert!(matches!(err, EngineError::TooManyFiles { max: 64 }), "{err}");
    e.close(ids[5]).unwrap();
    let again = e.open(&f.path, IoMode::Direct).unwrap();
    assert_eq!(again, ids[5]);
    let mut buf = [0u8; 8];
    e.read(again, 100, &mut buf).unwrap();
    assert_eq!(buf, [3u8; 8]);
    let err = e.submit_read(ids[5], 0, 8, 0);
    assert!(err.is_ok(), "slot 5 is open again");
    e.wait(1, &mut storefn_io::NoFunction, |_| {}).unwrap();
    e.close(ids[7]).unwrap();
    assert_eq!(
        e.submit_read(ids[7], 0, 8, 0),
        Err(storefn_io::SubmitError::UnknownFile { file: ids[7].index() })
    );
}
