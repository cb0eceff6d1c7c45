//! WiredTiger page, cell, cookie and configuration parsers on arbitrary bytes: errors, never a
//! panic or an out-of-bounds read.
#![no_main]

use libfuzzer_sys::fuzz_target;
use storefn_wiredtiger::format::{config_entries, BlockHeader, CheckpointCookie, PageHeader, Turtle};
use storefn_wiredtiger::{search_internal, search_leaf};

fuzz_target!(|data: &[u8]| {
    let (key, page) = data.split_at(data.len().min(usize::from(data.first().copied().unwrap_or(0) % 32)));
    let mut scratch = Vec::new();
    if let Ok(h) = PageHeader::parse(page) {
        let _ = search_internal(page, &h, key, 4096, &mut scratch);
        let _ = search_leaf(page, &h, key, &mut scratch);
    }
    let _ = BlockHeader::parse(page);
    let _ = CheckpointCookie::parse(page, 4096);
    if let Ok(s) = std::str::from_utf8(data) {
        let _ = config_entries(s);
        let _ = Turtle::parse(s);
    }
});
