//! Acknowledged WRITE and LAMBDA_WRITE requests survive power loss, not just a killed process:
//! the server writes through storefn-kv's crash model (`storefn_io::CrashSim`), which keeps
//! only what was synced when the power goes (unsynced writes lost or torn, sector by sector).
//! For every crash point of a run of writes, the disk image must hold every write the client
//! saw acknowledged, byte for byte, and a write the server could not make durable must not be
//! acknowledged.

mod common;

use std::sync::Arc;

use common::TempDir;
use storefn_io::CrashSim;
use storefn_server::{Server, ServerConfig};
use storefn_wire::StatusCode;
use storefn_wire::PROG_TYPE_LAMBDA;
use storefn_wire::{Client, ClientConfig, Request};

const FILE_BYTES: usize = 64 * 1024;

/// One step of the run: a plain WRITE of `data`, or a LAMBDA_WRITE of the bitmap program over
/// `input` (its output is what lands on disk).
enum Step {
    Write { file: &'static str, offset: u64, data: Vec<u8> },
    Lambda { file: &'static str, offset: u64, input: Vec<u8> },
}

/// Non-overlapping writes to two files, so each acknowledged one can be checked on its own;
/// two of them span several sectors so a torn write would show.
fn steps() -> Vec<Step> {
    let runs = |r: &[u16]| r.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
    vec![
        Step::Write { file: "a", offset: 0, data: vec![0xa1; 100] },
        Step::Lambda { file: "b", offset: 0, input: runs(&[3, 5, 700, 9, 4000]) },
        Step::Write { file: "a", offset: 4096, data: (0..3000u32).map(|i| i as u8).collect() },
        Step::Write { file: "b", offset: 20_000, data: vec![0x5c; 1500] },
        Step::Lambda { file: "a", offset: 30_000, input: runs(&[1, 1, 17, 12_000]) },
        Step::Write { file: "a", offset: 50_000, data: vec![0x77; 8] },
    ]
}

/// What the bitmap program writes for `input`: the same ELF run here on the interpreter.
fn lambda_output(input: &[u8]) -> Vec<u8> {
    let prog = storefn_vm::load_verified(
        storefn_progs::must("lambda/bitmap"),
        None,
        storefn_vm::ProgType::Lambda,
    )
    .unwrap();
    let mut inst = storefn_vm::Instance::new(prog, storefn_vm::Engine::Interp).unwrap();
    let mut out = vec![0u8; 4096];
    let n = inst.run_lambda(input, &mut out).unwrap();
    out.truncate(usize::try_from(n).unwrap());
    out
}

/// An acknowledged write: file, offset, the bytes it put there.
type Acked = (&'static str, u64, Vec<u8>);

/// Runs every step against a server writing through `sim`; returns the acknowledged writes
/// (file, offset, bytes on disk) and how many requests were refused.
fn run(dir: &TempDir, sim: &CrashSim) -> (Vec<Acked>, usize) {
    let mut cfg = ServerConfig::new(dir.path());
    cfg.storage = Arc::new(sim.clone());
    let server = Server::start("127.0.0.1:0", cfg).unwrap();
    let mut c = Client::connect(&server.local_addr().to_string(), ClientConfig::default()).unwrap();
    let hash = c.load_prog(PROG_TYPE_LAMBDA, b"", storefn_progs::must("lambda/bitmap")).unwrap();
    let (mut acked, mut refused) = (Vec::new(), 0);
    let steps = steps();
    for s in &steps {
        let (file, offset, req, written) = match s {
            Step::Write { file, offset, data } => {
                let req = Request::Write { path: file.as_bytes(), offset: *offset, data };
                (*file, *offset, req, data.clone())
            }
            Step::Lambda { file, offset, input } => {
                let out = lambda_output(input);
                let req = Request::LambdaWrite {
                    path: file.as_bytes(),
                    offset: *offset,
                    hash: &hash,
                    input,
                    out_cap: 4096,
                };
                (*file, *offset, req, out)
            }
        };
        match c.one(&req) {
            Ok(_) => acked.push((file, offset, written)),
            Err(e) => {
                // The only refusal here is the storage failing once the power is gone.
                assert_eq!(e.status(), Some(StatusCode::Io as u16), "{e}");
                refused += 1;
            }
        }
    }
    server.stop();
    server.join().unwrap();
    (acked, refused)
}

fn fresh_files(dir: &TempDir) {
    for f in ["a", "b"] {
        std::fs::write(dir.join(f), vec![0u8; FILE_BYTES]).unwrap();
    }
}

#[test]
fn acknowledged_writes_and_lambda_writes_are_on_disk_after_every_crash_point() {
    let dir = TempDir::new("power");
    // A run without a crash counts the operations: a write and a sync per step.
    fresh_files(&dir);
    let sim = CrashSim::new(dir.path(), None, 0).unwrap();
    let (acked, refused) = run(&dir, &sim);
    assert_eq!((acked.len(), refused), (steps().len(), 0));
    let total_ops = sim.ops();
    assert_eq!(total_ops, 2 * steps().len() as u64, "one write and one sync per step");
    let mut checked = 0;
    for crash_at in 0..=total_ops {
        for seed in 0..3 {
            fresh_files(&dir);
            let sim = CrashSim::new(dir.path(), Some(crash_at), seed).unwrap();
            let (acked, refused) = run(&dir, &sim);
            // Step k's sync is operation 2k+1: steps whose sync came before the crash are
            // acknowledged, the rest refused.
            let durable = usize::try_from(crash_at / 2).unwrap();
            assert_eq!(acked.len(), durable.min(steps().len()), "crash at {crash_at}");
            assert_eq!(refused, steps().len() - acked.len(), "crash at {crash_at}");
            let image = sim.crash_now();
            for (file, offset, bytes) in &acked {
                let disk = &image[std::ffi::OsStr::new(file)];
                let at = usize::try_from(*offset).unwrap();
                assert_eq!(
                    &disk[at..at + bytes.len()],
                    &bytes[..],
                    "crash at op {crash_at} seed {seed}: acknowledged write to {file} at \
                     {offset} ({} bytes) is not on disk",
                    bytes.len()
                );
                checked += 1;
            }
            assert_eq!(image[std::ffi::OsStr::new("a")].len(), FILE_BYTES, "length kept");
        }
    }
    assert!(checked > 40, "checked {checked} acknowledged writes");
}
