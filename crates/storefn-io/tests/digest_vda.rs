//! Privileges: a file on this machine's root disk (/dev/vda, which refuses opens with EPERM even
//! for root) gets a digest, but raw mode fails with a clean `DeviceAccess` error whose
//! `is_fallback()` tells the caller to stay on the file path.

mod digest_support;

use std::fs::File;
use std::path::PathBuf;

use digest_support::{pattern, read_file, write_pattern_file};
use storefn_io::{find_block_device, Digest, DigestError, RawAccess, RawDevice};

struct TempFile(PathBuf);
impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[test]
fn root_disk_file_gets_device_access_error_and_fallback_signal() {
    let tmp = TempFile(std::env::temp_dir().join(format!("storefn-vda-{}", std::process::id())));
    write_pattern_file(&tmp.0, 4, 1 << 20);
    let file = File::open(&tmp.0).unwrap();
    let digest = match Digest::build(&file) {
        Ok(d) => d,
        Err(e) => {
            println!("skipped: temp dir file system has no usable digest ({e})");
            return;
        }
    };
    let info = match find_block_device(digest.identity().dev) {
        Ok(i) => i,
        Err(e) => {
            println!("skipped: temp dir is not on a block device ({e})");
            return;
        }
    };
    match RawDevice::open(&digest) {
        Err(DigestError::DeviceAccess { path, err }) => {
            assert_eq!(path, info.path);
            println!("{}: {err} (as BRIEF §5 says for /dev/vda)", path.display());
            // Non-root gets EACCES from the node's permissions before the EPERM policy.
            if info.path == std::path::Path::new("/dev/vda") && digest_support::is_root() {
                assert_eq!(err.raw_os_error(), Some(libc::EPERM));
            }
        }
        Ok(_) => {
            println!("skipped: {} opens here, nothing to refuse", info.path.display());
            return;
        }
        Err(e) => panic!("expected DeviceAccess, got {e}"),
    }
    // The bundled entry point gives the same clean error, and says "fall back".
    let e = RawAccess::open(&file).expect_err("raw mode must be unavailable");
    assert!(matches!(e, DigestError::DeviceAccess { .. }), "{e}");
    assert!(e.is_fallback());
    let msg = e.to_string();
    assert!(msg.contains("stay on the file path") && msg.contains(info.path.to_str().unwrap()));
    // ... and the file path still works: the lease taken inside open was released on failure,
    // so a writer is not blocked, and plain reads give the data.
    assert_eq!(read_file(&file, 4096, 512), pattern(4, 4096, 512));
    drop(std::fs::OpenOptions::new().write(true).open(&tmp.0).unwrap());
}
