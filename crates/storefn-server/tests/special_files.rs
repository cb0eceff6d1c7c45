// Regression: READ, STAT and WRITE opened their file before looking at its type and without
// O_NONBLOCK: a FIFO in the served directory blocked the worker in `open` (every connection of
// that thread stopped), WRITE wrote into character devices before failing, READ opened block
// devices.

mod common;

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::{Duration, Instant};

use common::{serve, TempDir};
use storefn_wire::StatusCode;
use storefn_wire::{Client, ClientConfig, Request};

fn mknod(path: &Path, mode: libc::mode_t, dev: libc::dev_t) -> std::io::Result<()> {
    let c = CString::new(path.as_os_str().as_bytes()).unwrap();
    // SAFETY: `c` is a NUL-terminated path; mknod reads it and nothing else.
    let r = unsafe { libc::mknod(c.as_ptr(), mode, dev) };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

fn quick_client(addr: &str) -> Client {
    let cfg = ClientConfig { timeout: Duration::from_secs(5), ..ClientConfig::default() };
    Client::connect(addr, cfg).unwrap()
}

fn requests(path: &str) -> [Request<'_>; 3] {
    [
        Request::Read { path: path.as_bytes(), offset: 0, len: 8 },
        Request::Stat { path: path.as_bytes() },
        Request::Write { path: path.as_bytes(), offset: 0, data: b"attacker" },
    ]
}

#[test]
fn a_fifo_is_refused_at_once_and_never_stops_a_worker() {
    let dir = TempDir::new("fifo");
    std::fs::write(dir.join("ok"), b"regular!").unwrap();
    mknod(&dir.join("pipe"), libc::S_IFIFO | 0o666, 0).unwrap();
    let server = serve(dir.path(), 2);
    let addr = server.local_addr().to_string();
    let started = Instant::now();
    // Four connections (both threads get some) with every op on the FIFO, then a read of a
    // regular file on each: all answered, none waits for a writer or reader of the pipe.
    let handles: Vec<_> = (0..4)
        .map(|_| {
            let addr = addr.clone();
            std::thread::spawn(move || {
                let mut c = quick_client(&addr);
                for r in c.call(&requests("pipe")).unwrap() {
                    assert_eq!(r.status, StatusCode::NotRegular as u16, "{}", r.message);
                    assert!(r.message.contains("FIFO"), "{}", r.message);
                }
                let r = c.one(&Request::Read { path: b"ok", offset: 0, len: 8 }).unwrap();
                assert_eq!(r.data, b"regular!");
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    assert!(started.elapsed() < Duration::from_secs(10));
    server.stop();
    server.join().unwrap();
}

#[test]
fn devices_are_never_opened_read_or_written() {
    let dir = TempDir::new("devices");
    // The same devices as /dev/null (1,3) and /dev/zero (1,5), and a block device number.
    let made = [
        ("null", libc::S_IFCHR, libc::makedev(1, 3)),
        ("zero", libc::S_IFCHR, libc::makedev(1, 5)),
        ("loop", libc::S_IFBLK, libc::makedev(7, 0)),
    ]
    .iter()
    .map(|&(n, kind, dev)| mknod(&dir.join(n), kind | 0o666, dev))
    .collect::<Result<Vec<()>, _>>();
    if let Err(e) = made {
        storefn_testkit::skip(&format!("mknod of device nodes needs root: {e}"));
        return;
    }
    std::fs::create_dir(dir.join("sub")).unwrap();
    let server = serve(dir.path(), 1);
    let mut c = quick_client(&server.local_addr().to_string());
    for (path, what) in [
        ("null", "character device"),
        ("zero", "character device"),
        ("loop", "block device"),
        ("sub", "directory"),
    ] {
        for r in c.call(&requests(path)).unwrap() {
            assert_eq!(r.status, StatusCode::NotRegular as u16, "{path}: {}", r.message);
            assert!(r.message.contains(what), "{path}: {}", r.message);
        }
    }
    server.stop();
    server.join().unwrap();
}
