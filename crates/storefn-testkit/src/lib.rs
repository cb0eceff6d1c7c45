//! Test support shared by every storefn crate's tests (a dev-dependency, never a dependency):
//! - [`skip`]: the one way a test skips, and fails instead under CI's
//!   [`REQUIRE_PRIVILEGED`];
//! - [`CountingAlloc`]: the global allocator of the no-allocation tests (AIOS: no allocation
//!   per request in steady state), counting per thread and per process;
//! - [`dir_names`]: what a directory holds, for tests that check a command left nothing behind;
//! - [`etcd`]: a real etcd member for the cluster tests, stopped and removed on drop.

pub mod etcd;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

/// The variable CI sets (`.ci/run`, as root): every privilege, device and tool a test needs is
/// there, so a test that would skip fails instead.
pub const REQUIRE_PRIVILEGED: &str = "STOREFN_REQUIRE_PRIVILEGED";

/// Prints `skipped: <why>`; panics instead when `STOREFN_REQUIRE_PRIVILEGED=1`. For skips for
/// lack of root, a loop device, zram, /dev/shm or a tool; not for facts of the machine a test
/// only adapts to (e.g. a device that opens where it could have refused).
pub fn skip(why: &str) {
    if std::env::var_os(REQUIRE_PRIVILEGED).is_some_and(|v| v == "1") {
        panic!("{REQUIRE_PRIVILEGED}=1, but this test would skip: {why}");
    }
    println!("skipped: {why}");
}

/// The names of the entries in `dir`, sorted. Panics when the directory cannot be read (a test
/// helper: the test fails naming the cause).
#[must_use]
pub fn dir_names(dir: &std::path::Path) -> Vec<String> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

thread_local! {
    /// Allocations (alloc, alloc_zeroed, realloc) made by this thread. Const-initialised and
    /// without a destructor, so touching it from the allocator never allocates and never fails
    /// during thread teardown.
    static THREAD_ALLOCS: Cell<u64> = const { Cell::new(0) };
}

/// Allocations made by every thread of the process.
static PROCESS_ALLOCS: AtomicU64 = AtomicU64::new(0);

/// A global allocator that forwards to [`System`] and counts allocations. A test binary installs
/// it with `#[global_allocator] static A: CountingAlloc = CountingAlloc;` and compares
/// [`CountingAlloc::thread_allocs`] (work done on the test's thread) or
/// [`CountingAlloc::process_allocs`] (work done by threads it started, e.g. a server's) before
/// and after the measured window. Frees are not counted: a steady state that allocates and
/// frees per request is still allocating.
#[derive(Debug, Clone, Copy, Default)]
pub struct CountingAlloc;

impl CountingAlloc {
    /// Allocations made so far by the calling thread.
    #[must_use]
    pub fn thread_allocs() -> u64 {
        THREAD_ALLOCS.with(Cell::get)
    }

    /// Allocations made so far by the whole process.
    #[must_use]
    pub fn process_allocs() -> u64 {
        // Relaxed: a statistic read after the measured window; the test's own synchronisation
        // with the threads it measures (a reply received, a join) orders their counts before it.
        PROCESS_ALLOCS.load(Ordering::Relaxed)
    }

    fn count() {
        THREAD_ALLOCS.with(|c| c.set(c.get() + 1));
        // Relaxed: a counter; see `process_allocs`.
        PROCESS_ALLOCS.fetch_add(1, Ordering::Relaxed);
    }
}

// SAFETY: every method forwards to the system allocator with the caller's arguments unchanged,
// so `System`'s guarantees are ours; counting touches only a const thread-local and an atomic
// (neither allocates).
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        Self::count();
        // SAFETY: same contract as ours.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        Self::count();
        // SAFETY: same contract as ours.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System` (every allocation here does) with `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        Self::count();
        // SAFETY: same contract as ours; `ptr` came from `System`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

/// Rows (cells trimmed, backticks removed, the header row left out) of the Markdown table under
/// `heading` in `doc`, up to the next heading: how a doc test reads a table of docs/FORMAT.md.
/// Panics naming the heading when `doc` lacks it.
#[must_use]
pub fn doc_table_rows(doc: &str, heading: &str) -> Vec<Vec<String>> {
    let start = doc
        .find(&format!("\n{heading}\n"))
        .unwrap_or_else(|| panic!("the document lacks {heading:?}"));
    let body = &doc[start + heading.len() + 2..];
    let end = body.find("\n#").unwrap_or(body.len());
    body[..end]
        .lines()
        .filter(|l| l.starts_with('|') && !l.contains("---"))
        .map(|l| l.trim_matches('|').split(" | ").map(|c| c.trim().replace('`', "")).collect())
        .skip(1)
        .collect()
}
