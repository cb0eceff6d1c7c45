//! Loader: turns a clang-built eBPF relocatable object (`clang -target bpf -c`) into a linked
//! [`Program`].
//!
//! What it does, following what libbpf does for the same objects:
//! - picks the program: a section (`SEC("xrp")`) or a function symbol by name; by default the
//!   first executable section other than `.text`, or the only function in the object;
//! - links BPF-to-BPF calls (`call` with src = 1): every called function (usually in `.text`) is
//!   appended after the entry function and the call's pc-relative `imm` is rewritten;
//! - resolves `lddw` relocations against `.rodata*`, `.data*` and `.bss*` into one globals image
//!   (read-only part first) plus [`Program::global_relocs`];
//! - ignores BTF, `.BTF.ext`, `.debug*`, `license`; rejects maps (not supported yet).
//!
//! Any malformed input is a [`LoadError`] naming the section and offset, never a panic.

use std::collections::HashMap;

use object::read::{Object, ObjectSection, ObjectSymbol, RelocationTarget, SymbolSection};
use object::{Architecture, ObjectKind, RelocationFlags, SectionFlags, SectionIndex, SymbolKind};

use crate::insn::{self, Insn, BPF_PSEUDO_CALL, INSN_BYTES};
use crate::program::{ProgType, Program, MAX_INSNS};

/// ELF relocation types for BPF (LLVM's `BPF.def`).
const R_BPF_64_64: u32 = 1;
const R_BPF_64_32: u32 = 10;
/// `sh_flags` bits.
const SHF_WRITE: u64 = 0x1;
const SHF_EXECINSTR: u64 = 0x4;
/// Largest globals image (rodata + data + bss) a program may carry: generous for lookup
/// tables, small enough that a hostile `.bss` size cannot make us allocate gigabytes.
pub const MAX_GLOBALS_BYTES: usize = 1 << 20;
/// Alignment of every globals section inside the image (the largest any BPF access needs).
const GLOBALS_ALIGN: usize = 8;

/// Why an object could not be loaded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    #[error("not a valid ELF object: {0}")]
    Parse(String),
    #[error("not an eBPF object: {0}")]
    NotBpf(String),
    #[error("no program named {0:?} (neither a section nor a function)")]
    NotFound(String),
    #[error("no program in the object (no executable section with code)")]
    NoProgram,
    #[error("{0} programs in the object ({1}); choose one with --section")]
    Ambiguous(usize, String),
    #[error("section {section}: {reason}")]
    Section { section: String, reason: String },
    #[error("section {section}, offset {offset:#x}: {reason}")]
    Reloc { section: String, offset: u64, reason: String },
    #[error("section {section}: maps are not supported (yet); use globals instead")]
    Maps { section: String },
    #[error("linked program has {0} instructions, more than the limit {MAX_INSNS}")]
    TooLong(usize),
    #[error("globals image would be {0} bytes, more than the limit {MAX_GLOBALS_BYTES}")]
    GlobalsTooLarge(usize),
}

/// A run of instructions copied into the linked program: `len` slots of section `sec` from
/// slot `start`, placed at `out_base`.
#[derive(Debug, Clone, Copy)]
struct Unit {
    sec: SectionIndex,
    start: usize,
    len: usize,
    out_base: usize,
}

/// A code section decoded once.
#[derive(Debug)]
struct CodeSec {
    name: String,
    insns: Vec<Insn>,
    /// Relocations by slot index: (r_type, symbol index).
    relocs: HashMap<usize, (u32, object::SymbolIndex)>,
}

/// Loads the program `select` (section or function name; `None` = the default) from `elf`.
///
/// # Errors
/// A [`LoadError`] naming what is wrong; never panics on malformed input.
pub fn load(elf: &[u8], select: Option<&str>, prog_type: ProgType) -> Result<Program, LoadError> {
    // `object` reads headers in place and needs them aligned; `include_bytes!` data is not.
    let words = aligned_copy(elf);
    // SAFETY: `words` owns `words.len() * 8 >= elf.len()` initialised bytes, u8 has no
    // alignment requirement, and the slice does not outlive `words`.
    let elf = unsafe { std::slice::from_raw_parts(words.as_ptr().cast::<u8>(), elf.len()) };
    let file = object::File::parse(elf).map_err(|e| LoadError::Parse(e.to_string()))?;
    check_header(&file)?;
    for s in file.sections() {
        let name = s.name().unwrap_or("");
        if name == "maps" || name == ".maps" {
            return Err(LoadError::Maps { section: name.to_string() });
        }
    }
    let mut linker = Linker::new(&file)?;
    let (entry, name) = linker.select(select)?;
    linker.link(entry)?;
    let Linker { out, global_relocs, globals, globals_rw_start, .. } = linker;
    Ok(Program { name, prog_type, insns: out, globals, globals_rw_start, global_relocs })
}

fn aligned_copy(bytes: &[u8]) -> Vec<u64> {
    let mut words = vec![0u64; bytes.len().div_ceil(8)];
    for (w, c) in words.iter_mut().zip(bytes.chunks(8)) {
        let mut b = [0u8; 8];
        b[..c.len()].copy_from_slice(c);
        *w = u64::from_ne_bytes(b);
    }
    words
}

fn check_header(file: &object::File<'_>) -> Result<(), LoadError> {
    if file.architecture() != Architecture::Bpf {
        return Err(LoadError::NotBpf(format!("machine is {:?}", file.architecture())));
    }
    if !file.is_64() || !file.is_little_endian() {
        return Err(LoadError::NotBpf("only 64-bit little-endian objects are supported".into()));
    }
    if file.kind() != ObjectKind::Relocatable {
        return Err(LoadError::NotBpf(format!("kind is {:?}, not a relocatable .o", file.kind())));
    }
    Ok(())
}

fn sh_flags(s: &object::Section<'_, '_>) -> u64 {
    match s.flags() {
        SectionFlags::Elf { sh_flags } => sh_flags,
        _ => 0,
    }
}

fn sec_name(file: &object::File<'_>, idx: SectionIndex) -> String {
    file.section_by_index(idx)
        .ok()
        .and_then(|s| s.name().ok().map(str::to_string))
        .unwrap_or_else(|| format!("#{}", idx.0))
}

fn is_globals_section(name: &str) -> bool {
    [".rodata", ".data", ".bss"]
        .iter()
        .any(|p| name == *p || name.strip_prefix(p).is_some_and(|r| r.starts_with('.')))
}

struct Linker<'f, 'd> {
    file: &'f object::File<'d>,
    code: HashMap<SectionIndex, CodeSec>,
    /// Base of each globals section inside `globals`.
    globals_base: HashMap<SectionIndex, usize>,
    globals: Vec<u8>,
    globals_rw_start: usize,
    units: Vec<Unit>,
    out: Vec<Insn>,
    global_relocs: Vec<(usize, u64)>,
}

impl<'f, 'd> Linker<'f, 'd> {
    fn new(file: &'f object::File<'d>) -> Result<Self, LoadError> {
        let mut code = HashMap::new();
        for s in file.sections() {
            if sh_flags(&s) & SHF_EXECINSTR == 0 {
                continue;
            }
            let name = s.name().unwrap_or("?").to_string();
            let bytes = s.data().map_err(|e| LoadError::Section {
                section: name.clone(),
                reason: format!("unreadable: {e}"),
            })?;
            let insns = insn::decode_all(bytes).ok_or_else(|| LoadError::Section {
                section: name.clone(),
                reason: format!("size {} is not a multiple of {INSN_BYTES}", bytes.len()),
            })?;
            let mut relocs = HashMap::new();
            for (offset, r) in s.relocations() {
                let RelocationFlags::Elf { r_type } = r.flags() else { continue };
                let RelocationTarget::Symbol(sym) = r.target() else {
                    return Err(LoadError::Reloc {
                        section: name.clone(),
                        offset,
                        reason: "relocation without a symbol".into(),
                    });
                };
                if offset % INSN_BYTES as u64 != 0 || offset >= bytes.len() as u64 {
                    return Err(LoadError::Reloc {
                        section: name.clone(),
                        offset,
                        reason: "relocation offset is not an instruction in the section".into(),
                    });
                }
                let slot = usize::try_from(offset).unwrap_or(usize::MAX) / INSN_BYTES;
                relocs.insert(slot, (r_type, sym));
            }
            code.insert(s.index(), CodeSec { name, insns, relocs });
        }
        let mut me = Self {
            file,
            code,
            globals_base: HashMap::new(),
            globals: Vec::new(),
            globals_rw_start: 0,
            units: Vec::new(),
            out: Vec::new(),
            global_relocs: Vec::new(),
        };
        me.build_globals()?;
        Ok(me)
    }

    /// Lays out `.rodata*` (read-only) first, then `.data*` / `.bss*`.
    fn build_globals(&mut self) -> Result<(), LoadError> {
        for writable in [false, true] {
            if writable {
                // Aligned so that no read-only byte shares a word with writable ones.
                self.globals.resize(self.globals.len().next_multiple_of(GLOBALS_ALIGN), 0);
                self.globals_rw_start = self.globals.len();
            }
            for s in self.file.sections() {
                let name = s.name().unwrap_or("");
                let flags = sh_flags(&s);
                if !is_globals_section(name) || flags & SHF_EXECINSTR != 0 {
                    continue;
                }
                if (flags & SHF_WRITE != 0) != writable {
                    continue;
                }
                let base = self.globals.len().next_multiple_of(GLOBALS_ALIGN);
                let size = usize::try_from(s.size()).unwrap_or(usize::MAX);
                let end = base.checked_add(size).filter(|&e| e <= MAX_GLOBALS_BYTES);
                let end = end.ok_or(LoadError::GlobalsTooLarge(base.saturating_add(size)))?;
                let data = s.data().map_err(|e| LoadError::Section {
                    section: name.to_string(),
                    reason: format!("unreadable: {e}"),
                })?;
                if data.len() > size {
                    return Err(LoadError::Section {
                        section: name.to_string(),
                        reason: "data longer than the section size".into(),
                    });
                }
                self.globals.resize(end, 0);
                // .bss has no file data: `data` is empty and the image stays zero.
                self.globals[base..base + data.len()].copy_from_slice(data);
                self.globals_base.insert(s.index(), base);
            }
        }
        self.globals.resize(self.globals.len().next_multiple_of(GLOBALS_ALIGN), 0);
        Ok(())
    }

    /// Function symbols defined in code section `sec`: (start slot, slots, name).
    fn functions(&self, sec: SectionIndex) -> Vec<(usize, usize, String)> {
        let mut v: Vec<_> = self
            .file
            .symbols()
            .filter(|s| s.kind() == SymbolKind::Text && s.section() == SymbolSection::Section(sec))
            .map(|s| {
                let start = usize::try_from(s.address()).unwrap_or(usize::MAX) / INSN_BYTES;
                let len = usize::try_from(s.size()).unwrap_or(usize::MAX) / INSN_BYTES;
                (start, len, s.name().unwrap_or("?").to_string())
            })
            .collect();
        v.sort();
        v
    }

    /// The unit a program starts with, and its name.
    fn select(&self, select: Option<&str>) -> Result<(Unit, String), LoadError> {
        let mut secs: Vec<_> = self.code.iter().filter(|(_, c)| !c.insns.is_empty()).collect();
        secs.sort_by_key(|(i, _)| i.0);
        let whole = |idx: SectionIndex, c: &CodeSec| Unit {
            sec: idx,
            start: 0,
            len: c.insns.len(),
            out_base: 0,
        };
        if let Some(want) = select {
            if let Some((idx, c)) = secs.iter().find(|(_, c)| c.name == want) {
                return Ok((whole(**idx, c), want.to_string()));
            }
            for (idx, _) in &secs {
                if let Some(f) = self.functions(**idx).into_iter().find(|f| f.2 == want) {
                    return Ok((self.unit_of(**idx, f.0, f.1)?, want.to_string()));
                }
            }
            return Err(LoadError::NotFound(want.to_string()));
        }
        if let Some((idx, c)) = secs.iter().find(|(_, c)| c.name != ".text") {
            return Ok((whole(**idx, c), c.name.clone()));
        }
        let mut funcs = Vec::new();
        for (idx, _) in &secs {
            funcs.extend(self.functions(**idx).into_iter().map(|f| (**idx, f)));
        }
        match funcs.len() {
            0 => Err(LoadError::NoProgram),
            1 => {
                let (idx, f) = funcs.remove(0);
                Ok((self.unit_of(idx, f.0, f.1)?, f.2))
            }
            n => {
                let names: Vec<_> = funcs.iter().map(|(_, f)| f.2.as_str()).collect();
                Err(LoadError::Ambiguous(n, names.join(", ")))
            }
        }
    }

    fn unit_of(&self, sec: SectionIndex, start: usize, len: usize) -> Result<Unit, LoadError> {
        let c = &self.code[&sec];
        if len == 0 || start.checked_add(len).is_none_or(|e| e > c.insns.len()) {
            return Err(LoadError::Section {
                section: c.name.clone(),
                reason: format!("function at slot {start} with {len} slots is outside the section"),
            });
        }
        Ok(Unit { sec, start, len, out_base: 0 })
    }

    /// The unit for a call target slot: the function symbol covering it, else the rest of the
    /// section from the target.
    fn unit_for_target(&self, sec: SectionIndex, slot: usize) -> Result<Unit, LoadError> {
        let c = &self.code[&sec];
        if let Some(f) = self.functions(sec).into_iter().find(|f| f.0 == slot && f.1 > 0) {
            return self.unit_of(sec, f.0, f.1);
        }
        let end = self
            .functions(sec)
            .into_iter()
            .map(|f| f.0)
            .filter(|&s| s > slot)
            .min()
            .unwrap_or(c.insns.len());
        self.unit_of(sec, slot, end - slot)
    }

    /// Where `(sec, slot)` lives in the output, appending its function when not yet placed.
    fn place(&mut self, sec: SectionIndex, slot: usize) -> Result<usize, LoadError> {
        if let Some(u) =
            self.units.iter().find(|u| u.sec == sec && slot >= u.start && slot < u.start + u.len)
        {
            return Ok(u.out_base + slot - u.start);
        }
        let mut u = self.unit_for_target(sec, slot)?;
        u.out_base = self.units.iter().map(|u| u.out_base + u.len).max().unwrap_or(0);
        if u.out_base + u.len > MAX_INSNS {
            return Err(LoadError::TooLong(u.out_base + u.len));
        }
        self.units.push(u);
        Ok(u.out_base)
    }

    fn link(&mut self, entry: Unit) -> Result<(), LoadError> {
        self.units.push(entry);
        let mut next = 0;
        while next < self.units.len() {
            let u = self.units[next];
            next += 1;
            self.out.resize(u.out_base + u.len, Insn::default());
            let mut i = 0;
            while i < u.len {
                i += self.link_insn(u, u.start + i)?;
            }
        }
        self.global_relocs.sort_unstable();
        Ok(())
    }

    fn reloc_err(&self, sec: SectionIndex, slot: usize, reason: String) -> LoadError {
        LoadError::Reloc {
            section: self.code[&sec].name.clone(),
            offset: (slot * INSN_BYTES) as u64,
            reason,
        }
    }

    /// Copies one instruction (two for `lddw`) into the output; returns the slots consumed.
    fn link_insn(&mut self, u: Unit, slot: usize) -> Result<usize, LoadError> {
        let c = &self.code[&u.sec];
        let mut ins = c.insns[slot];
        let reloc = c.relocs.get(&slot).copied();
        let out_pc = u.out_base + slot - u.start;
        let is_call = ins.op == insn::BPF_JMP | insn::BPF_CALL;
        match reloc {
            Some((R_BPF_64_32, sym)) if is_call && ins.src == BPF_PSEUDO_CALL => {
                let (tsec, value) = self.code_symbol(u.sec, slot, sym)?;
                // libbpf's rule: target = symbol value / 8 + imm + 1 (imm = -1 for a function
                // symbol, the pc-relative offset inside the section for a section symbol).
                let target = i64::try_from(value / INSN_BYTES as u64).unwrap_or(i64::MAX)
                    + i64::from(ins.imm)
                    + 1;
                ins.imm = self.call_imm(u.sec, slot, tsec, target, out_pc)?;
            }
            Some((R_BPF_64_64, sym)) if ins.is_lddw() => {
                let off = self.global_offset(u.sec, slot, sym, ins.imm)?;
                self.global_relocs.push((out_pc, off));
                // The immediates carry the offset for readability (`dump`); engines must use
                // `global_relocs` and add `RunEnv::globals_base`.
                ins.imm = i32::try_from(off).unwrap_or(0);
                ins.src = 0;
            }
            Some((t, _)) => {
                return Err(self.reloc_err(
                    u.sec,
                    slot,
                    format!("unsupported relocation type {t} on opcode {:#04x}", ins.op),
                ));
            }
            None if is_call && ins.src == BPF_PSEUDO_CALL => {
                let target = i64::try_from(slot).unwrap_or(i64::MAX) + i64::from(ins.imm) + 1;
                ins.imm = self.call_imm(u.sec, slot, u.sec, target, out_pc)?;
            }
            None => {}
        }
        self.out[out_pc] = ins;
        // The second lddw slot may lie outside the unit (truncated lddw); the verifier rejects it.
        if ins.is_lddw() && slot + 1 < u.start + u.len {
            let mut hi = self.code[&u.sec].insns[slot + 1];
            if self.global_relocs.last().is_some_and(|r| r.0 == out_pc) {
                hi.imm = 0;
            }
            self.out[out_pc + 1] = hi;
            return Ok(2);
        }
        Ok(1)
    }

    /// Resolves a call's symbol to (code section, symbol value).
    fn code_symbol(
        &self,
        sec: SectionIndex,
        slot: usize,
        sym: object::SymbolIndex,
    ) -> Result<(SectionIndex, u64), LoadError> {
        let s = self
            .file
            .symbol_by_index(sym)
            .map_err(|e| self.reloc_err(sec, slot, format!("bad symbol: {e}")))?;
        let name = s.name().unwrap_or("?");
        match s.section() {
            SymbolSection::Section(t) if self.code.contains_key(&t) => Ok((t, s.address())),
            SymbolSection::Undefined => Err(self.reloc_err(
                sec,
                slot,
                format!("call to undefined function {name:?} (kfuncs are not supported)"),
            )),
            _ => Err(self.reloc_err(sec, slot, format!("call target {name:?} is not code"))),
        }
    }

    fn call_imm(
        &mut self,
        sec: SectionIndex,
        slot: usize,
        tsec: SectionIndex,
        target: i64,
        out_pc: usize,
    ) -> Result<i32, LoadError> {
        let len = self.code[&tsec].insns.len();
        let t = usize::try_from(target).ok().filter(|&t| t < len).ok_or_else(|| {
            self.reloc_err(sec, slot, format!("call target slot {target} is outside the section"))
        })?;
        let out_target = self.place(tsec, t)?;
        let rel = i64::try_from(out_target).unwrap_or(0) - i64::try_from(out_pc).unwrap_or(0) - 1;
        i32::try_from(rel).map_err(|_| self.reloc_err(sec, slot, "call too far".into()))
    }

    /// Byte offset inside the globals image an `lddw` relocation points at.
    fn global_offset(
        &self,
        sec: SectionIndex,
        slot: usize,
        sym: object::SymbolIndex,
        addend: i32,
    ) -> Result<u64, LoadError> {
        let s = self
            .file
            .symbol_by_index(sym)
            .map_err(|e| self.reloc_err(sec, slot, format!("bad symbol: {e}")))?;
        let name = s.name().unwrap_or("?");
        let SymbolSection::Section(t) = s.section() else {
            return Err(self.reloc_err(sec, slot, format!("lddw of undefined symbol {name:?}")));
        };
        let tname = sec_name(self.file, t);
        if tname == "maps" || tname == ".maps" {
            return Err(LoadError::Maps { section: tname });
        }
        let Some(&base) = self.globals_base.get(&t) else {
            return Err(self.reloc_err(
                sec,
                slot,
                format!("lddw of {name:?} in section {tname}, not .rodata/.data/.bss"),
            ));
        };
        let size = self.file.section_by_index(t).map(|x| x.size()).unwrap_or(0);
        let within = s.address().checked_add_signed(i64::from(addend)).filter(|&o| o <= size);
        let within = within.ok_or_else(|| {
            self.reloc_err(sec, slot, format!("lddw of {name:?}{addend:+} is outside {tname}"))
        })?;
        Ok(base as u64 + within)
    }
}
