//! include/storefn.h: regenerated from the crate with cbindgen and compared with the committed
//! copy (drift fails), then compiled as C11 and C++17 with every warning an error.

use std::path::PathBuf;
use std::process::Command;

fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn generate() -> String {
    let dir = crate_dir();
    let cfg = cbindgen::Config::from_file(dir.join("cbindgen.toml")).expect("cbindgen.toml");
    let mut out = Vec::new();
    cbindgen::Builder::new()
        .with_crate(&dir)
        .with_config(cfg)
        .generate()
        .expect("cbindgen generates the header")
        .write(&mut out);
    String::from_utf8(out).expect("UTF-8 header")
}

#[test]
fn header_matches_the_rust_side() {
    let path = crate_dir().join("include/storefn.h");
    let fresh = generate();
    if std::env::var_os("STOREFN_BLESS").is_some() {
        std::fs::write(&path, &fresh).unwrap();
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == fresh,
        "{} is stale: regenerate it with STOREFN_BLESS=1 cargo test -p storefn-capi --test header",
        path.display()
    );
}

fn compile(compiler: &str, std: &str, src_ext: &str) {
    let dir =
        std::env::temp_dir().join(format!("storefn-capi-header-{}-{src_ext}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join(format!("use.{src_ext}"));
    // Uses a few declarations so the compiler checks them, not only the preprocessor.
    std::fs::write(
        &src,
        "#include \"storefn.h\"\nint main(void) {\n  storefn_engine_config c;\n  \
         storefn_status s = storefn_engine_config_default(&c);\n  \
         return s == STOREFN_STATUS_OK && storefn_last_error() != 0 ? 0 : 1;\n}\n",
    )
    .unwrap();
    let out = Command::new(compiler)
        .args([std, "-Wall", "-Wextra", "-Werror", "-pedantic", "-fsyntax-only", "-I"])
        .arg(crate_dir().join("include"))
        .arg(&src)
        .output()
        .unwrap_or_else(|e| panic!("{compiler}: {e}"));
    let _ = std::fs::remove_dir_all(&dir);
    assert!(out.status.success(), "{compiler} {std}: {}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn header_compiles_as_c11() {
    compile("cc", "-std=c11", "c");
}

#[test]
fn header_compiles_as_cpp17() {
    compile("c++", "-std=c++17", "cpp");
}
