//! Multi-key lookups and range queries over the tree plus the puts not yet compacted (the
//! memtable): what [`Db::multiget`] and [`Db::range`] run, and what the read-only CLI commands
//! run over a logged memtable. A logged key always wins over the tree.

use std::sync::Arc;

use crate::abi::Abi;
use crate::db::Db;
use crate::format::{NodeSize, VALUE_BYTES};
use crate::memtable::Memtable;
use crate::path::{Lookup, LookupPath, PathStats, ReadPath};
use crate::program::{load_range, ProgSource};
use crate::range::{aggregate, Agg, RangeScan};
use crate::store::Store;
use crate::xrp_paths::EngineChain;
use crate::xrp_range::{range_bpfkv, range_hops, range_xrp, RangeOutcome};
use crate::KvError;

/// How a range query reaches the tree.
#[derive(Debug, Clone, Default)]
pub enum RangeVia {
    /// A leaf scan with pread.
    #[default]
    Read,
    /// A resumable range storage function on the io engine (512 B nodes): ours or `prog`, in
    /// the scratch layout `abi` (docs/FORMAT.md).
    Chain { prog: ProgSource, abi: Abi },
}

impl RangeVia {
    /// The default for a node size: the built-in storage function for 512 B nodes, the leaf
    /// scan for 4096 B (the range programs read 512 B nodes).
    #[must_use]
    pub fn default_for(node_size: NodeSize) -> RangeVia {
        match node_size {
            NodeSize::B512 => RangeVia::Chain { prog: ProgSource::BuiltIn, abi: Abi::Storefn },
            NodeSize::B4096 => RangeVia::Read,
        }
    }
}

/// `keys` through `path` (one result per key, in order), logged puts laid over the tree's.
///
/// # Errors
/// The path's lookup errors.
pub fn multiget(
    path: &mut dyn LookupPath,
    mem: &Memtable,
    keys: &[u64],
) -> Result<Vec<Option<[u8; VALUE_BYTES]>>, KvError> {
    let mut out: Vec<Lookup> = Vec::with_capacity(keys.len());
    path.get_many(keys, &mut out)?;
    Ok(keys.iter().zip(&out).map(|(k, l)| mem.get(*k).copied().or(l.value)).collect())
}

/// Entries of `[begin, end]` (inclusive) or their aggregate, logged puts laid over the tree's.
/// When a logged key lies in the range the aggregate is computed here over the merged entries
/// (the storage function sees the tree only); min/max/count in the BPF-KV ABI are computed here
/// too (BPF-KV's `RangeQuery` aggregates sums only).
///
/// # Errors
/// I/O errors, corrupt nodes, chain failures, a program that breaks its ABI.
pub fn range(
    store: &Store,
    mem: &Memtable,
    begin: u64,
    end: u64,
    agg: Option<Agg>,
    via: &RangeVia,
) -> Result<RangeOutcome, KvError> {
    let logged = mem.range(begin, end).next().is_some();
    let mut out = match via {
        RangeVia::Read => {
            let mut scan = RangeScan::new(store);
            let entries = scan.collect(begin, end)?;
            RangeOutcome { entries, agg: None, calls: 0, ios: scan.ios }
        }
        RangeVia::Chain { prog, abi } => {
            let fn_agg = if logged { None } else { agg };
            let inst = load_range(prog, *abi)?;
            let hops = range_hops(store, *abi, fn_agg);
            let mut ch = EngineChain::new(store, inst, Some(hops))?;
            let mut run = |start: u64, s: &mut [u8]| ch.run(start, 512, s);
            match abi {
                Abi::Storefn => range_xrp(store, &mut run, begin, end, fn_agg)?,
                Abi::BpfKv => range_bpfkv(store, &mut run, begin, end, fn_agg)?,
            }
        }
    };
    out.entries = crate::db::overlay_range(std::mem::take(&mut out.entries), mem, begin, end);
    if let Some(a) = agg {
        if out.agg.is_none() || logged {
            out.agg = aggregate(a, out.entries.iter().map(|(_, v)| v));
        }
    }
    Ok(out)
}

/// Builds a lookup path over a tree.
pub type MakePath = Box<dyn FnMut(Arc<Store>) -> Result<Box<dyn LookupPath>, KvError>>;

/// A lookup path kept across calls on a [`Db`], so its caches stay warm (`--cache-bytes` LRU,
/// cached levels), and rebuilt over the new tree when a compaction has swapped it: compaction
/// rewrites every block, so everything cached from the old tree is dropped with the old path.
/// A put changes no block of the tree (it goes to the WAL and the memtable, which lookups
/// consult first), so nothing cached needs dropping for it.
pub struct DbPath {
    make: MakePath,
    current: Option<(Arc<Store>, Box<dyn LookupPath>)>,
    builds: u64,
}

impl std::fmt::Debug for DbPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DbPath").field("builds", &self.builds).finish_non_exhaustive()
    }
}

impl DbPath {
    /// `make` builds the path over a tree (e.g. an `XrpPath` with an LRU).
    #[must_use]
    pub fn new(make: MakePath) -> Self {
        Self { make, current: None, builds: 0 }
    }

    /// Paths built so far: 1 after the first lookup, + 1 per compaction seen since.
    #[must_use]
    pub fn builds(&self) -> u64 {
        self.builds
    }

    /// The current path's counters (since it was built).
    #[must_use]
    pub fn stats(&self) -> Option<PathStats> {
        self.current.as_ref().map(|(_, p)| p.stats())
    }

    /// The path over `store`, rebuilt when `store` is not the tree it was built on.
    fn over(&mut self, store: Arc<Store>) -> Result<&mut dyn LookupPath, KvError> {
        let stale = self.current.as_ref().is_none_or(|(s, _)| !Arc::ptr_eq(s, &store));
        if stale {
            self.current = None; // the old path (and its caches) go first
            let p = (self.make)(Arc::clone(&store))?;
            self.builds += 1;
            self.current = Some((store, p));
        }
        Ok(self.current.as_mut().expect("built above").1.as_mut())
    }
}

impl Db {
    /// Looks `key` up through `path` (puts not yet compacted first).
    ///
    /// # Errors
    /// The path's errors.
    pub fn get_via(
        &self,
        path: &mut DbPath,
        key: u64,
    ) -> Result<Option<[u8; VALUE_BYTES]>, KvError> {
        self.with_memtable(|store, mem| match mem.get(key) {
            Some(v) => Ok(Some(*v)),
            None => path.over(store)?.get(key),
        })
    }

    /// Looks `keys` up through `path` (puts not yet compacted first).
    ///
    /// # Errors
    /// The path's errors.
    pub fn multiget_via(
        &self,
        path: &mut DbPath,
        keys: &[u64],
    ) -> Result<Vec<Option<[u8; VALUE_BYTES]>>, KvError> {
        self.with_memtable(|store, mem| multiget(path.over(store)?, mem, keys))
    }

    /// Looks `keys` up (puts not yet compacted first, then the tree through the `read` path).
    ///
    /// # Errors
    /// I/O errors, corrupt nodes.
    pub fn multiget(&self, keys: &[u64]) -> Result<Vec<Option<[u8; VALUE_BYTES]>>, KvError> {
        self.multiget_with(keys, &mut |store| Ok(Box::new(ReadPath::new(store, 0))))
    }

    /// [`Db::multiget`] through the lookup path `make` builds over the current tree (e.g. an
    /// `XrpPath` running a BPF-KV program).
    ///
    /// # Errors
    /// Whatever the path returns.
    pub fn multiget_with(
        &self,
        keys: &[u64],
        make: &mut dyn FnMut(std::sync::Arc<Store>) -> Result<Box<dyn LookupPath>, KvError>,
    ) -> Result<Vec<Option<[u8; VALUE_BYTES]>>, KvError> {
        self.with_memtable(|store, mem| multiget(make(store)?.as_mut(), mem, keys))
    }

    /// Entries of `[begin, end]` or their aggregate (see [`range`]).
    ///
    /// # Errors
    /// As [`range`].
    pub fn range(
        &self,
        begin: u64,
        end: u64,
        agg: Option<Agg>,
        via: &RangeVia,
    ) -> Result<RangeOutcome, KvError> {
        self.with_memtable(|store, mem| range(&store, mem, begin, end, agg, via))
    }
}
