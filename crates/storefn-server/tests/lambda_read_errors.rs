//! A λ range whose chunk reads fail partway (a real EIO from the device, mid-range) is answered
//! with one clean error, never a partial result, and the connection carries on. The device is a
//! loop device over an image file cut short inside the served file's blocks: reads before the
//! cut succeed, reads past it fail with EIO (the loop driver's short read). Root only (loop
//! device, mkfs, mount); everything set up is undone on every path.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::TempDir;
use storefn_server::{Server, ServerConfig};
use storefn_wire::limits::MAX_LAMBDA_IN_BYTES;
use storefn_wire::StatusCode;
use storefn_wire::PROG_TYPE_LAMBDA;
use storefn_wire::{Client, ClientConfig, Request};

/// File-system block size of the test image (one server chunk read per block).
/// The file system's block: the unit the cut image fails in.
const FS_BLOCK: u64 = 4096;

fn run(cmd: &str, args: &[&str]) -> Result<String, String> {
    let o = Command::new(cmd).args(args).output().map_err(|e| format!("{cmd}: {e}"))?;
    if !o.status.success() {
        return Err(format!("{cmd} {args:?}: {}", String::from_utf8_lossy(&o.stderr)));
    }
    Ok(String::from_utf8_lossy(&o.stdout).into_owned())
}

/// A loop device over `image` with an ext4 file system mounted at `mnt`; undone on drop.
struct LoopFs {
    image: PathBuf,
    dev: Option<String>,
    mnt: PathBuf,
    mounted: bool,
}

impl LoopFs {
    fn mount(&mut self, opts: &str) {
        let dev = self.dev.clone().expect("attached");
        run("mount", &["-o", opts, &dev, self.mnt.to_str().unwrap()]).unwrap();
        self.mounted = true;
    }

    fn umount(&mut self) {
        if std::mem::take(&mut self.mounted) {
            let m = self.mnt.to_str().unwrap();
            // Lazy as a fallback: a panicking test may still hold a file open.
            if run("umount", &[m]).is_err() {
                let _ = run("umount", &["-l", m]);
            }
        }
    }
}

impl Drop for LoopFs {
    fn drop(&mut self) {
        self.umount();
        if let Some(d) = self.dev.take() {
            let _ = run("losetup", &["-d", &d]);
        }
        let _ = std::fs::remove_file(&self.image);
    }
}

/// Root and the tools, or a skip (a failure under STOREFN_REQUIRE_PRIVILEGED=1).
fn privileged() -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        storefn_testkit::skip("needs root (loop device, mkfs.ext4, mount)");
        return false;
    }
    for tool in ["losetup", "mkfs.ext4", "mount", "umount", "filefrag"] {
        if run("sh", &["-c", &format!("command -v {tool}")]).is_err() {
            storefn_testkit::skip(&format!("needs {tool}"));
            return false;
        }
    }
    true
}

/// Physical block of logical block `logical` of `file`, from `filefrag -v` (blocks of the file
/// system's size), and the number of extents.
fn physical_block(file: &Path, logical: u64) -> (u64, usize) {
    let out = run("filefrag", &["-v", file.to_str().unwrap()]).unwrap();
    let mut found = None;
    let mut extents = 0;
    for line in out.lines() {
        // "   0:        0..     255:      33280..     33535:    256:             last,eof"
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 5 || !f[0].ends_with(':') || f[0].trim_end_matches(':').parse::<u32>().is_err()
        {
            continue;
        }
        extents += 1;
        let num = |s: &str| s.trim_end_matches(':').trim_end_matches("..").parse::<u64>().unwrap();
        let (lstart, lend, pstart) = (num(f[1]), num(f[2]), num(f[3]));
        if (lstart..=lend).contains(&logical) {
            found = Some(pstart + (logical - lstart));
        }
    }
    (found.unwrap_or_else(|| panic!("logical block {logical} not in:\n{out}")), extents)
}

/// stats64's result over `data`, by the same program on the local interpreter.
fn local_stats(elf: &[u8], data: &[u8]) -> (u64, Vec<u8>) {
    let v = storefn_vm::load_verified(elf, None, storefn_vm::ProgType::Lambda).unwrap();
    let mut inst = storefn_vm::Instance::new(v, storefn_vm::Engine::Interp).unwrap();
    let mut out = vec![0u8; 64];
    let ret = inst.run_lambda(data, &mut out).unwrap();
    out.truncate(usize::try_from(ret).unwrap());
    (ret, out)
}

#[test]
fn a_chunk_read_failing_mid_range_answers_one_clean_error() {
    if !privileged() {
        return;
    }
    let dir = TempDir::new("lambda-eio");
    let mnt = dir.join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let mut fs = LoopFs { image: dir.join("img"), dev: None, mnt: mnt.clone(), mounted: false };
    run("truncate", &["-s", "64M", fs.image.to_str().unwrap()]).unwrap();
    fs.dev = Some(
        run("losetup", &["--find", "--show", fs.image.to_str().unwrap()]).unwrap().trim().into(),
    );
    let dev = fs.dev.clone().unwrap();
    // No journal: nothing writes to the image once it is cut.
    run("mkfs.ext4", &["-q", "-F", "-b", &FS_BLOCK.to_string(), "-O", "^has_journal", &dev])
        .unwrap();
    fs.mount("rw");
    let len = u64::from(MAX_LAMBDA_IN_BYTES);
    let data: Vec<u8> = (0..len / 8).flat_map(|i| (i * 2_654_435_761).to_le_bytes()).collect();
    let f = mnt.join("f");
    std::fs::write(&f, &data).unwrap();
    std::fs::File::open(&f).unwrap().sync_all().unwrap();
    // The image ends inside the file: its first half is readable, the rest fails with EIO.
    let half = len / FS_BLOCK / 2;
    let (cut_block, extents) = physical_block(&f, half);
    assert_eq!(extents, 1, "a fresh file system gives the file one extent");
    fs.umount();
    run("truncate", &["-s", &(cut_block * FS_BLOCK).to_string(), fs.image.to_str().unwrap()])
        .unwrap();
    fs.mount("ro");

    let server = Server::start("127.0.0.1:0", ServerConfig::new(&mnt)).unwrap();
    let mut c = Client::connect(&server.local_addr().to_string(), ClientConfig::default()).unwrap();
    let elf = storefn_progs::must("lambda/stats64");
    let h = c.load_prog(PROG_TYPE_LAMBDA, b"", elf).unwrap();
    let lambda = |offset: u64, len: u64| Request::Lambda {
        path: b"f",
        offset,
        len: u32::try_from(len).unwrap(),
        hash: &h,
        out_cap: 64,
    };
    let good = half * FS_BLOCK;
    for round in 0..3 {
        // The whole range: 256 chunk reads, the second half failing while others are in
        // flight. One reply, an I/O error naming the cause; never an OK with a partial result.
        let r = c.call(&[lambda(0, len)]).unwrap();
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].status, StatusCode::Io as u16, "round {round}: {:?}", r[0].message);
        assert!(r[0].data.is_empty(), "round {round}: a result came with the error");
        // The failing chunk is one past the cut (the reply names its file offset, not the
        // engine's token).
        let m = &r[0].message;
        let at = m.split("file offset 0x").nth(1).and_then(|s| s.split(',').next());
        let at = at.and_then(|h| u64::from_str_radix(h, 16).ok());
        assert!(m.contains("EIO") && at.is_some_and(|a| (good..len).contains(&a)), "{m}");
        assert!(!m.contains("token"), "{m}");
        // A range that ends past the cut, and one only past it, fail the same way.
        for (off, l) in [(good - 4 * FS_BLOCK, 8 * FS_BLOCK), (good, FS_BLOCK)] {
            let e = c.one(&lambda(off, l)).unwrap_err();
            assert_eq!(e.status(), Some(StatusCode::Io as u16), "{e}");
        }
        // The connection carries on (no stray reply from the failed job's other chunks), and
        // the readable half gives the function's exact result.
        let ok = c.one(&lambda(0, good)).unwrap();
        let (ret, out) = local_stats(elf, &data[..usize::try_from(good).unwrap()]);
        assert_eq!((ok.value, ok.data), (ret, out), "round {round}");
        let rd = c.one(&Request::Read { path: b"f", offset: 0, len: 8 }).unwrap();
        assert_eq!(rd.data, data[..8]);
    }
    server.stop();
    server.join().unwrap();
    drop(fs);
}
