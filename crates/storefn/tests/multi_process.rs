//! Several writer processes and reader processes on one database at once: writers
//! take turns through the lock (`--wait-lock`), a writer that does not wait fails at once naming
//! the holder's pid, readers never error and never see a key of the tree missing, and afterwards
//! every acknowledged put is there with its exact value.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use storefn_kv::value_text;
use storefn_kv::Db;

const BIN: &str = env!("CARGO_BIN_EXE_storefn");
/// Writer threads, each running this many `put-stream` processes one after another.
const WRITERS: u64 = 3;
const PROCS_PER_WRITER: u64 = 4;
const PUTS_PER_PROC: u64 = 150;
/// 40 entries: every writer process compacts several times.
const MEMTABLE_BYTES: usize = 40 * 80;
/// Reader threads, looping get / multiget / range until the writers are done.
const READERS: usize = 2;
/// Bound on the whole run (a writer waits at most this long for the lock).
const WAIT_LOCK_S: u64 = 300;

fn storefn(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn fresh(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("multi_process").join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let db = dir.join("db");
    let o = storefn(&["kv", "create", db.to_str().unwrap(), "--layers", "2"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    db
}

/// One reader invocation; returns an error description, or None when the answer was right.
fn read_once(db: &str, i: u64) -> Option<String> {
    let k = (i * 97) % 961; // a key of the tree: always present
    let (k, k1) = (k.to_string(), format!("{k},{}", (k + 1) % 961));
    let args: &[&str] = match i % 3 {
        0 => &["kv", "get", db, "--key", &k],
        1 => &["kv", "multiget", db, "--keys", &k1],
        _ => &["kv", "range", db, "--begin", "0", "--end", "960", "--agg", "count"],
    };
    let o = storefn(args);
    let out = text(&o.stdout);
    let right = match i % 3 {
        0 => !out.is_empty(),
        1 => out.lines().count() == 2 && !out.contains("not found"),
        _ => out == "961\n",
    };
    (!o.status.success() || !o.stderr.is_empty() || !right).then(|| {
        format!("{args:?}: exit {:?} out {out:?} err {}", o.status.code(), text(&o.stderr))
    })
}

#[test]
fn writers_take_turns_readers_never_fail_and_no_ack_is_lost() {
    let db = fresh("mixed");
    let dbs = db.to_str().unwrap().to_owned();
    let t0 = Instant::now();
    let done = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..READERS)
        .map(|r| {
            let (db, done) = (dbs.clone(), Arc::clone(&done));
            std::thread::spawn(move || {
                let (mut n, mut errors) = (0u64, Vec::new());
                // Bounded: the writers finish within WAIT_LOCK_S, then `done` is set.
                while !done.load(Ordering::Acquire) {
                    if let Some(e) = read_once(&db, n * READERS as u64 + r as u64) {
                        errors.push(e);
                    }
                    n += 1;
                }
                (n, errors)
            })
        })
        .collect();
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let db = dbs.clone();
            std::thread::spawn(move || {
                (0..PROCS_PER_WRITER)
                    .map(|p| {
                        let seed = (w * 100 + p + 1).to_string();
                        let o = storefn(&[
                            "kv",
                            "put-stream",
                            &db,
                            "--count",
                            &PUTS_PER_PROC.to_string(),
                            "--seed",
                            &seed,
                            "--memtable-bytes",
                            &MEMTABLE_BYTES.to_string(),
                            "--batch",
                            &(1 + (w + p) % 4).to_string(),
                            "--wait-lock",
                            &WAIT_LOCK_S.to_string(),
                        ]);
                        assert!(o.status.success(), "writer {seed}: {}", text(&o.stderr));
                        text(&o.stdout)
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    // Meanwhile, writers that do not wait: they fail at once naming the holder, or get the lock
    // in a gap between two put-streams and put.
    let (mut refused, mut impatient) = (0u64, 0u64);
    while writers.iter().any(|w| !w.is_finished()) && impatient < 200 {
        impatient += 1;
        let o = storefn(&["kv", "put", &dbs, "--key", "999999", "--value", "impatient"]);
        if !o.status.success() {
            let err = text(&o.stderr);
            assert!(
                err.contains(&format!("{dbs}: another writer holds the database lock"))
                    && err.contains("(pid "),
                "{err}"
            );
            refused += 1;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let outputs: Vec<String> = writers.into_iter().flat_map(|w| w.join().unwrap()).collect();
    done.store(true, Ordering::Release);
    let (mut reads, mut read_errors) = (0u64, Vec::new());
    for r in readers {
        let (n, e) = r.join().unwrap();
        reads += n;
        read_errors.extend(e);
    }
    assert!(
        read_errors.is_empty(),
        "{} reader errors, first: {}",
        read_errors.len(),
        read_errors[0]
    );

    // Lock holds do not overlap, so ordering the writer processes by when they got the lock
    // orders all their puts.
    let mut procs: Vec<(u128, &str)> = outputs
        .iter()
        .map(|o| {
            let first = o.lines().next().unwrap();
            (first.strip_prefix("locked ").unwrap().parse().unwrap(), o.as_str())
        })
        .collect();
    procs.sort_unstable();
    let mut model: HashMap<u64, String> = HashMap::new();
    let mut acks = 0u64;
    for (_, out) in &procs {
        for l in out.lines().skip(1) {
            let mut f = l.splitn(3, ' ');
            assert_eq!(f.next(), Some("ack"), "{l}");
            let key: u64 = f.next().unwrap().parse().unwrap();
            model.insert(key, f.next().unwrap().to_owned());
            acks += 1;
        }
    }
    assert_eq!(acks, WRITERS * PROCS_PER_WRITER * PUTS_PER_PROC);
    let d = Db::open(&db).unwrap();
    let mut lost = 0;
    for (k, want) in &model {
        let got = d.get(*k).unwrap().map(|v| value_text(&v));
        if got.as_deref() != Some(want.trim_end()) && got.as_deref() != Some(want.as_str()) {
            lost += 1;
            eprintln!("key {k}: got {got:?}, want {want:?}");
        }
    }
    assert_eq!(lost, 0, "acknowledged puts lost or wrong");
    println!(
        "multi-process: {} writer processes ({WRITERS} at once, --wait-lock), {acks} acknowledged \
         puts, {} keys, 0 lost; {READERS} reader threads ran {reads} read commands, 0 errors; \
         {impatient} non-waiting writers, {refused} refused naming the holder; {:.1} s",
        procs.len(),
        model.len(),
        t0.elapsed().as_secs_f64()
    );
    assert!(reads > 0, "readers ran");
}

#[test]
fn a_second_writer_fails_at_once_naming_the_pid_or_waits() {
    let db = fresh("second");
    let dbs = db.to_str().unwrap();
    let holder = Db::open(&db).unwrap();
    let t = Instant::now();
    let o = storefn(&["kv", "put", dbs, "--key", "1", "--value", "x"]);
    assert!(!o.status.success());
    let err = text(&o.stderr);
    let pid = std::process::id();
    assert!(
        err.contains(&format!("{dbs}: another writer holds"))
            && err.contains(&format!("(pid {pid})")),
        "{err}"
    );
    assert!(t.elapsed() < Duration::from_secs(5), "failed at once");
    for cmd in [&["compact", dbs][..], &["create", dbs, "--layers", "1"], &["recover", dbs]] {
        let mut args = vec!["kv"];
        args.extend_from_slice(cmd);
        let o = storefn(&args);
        assert!(
            !o.status.success() && text(&o.stderr).contains(&format!("(pid {pid})")),
            "{cmd:?}"
        );
    }
    let o = storefn(&["kv", "put", dbs, "--key", "1", "--value", "x", "--wait-lock", "0.3"]);
    assert!(text(&o.stderr).contains("after waiting"), "{}", text(&o.stderr));
    // Waiting long enough: it gets the lock once the holder lets go.
    let releaser = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        drop(holder);
    });
    let o = storefn(&["kv", "put", dbs, "--key", "1", "--value", "waited", "--wait-lock", "30"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    releaser.join().unwrap();
    let o = storefn(&["kv", "get", dbs, "--key", "1"]);
    assert_eq!(text(&o.stdout), "waited\n");
}

/// Names, sizes and mtimes of every file in `dir`.
fn snapshot(dir: &Path) -> Vec<(String, u64, std::time::SystemTime)> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            let m = e.metadata().unwrap();
            (e.file_name().to_string_lossy().into_owned(), m.len(), m.modified().unwrap())
        })
        .collect();
    v.sort();
    v
}

fn reads(dbs: &str) -> Vec<Output> {
    [
        &["get", dbs, "--key", "7"][..],
        &["get", dbs, "--key", "7", "--path", "uring"],
        &["multiget", dbs, "--keys", "7,8"],
        &["range", dbs, "--begin", "5", "--end", "9"],
        &["range", dbs, "--begin", "5", "--end", "9", "--path", "read", "--agg", "count"],
        &["bench", dbs, "--requests", "200", "--warmup", "10"],
    ]
    .iter()
    .map(|a| {
        let mut args = vec!["kv"];
        args.extend_from_slice(a);
        storefn(&args)
    })
    .collect()
}

#[test]
fn read_only_commands_never_modify_create_or_delete_a_file() {
    let db = fresh("readonly");
    let dbs = db.to_str().unwrap();
    let dir = db.parent().unwrap();
    let o = storefn(&["kv", "put", dbs, "--key", "7", "--value", "logged"]);
    assert!(o.status.success());
    // A torn WAL tail (a writer mid-append, or a crash), and a half-built compaction output.
    let wal = dir.join("db.wal");
    let mut w = std::fs::read(&wal).unwrap();
    w.extend_from_slice(b"SFWB torn");
    std::fs::write(&wal, &w).unwrap();
    std::fs::write(dir.join("db.new"), b"half built").unwrap();
    std::thread::sleep(Duration::from_millis(20)); // let any mtime change show
    let before = snapshot(dir);
    for o in reads(dbs) {
        assert!(o.status.success(), "{}", text(&o.stderr));
    }
    let o = storefn(&["kv", "get", dbs, "--key", "7"]);
    assert_eq!(text(&o.stdout), "logged\n", "the committed log is read, the torn tail ignored");
    assert_eq!(snapshot(dir), before, "read-only commands changed the directory");
    // The writer cleans up.
    assert!(storefn(&["kv", "put", dbs, "--key", "8", "--value", "w"]).status.success());
    assert!(!dir.join("db.new").exists());
    assert_eq!(std::fs::metadata(&wal).unwrap().len() as usize, 2 * (32 + 72 + 16));
}

#[test]
fn sidecar_less_bpfkv_file_opens_everywhere_and_only_a_writer_adds_the_sidecar() {
    let db = fresh("nosidecar");
    let dbs = db.to_str().unwrap();
    let dir = db.parent().unwrap();
    std::fs::remove_file(dir.join("db.meta")).unwrap();
    std::fs::remove_file(dir.join("db.lock")).unwrap();
    let before = snapshot(dir);
    for o in reads(dbs) {
        assert!(o.status.success(), "{}", text(&o.stderr));
    }
    let o = storefn(&["kv", "get", dbs, "--key", "960", "--layers", "2"]);
    assert_eq!(text(&o.stdout), format!("{:>63}\n", 960));
    let o = storefn(&["kv", "get", dbs, "--key", "960", "--layers", "3"]);
    assert!(!o.status.success() && text(&o.stderr).contains("of 3 layers"), "{}", text(&o.stderr));
    assert_eq!(snapshot(dir), before, "no DB.meta from a reader");
    assert!(storefn(&["kv", "put", dbs, "--key", "1", "--value", "w"]).status.success());
    assert_eq!(std::fs::metadata(dir.join("db.meta")).unwrap().len(), 64, "the writer wrote it");
}
