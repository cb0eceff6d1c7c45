//! docs/DESIGN.md's "Named limits" table against the code: every limit of the wire, the engine
//! and the server is in the table, and its row gives the value the code has.

use std::time::Duration;

use storefn_io::limits as io;
use storefn_server::limits as srv;
use storefn_wire::limits as wire;

const DOC: &str = include_str!("../../../docs/DESIGN.md");

/// The table's rows: (value cell, where cell).
fn rows() -> Vec<(String, String)> {
    let start = DOC.find("## Named limits").expect("DESIGN.md has a limits table");
    DOC[start..]
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2)
        .map(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            (cells[2].to_string(), cells[3].to_string())
        })
        .collect()
}

/// The names a limits source file makes public: `pub const NAME` and `pub use ...{NAME, ..}`.
fn names(src: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut in_use = false;
    for l in src.lines() {
        let t = l.trim();
        // `pub const fn` are derived bounds (functions of a parameter), not limits.
        if let Some(rest) = t.strip_prefix("pub const ").filter(|r| !r.starts_with("fn ")) {
            out.push(rest.split(':').next().unwrap().trim().to_string());
        }
        if t.starts_with("pub use ") {
            in_use = true;
        }
        if in_use {
            let list = t.rsplit(['{', ':']).next().unwrap_or(t);
            for n in list.split(',') {
                let n = n.trim().trim_end_matches("};").trim_end_matches(';').trim();
                if !n.is_empty() && n.chars().all(|c| c.is_ascii_uppercase() || c == '_') {
                    out.push(n.to_string());
                }
            }
            in_use = !t.ends_with(';');
        }
    }
    out
}

fn row_of(name: &str) -> (String, String) {
    let tick = format!("`{name}`");
    let path = format!("::{name}`");
    rows()
        .into_iter()
        .find(|(_, w)| w.contains(&tick) || w.contains(&path))
        .unwrap_or_else(|| panic!("{name} is not in DESIGN.md's limits table"))
}

fn forms(v: u64) -> Vec<String> {
    let mut f = vec![v.to_string()];
    let s = v.to_string();
    let mut grouped = String::new();
    for (i, ch) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            grouped.push(',');
        }
        grouped.push(ch);
    }
    f.push(grouped);
    if v >= 1 << 20 && v.is_multiple_of(1 << 20) {
        f.push(format!("{} MiB", v >> 20));
    }
    if v >= 1 << 10 && v.is_multiple_of(1 << 10) {
        f.push(format!("{} KiB", v >> 10));
    }
    f
}

fn check(name: &str, v: u64) {
    let (value, _) = row_of(name);
    assert!(
        forms(v).iter().any(|f| value.contains(f.as_str())),
        "{name} = {v} in the code, but its row says {value:?}"
    );
}

fn check_time(name: &str, d: Duration) {
    let (value, _) = row_of(name);
    let f = if d.subsec_millis() == 0 && d.as_secs() > 0 {
        format!("{} s", d.as_secs())
    } else {
        format!("{} ms", d.as_millis())
    };
    assert!(value.contains(&f), "{name} = {d:?} in the code, but its row says {value:?}");
}

#[test]
fn every_limit_of_the_wire_the_engine_and_the_server_is_in_the_table() {
    for (file, src) in [
        ("storefn-wire", include_str!("../../storefn-wire/src/limits.rs")),
        ("storefn-io", include_str!("../../storefn-io/src/limits.rs")),
        ("storefn-server", include_str!("../src/limits.rs")),
    ] {
        let n = names(src);
        assert!(n.len() >= 8, "{file}: only {n:?} found");
        for name in n {
            row_of(&name);
        }
    }
}

#[test]
fn the_table_gives_the_values_of_the_code() {
    let sizes: &[(&str, u64)] = &[
        ("MAX_FRAME_BYTES", wire::MAX_FRAME_BYTES as u64),
        ("MAX_MSGS_PER_FRAME", u64::from(wire::MAX_MSGS_PER_FRAME)),
        ("MAX_PATH_BYTES", wire::MAX_PATH_BYTES as u64),
        ("MAX_TENANT_BYTES", wire::MAX_TENANT_BYTES as u64),
        ("MAX_READ_BYTES", u64::from(wire::MAX_READ_BYTES)),
        ("MAX_WRITE_BYTES", u64::from(wire::MAX_WRITE_BYTES)),
        ("MAX_LAMBDA_IN_BYTES", u64::from(wire::MAX_LAMBDA_IN_BYTES)),
        ("MAX_LAMBDA_OUT_BYTES", u64::from(wire::MAX_LAMBDA_OUT_BYTES)),
        ("MAX_LAMBDA_WRITE_IN_BYTES", u64::from(wire::MAX_LAMBDA_WRITE_IN_BYTES)),
        ("MAX_LAMBDA_WRITE_OUT_BYTES", u64::from(wire::MAX_LAMBDA_WRITE_OUT_BYTES)),
        ("MAX_OFFLOAD_MSG_BYTES", u64::from(wire::MAX_OFFLOAD_MSG_BYTES)),
        ("MAX_OFFLOAD_DATA_BYTES", u64::from(wire::MAX_OFFLOAD_DATA_BYTES)),
        ("DEFAULT_RING_DEPTH", u64::from(io::DEFAULT_RING_DEPTH)),
        ("MAX_RING_DEPTH", u64::from(io::MAX_RING_DEPTH)),
        ("MAX_BUFFERS", io::MAX_BUFFERS as u64),
        ("MAX_CHAINS", io::MAX_CHAINS as u64),
        ("DEFAULT_MAX_HOPS", u64::from(io::DEFAULT_MAX_HOPS)),
        ("MAX_HOP_BYTES", io::MAX_HOP_BYTES as u64),
        ("MAX_RANGE_BYTES", io::MAX_RANGE_BYTES as u64),
        ("MAX_FILES", io::MAX_FILES as u64),
        ("REGISTERED_FILE_SLOTS", io::REGISTERED_FILE_SLOTS as u64),
        ("MAX_IN_FLIGHT_PER_CONN", u64::from(srv::MAX_IN_FLIGHT_PER_CONN)),
        ("MAX_CONN_OUT_BYTES", srv::MAX_CONN_OUT_BYTES as u64),
        ("ENGINE_CHAINS", srv::ENGINE_CHAINS as u64),
        ("SERVER_MAX_HOPS", u64::from(srv::SERVER_MAX_HOPS)),
        ("SERVER_HOP_BYTES", srv::SERVER_HOP_BYTES as u64),
        ("MAX_THREADS", srv::MAX_THREADS as u64),
        ("MAX_CONNS_PER_THREAD", srv::MAX_CONNS_PER_THREAD as u64),
        ("MAX_OPEN_FILES_PER_THREAD", srv::MAX_OPEN_FILES_PER_THREAD as u64),
        ("MAX_TENANTS_PER_THREAD", srv::MAX_TENANTS_PER_THREAD as u64),
        ("MAX_INSTANCES_PER_THREAD", srv::MAX_INSTANCES_PER_THREAD as u64),
        ("DEFAULT_REGISTRY_BYTES", srv::DEFAULT_REGISTRY_BYTES as u64),
        ("SERVER_INSN_BUDGET", srv::SERVER_INSN_BUDGET),
        ("MIN_SECRET_BYTES", srv::MIN_SECRET_BYTES as u64),
        ("MAX_OFFLOAD_READS", srv::MAX_OFFLOAD_READS as u64),
        ("RESERVE_DIV", u64::from(srv::RESERVE_DIV)),
        ("MAX_METRIC_TENANTS", srv::MAX_METRIC_TENANTS as u64),
        ("MAX_METRICS_CONNS", srv::MAX_METRICS_CONNS as u64),
        ("MAX_METRICS_REQUEST_BYTES", srv::MAX_METRICS_REQUEST_BYTES as u64),
        ("MAX_REFUSED_LOG_LINES_PER_SEC", u64::from(srv::MAX_REFUSED_LOG_LINES_PER_SEC)),
    ];
    for &(name, v) in sizes {
        check(name, v);
    }
    for (name, d) in [
        ("IDLE_TIMEOUT", srv::IDLE_TIMEOUT),
        ("SLOW_CLIENT_TIMEOUT", srv::SLOW_CLIENT_TIMEOUT),
        ("FORWARD_TIMEOUT", srv::FORWARD_TIMEOUT),
        ("POLL_INTERVAL", srv::POLL_INTERVAL),
        ("SHUTDOWN_FLUSH_TIMEOUT", srv::SHUTDOWN_FLUSH_TIMEOUT),
        ("METRICS_IO_TIMEOUT", srv::METRICS_IO_TIMEOUT),
        ("RAW_RETRY_INTERVAL", io::RAW_RETRY_INTERVAL),
    ] {
        check_time(name, d);
    }
}
