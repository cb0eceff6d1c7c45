//! The program registry: programs verified once, named by content hash (SHA-256 over
//! `prog_type || section || elf`), bounded by bytes with least-recently-used eviction.
//!
//! Shared by the server's threads behind a mutex (LOAD_PROG and the first use of a hash on a
//! thread take it; each thread then keeps its own compiled [`storefn_vm::Instance`]).

use std::collections::HashMap;
use std::sync::Arc;

use storefn_vm::{ProgType, VerifiedProgram};

pub use storefn_wire::{prog_hash, ProgHash};

#[derive(Debug)]
struct Entry {
    prog: Arc<VerifiedProgram>,
    bytes: usize,
    last_used: u64,
}

/// Verified programs by hash.
#[derive(Debug)]
pub struct Registry {
    map: HashMap<ProgHash, Entry>,
    bytes: usize,
    max_bytes: usize,
    clock: u64,
    /// Programs verified and added, and programs evicted to make room (the metrics').
    loaded: u64,
    evicted: u64,
}

/// Why LOAD_PROG failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    #[error("{0}")]
    Rejected(storefn_vm::Error),
    #[error("section name is not UTF-8")]
    Section,
    #[error("program of {bytes} bytes is larger than the registry ({max} bytes)")]
    TooLarge { bytes: usize, max: usize },
}

impl Registry {
    #[must_use]
    pub fn new(max_bytes: usize) -> Self {
        Self { map: HashMap::new(), bytes: 0, max_bytes, clock: 0, loaded: 0, evicted: 0 }
    }

    /// Parses and verifies a program, without the registry (the server does it off its
    /// event loop and without the registry's lock); returns it and the bytes it would hold.
    ///
    /// # Errors
    /// The loader's or verifier's error.
    pub fn verify(
        prog_type: u8,
        section: &[u8],
        elf: &[u8],
    ) -> Result<(Arc<VerifiedProgram>, usize), LoadError> {
        let sel = if section.is_empty() {
            None
        } else {
            Some(std::str::from_utf8(section).map_err(|_| LoadError::Section)?)
        };
        // The frame decoder admits only these two codes.
        let ty =
            if prog_type == storefn_wire::PROG_TYPE_XRP { ProgType::Xrp } else { ProgType::Lambda };
        // The instruction budget is set on every instance the workers build
        // (SERVER_INSN_BUDGET), not on the shared program.
        let prog = storefn_vm::load_verified(elf, sel, ty).map_err(LoadError::Rejected)?;
        let bytes = elf.len() + prog.insns.len() * 8 + prog.globals.len();
        Ok((prog, bytes))
    }

    /// Adds a program `verify` returned under `hash` (the one already there if another thread
    /// added it meanwhile), evicting the least recently used to make room.
    ///
    /// # Errors
    /// A program larger than the whole registry.
    pub fn insert(
        &mut self,
        hash: ProgHash,
        prog: Arc<VerifiedProgram>,
        bytes: usize,
    ) -> Result<Arc<VerifiedProgram>, LoadError> {
        if let Some(p) = self.get(&hash) {
            return Ok(p);
        }
        if bytes > self.max_bytes {
            return Err(LoadError::TooLarge { bytes, max: self.max_bytes });
        }
        self.clock += 1;
        while self.bytes + bytes > self.max_bytes {
            let (&victim, _) =
                self.map.iter().min_by_key(|(_, e)| e.last_used).expect("bytes > 0 means entries");
            let e = self.map.remove(&victim).expect("present");
            self.bytes -= e.bytes;
            self.evicted += 1;
        }
        self.loaded += 1;
        self.bytes += bytes;
        self.map.insert(hash, Entry { prog: Arc::clone(&prog), bytes, last_used: self.clock });
        Ok(prog)
    }

    /// The program with `hash`, marking it used; `None` if unknown or evicted.
    pub fn get(&mut self, hash: &ProgHash) -> Option<Arc<VerifiedProgram>> {
        self.clock += 1;
        let e = self.map.get_mut(hash)?;
        e.last_used = self.clock;
        Some(Arc::clone(&e.prog))
    }

    /// Programs verified and added since the start, and programs evicted to make room.
    #[must_use]
    pub fn churn(&self) -> (u64, u64) {
        (self.loaded, self.evicted)
    }

    /// Programs held.
    #[must_use]
    pub fn len(&self) -> usize {
        self.map.len()
    }
}
