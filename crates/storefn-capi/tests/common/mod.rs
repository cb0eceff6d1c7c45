//! Shared by the C-side tests: paths, compiling C against libstorefn, the CLI, a loopback
//! server and a BPF-KV store.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use storefn_server::load_tokens;
use storefn_server::{Server, ServerConfig};

pub fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// target/debug (where libstorefn.{so,a} and the CLI are built): two levels above this test
/// executable (target/debug/deps/NAME-HASH).
pub fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().and_then(Path::parent).expect("target/debug/deps/TEST").to_path_buf()
}

/// A directory of its own, removed when dropped.
#[derive(Debug)]
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> Self {
        let d = std::env::temp_dir().join(format!("storefn-capi-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        Self(d)
    }

    pub fn join(&self, p: &str) -> PathBuf {
        self.0.join(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Builds every target of the workspace, once per test process. `cargo test --workspace` has
/// built them all already with the workspace's unified features, so this only checks they are
/// fresh and adds the C libraries (`cargo test` builds only the rlib its tests link). Building
/// one package alone (`-p storefn`) would resolve other features and rebuild the whole stack a
/// second time, which cost CI minutes.
fn workspace_build() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
            let st = Command::new(cargo)
                .args(["build", "-q", "--workspace", "--all-targets"])
                .current_dir(crate_dir())
                .status()
                .expect("cargo build");
            assert!(st.success(), "cargo build --workspace --all-targets failed");
            target_dir()
        })
        .clone()
}

/// The `storefn` CLI, as the workspace's tests build it.
pub fn cli() -> PathBuf {
    workspace_build().join("storefn")
}

/// target/debug with libstorefn.so and libstorefn.a fresh.
pub fn lib_dir() -> PathBuf {
    workspace_build()
}

pub fn run(cmd: &mut Command) -> Output {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    out
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Compiles `src` (C11, every warning an error) against include/storefn.h and
/// libstorefn.so (with an rpath to it), plus `extra` flags; returns the executable.
pub fn cc(src: &Path, out: &Path, extra: &[&str]) -> PathBuf {
    let t = lib_dir();
    let o = run(Command::new("cc")
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-g"])
        .args(extra)
        .arg("-I")
        .arg(crate_dir().join("include"))
        .arg(src)
        .arg("-o")
        .arg(out)
        .arg(format!("-L{}", t.display()))
        .arg(format!("-Wl,-rpath,{}", t.display()))
        .arg("-lstorefn"));
    assert!(o.status.success(), "cc {}: {}", src.display(), String::from_utf8_lossy(&o.stderr));
    out.to_path_buf()
}

pub fn example(name: &str) -> PathBuf {
    crate_dir().join("../../examples/c").join(name)
}

/// Writes the compiled program `progs/<name>.bpf.c` to `dir` and returns its path.
pub fn prog_file(dir: &TempDir, name: &str) -> PathBuf {
    let p = dir.join(&format!("{}.o", name.replace('/', "_")));
    std::fs::write(&p, storefn_progs::must(name)).unwrap();
    p
}

/// A 2-level BPF-KV store (961 keys, 512 B nodes) at `path`, as `storefn kv create` builds.
pub fn kv_db(path: &Path) {
    storefn_kv::create_bpfkv(path, storefn_kv::NodeSize::B512, 2, &mut |_, _| {}).unwrap();
}

/// A loopback server over `dir` with one tenant; its token file is written into `dir`'s
/// parent-free sibling `token` path given.
pub struct TestServer {
    pub server: Option<Server>,
    pub addr: String,
    pub token: PathBuf,
}

impl TestServer {
    pub fn start(dir: &Path, token: &Path) -> Self {
        std::fs::write(token, "capi 0123456789abcdef0123456789abcdef\n").unwrap();
        let mut cfg = ServerConfig::new(dir);
        cfg.tokens = Some(load_tokens(token).unwrap());
        let server = Server::start("127.0.0.1:0", cfg).unwrap();
        let addr = server.local_addr().to_string();
        Self { server: Some(server), addr, token: token.to_path_buf() }
    }

    pub fn stop(&mut self) {
        if let Some(s) = self.server.take() {
            s.stop();
            s.join().unwrap();
        }
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.stop();
    }
}
