//! A served database directory read through the wire: STATs and READs (at most
//! `MAX_READ_BYTES` each, many to a frame). Each file's version (device, inode, change) is kept
//! from the first reply that names it, so a later reply from another version is seen.

use std::collections::HashMap;
use std::path::PathBuf;

use storefn_wire::limits::MAX_READ_BYTES;
use storefn_wire::{Client, FileVersion, Reply, Request, StatusCode};

use crate::error::RocksError;
use crate::source::Files;

/// READs (or STATs) sent in one frame: a bound on the frame's reply (256 x 4 KiB = 1 MiB less
/// headers would not fit MAX_FRAME_BYTES, 128 does).
pub const MAX_READS_PER_FRAME: usize = 128;

/// The server's copy of one database directory.
#[derive(Debug)]
pub struct RemoteFiles {
    pub(crate) client: Client,
    addr: String,
    /// The directory, relative to the served one ("" = the served directory itself).
    dir: String,
    pub(crate) versions: HashMap<String, FileVersion>,
}

impl RemoteFiles {
    pub fn new(client: Client, addr: &str, dir: &str) -> Self {
        let dir = dir.trim_matches('/').to_string();
        RemoteFiles { client, addr: addr.to_string(), dir, versions: HashMap::new() }
    }

    /// The wire path of file `name`.
    pub fn wire_path(&self, name: &str) -> String {
        if self.dir.is_empty() {
            name.to_string()
        } else {
            format!("{}/{name}", self.dir)
        }
    }

    /// The path errors name file `name` by.
    pub fn path_of(&self, name: &str) -> PathBuf {
        Files::path(self, name)
    }

    pub fn client(&mut self) -> &mut Client {
        &mut self.client
    }

    fn wire_err(&self, name: &str, e: impl std::fmt::Display) -> RocksError {
        RocksError::chain(&self.path(name), e)
    }

    /// Sends `reqs` and waits for their replies. Reads and STATs are idempotent, so a
    /// connection that broke since the last call (a server's idle timeout) is tried once more:
    /// the client reconnects on the call after a failure.
    pub(crate) fn call(
        &mut self,
        reqs: &[Request<'_>],
    ) -> Result<Vec<Reply>, storefn_wire::ClientError> {
        match self.client.call(reqs) {
            Err(storefn_wire::ClientError::Io(_)) => self.client.call(reqs),
            r => r,
        }
    }

    /// Records `v` for `name`; false when another version was recorded before.
    pub(crate) fn same_version(&mut self, name: &str, v: FileVersion) -> bool {
        *self.versions.entry(name.to_string()).or_insert(v) == v
    }

    /// Reads `len` bytes at `offset` in READs of at most `MAX_READ_BYTES`, one frame per
    /// [`MAX_READS_PER_FRAME`].
    pub(crate) fn read_range(
        &mut self,
        name: &str,
        offset: u64,
        len: usize,
    ) -> Result<Vec<u8>, RocksError> {
        let wp = self.wire_path(name);
        let step = MAX_READ_BYTES as usize;
        let mut out = Vec::with_capacity(len);
        let mut at = 0usize;
        while at < len {
            let mut reqs = Vec::new();
            let mut p = at;
            while p < len && reqs.len() < MAX_READS_PER_FRAME {
                let n = (len - p).min(step);
                reqs.push(Request::Read {
                    path: wp.as_bytes(),
                    offset: offset + p as u64,
                    len: n as u32,
                });
                p += n;
            }
            let replies = self.call(&reqs).map_err(|e| self.wire_err(name, e))?;
            for (r, q) in replies.into_iter().zip(&reqs) {
                let r = self.checked(name, r)?;
                let Request::Read { len: want, .. } = q else { unreachable!("reads only") };
                if r.data.len() != *want as usize {
                    return Err(RocksError::corrupt(
                        &self.path(name),
                        offset + out.len() as u64,
                        format!("read {} bytes of {want}: past the end", r.data.len()),
                    ));
                }
                out.extend_from_slice(&r.data);
            }
            at = p;
        }
        Ok(out)
    }

    /// A reply's status and version checked: a file gone or replaced is [`RocksError::Stale`].
    pub(crate) fn checked(&mut self, name: &str, r: Reply) -> Result<Reply, RocksError> {
        if r.status == StatusCode::NotFound as u16 {
            return Err(RocksError::Stale { file: self.path(name), what: "gone".into() });
        }
        let r = r.ok("READ").map_err(|e| self.wire_err(name, e))?;
        if !self.same_version(name, r.version) {
            return Err(RocksError::Stale { file: self.path(name), what: "replaced".into() });
        }
        Ok(r)
    }
}

impl Files for RemoteFiles {
    fn path(&self, name: &str) -> PathBuf {
        PathBuf::from(format!("{}:{}", self.addr, self.wire_path(name)))
    }

    fn read_all(&mut self, name: &str, limit: u64) -> Result<Vec<u8>, RocksError> {
        let Some(size) = self.size(name)? else {
            return Err(RocksError::io(
                &self.path(name),
                std::io::Error::from(std::io::ErrorKind::NotFound),
            ));
        };
        if size > limit {
            return Err(RocksError::corrupt(
                &self.path(name),
                limit,
                format!("{size} bytes: larger than {limit}"),
            ));
        }
        self.read_range(name, 0, size as usize)
    }

    fn size(&mut self, name: &str) -> Result<Option<u64>, RocksError> {
        let wp = self.wire_path(name);
        let r = self
            .call(&[Request::Stat { path: wp.as_bytes() }])
            .map_err(|e| self.wire_err(name, e))?
            .remove(0);
        if r.status == StatusCode::NotFound as u16 {
            return Ok(None);
        }
        let r = r.ok("STAT").map_err(|e| self.wire_err(name, e))?;
        self.versions.insert(name.to_string(), r.version);
        Ok(Some(r.value))
    }

    fn read_at(&mut self, name: &str, offset: u64, len: usize) -> Result<Vec<u8>, RocksError> {
        self.read_range(name, offset, len)
    }

    fn existing(&mut self, names: &[String]) -> Result<Vec<bool>, RocksError> {
        let wps: Vec<String> = names.iter().map(|n| self.wire_path(n)).collect();
        let mut out = Vec::with_capacity(names.len());
        for chunk in wps.chunks(MAX_READS_PER_FRAME) {
            let reqs: Vec<Request<'_>> =
                chunk.iter().map(|p| Request::Stat { path: p.as_bytes() }).collect();
            let replies = self.call(&reqs).map_err(|e| self.wire_err("", e))?;
            for r in replies {
                if r.status == StatusCode::NotFound as u16 {
                    out.push(false);
                } else {
                    r.ok("STAT").map_err(|e| self.wire_err("", e))?;
                    out.push(true);
                }
            }
        }
        Ok(out)
    }
}
