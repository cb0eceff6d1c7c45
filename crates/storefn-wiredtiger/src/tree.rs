//! One WiredTiger file opened read-only and walked from a checkpoint's root with plain reads.

use crate::error::WtError;
use crate::format::{
    BlockAddr, BlockHeader, CheckpointCookie, FileDesc, Malformed, PageHeader, PageType,
};
use crate::format::{PAGE_COMPRESSED, PAGE_ENCRYPTED};
use crate::limits::{MAX_BLOCK_BYTES, MAX_DEPTH};
use crate::page::{search_internal, search_leaf, Child, Fallback, LeafHit};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// A lookup's answer. A [`Outcome::Fallback`] is answered by WiredTiger's own API.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The value was copied into the caller's buffer.
    Found,
    NotFound,
    Fallback(Fallback),
}

/// A B-tree file and the checkpoint a lookup reads. Opened `O_RDONLY`, never locked.
#[derive(Debug)]
pub struct Tree {
    path: PathBuf,
    file: File,
    alloc: u64,
    ckpt: CheckpointCookie,
    /// Caller-independent buffers reused by every lookup (no allocation in steady state).
    page: Vec<u8>,
    key: Vec<u8>,
}

impl Tree {
    /// Opens `path` read-only and checks its descriptor block; `ckpt` is the checkpoint to read.
    ///
    /// # Errors
    /// The file cannot be read, or its descriptor is damaged or of an unknown format.
    pub fn open(path: &Path, alloc: u64, ckpt: CheckpointCookie) -> Result<Self, WtError> {
        let file = File::open(path).map_err(|source| WtError::Io {
            path: path.into(),
            op: "open",
            source,
        })?;
        let tree = Tree { path: path.into(), file, alloc, ckpt, page: Vec::new(), key: Vec::new() };
        let mut first = vec![0; alloc as usize];
        tree.read_at(0, &mut first)?;
        FileDesc::parse(&first).map_err(|m| tree.corrupt(0, &m))?;
        Ok(tree)
    }

    /// The file this tree reads.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The checkpoint this tree reads.
    #[must_use]
    pub fn checkpoint(&self) -> &CheckpointCookie {
        &self.ckpt
    }

    /// The allocation unit of the file.
    #[must_use]
    pub fn allocation_size(&self) -> u64 {
        self.alloc
    }

    pub(crate) fn corrupt(&self, base: u64, m: &Malformed) -> WtError {
        WtError::Corrupt {
            path: self.path.clone(),
            offset: base + m.at as u64,
            what: m.what.clone(),
        }
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), WtError> {
        read_exact(&self.file, &self.path, offset, buf)
    }

    /// Looks `key` (as stored: an `S` key with its NUL) up, copying the value as stored into
    /// `value`.
    ///
    /// # Errors
    /// A read failure, or damage on the path (named with the file and byte offset).
    pub fn get(&mut self, key: &[u8], value: &mut Vec<u8>) -> Result<Outcome, WtError> {
        let (file, path) = (&self.file, &self.path);
        let mut w = Walk {
            path,
            alloc: self.alloc,
            ckpt: &self.ckpt,
            page: &mut self.page,
            key: &mut self.key,
        };
        w.get(key, value, |offset, buf| read_exact(file, path, offset, buf))
    }
}

fn read_exact(file: &File, path: &Path, offset: u64, buf: &mut [u8]) -> Result<(), WtError> {
    file.read_exact_at(buf, offset).map_err(|e| {
        if e.kind() == std::io::ErrorKind::UnexpectedEof {
            WtError::Corrupt {
                path: path.into(),
                offset,
                what: format!("block of {} bytes runs past the end of the file", buf.len()),
            }
        } else {
            WtError::Io { path: path.into(), op: "read", source: e }
        }
    })
}

/// One lookup's walk from a checkpoint's root with plain block reads, wherever the blocks come
/// from (this process's file, or a server's READs): every block is checked against the address
/// that named it (size, checksum) before a byte of it is parsed.
pub(crate) struct Walk<'a> {
    pub path: &'a Path,
    pub alloc: u64,
    pub ckpt: &'a CheckpointCookie,
    pub page: &'a mut Vec<u8>,
    pub key: &'a mut Vec<u8>,
}

impl Walk<'_> {
    fn corrupt(&self, base: u64, m: &Malformed) -> WtError {
        WtError::Corrupt {
            path: self.path.into(),
            offset: base + m.at as u64,
            what: m.what.clone(),
        }
    }

    /// Reads (by `read(offset, buf)`) and verifies the block at `addr`; returns its header.
    fn read_block(
        &mut self,
        addr: BlockAddr,
        read: &mut impl FnMut(u64, &mut [u8]) -> Result<(), WtError>,
    ) -> Result<PageHeader, WtError> {
        let end = addr.offset.checked_add(addr.size);
        if addr.size > MAX_BLOCK_BYTES || end.is_none_or(|e| e > self.ckpt.file_size) {
            return Err(WtError::Corrupt {
                path: self.path.into(),
                offset: addr.offset,
                what: format!(
                    "block of {} bytes lies outside the checkpoint's {} bytes",
                    addr.size, self.ckpt.file_size
                ),
            });
        }
        self.page.resize(addr.size as usize, 0);
        read(addr.offset, self.page)?;
        BlockHeader::verify(self.page, addr).map_err(|m| self.corrupt(addr.offset, &m))?;
        PageHeader::parse(self.page).map_err(|m| self.corrupt(addr.offset, &m))
    }

    /// Looks `key` (as stored) up, copying the value as stored into `value`.
    pub(crate) fn get(
        &mut self,
        key: &[u8],
        value: &mut Vec<u8>,
        mut read: impl FnMut(u64, &mut [u8]) -> Result<(), WtError>,
    ) -> Result<Outcome, WtError> {
        let Some(mut addr) = self.ckpt.root else { return Ok(Outcome::NotFound) };
        let mut expect = PageType::RowInternal;
        for _ in 0..MAX_DEPTH {
            let hdr = self.read_block(addr, &mut read)?;
            if hdr.flags & PAGE_COMPRESSED != 0 {
                return Ok(Outcome::Fallback(Fallback::CompressedPage));
            }
            if hdr.flags & PAGE_ENCRYPTED != 0 {
                return Ok(Outcome::Fallback(Fallback::EncryptedPage));
            }
            // The root may be a leaf; below it, the parent's address cell names the child's type.
            let root_leaf = addr == self.ckpt.root.unwrap() && hdr.page_type == PageType::RowLeaf;
            if hdr.page_type != expect && !root_leaf {
                return Err(WtError::Corrupt {
                    path: self.path.into(),
                    offset: addr.offset + 24,
                    what: format!("page type {:?}, expected {expect:?}", hdr.page_type),
                });
            }
            if hdr.page_type == PageType::RowLeaf {
                let hit = search_leaf(self.page, &hdr, key, self.key)
                    .map_err(|m| self.corrupt(addr.offset, &m))?;
                return Ok(match hit {
                    LeafHit::Found(r) => {
                        value.clear();
                        value.extend_from_slice(&self.page[r]);
                        Outcome::Found
                    }
                    LeafHit::NotFound => Outcome::NotFound,
                    LeafHit::Fallback(f) => Outcome::Fallback(f),
                });
            }
            let child = search_internal(self.page, &hdr, key, self.alloc, self.key)
                .map_err(|m| self.corrupt(addr.offset, &m))?;
            (addr, expect) = match child {
                Child::Internal(a) => (a, PageType::RowInternal),
                Child::Leaf(a) => (a, PageType::RowLeaf),
                Child::Empty => return Ok(Outcome::NotFound),
                Child::Fallback(f) => return Ok(Outcome::Fallback(f)),
            };
        }
        Err(WtError::Corrupt {
            path: self.path.into(),
            offset: addr.offset,
            what: format!("tree deeper than {MAX_DEPTH} levels (a cycle?)"),
        })
    }
}
