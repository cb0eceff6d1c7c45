//! The `offload` program type with the page server's functions (progs/dds/pageserver.bpf.c):
//! each entry point on both engines, JIT vs interpreter on random batches, a faulting program,
//! and cache-on-write / invalidate-on-read through the file service's hooks.

mod common;

use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use rand::{Rng, SeedableRng};
use storefn_dds::limits::DEFAULT_CHANNEL_RING_BYTES;
use storefn_dds::{CacheTable, Item};
use storefn_dds::{FileService, HostChannel, HostFiles};
use storefn_dds::{OffloadError, OffloadFunctions, OffloadHooks};
use storefn_vm::offload::ReadOp;
use storefn_vm::{Engine, VmError};

const PAGE: usize = 8192;

fn pageserver() -> &'static [u8] {
    storefn_progs::must("dds/pageserver")
}

/// A GetPage batch of (page, lsn) requests (the front end's encoding).
fn batch(reqs: &[(u64, u64)]) -> Vec<u8> {
    let msgs: Vec<[u8; 16]> = reqs.iter().map(|&(p, l)| storefn_dds::get_page(p, l)).collect();
    let mut m = Vec::new();
    storefn_dds::encode_batch(msgs.iter().map(<[u8; 16]>::as_slice), &mut m);
    m
}

fn page_bytes(lsn: u64, fill: u8) -> Vec<u8> {
    let mut p = vec![fill; PAGE];
    p[..8].copy_from_slice(&lsn.to_le_bytes());
    p
}

#[test]
fn page_server_functions_cache_offload_and_invalidate_on_both_engines() {
    for engine in [Engine::Interp, Engine::Jit] {
        let table = Arc::new(CacheTable::with_capacity(256).unwrap());
        let mut f = OffloadFunctions::load(pageserver(), engine, Arc::clone(&table)).unwrap();
        // A host write of pages 3 and 4 (LSNs 10 and 12) in one request caches both.
        let mut data = page_bytes(10, 3);
        data.extend(page_bytes(12, 4));
        assert_eq!(f.cache(7, 3 * PAGE as u64, &data).unwrap(), 2, "{engine:?}");
        assert_eq!(
            table.get(4),
            Some(Item { key: 4, version: 12, file: 7, offset: 4 * PAGE as u64, size: PAGE as u32 })
        );
        // An unaligned write caches nothing.
        assert_eq!(f.cache(7, 100, &data).unwrap(), 0);
        let msg = batch(&[(3, 5), (3, 10), (3, 11), (4, 12), (9, 1)]);
        assert_eq!(f.pred(&msg).unwrap().0, [true, true, false, true, false], "{engine:?}");
        assert_eq!(
            f.func(&msg, 1).unwrap(),
            Some(ReadOp { file: 7, size: PAGE as u32, offset: 3 * PAGE as u64 })
        );
        assert_eq!(f.func(&msg, 2).unwrap(), None, "stale page offloaded");
        assert_eq!(f.func(&msg, 99).unwrap(), None, "index past the batch");
        // The host reads page 3 (to apply a log record): invalidated, now forwarded.
        assert_eq!(f.invalidate(false, 7, 3 * PAGE as u64 + 100, 10).unwrap(), 1);
        assert_eq!(f.pred(&msg).unwrap().0, [false, false, false, true, false]);
        // Writes do not invalidate (cache re-caches them); a malformed batch is an error.
        assert_eq!(f.invalidate(true, 7, 4 * PAGE as u64, PAGE as u32).unwrap(), 0);
        assert!(matches!(f.pred(&[1, 0]), Err(OffloadError::BadOutput { .. })));
    }
}

/// The JIT and the interpreter agree on every output for random tables and batches.
#[test]
fn jit_and_interpreter_agree_on_random_batches() {
    let mut rng = rand::rngs::SmallRng::seed_from_u64(13);
    for _ in 0..40 {
        let table = Arc::new(CacheTable::with_capacity(512).unwrap());
        let mut jit =
            OffloadFunctions::load(pageserver(), Engine::Jit, Arc::clone(&table)).unwrap();
        let mut interp =
            OffloadFunctions::load(pageserver(), Engine::Interp, Arc::clone(&table)).unwrap();
        for _ in 0..rng.gen_range(0..40) {
            let page = rng.gen_range(0..64u64);
            let data = page_bytes(rng.gen_range(0..100), 0);
            jit.cache(1, page * PAGE as u64, &data).unwrap();
        }
        let reqs: Vec<(u64, u64)> = (0..rng.gen_range(0..=64))
            .map(|_| (rng.gen_range(0..64), rng.gen_range(0..100)))
            .collect();
        let msg = batch(&reqs);
        let v = jit.pred(&msg).unwrap();
        assert_eq!(v, interp.pred(&msg).unwrap());
        for (i, &(page, lsn)) in reqs.iter().enumerate() {
            let expect = table.get(page).filter(|it| it.version >= lsn);
            assert_eq!(v.0[i], expect.is_some(), "request {i}");
            let op = jit.func(&msg, i as u32).unwrap();
            assert_eq!(op, interp.func(&msg, i as u32).unwrap());
            assert_eq!(op.map(|o| o.offset), expect.map(|it| it.offset));
        }
    }
}

#[test]
fn a_program_writing_past_out_faults_cleanly() {
    let table = Arc::new(CacheTable::with_capacity(16).unwrap());
    // Only `offload/pred` exists in this object, so loading the set names the missing section.
    let err = OffloadFunctions::load(
        storefn_progs::must("test/offload_oob"),
        Engine::Interp,
        Arc::clone(&table),
    )
    .unwrap_err();
    assert!(err.to_string().contains("offload/func"), "{err}");
    for engine in [Engine::Interp, Engine::Jit] {
        let prog = storefn_vm::load_verified(
            storefn_progs::must("test/offload_oob"),
            Some("offload/pred"),
            storefn_vm::ProgType::Offload,
        )
        .unwrap();
        let mut inst = storefn_vm::Instance::new(prog, engine).unwrap();
        let mut ctx = storefn_vm::offload::OffloadCtx::default();
        let mut out = [0u8; 16];
        let r = inst.run_offload(&mut ctx, &[], &mut out);
        assert!(matches!(r, Err(VmError::BadWrite { .. })), "{engine:?}: {r:?}");
        assert_eq!(out, [0; 16]);
    }
}

/// The paper's flow without the network: the host writes pages through the host library, the
/// file service's hooks run `cache`; a GetPage batch is judged by `pred`, offloaded ones are read
/// straight from the service's file at the `func` location and carry an LSN >= the one asked;
/// a host read of a page invalidates it.
#[test]
fn host_writes_fill_the_table_and_offloaded_reads_are_fresh() {
    let nanos =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
    let dir =
        std::env::temp_dir().join(format!("storefn-dds-offload-{}-{nanos}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let channel = HostChannel::create(DEFAULT_CHANNEL_RING_BYTES).unwrap();
    let mut service = FileService::new(&dir, &channel).unwrap();
    let table = Arc::new(CacheTable::with_capacity(256).unwrap());
    let hooks = OffloadFunctions::load(pageserver(), Engine::Jit, Arc::clone(&table)).unwrap();
    service.set_hooks(Box::new(OffloadHooks { functions: hooks, errors: 0 }));
    let mut front = OffloadFunctions::load(pageserver(), Engine::Jit, Arc::clone(&table)).unwrap();
    let stop = AtomicBool::new(false);
    let file = std::thread::scope(|s| {
        let server = s.spawn(|| service.serve_until(&channel, &stop));
        let mut host = HostFiles::new(
            HostChannel::attach(channel.fd().try_clone_to_owned().unwrap()).unwrap(),
        );
        let f = host.create("pages").unwrap();
        for page in 0..16u64 {
            host.write(f, page * PAGE as u64, &page_bytes(100 + page, page as u8)).unwrap();
        }
        // Apply an update to page 5: read it (invalidates), write it back with a newer LSN.
        let mut buf = vec![0; PAGE];
        host.read(f, 5 * PAGE as u64, &mut buf).unwrap();
        assert_eq!(table.get(5), None, "host read did not invalidate page 5");
        host.write(f, 5 * PAGE as u64, &page_bytes(500, 55)).unwrap();
        host.read(f, 6 * PAGE as u64, &mut buf).unwrap();
        stop.store(true, Ordering::Relaxed);
        server.join().unwrap().unwrap();
        f
    });
    let msg = batch(&[(5, 400), (5, 501), (6, 1), (7, 107), (7, 108)]);
    let verdicts = front.pred(&msg).unwrap().0;
    assert_eq!(verdicts, [true, false, false, true, false]);
    for (i, &(page, lsn)) in [(5u64, 400u64), (7, 107)].iter().enumerate() {
        let op = front.func(&msg, [0, 3][i]).unwrap().expect("offloaded request has a read");
        let mut got = vec![0; op.size as usize];
        service.file(op.file).unwrap().read_exact_at(&mut got, op.offset).unwrap();
        let page_lsn = u64::from_le_bytes(got[..8].try_into().unwrap());
        assert!(page_lsn >= lsn, "page {page}: LSN {page_lsn} older than asked {lsn}");
        assert_eq!(op.offset, page * PAGE as u64);
    }
    assert_eq!(file, 0);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// docs/FORMAT.md's offload-context table names each field at the offset the VM uses.
#[test]
fn offload_context_offsets_match_format_md() {
    use storefn_vm::offload as o;
    common::assert_rows(
        "## Offload context",
        &[
            (o::OFF_MSG, "msg"),
            (o::OFF_MSG_LEN, "msg_len"),
            (o::OFF_INDEX, "index"),
            (o::OFF_OP, "op"),
            (o::OFF_FILE, "file"),
            (o::OFF_OFFSET, "offset"),
            (o::OFF_OUT, "out"),
            (o::OFF_OUT_LEN, "out_len"),
            (o::OFF_IO_LEN, "io_len"),
        ],
    );
    let section = common::format_section("## Offload context");
    for id in [o::STOREFN_TABLE_LOOKUP, o::STOREFN_TABLE_INSERT, o::STOREFN_TABLE_DELETE] {
        assert!(section.contains(&format!("{id:#x}")), "helper id {id:#x} missing");
    }
}

/// The insert/delete helpers map the table's answers to errnos; a lookup into read-only
/// memory faults; with no table attached the helpers answer -ENODEV.
#[test]
fn table_helpers_insert_delete_and_check_pointers() {
    use storefn_vm::offload::{OffloadCtx, OffloadTable, TableItem};
    let elf = storefn_progs::must("test/offload_table");
    let load = |section: &str, engine| {
        let prog =
            storefn_vm::load_verified(elf, Some(section), storefn_vm::ProgType::Offload).unwrap();
        storefn_vm::Instance::new(prog, engine).unwrap()
    };
    for engine in [Engine::Interp, Engine::Jit] {
        let table = Arc::new(CacheTable::with_capacity(8).unwrap());
        let shared: Arc<dyn OffloadTable> = table.clone();
        let mut insert = load("offload/cache", engine);
        insert.host_mut().offload_table = Some(Arc::clone(&shared));
        let items = [
            TableItem { key: 1, version: 5, file: 2, size: 4096, offset: 8192 },
            TableItem { key: 1, version: 4, file: 2, size: 4096, offset: 0 },
            TableItem { key: 2, version: 1, file: 3, size: 512, offset: 512 },
        ];
        let msg: Vec<u8> = items
            .iter()
            .flat_map(|i| {
                let mut b = Vec::new();
                b.extend(i.key.to_le_bytes());
                b.extend(i.version.to_le_bytes());
                b.extend(i.file.to_le_bytes());
                b.extend(i.size.to_le_bytes());
                b.extend(i.offset.to_le_bytes());
                b
            })
            .collect();
        let mut out = [0u8; 24];
        assert_eq!(insert.run_offload(&mut OffloadCtx::default(), &msg, &mut out).unwrap(), 3);
        let res: Vec<i64> =
            out.chunks(8).map(|c| i64::from_le_bytes(c.try_into().unwrap())).collect();
        assert_eq!(res, [0, -i64::from(libc::ESTALE), 0], "{engine:?}");
        assert_eq!(table.get(1).map(|i| (i.version, i.offset)), Some((5, 8192)));

        let mut delete = load("offload/invalidate", engine);
        delete.host_mut().offload_table = Some(Arc::clone(&shared));
        let mut ctx = OffloadCtx { offset: 2, ..OffloadCtx::default() };
        assert_eq!(delete.run_offload(&mut ctx, &[], &mut []).unwrap(), 0);
        assert_eq!(
            delete.run_offload(&mut ctx, &[], &mut []).unwrap() as i64,
            -i64::from(libc::ENOENT)
        );
        assert_eq!(table.get(2), None);

        let mut lookup = load("offload/pred", engine);
        lookup.host_mut().offload_table = Some(Arc::clone(&shared));
        let mut ctx = OffloadCtx { offset: 1, ..OffloadCtx::default() };
        let r = lookup.run_offload(&mut ctx, &[0; 32], &mut []);
        assert!(matches!(r, Err(VmError::BadWrite { .. })), "{engine:?}: {r:?}");
        let mut bare = load("offload/invalidate", engine);
        assert_eq!(
            bare.run_offload(&mut ctx, &[], &mut []).unwrap() as i64,
            -i64::from(libc::ENODEV)
        );
    }
}
