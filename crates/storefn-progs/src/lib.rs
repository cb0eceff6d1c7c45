//! The storage functions under `progs/`, compiled by `build.rs` with clang `-target bpf`.
//!
//! Names are paths relative to `progs/` without `.bpf.c`: `xrp_follow`, `test/bad_loop`, ...

include!(concat!(env!("OUT_DIR"), "/progs.rs"));

/// The ELF object compiled from `progs/<name>.bpf.c`.
#[must_use]
pub fn get(name: &str) -> Option<&'static [u8]> {
    ALL.iter().find(|(n, _)| *n == name).map(|(_, b)| *b)
}

/// Like [`get`], for names the caller knows exist (tests, built-in programs).
///
/// # Panics
/// If no such program was compiled: a build-time mistake, not a run-time condition.
#[must_use]
pub fn must(name: &str) -> &'static [u8] {
    get(name).unwrap_or_else(|| panic!("no compiled program progs/{name}.bpf.c"))
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_program_is_a_bpf_elf() {
        assert!(!super::ALL.is_empty());
        for (name, elf) in super::ALL {
            assert_eq!(&elf[..4], b"\x7fELF", "{name}");
            // e_machine at offset 18: EM_BPF = 247.
            assert_eq!(u16::from_le_bytes([elf[18], elf[19]]), 247, "{name}");
        }
    }
}
