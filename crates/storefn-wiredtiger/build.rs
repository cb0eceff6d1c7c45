//! With the `native` feature, compiles `csrc/shim.c` (a flat face over WiredTiger's method
//! tables) and links Debian's libwiredtiger (`apt-get install libwiredtiger-dev`).

use std::env;
use std::path::PathBuf;
use std::process::{exit, Command};

fn main() {
    println!("cargo:rerun-if-changed=csrc/shim.c");
    println!("cargo:rerun-if-env-changed=CC");
    if env::var_os("CARGO_FEATURE_NATIVE").is_none() {
        return;
    }
    let out = PathBuf::from(env::var("OUT_DIR").unwrap());
    let cc = env::var("CC").unwrap_or_else(|_| "cc".into());
    let obj = out.join("sfwt_shim.o");
    let lib = out.join("libsfwt_shim.a");
    run(
        Command::new(&cc)
            .args(["-O2", "-fPIC", "-Wall", "-Werror", "-c", "csrc/shim.c", "-o"])
            .arg(&obj),
        &cc,
    );
    let _ = std::fs::remove_file(&lib);
    run(Command::new("ar").arg("crs").arg(&lib).arg(&obj), "ar");
    println!("cargo:rustc-link-search=native={}", out.display());
    println!("cargo:rustc-link-lib=static=sfwt_shim");
    println!("cargo:rustc-link-lib=dylib=wiredtiger");
}

fn run(cmd: &mut Command, what: &str) {
    match cmd.status() {
        Ok(s) if s.success() => {}
        r => {
            eprintln!(
                "error: {what} failed ({r:?}) building the WiredTiger shim: the `native` feature \
                 needs libwiredtiger-dev (`apt-get install -y libwiredtiger-dev`)"
            );
            exit(1);
        }
    }
}
