//! ENOSPC in the middle of a write (injected in the storage layer, after the free-space check
//! passed: another program filled the disk meanwhile): `create` and compaction fail naming the
//! cause and remove what they wrote; the database stays as it was.

mod common;

use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use common::TempDir;
use storefn_io::{RealStorage, Storage, StorageFile};
use storefn_kv::create_bpfkv_in;
use storefn_kv::{Db, DbOptions};
use storefn_kv::{KvError, NodeSize};
use storefn_testkit::dir_names;

/// The real file system, except that data writes fail with ENOSPC once `budget` bytes went.
#[derive(Debug, Clone)]
struct FillingDisk {
    budget: Arc<AtomicU64>,
    /// Renames fail with EIO while set, except a sidecar's temp file's (so builds succeed and
    /// compaction's install fails).
    fail_renames: Arc<std::sync::atomic::AtomicBool>,
}

#[derive(Debug)]
struct FillingFile {
    real: Box<dyn StorageFile>,
    budget: Arc<AtomicU64>,
}

impl StorageFile for FillingFile {
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        let n = buf.len() as u64;
        // Relaxed: a test counter; the builder's writer thread is the only writer at a time.
        let left = self.budget.load(Ordering::Relaxed);
        if left < n {
            return Err(io::Error::from_raw_os_error(libc::ENOSPC));
        }
        self.budget.store(left - n, Ordering::Relaxed);
        self.real.write_at(buf, offset)
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.real.set_len(len)
    }
    fn allocate(&self, _len: u64) -> io::Result<()> {
        Ok(()) // a file system without fallocate: space is taken as written
    }
    fn sync(&self) -> io::Result<()> {
        self.real.sync()
    }
}

impl Storage for FillingDisk {
    fn create(&self, path: &Path, direct: bool) -> io::Result<Box<dyn StorageFile>> {
        let real = RealStorage.create(path, direct)?;
        Ok(Box::new(FillingFile { real, budget: Arc::clone(&self.budget) }))
    }
    fn open_write(&self, path: &Path) -> io::Result<Box<dyn StorageFile>> {
        let real = RealStorage.open_write(path)?;
        Ok(Box::new(FillingFile { real, budget: Arc::clone(&self.budget) }))
    }
    fn adopt(&self, file: std::fs::File, path: &Path) -> io::Result<Box<dyn StorageFile>> {
        let real = RealStorage.adopt(file, path)?;
        Ok(Box::new(FillingFile { real, budget: Arc::clone(&self.budget) }))
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        // Relaxed: a test flag, set before the call that should see it.
        if self.fail_renames.load(Ordering::Relaxed) && from.extension().is_none_or(|e| e != "tmp")
        {
            return Err(io::Error::from_raw_os_error(libc::EIO));
        }
        RealStorage.rename(from, to)
    }
    fn remove(&self, path: &Path) -> io::Result<()> {
        RealStorage.remove(path)
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        RealStorage.sync_dir(dir)
    }
    fn free_bytes(&self, _dir: &Path) -> io::Result<u64> {
        Ok(u64::MAX / 2) // the check passed; the disk fills up afterwards
    }
}

#[test]
fn create_hitting_enospc_removes_its_files() {
    let t = TempDir::new("enospc-create");
    let disk =
        FillingDisk { budget: Arc::new(AtomicU64::new(40_000)), fail_renames: Arc::default() };
    let e = create_bpfkv_in(&disk, &t.join("db"), NodeSize::B512, 2, &mut |_, _| {}).unwrap_err();
    assert!(
        matches!(&e, KvError::Io { source, .. } if source.raw_os_error() == Some(libc::ENOSPC)),
        "{e}"
    );
    assert!(dir_names(&t.0).is_empty(), "left behind: {:?}", dir_names(&t.0));
}

#[test]
fn compaction_hitting_enospc_removes_its_files_and_keeps_the_puts() {
    let t = TempDir::new("enospc-compact");
    let db = t.join("db");
    storefn_kv::create_bpfkv(&db, NodeSize::B512, 2, &mut |_, _| {}).unwrap();
    let budget = Arc::new(AtomicU64::new(u64::MAX));
    let opts = DbOptions {
        storage: Arc::new(FillingDisk {
            budget: Arc::clone(&budget),
            fail_renames: Arc::default(),
        }),
        ..DbOptions::default()
    };
    let d = Db::open_opts(&db, opts).unwrap();
    let mut v = [0u8; 64];
    v[..4].copy_from_slice(b"kept");
    d.put(5000, &v).unwrap();
    let before = dir_names(&t.0);
    budget.store(30_000, Ordering::Relaxed); // the disk fills during the build
    let e = d.compact().unwrap_err().to_string();
    assert!(e.contains("db.new") && e.contains("No space left on device"), "{e}");
    assert_eq!(dir_names(&t.0), before, "nothing left behind");
    assert_eq!(d.get(5000).unwrap(), Some(v), "the put is still served");
    budget.store(u64::MAX, Ordering::Relaxed);
    d.compact().unwrap();
    assert_eq!(d.get(5000).unwrap(), Some(v), "and compacts once there is room");
}

// Regression: a compaction that failed after closing its log (install steps 2-5) left the
// handle with no log, and the next put panicked ("wal is open outside compaction").
#[test]
fn a_failed_install_closes_the_handle_and_reopening_finishes_it() {
    let t = TempDir::new("failed-install");
    let db = t.join("db");
    storefn_kv::create_bpfkv(&db, NodeSize::B512, 2, &mut |_, _| {}).unwrap();
    let fail = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let disk =
        FillingDisk { budget: Arc::new(AtomicU64::new(u64::MAX)), fail_renames: Arc::clone(&fail) };
    let d =
        Db::open_opts(&db, DbOptions { storage: Arc::new(disk), ..DbOptions::default() }).unwrap();
    let v = [7u8; 64];
    d.put(5000, &v).unwrap();
    fail.store(true, Ordering::Relaxed);
    let e = d.compact().unwrap_err().to_string();
    assert!(e.contains("rename"), "{e}");
    for e in [d.put(5001, &v).unwrap_err(), d.compact().unwrap_err()] {
        assert!(matches!(e, storefn_kv::DbError::Closed { .. }), "{e}");
        assert!(e.to_string().contains("reopen the database"), "{e}");
    }
    drop(d);
    let d = Db::open(&db).unwrap();
    assert_eq!(d.get(5000).unwrap(), Some(v));
    assert_eq!(d.store().meta().key_count, 962, "the install was finished on reopen");
}
