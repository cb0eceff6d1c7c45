//! Compiles every `progs/**/*.bpf.c` with Debian's clang for the BPF target and generates a
//! table of the resulting ELF objects, so tests and the CLI carry the programs they need.

use std::env;
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{exit, Command};

/// Clang binaries tried in order; `STOREFN_CLANG` overrides.
const CLANG_CANDIDATES: &[&str] = &["clang-19", "clang-22", "clang-16", "clang-15", "clang"];
/// Flags fixed by the project: v3 adds 32-bit jumps and atomics, which our verifier allows.
const BPF_CFLAGS: &[&str] = &["-O2", "-g", "-target", "bpf", "-mcpu=v3", "-Wall", "-Werror"];

fn main() {
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap());
    let progs = manifest.join("../../progs").canonicalize().expect("progs/ next to crates/");
    let out = PathBuf::from(env::var("OUT_DIR").unwrap());
    println!("cargo:rerun-if-changed={}", progs.display());
    println!("cargo:rerun-if-env-changed=STOREFN_CLANG");

    let clang = find_clang().unwrap_or_else(|| {
        eprintln!(
            "error: storefn needs clang with the BPF target to build progs/: \
             run `apt-get install -y clang-19 libbpf-dev` (or set STOREFN_CLANG)"
        );
        exit(1);
    });
    let multiarch = multiarch_include();
    let mut sources = Vec::new();
    collect(&progs, &mut sources);
    sources.sort();

    let mut table = String::from(
        "/// Every compiled program: (name relative to progs/ without `.bpf.c`, ELF bytes).\n",
    );
    table.push_str("pub const ALL: &[(&str, &[u8])] = &[\n");
    for src in &sources {
        println!("cargo:rerun-if-changed={}", src.display());
        let rel = src.strip_prefix(&progs).unwrap().to_str().unwrap();
        let name = rel.trim_end_matches(".bpf.c");
        let obj = out.join(format!("{}.o", name.replace('/', "__")));
        let mut cmd = Command::new(&clang);
        cmd.args(BPF_CFLAGS).arg("-I").arg(progs.join("include"));
        if let Some(dir) = &multiarch {
            cmd.arg("-idirafter").arg(dir);
        }
        cmd.arg("-c").arg(src).arg("-o").arg(&obj);
        let status = cmd.status().unwrap_or_else(|e| {
            eprintln!("error: running {clang}: {e}");
            exit(1);
        });
        if !status.success() {
            eprintln!("error: {clang} failed on {}", src.display());
            exit(1);
        }
        writeln!(table, "    ({name:?}, include_bytes!({:?})),", obj.display().to_string())
            .unwrap();
    }
    table.push_str("];\n");
    fs::write(out.join("progs.rs"), table).unwrap();
}

fn find_clang() -> Option<String> {
    if let Ok(c) = env::var("STOREFN_CLANG") {
        return Some(c);
    }
    CLANG_CANDIDATES.iter().find(|c| supports_bpf(c)).map(|c| (*c).to_string())
}

fn supports_bpf(clang: &str) -> bool {
    Command::new(clang)
        .arg("--print-targets")
        .output()
        .map(|o| o.status.success() && String::from_utf8_lossy(&o.stdout).contains("bpf"))
        .unwrap_or(false)
}

/// `<asm/types.h>` lives under the multiarch directory on Debian; `-target bpf` does not search it.
fn multiarch_include() -> Option<PathBuf> {
    ["/usr/include/x86_64-linux-gnu", "/usr/include/aarch64-linux-gnu"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.join("asm/types.h").exists())
}

fn collect(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            if path.file_name().is_some_and(|n| n != "include") {
                collect(&path, out);
            }
        } else if path.to_str().is_some_and(|p| p.ends_with(".bpf.c")) {
            out.push(path);
        }
    }
}
