//! The run's memory budget: a cgroup v1 memory group (it counts the page cache) that the
//! process enters for the run and that is removed when the run ends, error or not.

use crate::error::YcsbError;
use crate::limits::MIN_MEMORY_LIMIT;
use std::path::{Path, PathBuf};

/// The v1 memory hierarchy (this machine's cgroups are v1 for resource control).
pub const MEMORY_ROOT: &str = "/sys/fs/cgroup/memory";
/// Groups this driver creates are named `<prefix><pid>`.
pub const GROUP_PREFIX: &str = "storefn-ycsb-";

fn cg_err<'p>(path: &'p Path, op: &'static str) -> impl FnOnce(std::io::Error) -> YcsbError + 'p {
    move |source| YcsbError::Cgroup { path: path.into(), op, source }
}

/// The process inside a memory group; leaving and removing it happens on drop.
#[derive(Debug)]
pub struct MemoryGroup {
    path: PathBuf,
    limit: u64,
}

impl MemoryGroup {
    /// Creates `<MEMORY_ROOT>/storefn-ycsb-<pid>` with `limit` bytes and moves the whole
    /// process (every thread) into it. Groups a killed earlier run left behind (their pid is
    /// gone) are removed first.
    ///
    /// # Errors
    /// A limit below [`MIN_MEMORY_LIMIT`], no v1 memory controller, no permission (root).
    pub fn enter(limit: u64) -> Result<Self, YcsbError> {
        if limit < MIN_MEMORY_LIMIT {
            return Err(YcsbError::Invalid(format!(
                "--memory-limit {limit}: at least {MIN_MEMORY_LIMIT} bytes"
            )));
        }
        let root = Path::new(MEMORY_ROOT);
        remove_stale(root);
        let path = root.join(format!("{GROUP_PREFIX}{}", std::process::id()));
        std::fs::create_dir(&path).map_err(cg_err(&path, "mkdir"))?;
        let group = MemoryGroup { path, limit };
        std::fs::write(group.path.join("memory.limit_in_bytes"), limit.to_string())
            .map_err(cg_err(&group.path, "write memory.limit_in_bytes"))?;
        std::fs::write(group.path.join("cgroup.procs"), std::process::id().to_string())
            .map_err(cg_err(&group.path, "write cgroup.procs"))?;
        Ok(group)
    }

    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }

    #[must_use]
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// The group's peak charge so far (memory.max_usage_in_bytes), page cache included.
    #[must_use]
    pub fn max_usage(&self) -> Option<u64> {
        std::fs::read_to_string(self.path.join("memory.max_usage_in_bytes"))
            .ok()
            .and_then(|s| s.trim().parse().ok())
    }

    /// Leaves the group and removes it.
    ///
    /// # Errors
    /// The group could not be removed (it is named so the user can `rmdir` it).
    pub fn remove(mut self) -> Result<(), YcsbError> {
        let r = self.remove_inner();
        self.path = PathBuf::new();
        r
    }

    fn remove_inner(&self) -> Result<(), YcsbError> {
        if self.path.as_os_str().is_empty() {
            return Ok(());
        }
        let root = Path::new(MEMORY_ROOT);
        std::fs::write(root.join("cgroup.procs"), std::process::id().to_string())
            .map_err(cg_err(&self.path, "move the process back to the root group"))?;
        // rmdir races the kernel's bookkeeping of the threads just moved: a few short retries.
        let mut last = None;
        for _ in 0..50 {
            match std::fs::remove_dir(&self.path) {
                Ok(()) => return Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
                Err(e) => last = Some(e),
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        Err(cg_err(&self.path, "rmdir")(last.expect("set by the loop")))
    }
}

impl Drop for MemoryGroup {
    fn drop(&mut self) {
        if let Err(e) = self.remove_inner() {
            eprintln!("warning: {e}");
        }
    }
}

/// Removes `storefn-ycsb-<pid>` groups whose process is gone (an earlier run killed, e.g. by
/// the OOM killer, before its drop ran).
fn remove_stale(root: &Path) {
    let Ok(entries) = std::fs::read_dir(root) else { return };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.strip_prefix(GROUP_PREFIX)) else {
            continue;
        };
        if pid.parse::<u32>().is_ok() && !Path::new("/proc").join(pid).exists() {
            let _ = std::fs::remove_dir(e.path());
        }
    }
}

/// Drops the page cache of `path` (a file, with its siblings named `path.*`, or every file
/// of a directory), so pages cached before the run, charged to no group, do not serve it.
///
/// # Errors
/// A file that cannot be opened.
pub fn drop_cache(path: &Path) -> Result<(), YcsbError> {
    let mut files = Vec::new();
    if path.is_dir() {
        for e in std::fs::read_dir(path).map_err(io(path, "read_dir"))?.flatten() {
            files.push(e.path());
        }
    } else {
        files.push(path.to_owned());
        let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
            return Ok(());
        };
        let parent = if parent.as_os_str().is_empty() { Path::new(".") } else { parent };
        let prefix = format!("{}.", name.to_string_lossy());
        for e in std::fs::read_dir(parent).map_err(io(parent, "read_dir"))?.flatten() {
            if e.file_name().to_string_lossy().starts_with(&prefix) {
                files.push(e.path());
            }
        }
    }
    for f in files.iter().filter(|f| f.is_file()) {
        let file = std::fs::File::open(f).map_err(io(f, "open"))?;
        use std::os::fd::AsRawFd;
        // Written pages must reach the disk before they can be dropped.
        let _ = file.sync_all();
        // SAFETY: the descriptor is open for the call; fadvise only drops clean cached pages.
        unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    }
    Ok(())
}

fn io<'p>(path: &'p Path, op: &'static str) -> impl FnOnce(std::io::Error) -> YcsbError + 'p {
    move |source| YcsbError::Io { path: path.into(), op, source }
}
