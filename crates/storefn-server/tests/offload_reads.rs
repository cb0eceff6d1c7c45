//! The server's side of DDS with a scripted `OffloadHook` (no offload functions): offloaded
//! reads are range reads of the worker's engine straight into the buffer the answer is sent
//! from, and come back byte-exact (short at the end of the file); a read during which the hook reports a
//! change (its epoch moved: a host write may have torn the page) is forwarded to the host
//! instead; forwarded requests are answered by the host.

mod common;

use std::fs::File;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use common::TempDir;
use storefn_server::{token_thread, HostAnswer, OffloadDecision, OffloadHook, ReadCheck};
use storefn_server::{Server, ServerConfig};
use storefn_wire::{Client, ClientConfig, Request};
use storefn_wire::{SERVED_BY_HOST, SERVED_BY_OFFLOAD};

const FILE_BYTES: usize = 300_000;

fn content(i: usize) -> u8 {
    (i.wrapping_mul(7919) >> 3) as u8
}

/// Messages: `offset u64 | size u32` = offload that read of file 7; anything else = forward.
#[derive(Debug)]
struct Scripted {
    file: Arc<File>,
    /// false: every read looks raced by a change (must be forwarded).
    stable: AtomicBool,
    pending: Mutex<Vec<(u64, Vec<u8>)>>,
    forwarded: AtomicU64,
}

impl OffloadHook for Scripted {
    fn decide(&self, bytes: &[u8], bounds: &[(usize, usize)], out: &mut Vec<OffloadDecision>) {
        for &(a, b) in bounds {
            let m = &bytes[a..b];
            out.push(if m.len() == 12 {
                OffloadDecision::Read {
                    file: 7,
                    offset: u64::from_le_bytes(m[..8].try_into().unwrap()),
                    size: u32::from_le_bytes(m[8..].try_into().unwrap()),
                    epoch: 2,
                }
            } else {
                OffloadDecision::Forward
            });
        }
    }
    fn file(&self, file: u32, _offset: u64, _size: u32) -> Option<(Arc<File>, u64)> {
        (file == 7).then(|| (Arc::clone(&self.file), 40))
    }
    fn unchanged_since(&self, r: &ReadCheck) -> bool {
        (r.epoch, r.stamp) == (2, 40) && self.stable.load(Ordering::SeqCst)
    }
    fn forward(&self, token: u64, msg: &[u8]) -> Result<u64, String> {
        self.forwarded.fetch_add(1, Ordering::SeqCst);
        let mut answer = b"host:".to_vec();
        answer.extend_from_slice(msg);
        self.pending.lock().unwrap().push((token, answer));
        Ok(0)
    }
    fn poll_answers(&self, thread: usize, f: &mut dyn FnMut(HostAnswer<'_>)) -> usize {
        let mut pending = self.pending.lock().unwrap();
        let (mine, rest) = std::mem::take(&mut *pending)
            .into_iter()
            .partition::<Vec<_>, _>(|(t, _)| token_thread(*t) == thread);
        *pending = rest;
        for (token, data) in &mine {
            f(HostAnswer::Data { token: *token, data });
        }
        mine.len()
    }
}

fn read_msg(offset: u64, size: u32) -> Vec<u8> {
    let mut m = offset.to_le_bytes().to_vec();
    m.extend_from_slice(&size.to_le_bytes());
    m
}

fn start(tag: &str) -> (TempDir, Arc<Scripted>, Server) {
    let dir = TempDir::new(tag);
    let path = dir.join("pages");
    std::fs::write(&path, (0..FILE_BYTES).map(content).collect::<Vec<u8>>()).unwrap();
    let hook = Arc::new(Scripted {
        file: Arc::new(File::open(&path).unwrap()),
        stable: AtomicBool::new(true),
        pending: Mutex::new(Vec::new()),
        forwarded: AtomicU64::new(0),
    });
    let mut cfg = ServerConfig::new(dir.path());
    cfg.offload = Some(hook.clone());
    let server = Server::start("127.0.0.1:0", cfg).unwrap();
    (dir, hook, server)
}

#[test]
fn offloaded_reads_come_back_byte_exact_from_the_io_uring_path() {
    let (_dir, hook, server) = start("offload-reads");
    let mut c = Client::connect(&server.local_addr().to_string(), ClientConfig::default()).unwrap();
    // One frame: reads of several sizes and offsets (one running past the end of the file),
    // with forwarded requests between them.
    let reads: Vec<(u64, u32)> =
        vec![(0, 8192), (8192 * 5, 8192), (12_345, 1), (100_000, 65_536), (299_000, 8192)];
    let msgs: Vec<Vec<u8>> = reads.iter().map(|&(off, size)| read_msg(off, size)).collect();
    let mut reqs = Vec::new();
    for m in &msgs {
        reqs.push(Request::Offload { msg: m });
        reqs.push(Request::Offload { msg: b"fwd" });
    }
    for round in 0..50 {
        let got = c.call(&reqs).unwrap();
        for (k, &(off, size)) in reads.iter().enumerate() {
            let r = &got[2 * k];
            assert_eq!(r.status, 0, "{}", r.message);
            assert_eq!(r.value, u64::from(SERVED_BY_OFFLOAD), "round {round} read {k}");
            let end = (off as usize + size as usize).min(FILE_BYTES);
            let want: Vec<u8> = (off as usize..end).map(content).collect();
            assert!(r.data == want, "round {round}: read at {off} (+{size}) differs");
            let f = &got[2 * k + 1];
            assert_eq!((f.value, f.data.as_slice()), (u64::from(SERVED_BY_HOST), &b"host:fwd"[..]));
        }
    }
    assert_eq!(hook.forwarded.load(Ordering::SeqCst), 50 * reads.len() as u64);
    server.stop();
    server.join().unwrap();
}

#[test]
fn a_read_that_raced_a_change_is_forwarded_not_served() {
    let (_dir, hook, server) = start("offload-raced");
    hook.stable.store(false, Ordering::SeqCst);
    let mut c = Client::connect(&server.local_addr().to_string(), ClientConfig::default()).unwrap();
    let msg = read_msg(8192, 8192);
    let r = c.one(&Request::Offload { msg: &msg }).unwrap();
    assert_eq!(r.value, u64::from(SERVED_BY_HOST), "a possibly torn read was served");
    let mut want = b"host:".to_vec();
    want.extend_from_slice(&msg);
    assert_eq!(r.data, want);
    hook.stable.store(true, Ordering::SeqCst);
    let r = c.one(&Request::Offload { msg: &msg }).unwrap();
    assert_eq!(r.value, u64::from(SERVED_BY_OFFLOAD));
    server.stop();
    server.join().unwrap();
}

#[test]
fn a_file_that_grew_is_read_to_its_new_end() {
    // The engine registers the hook's file once and keeps its size: a host append after the
    // first offloaded read must still be served (not refused or cut at the old end).
    let (dir, _hook, server) = start("offload-grown");
    let mut c = Client::connect(&server.local_addr().to_string(), ClientConfig::default()).unwrap();
    let first = read_msg(0, 4096);
    let r = c.one(&Request::Offload { msg: &first }).unwrap();
    assert_eq!(r.value, u64::from(SERVED_BY_OFFLOAD));
    let more = 50_000;
    let tail: Vec<u8> = (FILE_BYTES..FILE_BYTES + more).map(content).collect();
    let mut f = std::fs::OpenOptions::new().append(true).open(dir.join("pages")).unwrap();
    std::io::Write::write_all(&mut f, &tail).unwrap();
    let (off, size) = (FILE_BYTES as u64 - 1000, 20_000u32);
    let r = c.one(&Request::Offload { msg: &read_msg(off, size) }).unwrap();
    assert_eq!(r.value, u64::from(SERVED_BY_OFFLOAD));
    let want: Vec<u8> = (off as usize..off as usize + size as usize).map(content).collect();
    assert!(r.data == want, "{} bytes, the grown range differs", r.data.len());
    server.stop();
    server.join().unwrap();
}
