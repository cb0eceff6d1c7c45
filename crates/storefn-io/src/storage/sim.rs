//! A power-loss model of a disk under one directory, for crash tests.
//!
//! [`CrashSim`] passes every operation but the syncs through to the real file system (so the
//! store reads back what it wrote, as through a page cache) and keeps a shadow of what the *disk* holds: per file,
//! the bytes as of its last sync plus the writes and length changes since; for the directory,
//! the entries as of its last sync plus the creates, renames and removes since.
//!
//! The crash point is an operation number: operations are counted in the order they are issued
//! (every write, length change, allocation, sync, create, rename, remove and directory sync).
//! When operation `crash_at` is reached the power goes: that operation and every later one fail
//! with [`CRASH_ERROR`] and change nothing, and the disk image is fixed as a disk could leave it:
//! - each file keeps its synced bytes; every write since its last sync (the crashing write
//!   included, if the crash falls inside one) is independently kept whole, lost, or torn, a
//!   torn write keeping a random subset of its [`SECTOR_BYTES`] sectors; a length change since
//!   the last sync is kept or lost;
//! - the directory keeps its synced entries plus a random prefix of the later entry changes (a
//!   journaling file system applies metadata in order), so an entry not yet synced may vanish.
//!
//! [`CrashSim::image`] returns that image; a test writes it to a fresh directory and opens the
//! database there with the real storage, as a machine does after the power comes back.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};

use rand::{Rng, SeedableRng};

use super::{RealStorage, Storage, StorageFile};

/// The unit a disk writes atomically; a torn write keeps some of its sectors and not others.
pub const SECTOR_BYTES: usize = 512;
/// The error message every operation at and after the crash point fails with.
pub const CRASH_ERROR: &str = "simulated power loss";

#[derive(Debug, Clone)]
enum Change {
    Write { offset: u64, data: Vec<u8> },
    SetLen(u64),
}

#[derive(Debug, Default)]
struct Shadow {
    /// Bytes as of the last sync.
    synced: Vec<u8>,
    /// Changes since, in issue order.
    pending: Vec<Change>,
}

#[derive(Debug, Clone)]
enum Entry {
    Link(OsString, usize),
    Rename(OsString, OsString),
    Remove(OsString),
}

#[derive(Debug)]
struct State {
    files: Vec<Shadow>,
    /// Name -> file index, as of the last directory sync.
    synced_dir: BTreeMap<OsString, usize>,
    /// Name -> file index now.
    dir: BTreeMap<OsString, usize>,
    /// Entry changes since the last directory sync.
    pending_dir: Vec<Entry>,
    ops: u64,
    crash_at: Option<u64>,
    image: Option<BTreeMap<OsString, Vec<u8>>>,
    rng: rand::rngs::SmallRng,
}

fn apply(bytes: &mut Vec<u8>, change: &Change) {
    match change {
        Change::Write { offset, data } => {
            let at = usize::try_from(*offset).expect("test files fit in memory");
            if bytes.len() < at + data.len() {
                bytes.resize(at + data.len(), 0);
            }
            bytes[at..at + data.len()].copy_from_slice(data);
        }
        Change::SetLen(n) => bytes.resize(usize::try_from(*n).expect("fits"), 0),
    }
}

fn apply_entry(dir: &mut BTreeMap<OsString, usize>, e: &Entry) {
    match e {
        Entry::Link(name, id) => {
            dir.insert(name.clone(), *id);
        }
        Entry::Rename(from, to) => {
            if let Some(id) = dir.remove(from) {
                dir.insert(to.clone(), id);
            }
        }
        Entry::Remove(name) => {
            dir.remove(name);
        }
    }
}

impl State {
    /// Counts one operation; false (and the image fixed) from the crash point on. `inflight` is
    /// the change this operation makes to a file: at the crash point it is torn like any
    /// unsynced change (the power went while it was being written).
    fn tick(&mut self, inflight: Option<(usize, &Change)>) -> bool {
        if self.image.is_some() {
            return false;
        }
        let n = self.ops;
        self.ops += 1;
        if self.crash_at == Some(n) {
            if let Some((id, c)) = inflight {
                self.files[id].pending.push(c.clone());
            }
            self.image = Some(self.crash_image());
            return false;
        }
        true
    }

    fn crash_image(&mut self) -> BTreeMap<OsString, Vec<u8>> {
        let mut dir = self.synced_dir.clone();
        let keep = self.rng.gen_range(0..=self.pending_dir.len());
        for e in &self.pending_dir[..keep] {
            apply_entry(&mut dir, e);
        }
        let mut out = BTreeMap::new();
        for (name, &id) in &dir {
            let f = &self.files[id];
            let mut bytes = f.synced.clone();
            for c in &f.pending {
                match (self.rng.gen_range(0..3u8), c) {
                    (0, _) => {}
                    (1, _) | (_, Change::SetLen(_)) => apply(&mut bytes, c),
                    (_, Change::Write { offset, data }) => {
                        for (i, sector) in data.chunks(SECTOR_BYTES).enumerate() {
                            if self.rng.gen_bool(0.5) {
                                let offset = offset + (i * SECTOR_BYTES) as u64;
                                apply(&mut bytes, &Change::Write { offset, data: sector.to_vec() });
                            }
                        }
                    }
                }
            }
            out.insert(name.clone(), bytes);
        }
        out
    }
}

fn crashed() -> io::Error {
    io::Error::other(CRASH_ERROR)
}

fn name_of(path: &Path) -> OsString {
    path.file_name().expect("a file path").to_owned()
}

/// The crash model (module comment). Every path it is handed must lie in its one directory.
#[derive(Debug, Clone)]
pub struct CrashSim {
    state: Arc<Mutex<State>>,
}

impl CrashSim {
    /// Models the disk under `dir`, whose files as they are now count as synced. The power goes
    /// at operation `crash_at` (None: never); `seed` picks what a crash keeps.
    ///
    /// # Errors
    /// I/O errors reading `dir`.
    pub fn new(dir: &Path, crash_at: Option<u64>, seed: u64) -> io::Result<Self> {
        let mut files = Vec::new();
        let mut names = BTreeMap::new();
        for e in std::fs::read_dir(dir)? {
            let e = e?;
            if e.file_type()?.is_file() {
                names.insert(e.file_name(), files.len());
                files.push(Shadow { synced: std::fs::read(e.path())?, pending: Vec::new() });
            }
        }
        let state = State {
            files,
            synced_dir: names.clone(),
            dir: names,
            pending_dir: Vec::new(),
            ops: 0,
            crash_at,
            image: None,
            rng: rand::rngs::SmallRng::seed_from_u64(seed),
        };
        Ok(Self { state: Arc::new(Mutex::new(state)) })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Operations issued so far (the crash point included, once reached).
    #[must_use]
    pub fn ops(&self) -> u64 {
        self.lock().ops
    }

    /// The disk as the crash left it (file name -> bytes), once the crash point was reached.
    #[must_use]
    pub fn image(&self) -> Option<BTreeMap<OsString, Vec<u8>>> {
        self.lock().image.clone()
    }

    /// Cuts the power now (if it has not gone yet) and returns the image.
    #[must_use]
    pub fn crash_now(&self) -> BTreeMap<OsString, Vec<u8>> {
        let mut st = self.lock();
        if st.image.is_none() {
            let img = st.crash_image();
            st.image = Some(img);
        }
        st.image.clone().expect("set above")
    }
}

impl CrashSim {
    /// The shadow id of an existing file to open for writing (opening changes nothing on
    /// disk, so it is not an operation); fails once the power has gone.
    fn known(&self, path: &Path) -> io::Result<usize> {
        let st = self.lock();
        if st.image.is_some() {
            return Err(crashed());
        }
        st.dir.get(&name_of(path)).copied().ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))
    }
}

#[derive(Debug)]
struct SimFile {
    sim: CrashSim,
    id: usize,
    real: Box<dyn StorageFile>,
}

impl SimFile {
    fn change(&self, c: Change, real: impl FnOnce() -> io::Result<()>) -> io::Result<()> {
        let mut st = self.sim.lock();
        if !st.tick(Some((self.id, &c))) {
            return Err(crashed());
        }
        real()?;
        st.files[self.id].pending.push(c);
        Ok(())
    }
}

impl StorageFile for SimFile {
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        let c = Change::Write { offset, data: buf.to_vec() };
        self.change(c, || self.real.write_at(buf, offset))
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.change(Change::SetLen(len), || self.real.set_len(len))
    }
    fn allocate(&self, len: u64) -> io::Result<()> {
        let mut st = self.sim.lock();
        if !st.tick(None) {
            return Err(crashed());
        }
        self.real.allocate(len)?;
        // Allocation past the end extends the file with zeros, like a length change.
        let f = &mut st.files[self.id];
        let mut now = f.synced.clone();
        f.pending.iter().for_each(|c| apply(&mut now, c));
        if (now.len() as u64) < len {
            f.pending.push(Change::SetLen(len));
        }
        Ok(())
    }
    fn sync(&self) -> io::Result<()> {
        let mut st = self.sim.lock();
        if !st.tick(None) {
            return Err(crashed());
        }
        // The model decides durability; the real file only serves reads (page cache), so it
        // needs no real sync (which would make a test of hundreds of crash points crawl).
        let f = &mut st.files[self.id];
        for c in std::mem::take(&mut f.pending) {
            apply(&mut f.synced, &c);
        }
        Ok(())
    }
}

impl Storage for CrashSim {
    fn create(&self, path: &Path, direct: bool) -> io::Result<Box<dyn StorageFile>> {
        let mut st = self.lock();
        if !st.tick(None) {
            return Err(crashed());
        }
        // Buffered: the model, not the device, holds what is durable (see `SimFile::sync`).
        let _ = direct;
        let real = RealStorage.create(path, false)?;
        let name = name_of(path);
        let id = if let Some(&id) = st.dir.get(&name) {
            st.files[id].pending.push(Change::SetLen(0)); // O_TRUNC of the same inode
            id
        } else {
            st.files.push(Shadow::default());
            let id = st.files.len() - 1;
            st.dir.insert(name.clone(), id);
            st.pending_dir.push(Entry::Link(name, id));
            id
        };
        drop(st);
        Ok(Box::new(SimFile { sim: self.clone(), id, real }))
    }
    fn open_write(&self, path: &Path) -> io::Result<Box<dyn StorageFile>> {
        let id = self.known(path)?;
        let real = RealStorage.open_write(path)?;
        Ok(Box::new(SimFile { sim: self.clone(), id, real }))
    }
    fn adopt(&self, file: std::fs::File, path: &Path) -> io::Result<Box<dyn StorageFile>> {
        let id = self.known(path)?;
        let real = RealStorage.adopt(file, path)?;
        Ok(Box::new(SimFile { sim: self.clone(), id, real }))
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut st = self.lock();
        if !st.tick(None) {
            return Err(crashed());
        }
        RealStorage.rename(from, to)?;
        let e = Entry::Rename(name_of(from), name_of(to));
        apply_entry(&mut st.dir, &e);
        st.pending_dir.push(e);
        Ok(())
    }
    fn remove(&self, path: &Path) -> io::Result<()> {
        let mut st = self.lock();
        if !st.tick(None) {
            return Err(crashed());
        }
        RealStorage.remove(path)?;
        let e = Entry::Remove(name_of(path));
        apply_entry(&mut st.dir, &e);
        st.pending_dir.push(e);
        Ok(())
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        let mut st = self.lock();
        if !st.tick(None) {
            return Err(crashed());
        }
        let _ = dir; // modelled, not done (see `SimFile::sync`)
        st.synced_dir = st.dir.clone();
        st.pending_dir.clear();
        Ok(())
    }
    fn free_bytes(&self, dir: &Path) -> io::Result<u64> {
        RealStorage.free_bytes(dir)
    }
}
