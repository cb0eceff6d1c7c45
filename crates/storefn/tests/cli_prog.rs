//! `storefn prog verify|dump|run`: the outputs other checks parse are pinned here.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_storefn"))
}

/// A per-test scratch directory under the system temp dir.
fn tmpdir(test: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("storefn-cli-prog-{}-{test}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn obj(dir: &Path, name: &str) -> PathBuf {
    let p = dir.join(format!("{}.o", name.replace('/', "__")));
    std::fs::write(&p, storefn_progs::must(name)).unwrap();
    p
}

fn run(args: &[&str]) -> Output {
    bin().args(args).output().unwrap()
}

/// `storefn prog run <prog> --type xrp --data <data>` followed by `extra`.
fn run_xrp(prog: &Path, data: &Path, extra: &[&str]) -> Output {
    let mut args = vec!["prog", "run", prog.to_str().unwrap(), "--type", "xrp", "--data"];
    args.push(data.to_str().unwrap());
    args.extend_from_slice(extra);
    run(&args)
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn words(ws: &[u64]) -> Vec<u8> {
    ws.iter().flat_map(|w| w.to_le_bytes()).collect()
}

#[test]
fn verify_accepts_and_prints_the_instruction_count() {
    let d = tmpdir("verify_ok");
    let o = run(&["prog", "verify", obj(&d, "xrp_follow").to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(stdout(&o), "ok: 19 instructions\n");
    let o =
        run(&["prog", "verify", obj(&d, "test/lambda_sum").to_str().unwrap(), "--type", "lambda"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).starts_with("ok: "));
}

#[test]
fn verify_rejects_with_insn_and_reason() {
    let d = tmpdir("verify_reject");
    let o = run(&["prog", "verify", obj(&d, "test/reject_helper").to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(stdout(&o), "insn #1: unknown helper 5 for xrp programs\n");
    // The λ table has the memory helpers, xrp's does not.
    let o = run(&["prog", "verify", obj(&d, "test/lambda_sum").to_str().unwrap(), "--type", "xrp"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stdout(&o).starts_with("insn #") && stdout(&o).contains("unknown helper 4096"));
    let o = run(&["prog", "verify", obj(&d, "xrp_follow").to_str().unwrap(), "--section", "nope"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("no program named \"nope\""), "{}", stderr(&o));
    let o = run(&["prog", "verify", obj(&d, "test/reject_load_maps").to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("maps are not supported"), "{}", stderr(&o));
}

#[test]
fn dump_prints_one_line_per_instruction() {
    let d = tmpdir("dump");
    let o = run(&["prog", "dump", obj(&d, "xrp_follow").to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0));
    let out = stdout(&o);
    let lines: Vec<&str> = out.lines().filter(|l| !l.starts_with(';')).collect();
    assert_eq!(lines.len(), 19);
    assert_eq!(lines[0], "    0: r2 = *(u64 *)(r1 +272)");
    assert_eq!(lines[18], "   18: exit");
    let o = run(&["prog", "dump", obj(&d, "test/globals").to_str().unwrap()]);
    assert!(stdout(&o).contains("    2: r3 = 0x48 ll ; globals+0x48"), "{}", stdout(&o));
}

#[test]
fn run_prints_decision_and_writes_scratch() {
    let d = tmpdir("run");
    let o_file = obj(&d, "xrp_follow");
    let data = d.join("blk");
    std::fs::write(&data, words(&[4096, 42])).unwrap(); // 16 bytes: zero-padded to 4 KiB
    let scratch_in = d.join("scratch.in");
    std::fs::write(&scratch_in, words(&[1, 1])).unwrap();
    let scratch_out = d.join("scratch.out");
    let o = run_xrp(
        &o_file,
        &data,
        &[
            "--scratch",
            scratch_in.to_str().unwrap(),
            "--scratch-out",
            scratch_out.to_str().unwrap(),
            "--engine",
            "interp",
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(stdout(&o), "r0=0 done=0\nnext 0 addr=4096 size=512\n");
    let s = std::fs::read(&scratch_out).unwrap();
    assert_eq!(s.len(), 4096);
    assert_eq!(&s[..16], &words(&[43, 2])[..]);
    std::fs::write(&data, words(&[0, 5])).unwrap();
    let o = run_xrp(&o_file, &data, &["--engine", "interp"]);
    assert_eq!(stdout(&o), "r0=0 done=1\n");
}

#[test]
fn run_faults_print_insn_and_exit_1() {
    let d = tmpdir("run_fault");
    let data = d.join("blk");
    std::fs::write(&data, words(&[1])).unwrap();
    let scratch = d.join("scratch");
    // Far outside: a small overrun could land in another granted region (scratch, stack).
    std::fs::write(&scratch, words(&[1 << 40])).unwrap();
    let o = run_xrp(
        &obj(&d, "test/bad_read"),
        &data,
        &["--scratch", scratch.to_str().unwrap(), "--engine", "interp"],
    );
    assert_eq!(o.status.code(), Some(1));
    let e = stderr(&o);
    // In the program's terms, never a host address.
    assert!(e.starts_with("error: insn #4: read of 8 bytes at an address far from every"), "{e}");
    let o = run_xrp(&obj(&d, "test/write_data"), &data, &["--engine", "interp"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).starts_with("error: insn #2: write of 1 bytes at data+"), "{}", stderr(&o));
    let o = run_xrp(&obj(&d, "test/spin"), &data, &["--engine", "interp"]);
    assert_eq!(o.status.code(), Some(1));
    let want = format!(
        "instruction budget exhausted ({} instructions)",
        storefn_vm::limits::DEFAULT_INSN_BUDGET
    );
    assert!(stderr(&o).contains(&want), "{}", stderr(&o));
    // `--budget` sets it per run; the loop-free call fan-out stops on it on both engines at
    // the same instruction.
    let mut errs = Vec::new();
    for engine in ["jit", "interp"] {
        let o = run_xrp(&obj(&d, "test/fanout"), &data, &["--engine", engine, "--budget", "5000"]);
        assert_eq!(o.status.code(), Some(1));
        let e = stderr(&o);
        assert!(e.contains("instruction budget exhausted (5000 instructions)"), "{e}");
        errs.push(e);
    }
    assert_eq!(errs[0], errs[1]);
    // A data file longer than the view is an error, not a silent truncation.
    std::fs::write(&data, vec![0u8; 5000]).unwrap();
    let o = run_xrp(&obj(&d, "xrp_follow"), &data, &["--engine", "interp"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("more than the 4096-byte data buffer"), "{}", stderr(&o));
}

/// The default engine is the JIT; when it cannot compile, the run fails and says so instead of
/// quietly using the interpreter. When it can, its output equals the interpreter's.
#[test]
fn default_engine_is_jit_without_silent_fallback() {
    let d = tmpdir("jit");
    let data = d.join("blk");
    std::fs::write(&data, words(&[4096, 42])).unwrap();
    let f = obj(&d, "xrp_follow");
    let jit = run_xrp(&f, &data, &[]);
    let interp = run_xrp(&f, &data, &["--engine", "interp"]);
    if jit.status.success() {
        assert_eq!(stdout(&jit), stdout(&interp));
    } else {
        assert_eq!(jit.status.code(), Some(1));
        assert!(stderr(&jit).contains("JIT"), "{}", stderr(&jit));
        assert!(stdout(&jit).is_empty());
    }
}

/// `storefn prog bench`: a row per (workload, engine), the stable summary and geomean lines,
/// and JSON records with the keys program, engine, ns_per_call, compile_us, verify_us; `empty`
/// (the fixed cost of a call) is among the workloads.
#[test]
fn prog_bench_prints_rows_summary_and_json() {
    let d = tmpdir("bench");
    let json = d.join("bench.json");
    let o = run(&[
        "prog",
        "bench",
        "--calls",
        "20",
        "--rounds",
        "1",
        "--warmup",
        "1",
        "--workload",
        "node512,node4k,empty,crc32",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    for w in ["node512", "node4k", "empty", "crc32"] {
        for e in ["jit", "interp", "native"] {
            assert!(out.lines().any(|l| l.starts_with(w) && l.contains(e)), "{w} {e}: {out}");
        }
    }
    assert!(out.contains("summary: node512 jit/native="), "{out}");
    assert!(out.contains("geomean: jit/native="), "{out}");
    let text = std::fs::read_to_string(&json).unwrap();
    assert_eq!(text.matches("\"ns_per_call\"").count(), 12, "{text}");
    assert_eq!(text.matches("\"compile_us\"").count(), 4, "{text}");
    assert_eq!(text.matches("\"verify_us\"").count(), 8, "{text}");
    std::fs::remove_dir_all(&d).ok();
}

/// `storefn prog bench --workload list` names at least 20 programs besides `empty`; an
/// unknown name is an error naming it.
#[test]
fn prog_bench_lists_workloads_and_refuses_unknown_ones() {
    let o = run(&["prog", "bench", "--workload", "list"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.lines().filter(|l| !l.starts_with("empty")).count() >= 20, "{out}");
    assert!(out.contains("bench/crc32"), "{out}");
    let o = run(&["prog", "bench", "--shapes", "256", "--rounds", "1"]);
    assert!(o.status.success(), "{}", stderr(&o));
    for shape in ["straight", "loads", "branchy", "loops", "calls", "unproved"] {
        assert!(stdout(&o).lines().any(|l| l.starts_with(shape)), "{}", stdout(&o));
    }
    let o = run(&["prog", "bench", "--workload", "nosuch"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("unknown workload \"nosuch\""), "{}", stderr(&o));
}

/// `storefn prog verify --proofs`: the accesses the JIT runs unchecked and what they need.
#[test]
fn verify_proofs_counts_the_proved_accesses() {
    let d = tmpdir("verify_proofs");
    let o = run(&["prog", "verify", obj(&d, "bench_node512").to_str().unwrap(), "--proofs"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(
        stdout(&o),
        "ok: 18 instructions\n\
         proved: 6 of 6 memory accesses in bounds (needs data >= 264 bytes, scratch >= 16 bytes)\n\
         counted loop: #5..#11, at most 30 trips, charged before it runs\n"
    );
    // classify's loop: four classes jump back to the shared counter step.
    let o = run(&["prog", "verify", obj(&d, "bench/classify").to_str().unwrap(), "--proofs"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let want = "counted loop of blocks: header #7 (body up to #38), at most 1024 trips, charged \
                before it runs\n";
    assert!(stdout(&o).ends_with(want), "{}", stdout(&o));
    std::fs::remove_dir_all(&d).ok();
}

/// Regression: `storefn prog list | head -1` panicked ("failed printing to stdout: Broken pipe")
/// once the reader had gone; a listing whose reader stops early must end quietly.
#[test]
fn a_listing_whose_reader_hangs_up_ends_without_a_panic() {
    use std::process::Stdio;
    let mut child =
        bin().args(["prog", "list"]).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    // Close the read end before the child writes: every write it makes meets a hung-up reader.
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let err = stderr(&out);
    assert!(!err.contains("panicked"), "stderr: {err}");
    assert!(err.is_empty(), "stderr: {err}");
}
