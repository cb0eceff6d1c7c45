// Regression: there was no authorization or quota: every tenant read and wrote every file
// under the served directory, and one WRITE at a huge offset extended a file to 1 TiB.

mod common;

use common::TempDir;
use storefn_server::{Server, ServerConfig, ServerError};
use storefn_wire::StatusCode;
use storefn_wire::PROG_TYPE_LAMBDA;
use storefn_wire::{Client, ClientConfig, Request};

const SECRET: &str = "0123456789abcdef0123";

fn start(dir: &TempDir, tokens: &str) -> Result<Server, ServerError> {
    let tok = dir.join("tokens");
    std::fs::write(&tok, tokens).unwrap();
    let mut cfg = ServerConfig::new(&dir.join("served"));
    cfg.tokens = Some(storefn_server::load_tokens(&tok).unwrap());
    Server::start("127.0.0.1:0", cfg)
}

fn as_tenant(server: &Server, tenant: &str) -> Client {
    let cfg = ClientConfig {
        tenant: tenant.into(),
        secret: Some(SECRET.as_bytes().to_vec()),
        ..ClientConfig::default()
    };
    Client::connect(&server.local_addr().to_string(), cfg).unwrap()
}

fn status(c: &mut Client, r: Request<'_>) -> u16 {
    c.call(&[r]).unwrap()[0].status
}

fn read(p: &str) -> Request<'_> {
    Request::Read { path: p.as_bytes(), offset: 0, len: 4 }
}

fn stat(p: &str) -> Request<'_> {
    Request::Stat { path: p.as_bytes() }
}

fn write(p: &str) -> Request<'_> {
    Request::Write { path: p.as_bytes(), offset: 0, data: b"XXXX" }
}

/// `served/`: a/f, b/f, shared/s, top; a/escape -> ../b/f (beneath the root, outside a/);
/// b/inner -> f (inside b/).
fn layout(dir: &TempDir) {
    let s = dir.join("served");
    for d in ["a", "b", "shared"] {
        std::fs::create_dir_all(s.join(d)).unwrap();
    }
    for f in ["a/f", "b/f", "shared/s", "top"] {
        std::fs::write(s.join(f), format!("{f:<16}")).unwrap();
    }
    std::os::unix::fs::symlink("../b/f", s.join("a/escape")).unwrap();
    std::os::unix::fs::symlink("f", s.join("b/inner")).unwrap();
}

#[test]
fn each_tenant_reads_writes_and_runs_programs_only_within_its_scope() {
    let dir = TempDir::new("scopes");
    layout(&dir);
    let tokens = format!(
        "admin {SECRET}\n\
         alice {SECRET} rw dir=a dir=shared\n\
         bob {SECRET} ro dir=b dir=./shared/\n"
    );
    let server = start(&dir, &tokens).unwrap();
    let (ok, forbidden) = (StatusCode::Ok as u16, StatusCode::Forbidden as u16);
    let outside = StatusCode::OutsideRoot as u16;
    let mut alice = as_tenant(&server, "alice");
    for p in ["a/f", "shared/s"] {
        for r in [read(p), stat(p), write(p)] {
            assert_eq!(status(&mut alice, r), ok, "alice {r:?}");
        }
    }
    for p in ["b/f", "top", "b/inner", "shared", "a"] {
        for r in [read(p), stat(p), write(p)] {
            assert_eq!(status(&mut alice, r), forbidden, "alice {r:?}");
        }
    }
    // Inside a/ by name, out of it by resolution: refused by the kernel beneath a/.
    for p in ["a/escape", "a/../b/f"] {
        for r in [read(p), stat(p), write(p)] {
            assert_eq!(status(&mut alice, r), outside, "alice {r:?}");
        }
    }
    // Programs run only over files in scope.
    let h = alice.load_prog(PROG_TYPE_LAMBDA, b"", storefn_progs::must("test/lambda_sum")).unwrap();
    let lambda = |p: &'static str| Request::Lambda {
        path: p.as_bytes(),
        offset: 0,
        len: 16,
        hash: &h,
        out_cap: 64,
    };
    assert_eq!(status(&mut alice, lambda("a/f")), ok);
    assert_eq!(status(&mut alice, lambda("b/f")), forbidden);
    let lw = |p: &'static str| Request::LambdaWrite {
        path: p.as_bytes(),
        offset: 0,
        hash: &h,
        input: &[1; 16],
        out_cap: 24,
    };
    assert_eq!(status(&mut alice, lw("b/f")), forbidden);

    let mut bob = as_tenant(&server, "bob");
    for r in [read("b/f"), stat("b/f"), read("b/inner"), read("shared/s")] {
        assert_eq!(status(&mut bob, r), ok, "bob {r:?}");
    }
    for r in [write("b/f"), write("shared/s"), lw("b/f"), read("a/f"), stat("top")] {
        assert_eq!(status(&mut bob, r), forbidden, "bob {r:?}");
    }
    let served = dir.join("served");
    assert_eq!(std::fs::read(served.join("b/f")).unwrap(), b"b/f             ", "nobody wrote b/f");

    // An old `TENANT SECRET` line: read-write over the whole directory.
    let mut admin = as_tenant(&server, "admin");
    for r in [read("b/f"), write("b/f"), read("top"), read("a/escape"), write("a/f")] {
        assert_eq!(status(&mut admin, r), ok, "admin {r:?}");
    }
    server.stop();
    server.join().unwrap();
}

#[test]
fn quotas_bound_the_bytes_written_and_the_growth_of_files() {
    let dir = TempDir::new("quota");
    layout(&dir);
    let tokens = format!("carol {SECRET} write_quota=10K grow_quota=4K\nold {SECRET}\n");
    let server = start(&dir, &tokens).unwrap();
    let quota = StatusCode::QuotaExceeded as u16;
    let top = dir.join("served/top");
    let size = || std::fs::metadata(&top).unwrap().len();
    let ones = vec![1u8; 1 << 20];
    let w = |offset: u64, n: usize| Request::Write { path: b"top", offset, data: &ones[..n] };
    for tenant in ["carol", "old"] {
        let mut c = as_tenant(&server, tenant);
        // One small write 1 TiB in: refused, nothing written (the default growth quota is
        // 1 GiB for a line without options).
        assert_eq!(status(&mut c, w(1 << 40, 8)), quota, "{tenant}");
        assert_eq!(size(), 16, "{tenant}: the file did not grow");
    }
    let mut c = as_tenant(&server, "carol");
    // Growth: 4 KiB past the end is allowed once.
    assert_eq!(status(&mut c, w(16, 4096)), 0);
    assert_eq!(size(), 4112);
    assert_eq!(status(&mut c, w(4112, 1)), quota);
    let e = c.call(&[w(4112, 1)]).unwrap().remove(0);
    assert!(e.message.contains("growth quota"), "{}", e.message);
    // Bytes written: 10 KiB in all, overwrites included (4 KiB taken above).
    assert_eq!(status(&mut c, w(0, 4096)), 0);
    assert_eq!(status(&mut c, w(0, 2048)), 0);
    let e = c.call(&[w(0, 1)]).unwrap().remove(0);
    assert_eq!(e.status, quota, "{}", e.message);
    assert!(e.message.contains("write quota"), "{}", e.message);
    // Another connection of the same tenant shares the count.
    let mut again = as_tenant(&server, "carol");
    assert_eq!(status(&mut again, w(0, 1)), quota);
    server.stop();
    server.join().unwrap();
}

#[test]
fn without_a_token_file_the_default_scope_still_bounds_growth() {
    let dir = TempDir::new("noauth_quota");
    layout(&dir);
    let server = common::serve(&dir.join("served"), 1);
    let mut c = common::client(&server);
    let r = Request::Write { path: b"top", offset: 1 << 40, data: &[1; 8] };
    assert_eq!(status(&mut c, r), StatusCode::QuotaExceeded as u16);
    assert_eq!(std::fs::metadata(dir.join("served/top")).unwrap().len(), 16);
    server.stop();
    server.join().unwrap();
}

#[test]
fn each_tenant_runs_under_the_instruction_budget_its_token_line_names() {
    // The operator's per-tenant budget: a token line's `insns=`, overridden by the
    // configuration's own budget for the tenant, else the server's default.
    let dir = TempDir::new("insns");
    layout(&dir);
    common::loop_file(&dir.join("served"));
    let tok = dir.join("tokens");
    std::fs::write(
        &tok,
        format!(
            "tiny {SECRET} insns=5000
plain {SECRET}
over {SECRET} insns=4K
"
        ),
    )
    .unwrap();
    let mut cfg = ServerConfig::new(&dir.join("served"));
    cfg.tokens = Some(storefn_server::load_tokens(&tok).unwrap());
    cfg.tenant_insn_budgets = vec![("over".into(), 9000)];
    let server = Server::start("127.0.0.1:0", cfg).unwrap();
    let default = storefn_server::limits::DEFAULT_TENANT_INSN_BUDGET;
    for (tenant, budget) in [("tiny", 5000), ("plain", default), ("over", 9000)] {
        let mut c = as_tenant(&server, tenant);
        let spin = c.load_prog(storefn_wire::PROG_TYPE_XRP, b"", storefn_progs::must("test/spin"));
        let spin = spin.unwrap();
        let e = c.call(&[common::spin_request(&spin)]).unwrap().remove(0);
        assert_eq!(e.status, StatusCode::ChainFailed as u16, "{tenant}: {}", e.message);
        assert!(e.message.contains(&format!("({budget} instructions)")), "{tenant}: {}", e.message);
    }
    server.stop();
    server.join().unwrap();
    for bad in ["insns=0", "insns=many", "insns=1G"] {
        assert!(storefn_server::Scope::parse(&[bad]).is_err(), "{bad}");
    }
}

#[test]
fn a_bad_scope_stops_the_server_from_starting_naming_the_line() {
    let dir = TempDir::new("bad_scope");
    layout(&dir);
    for (tokens, want) in [
        (format!("x {SECRET}\ny {SECRET} dir=missing\n"), "line 2, tenant \"y\": dir=missing"),
        (format!("x {SECRET} size=3\n"), "line 1, tenant \"x\": option `size=3`"),
        (format!("x {SECRET} dir=../a\n"), "`..`"),
        (format!("x {SECRET} dir=top\n"), "dir=top"),
    ] {
        let e = start(&dir, &tokens).unwrap_err().to_string();
        assert!(e.contains(want), "{tokens}: {e}");
    }
}
