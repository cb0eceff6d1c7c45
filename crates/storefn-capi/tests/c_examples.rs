//! The C examples (examples/c/), compiled with the system C compiler against libstorefn and
//! run; their output is checked against the CLI's (`storefn kv get`, `storefn lambda run`).

mod common;

use std::process::Command;

use common::{cc, cli, example, kv_db, prog_file, run, stdout, TempDir, TestServer};

const KEYS: [&str; 6] = ["0", "1", "30", "500", "960", "961"];

fn cli_gets(db: &str, remote: Option<(&str, &std::path::Path)>) -> String {
    let mut all = String::new();
    for k in KEYS {
        let mut c = Command::new(cli());
        c.args(["kv", "get", db, "--key", k]);
        if let Some((addr, token)) = remote {
            c.args(["--remote", addr, "--token-file"]).arg(token);
        }
        all += &stdout(&run(&mut c));
    }
    all
}

#[test]
fn kv_get_example_matches_the_cli_locally() {
    let t = TempDir::new("ex-kv-local");
    let db = t.join("db");
    kv_db(&db);
    let prog = prog_file(&t, "bpfkv_get");
    let exe = cc(&example("kv_get.c"), &t.join("kv_get"), &[]);
    let o = run(Command::new(&exe).arg(&db).arg(&prog).args(KEYS));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let want = cli_gets(db.to_str().unwrap(), None);
    assert_eq!(stdout(&o), want);
    assert!(want.contains("not found") && want.contains("960\n"), "{want}");
}

#[test]
fn kv_get_example_links_the_static_library() {
    let t = TempDir::new("ex-kv-static");
    let db = t.join("db");
    kv_db(&db);
    let prog = prog_file(&t, "bpfkv_get");
    let exe = t.join("kv_get_static");
    let o = run(Command::new("cc")
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-I"])
        .arg(common::crate_dir().join("include"))
        .arg(example("kv_get.c"))
        .arg(common::lib_dir().join("libstorefn.a"))
        .args(["-lpthread", "-ldl", "-lm", "-o"])
        .arg(&exe));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = run(Command::new(&exe).arg(&db).arg(&prog).args(["7", "100"]));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(stdout(&o), format!("{:>63}\n{:>63}\n", 7, 100));
}

#[test]
fn kv_get_example_matches_the_cli_remotely() {
    let t = TempDir::new("ex-kv-remote");
    let served = t.join("served");
    std::fs::create_dir(&served).unwrap();
    kv_db(&served.join("db"));
    let prog = prog_file(&t, "bpfkv_get");
    let srv = TestServer::start(&served, &t.join("token"));
    let exe = cc(&example("kv_get.c"), &t.join("kv_get"), &[]);
    let o = run(Command::new(&exe)
        .args(["--remote", &srv.addr])
        .arg(&srv.token)
        .arg("db")
        .arg(&prog)
        .args(KEYS));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(stdout(&o), cli_gets("db", Some((&srv.addr, &srv.token))));
}

/// `out N bytes` from either program's summary.
fn out_bytes(s: &str) -> u64 {
    let at = s.find("out ").unwrap_or_else(|| panic!("no `out N bytes` in {s:?}"));
    s[at + 4..].split_whitespace().next().unwrap().parse().unwrap()
}

#[test]
fn lambda_example_matches_the_cli() {
    let t = TempDir::new("ex-lambda");
    let served = t.join("served");
    std::fs::create_dir(&served).unwrap();
    let data = served.join("data");
    let bytes: Vec<u8> =
        (0..65_536u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    std::fs::write(&data, &bytes).unwrap();
    let prog = prog_file(&t, "lambda/stats64");
    let exe = cc(&example("lambda_read.c"), &t.join("lambda_read"), &[]);
    let (off, len, cap) = ("4096", "32768", "4096");

    let (cli_out, c_out) = (t.join("cli.out"), t.join("c.out"));
    let o = run(Command::new(cli())
        .args(["lambda", "run"])
        .arg(&data)
        .arg("--prog")
        .arg(&prog)
        .args(["--range", &format!("{off}:{len}"), "--out-cap", cap, "--out"])
        .arg(&cli_out));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let want_n = out_bytes(&stdout(&o));
    let o = run(Command::new(&exe).arg(&data).arg(&prog).args([off, len, cap]).arg(&c_out));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(out_bytes(&stdout(&o)), want_n);
    let want = std::fs::read(&cli_out).unwrap();
    assert!(!want.is_empty());
    assert_eq!(std::fs::read(&c_out).unwrap(), want);

    // The same function on the server: the same output bytes.
    let srv = TestServer::start(&served, &t.join("token"));
    let o = run(Command::new(&exe)
        .args(["--remote", &srv.addr])
        .arg(&srv.token)
        .arg("data")
        .arg(&prog)
        .args([off, len, cap])
        .arg(&c_out));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(std::fs::read(&c_out).unwrap(), want);
}

#[test]
fn pkg_config_file_builds_an_example() {
    // Install into a prefix the way the template says: lib/, include/, lib/pkgconfig/.
    let t = TempDir::new("pkgconfig");
    let prefix = t.join("prefix");
    let lib = prefix.join("lib");
    std::fs::create_dir_all(lib.join("pkgconfig")).unwrap();
    std::fs::create_dir_all(prefix.join("include")).unwrap();
    std::fs::copy(common::crate_dir().join("include/storefn.h"), prefix.join("include/storefn.h"))
        .unwrap();
    std::os::unix::fs::symlink(common::lib_dir().join("libstorefn.so"), lib.join("libstorefn.so"))
        .unwrap();
    let pc = std::fs::read_to_string(common::crate_dir().join("storefn.pc.in")).unwrap();
    let pc = pc
        .replace("@PREFIX@", prefix.to_str().unwrap())
        .replace("@VERSION@", env!("CARGO_PKG_VERSION"));
    std::fs::write(lib.join("pkgconfig/storefn.pc"), pc).unwrap();

    let o = run(Command::new("pkg-config")
        .args(["--cflags", "--libs", "storefn"])
        .env("PKG_CONFIG_PATH", lib.join("pkgconfig")));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let flags = stdout(&o);
    assert!(flags.contains("-lstorefn"), "{flags}");
    let exe = t.join("kv_get");
    let o = run(Command::new("cc")
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror"])
        .arg(example("kv_get.c"))
        .args(flags.split_whitespace())
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .arg("-o")
        .arg(&exe));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let db = t.join("db");
    kv_db(&db);
    let prog = prog_file(&t, "bpfkv_get");
    let o = run(Command::new(&exe).arg(&db).arg(&prog).arg("5"));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(stdout(&o), format!("{:>63}\n", 5));
}
