//! Where a database's bytes come from: the local directory, or a storefn server's served
//! directory read through the wire (crate `remote`). Opening reads whole small files (`CURRENT`,
//! the MANIFEST, WALs) and ranges of SST files (footers and meta blocks); a Get's data blocks
//! are read by the path that answers it.

use std::fs::File;
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::error::RocksError;

/// A database directory's files, read-only.
pub trait Files {
    /// The path a file is named by in errors.
    fn path(&self, name: &str) -> PathBuf;
    /// A whole file, refused when longer than `limit`.
    ///
    /// # Errors
    /// I/O; a file longer than `limit`.
    fn read_all(&mut self, name: &str, limit: u64) -> Result<Vec<u8>, RocksError>;
    /// A file's size, `None` when there is no such file.
    ///
    /// # Errors
    /// I/O other than "not found".
    fn size(&mut self, name: &str) -> Result<Option<u64>, RocksError>;
    /// Exactly `len` bytes at `offset`.
    ///
    /// # Errors
    /// I/O, a range past the end.
    fn read_at(&mut self, name: &str, offset: u64, len: usize) -> Result<Vec<u8>, RocksError>;
    /// Which of `names` exist (one round trip for a remote source).
    ///
    /// # Errors
    /// I/O other than "not found".
    fn existing(&mut self, names: &[String]) -> Result<Vec<bool>, RocksError> {
        names.iter().map(|n| self.size(n).map(|s| s.is_some())).collect()
    }
    /// The local file, for sources that have one (plain reads of a Get use it).
    fn local(&self, _name: &str) -> Option<PathBuf> {
        None
    }
}

/// The local directory.
#[derive(Debug, Clone)]
pub struct LocalDir(pub PathBuf);

impl Files for LocalDir {
    fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }

    fn read_all(&mut self, name: &str, limit: u64) -> Result<Vec<u8>, RocksError> {
        read_limited(&self.0.join(name), limit)
    }

    fn size(&mut self, name: &str) -> Result<Option<u64>, RocksError> {
        let p = self.0.join(name);
        match std::fs::metadata(&p) {
            Ok(m) => Ok(Some(m.len())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(RocksError::io(&p, e)),
        }
    }

    fn read_at(&mut self, name: &str, offset: u64, len: usize) -> Result<Vec<u8>, RocksError> {
        let p = self.0.join(name);
        let f = File::open(&p).map_err(|e| RocksError::io(&p, e))?;
        let mut buf = vec![0u8; len];
        f.read_exact_at(&mut buf, offset).map_err(|e| RocksError::io(&p, e))?;
        Ok(buf)
    }

    fn local(&self, name: &str) -> Option<PathBuf> {
        Some(self.0.join(name))
    }
}

pub(crate) fn read_limited(path: &Path, limit: u64) -> Result<Vec<u8>, RocksError> {
    let f = File::open(path).map_err(|e| RocksError::io(path, e))?;
    let len = f.metadata().map_err(|e| RocksError::io(path, e))?.len();
    if len > limit {
        return Err(RocksError::corrupt(path, limit, format!("{len} bytes: larger than {limit}")));
    }
    let mut buf = Vec::with_capacity(len as usize);
    f.take(limit).read_to_end(&mut buf).map_err(|e| RocksError::io(path, e))?;
    Ok(buf)
}
