//! docs/DESIGN.md's "Named limits" table against the code, for every crate's `limits` module:
//! every limit is in the table under its crate's path, and its row gives the value the code
//! has (as crates/storefn-wire/tests/format_doc.rs checks FORMAT.md).

use std::time::Duration;

const DOC: &str = include_str!("../../../docs/DESIGN.md");

/// Each crate's limits module, as source: the names it makes public are the limits.
const SOURCES: &[(&str, &str)] = &[
    ("vm", include_str!("../../storefn-vm/src/limits.rs")),
    ("io", include_str!("../../storefn-io/src/limits.rs")),
    ("kv", include_str!("../../storefn-kv/src/limits.rs")),
    ("lambda", include_str!("../../storefn-lambda/src/limits.rs")),
    ("dds", include_str!("../../storefn-dds/src/limits.rs")),
    ("netdelay", include_str!("../../storefn-netdelay/src/limits.rs")),
    ("wire", include_str!("../../storefn-wire/src/limits.rs")),
    ("server", include_str!("../../storefn-server/src/limits.rs")),
    ("capi", include_str!("../../storefn-capi/src/limits.rs")),
    ("rocksdb", include_str!("../../storefn-rocksdb/src/limits.rs")),
];

/// A limit's value as the table writes it.
#[derive(Debug, Clone, Copy)]
enum Val {
    Int(u64),
    Share(f64),
    Time(Duration),
}

trait Limit {
    fn val(self) -> Val;
}
impl Limit for usize {
    fn val(self) -> Val {
        Val::Int(self as u64)
    }
}
impl Limit for u64 {
    fn val(self) -> Val {
        Val::Int(self)
    }
}
impl Limit for u32 {
    fn val(self) -> Val {
        Val::Int(u64::from(self))
    }
}
impl Limit for f64 {
    fn val(self) -> Val {
        Val::Share(self)
    }
}
impl Limit for Duration {
    fn val(self) -> Val {
        Val::Time(self)
    }
}
fn v(x: impl Limit) -> Val {
    x.val()
}

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

/// The (crate, name) pairs a where cell names: `storefn_x::limits::A`, `B` names x's A and B.
fn named(cell: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut krate = None;
    for (i, span) in cell.split('`').enumerate() {
        if i % 2 == 0 {
            continue;
        }
        if let Some((path, name)) = span.rsplit_once("::limits::") {
            krate = path.strip_prefix("storefn_").map(str::to_string);
            if let Some(k) = &krate {
                out.push((k.clone(), name.to_string()));
            }
        } else if let Some(k) = krate.as_ref().filter(|_| is_const(span)) {
            out.push((k.clone(), span.to_string()));
        }
    }
    out
}

fn is_const(s: &str) -> bool {
    !s.is_empty() && s.chars().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
}

/// The names a limits source makes public (`pub const NAME`, `pub use ...{NAME, ..}`), or for
/// a crate whose limits are internal (the C API's), its `pub(crate) const` names.
fn names(src: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut in_use = false;
    for l in src.lines() {
        let t = l.trim();
        // `pub const fn` are derived bounds (functions of a parameter), not limits.
        let decl = t.strip_prefix("pub const ").or_else(|| t.strip_prefix("pub(crate) const "));
        if let Some(rest) = decl.filter(|r| !r.starts_with("fn ")) {
            out.push(rest.split(':').next().unwrap().trim().to_string());
        }
        if t.starts_with("pub use ") {
            in_use = true;
        }
        if in_use {
            let list = t.rsplit(['{', ':']).next().unwrap_or(t);
            for n in list.split(',') {
                let n = n.trim().trim_end_matches("};").trim_end_matches(';').trim();
                if is_const(n) {
                    out.push(n.to_string());
                }
            }
            in_use = !t.ends_with(';');
        }
    }
    out
}

fn row_of(krate: &str, name: &str) -> Option<String> {
    rows()
        .into_iter()
        .find(|(_, w)| named(w).iter().any(|(k, n)| k == krate && n == name))
        .map(|r| r.0)
}

/// How the table may write an integer: `65536`, `65,536`, `64 KiB`, `1 MiB`, `1 GiB`.
fn forms(v: u64) -> Vec<String> {
    let s = v.to_string();
    let mut grouped = String::new();
    for (i, ch) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            grouped.push(',');
        }
        grouped.push(ch);
    }
    let mut f = vec![s, grouped];
    for (shift, unit) in [(30, "GiB"), (20, "MiB"), (10, "KiB")] {
        if v >= 1 << shift && v.is_multiple_of(1 << shift) {
            f.push(format!("{} {unit}", v >> shift));
        }
    }
    f
}

fn time_form(d: Duration) -> String {
    if d.subsec_nanos() == 0 {
        format!("{} s", d.as_secs())
    } else if d.subsec_micros().is_multiple_of(1000) {
        format!("{} ms", d.as_millis())
    } else {
        format!("{} µs", d.as_micros())
    }
}

fn all() -> Vec<(&'static str, &'static str, Val)> {
    vec![
        // storefn-vm
        ("vm", "MAX_GLOBALS_BYTES", v(storefn_vm::limits::MAX_GLOBALS_BYTES)),
        ("vm", "PLACE_NEAR_BYTES", v(storefn_vm::limits::PLACE_NEAR_BYTES)),
        ("vm", "HELPER_BYTES_PER_INSN", v(storefn_vm::limits::HELPER_BYTES_PER_INSN)),
        ("vm", "HELPER_CALL_INSNS", v(storefn_vm::limits::HELPER_CALL_INSNS)),
        ("vm", "CRC32C_BYTES_PER_INSN", v(storefn_vm::limits::CRC32C_BYTES_PER_INSN)),
        ("vm", "MAX_FORMAT_BYTES", v(storefn_vm::limits::MAX_FORMAT_BYTES)),
        ("vm", "MAX_TRACE_LINES", v(storefn_vm::limits::MAX_TRACE_LINES)),
        ("vm", "MAX_TRACE_LINE_BYTES", v(storefn_vm::limits::MAX_TRACE_LINE_BYTES)),
        ("vm", "TRACE_PRINTK_INSNS", v(storefn_vm::limits::TRACE_PRINTK_INSNS)),
        ("vm", "MAX_LOOP_PRECHARGE_INSNS", v(storefn_vm::limits::MAX_LOOP_PRECHARGE_INSNS)),
        ("vm", "MAX_REGIONS", v(storefn_vm::limits::MAX_REGIONS)),
        ("vm", "QUICK_TIER_SLOTS", v(storefn_vm::limits::QUICK_TIER_SLOTS)),
        ("vm", "DEFAULT_INSN_BUDGET", v(storefn_vm::limits::DEFAULT_INSN_BUDGET)),
        ("vm", "LAMBDA_INSNS_PER_INPUT_BYTE", v(storefn_vm::limits::LAMBDA_INSNS_PER_INPUT_BYTE)),
        ("vm", "LAMBDA_INSNS_PER_OUTPUT_BYTE", v(storefn_vm::limits::LAMBDA_INSNS_PER_OUTPUT_BYTE)),
        ("vm", "MAX_CALL_DEPTH", v(storefn_vm::limits::MAX_CALL_DEPTH)),
        ("vm", "MAX_INSNS", v(storefn_vm::limits::MAX_INSNS)),
        ("vm", "STACK_BYTES", v(storefn_vm::limits::STACK_BYTES)),
        ("vm", "STACK_FRAME_BYTES", v(storefn_vm::limits::STACK_FRAME_BYTES)),
        ("vm", "XRP_DATA_VIEW_BYTES", v(storefn_vm::limits::XRP_DATA_VIEW_BYTES)),
        ("vm", "XRP_MAX_FANOUT", v(storefn_vm::limits::XRP_MAX_FANOUT)),
        ("vm", "XRP_SCRATCH_BYTES", v(storefn_vm::limits::XRP_SCRATCH_BYTES)),
        // storefn-io
        ("io", "DEFAULT_RING_DEPTH", v(storefn_io::limits::DEFAULT_RING_DEPTH)),
        ("io", "MAX_RING_DEPTH", v(storefn_io::limits::MAX_RING_DEPTH)),
        ("io", "DEFAULT_BUFFERS", v(storefn_io::limits::DEFAULT_BUFFERS)),
        ("io", "MAX_BUFFERS", v(storefn_io::limits::MAX_BUFFERS)),
        ("io", "DEFAULT_CHAINS", v(storefn_io::limits::DEFAULT_CHAINS)),
        ("io", "MAX_CHAINS", v(storefn_io::limits::MAX_CHAINS)),
        ("io", "DEFAULT_MAX_HOPS", v(storefn_io::limits::DEFAULT_MAX_HOPS)),
        ("io", "MAX_FANOUT", v(storefn_io::limits::MAX_FANOUT)),
        ("io", "MAX_OUTSTANDING_PER_CHAIN", v(storefn_io::limits::MAX_OUTSTANDING_PER_CHAIN)),
        ("io", "DATA_VIEW_BYTES", v(storefn_io::limits::DATA_VIEW_BYTES)),
        ("io", "DEFAULT_HOP_BYTES", v(storefn_io::limits::DEFAULT_HOP_BYTES)),
        ("io", "MAX_HOP_BYTES", v(storefn_io::limits::MAX_HOP_BYTES)),
        ("io", "MAX_BLOCK_ALIGN", v(storefn_io::limits::MAX_BLOCK_ALIGN)),
        ("io", "BUFFER_ALIGN", v(storefn_io::limits::BUFFER_ALIGN)),
        ("io", "MAX_RANGE_BYTES", v(storefn_io::limits::MAX_RANGE_BYTES)),
        ("io", "MAX_RANGE_BUF_BYTES", v(storefn_io::limits::MAX_RANGE_BUF_BYTES)),
        ("io", "DEFAULT_RANGE_READS", v(storefn_io::limits::DEFAULT_RANGE_READS)),
        ("io", "MAX_RANGE_READS", v(storefn_io::limits::MAX_RANGE_READS)),
        ("io", "DEFAULT_RANGE_BUF_SLOTS", v(storefn_io::limits::DEFAULT_RANGE_BUF_SLOTS)),
        ("io", "SCRATCH_BYTES", v(storefn_io::limits::SCRATCH_BYTES)),
        ("io", "RAW_RETRY_INTERVAL", v(storefn_io::limits::RAW_RETRY_INTERVAL)),
        ("io", "MAX_FILES", v(storefn_io::limits::MAX_FILES)),
        ("io", "REGISTERED_FILE_SLOTS", v(storefn_io::limits::REGISTERED_FILE_SLOTS)),
        ("io", "MAX_DIGEST_EXTENTS", v(storefn_io::limits::MAX_DIGEST_EXTENTS)),
        ("io", "MAX_LEASES", v(storefn_io::limits::MAX_LEASES)),
        ("io", "LEASE_POLL_INTERVAL", v(storefn_io::limits::LEASE_POLL_INTERVAL)),
        ("io", "DOORKEEPER_MIN_BITS", v(storefn_io::limits::DOORKEEPER_MIN_BITS)),
        ("io", "SKETCH_COUNTER_MAX", v(storefn_io::limits::SKETCH_COUNTER_MAX)),
        ("io", "SKETCH_SAMPLES_PER_ENTRY", v(storefn_io::limits::SKETCH_SAMPLES_PER_ENTRY)),
        ("io", "SKETCH_WORDS_PER_ENTRY", v(storefn_io::limits::SKETCH_WORDS_PER_ENTRY)),
        ("io", "MIN_NODE_BYTES", v(storefn_io::limits::MIN_NODE_BYTES)),
        ("io", "MAX_NODE_BYTES", v(storefn_io::limits::MAX_NODE_BYTES)),
        // storefn-kv
        ("kv", "MAX_LAYERS", v(storefn_kv::limits::MAX_LAYERS)),
        ("kv", "MAX_CREATE_LAYERS", v(storefn_kv::limits::MAX_CREATE_LAYERS)),
        ("kv", "BUILD_CHUNK_BYTES", v(storefn_kv::limits::BUILD_CHUNK_BYTES)),
        ("kv", "IO_ALIGN", v(storefn_kv::limits::IO_ALIGN)),
        ("kv", "SCRATCH_BYTES", v(storefn_kv::limits::SCRATCH_BYTES)),
        ("kv", "DEFAULT_BATCH", v(storefn_kv::limits::DEFAULT_BATCH)),
        ("kv", "MAX_BATCH", v(storefn_kv::limits::MAX_BATCH)),
        ("kv", "RANGE_BATCH", v(storefn_kv::limits::RANGE_BATCH)),
        ("kv", "MAX_STALE_RETRIES", v(storefn_kv::limits::MAX_STALE_RETRIES)),
        ("kv", "MAX_BATCH_RECORDS", v(storefn_kv::limits::MAX_BATCH_RECORDS)),
        ("kv", "DEFAULT_MEMTABLE_LIMIT_BYTES", v(storefn_kv::limits::DEFAULT_MEMTABLE_LIMIT_BYTES)),
        ("kv", "COMPACT_READ_BYTES", v(storefn_kv::limits::COMPACT_READ_BYTES)),
        ("kv", "LOCK_RETRY_INTERVAL", v(storefn_kv::limits::LOCK_RETRY_INTERVAL)),
        ("kv", "DEFAULT_ROUNDS", v(storefn_kv::limits::DEFAULT_ROUNDS)),
        ("kv", "MAX_ROUNDS", v(storefn_kv::limits::MAX_ROUNDS)),
        ("kv", "DEVICE_MAX_BATCH", v(storefn_kv::limits::DEVICE_MAX_BATCH)),
        ("kv", "PIPELINE_FRAMES", v(storefn_kv::limits::PIPELINE_FRAMES)),
        ("kv", "RTT_PROBES", v(storefn_kv::limits::RTT_PROBES)),
        // storefn-lambda
        ("lambda", "MAX_RANGE_BYTES", v(storefn_lambda::limits::MAX_RANGE_BYTES)),
        ("lambda", "MAX_REMOTE_RANGE_BYTES", v(storefn_lambda::limits::MAX_REMOTE_RANGE_BYTES)),
        ("lambda", "MAX_REMOTE_READ_BYTES", v(storefn_lambda::limits::MAX_REMOTE_READ_BYTES)),
        (
            "lambda",
            "DEFAULT_CLIENT_CACHE_BYTES",
            v(storefn_lambda::limits::DEFAULT_CLIENT_CACHE_BYTES),
        ),
        (
            "lambda",
            "MAX_REMOTE_WRITE_IN_BYTES",
            v(storefn_lambda::limits::MAX_REMOTE_WRITE_IN_BYTES),
        ),
        (
            "lambda",
            "MAX_REMOTE_WRITE_OUT_BYTES",
            v(storefn_lambda::limits::MAX_REMOTE_WRITE_OUT_BYTES),
        ),
        ("lambda", "MINCORE_PAGES", v(storefn_lambda::limits::MINCORE_PAGES)),
        ("lambda", "MAX_SAMPLES", v(storefn_lambda::limits::MAX_SAMPLES)),
        ("lambda", "MIN_SAMPLES", v(storefn_lambda::limits::MIN_SAMPLES)),
        ("lambda", "MIN_PROBE_BUDGET", v(storefn_lambda::limits::MIN_PROBE_BUDGET)),
        ("lambda", "OWN_COST_EVERY", v(storefn_lambda::limits::OWN_COST_EVERY)),
        ("lambda", "CACHE_SAMPLE_BUDGET", v(storefn_lambda::limits::CACHE_SAMPLE_BUDGET)),
        ("lambda", "MIN_PROBE_INTERVAL", v(storefn_lambda::limits::MIN_PROBE_INTERVAL)),
        ("lambda", "SETTLED_RUN", v(storefn_lambda::limits::SETTLED_RUN)),
        ("lambda", "TAIL_SAMPLES", v(storefn_lambda::limits::TAIL_SAMPLES)),
        ("lambda", "TAIL_TRUSTED", v(storefn_lambda::limits::TAIL_TRUSTED)),
        ("lambda", "WARMUP_REQUESTS", v(storefn_lambda::limits::WARMUP_REQUESTS)),
        ("lambda", "ROUNDS_PER_HALF", v(storefn_lambda::limits::ROUNDS_PER_HALF)),
        ("lambda", "MIN_CFS_QUOTA_US", v(storefn_lambda::limits::MIN_CFS_QUOTA_US)),
        // storefn-dds
        ("rocksdb", "MAX_BLOCK_BYTES", v(storefn_rocksdb::limits::MAX_BLOCK_BYTES)),
        ("rocksdb", "MAX_KEY_BYTES", v(storefn_rocksdb::limits::MAX_KEY_BYTES)),
        ("rocksdb", "MAX_MANIFEST_BYTES", v(storefn_rocksdb::limits::MAX_MANIFEST_BYTES)),
        ("rocksdb", "MAX_WAL_BYTES", v(storefn_rocksdb::limits::MAX_WAL_BYTES)),
        ("rocksdb", "MAX_LEVELS", v(storefn_rocksdb::limits::MAX_LEVELS)),
        ("rocksdb", "MAX_CURRENT_BYTES", v(storefn_rocksdb::limits::MAX_CURRENT_BYTES)),
        ("rocksdb", "WAL_PROBE_SLACK", v(storefn_rocksdb::limits::WAL_PROBE_SLACK)),
        ("rocksdb", "MAX_WAL_PROBES", v(storefn_rocksdb::limits::MAX_WAL_PROBES)),
        ("rocksdb", "MAX_STALE_REOPENS", v(storefn_rocksdb::limits::MAX_STALE_REOPENS)),
        ("rocksdb", "REFRESH_SAMPLE_EVERY", v(storefn_rocksdb::limits::REFRESH_SAMPLE_EVERY)),
        ("dds", "MAX_CAPACITY_ITEMS", v(storefn_dds::limits::MAX_CAPACITY_ITEMS)),
        ("dds", "MAX_DISPLACEMENTS", v(storefn_dds::limits::MAX_DISPLACEMENTS)),
        ("dds", "MAX_SEARCH_SLOTS", v(storefn_dds::limits::MAX_SEARCH_SLOTS)),
        ("dds", "MAX_READ_RETRIES", v(storefn_dds::limits::MAX_READ_RETRIES)),
        ("dds", "MIN_RING_BYTES", v(storefn_dds::limits::MIN_RING_BYTES)),
        ("dds", "MAX_RING_BYTES", v(storefn_dds::limits::MAX_RING_BYTES)),
        ("dds", "MAX_BATCH_RECORDS", v(storefn_dds::limits::MAX_BATCH_RECORDS)),
        ("dds", "MAX_SHM_BYTES", v(storefn_dds::limits::MAX_SHM_BYTES)),
        ("dds", "MAX_IO_BYTES", v(storefn_dds::limits::MAX_IO_BYTES)),
        ("dds", "MAX_PATH_BYTES", v(storefn_dds::limits::MAX_PATH_BYTES)),
        ("dds", "DEFAULT_CHANNEL_RING_BYTES", v(storefn_dds::limits::DEFAULT_CHANNEL_RING_BYTES)),
        ("dds", "DEFAULT_TIMEOUT", v(storefn_dds::limits::DEFAULT_TIMEOUT)),
        ("dds", "HOST_HEARTBEAT_TIMEOUT", v(storefn_dds::limits::HOST_HEARTBEAT_TIMEOUT)),
        ("dds", "HANDOFF_TIMEOUT", v(storefn_dds::limits::HANDOFF_TIMEOUT)),
        ("dds", "SPIN_POLLS", v(storefn_dds::limits::SPIN_POLLS)),
        ("dds", "PARK_SLICE", v(storefn_dds::limits::PARK_SLICE)),
        ("dds", "MAX_OPEN_FILES", v(storefn_dds::limits::MAX_OPEN_FILES)),
        ("dds", "STAMP_GRAIN_BYTES", v(storefn_dds::limits::STAMP_GRAIN_BYTES)),
        ("dds", "STAMP_BUCKETS", v(storefn_dds::limits::STAMP_BUCKETS)),
        ("dds", "MAX_BATCH_REQUESTS", v(storefn_dds::limits::MAX_BATCH_REQUESTS)),
        ("dds", "MAX_CACHE_ITEMS", v(storefn_dds::limits::MAX_CACHE_ITEMS)),
        ("dds", "MAX_INVALIDATE_KEYS", v(storefn_dds::limits::MAX_INVALIDATE_KEYS)),
        ("dds", "MAX_ROUTE_BYTES", v(storefn_dds::limits::MAX_ROUTE_BYTES)),
        ("dds", "MAX_TIMING_SAMPLES", v(storefn_dds::limits::MAX_TIMING_SAMPLES)),
        ("dds", "MAX_LSN", v(storefn_dds::limits::MAX_LSN)),
        ("dds", "PAGE_SERVER_BATCH", v(storefn_dds::limits::PAGE_SERVER_BATCH)),
        ("dds", "HOST_CONNECT_TIMEOUT", v(storefn_dds::limits::HOST_CONNECT_TIMEOUT)),
        ("dds", "HOST_READY_TIMEOUT", v(storefn_dds::limits::HOST_READY_TIMEOUT)),
        ("dds", "HOST_STOP_TIMEOUT", v(storefn_dds::limits::HOST_STOP_TIMEOUT)),
        ("dds", "GENERATED_SECRET_BYTES", v(storefn_dds::limits::GENERATED_SECRET_BYTES)),
        ("dds", "MAX_PRODUCERS", v(storefn_dds::limits::MAX_PRODUCERS)),
        ("dds", "MAX_CASE_TIME", v(storefn_dds::limits::MAX_CASE_TIME)),
        ("dds", "MIN_MESSAGE_BYTES", v(storefn_dds::limits::MIN_MESSAGE_BYTES)),
        ("dds", "MAX_DEPTH", v(storefn_dds::limits::MAX_DEPTH)),
        ("dds", "MAX_OPS", v(storefn_dds::limits::MAX_OPS)),
        ("dds", "MAX_READERS", v(storefn_dds::limits::MAX_READERS)),
        ("dds", "MAX_DURATION", v(storefn_dds::limits::MAX_DURATION)),
        // storefn-netdelay
        ("netdelay", "CHUNK_BYTES", v(storefn_netdelay::limits::CHUNK_BYTES)),
        ("netdelay", "QUEUE_CHUNKS", v(storefn_netdelay::limits::QUEUE_CHUNKS)),
        ("netdelay", "MAX_CONNECTIONS", v(storefn_netdelay::limits::MAX_CONNECTIONS)),
        ("netdelay", "POLL_INTERVAL", v(storefn_netdelay::limits::POLL_INTERVAL)),
        ("netdelay", "CONNECT_TIMEOUT", v(storefn_netdelay::limits::CONNECT_TIMEOUT)),
        ("netdelay", "SPIN_BELOW", v(storefn_netdelay::limits::SPIN_BELOW)),
        ("netdelay", "MAX_RTT_US", v(storefn_netdelay::limits::MAX_RTT_US)),
        // storefn-wire
        ("wire", "MAX_FRAME_BYTES", v(storefn_wire::limits::MAX_FRAME_BYTES)),
        ("wire", "MAX_MSGS_PER_FRAME", v(storefn_wire::limits::MAX_MSGS_PER_FRAME)),
        ("wire", "MAX_PATH_BYTES", v(storefn_wire::limits::MAX_PATH_BYTES)),
        ("wire", "MAX_TENANT_BYTES", v(storefn_wire::limits::MAX_TENANT_BYTES)),
        ("wire", "MAX_READ_BYTES", v(storefn_wire::limits::MAX_READ_BYTES)),
        ("wire", "MAX_XRP_READ_BYTES", v(storefn_wire::limits::MAX_XRP_READ_BYTES)),
        ("wire", "MAX_WRITE_BYTES", v(storefn_wire::limits::MAX_WRITE_BYTES)),
        ("wire", "SCRATCH_BYTES", v(storefn_wire::limits::SCRATCH_BYTES)),
        ("wire", "MAX_LAMBDA_OUT_BYTES", v(storefn_wire::limits::MAX_LAMBDA_OUT_BYTES)),
        ("wire", "MAX_LAMBDA_IN_BYTES", v(storefn_wire::limits::MAX_LAMBDA_IN_BYTES)),
        ("wire", "MAX_LAMBDA_WRITE_IN_BYTES", v(storefn_wire::limits::MAX_LAMBDA_WRITE_IN_BYTES)),
        ("wire", "MAX_LAMBDA_WRITE_OUT_BYTES", v(storefn_wire::limits::MAX_LAMBDA_WRITE_OUT_BYTES)),
        ("wire", "MAX_OFFLOAD_MSG_BYTES", v(storefn_wire::limits::MAX_OFFLOAD_MSG_BYTES)),
        ("wire", "MAX_OFFLOAD_DATA_BYTES", v(storefn_wire::limits::MAX_OFFLOAD_DATA_BYTES)),
        ("wire", "DEFAULT_TIMEOUT", v(storefn_wire::limits::DEFAULT_TIMEOUT)),
        // storefn-server
        ("server", "MAX_IN_FLIGHT_PER_CONN", v(storefn_server::limits::MAX_IN_FLIGHT_PER_CONN)),
        ("server", "MAX_CONN_OUT_BYTES", v(storefn_server::limits::MAX_CONN_OUT_BYTES)),
        ("server", "IDLE_TIMEOUT", v(storefn_server::limits::IDLE_TIMEOUT)),
        ("server", "SLOW_CLIENT_TIMEOUT", v(storefn_server::limits::SLOW_CLIENT_TIMEOUT)),
        ("server", "SERVER_MAX_HOPS", v(storefn_server::limits::SERVER_MAX_HOPS)),
        ("server", "SERVER_HOP_BYTES", v(storefn_server::limits::SERVER_HOP_BYTES)),
        ("server", "LAMBDA_PIECE_BYTES", v(storefn_server::limits::LAMBDA_PIECE_BYTES)),
        ("server", "LAMBDA_READS_PER_JOB", v(storefn_server::limits::LAMBDA_READS_PER_JOB)),
        ("server", "CONTENDED_LAMBDA_READS", v(storefn_server::limits::CONTENDED_LAMBDA_READS)),
        ("server", "CONTENTION_WINDOW", v(storefn_server::limits::CONTENTION_WINDOW)),
        ("server", "MAX_QUEUED_RUNS", v(storefn_server::limits::MAX_QUEUED_RUNS)),
        (
            "server",
            "MAX_STAGED_RUNS_PER_TENANT",
            v(storefn_server::limits::MAX_STAGED_RUNS_PER_TENANT),
        ),
        ("server", "DDS_ENGINE_FILES", v(storefn_server::limits::DDS_ENGINE_FILES)),
        ("server", "MAX_METRICS_CONNS", v(storefn_server::limits::MAX_METRICS_CONNS)),
        (
            "server",
            "MAX_METRICS_REQUEST_BYTES",
            v(storefn_server::limits::MAX_METRICS_REQUEST_BYTES),
        ),
        ("server", "MAX_METRIC_TENANTS", v(storefn_server::limits::MAX_METRIC_TENANTS)),
        (
            "server",
            "MAX_REFUSED_LOG_LINES_PER_SEC",
            v(storefn_server::limits::MAX_REFUSED_LOG_LINES_PER_SEC),
        ),
        ("server", "METRICS_IO_TIMEOUT", v(storefn_server::limits::METRICS_IO_TIMEOUT)),
        ("server", "ENGINE_CHAINS", v(storefn_server::limits::ENGINE_CHAINS)),
        ("server", "MAX_CONNS_PER_THREAD", v(storefn_server::limits::MAX_CONNS_PER_THREAD)),
        (
            "server",
            "MAX_OPEN_FILES_PER_THREAD",
            v(storefn_server::limits::MAX_OPEN_FILES_PER_THREAD),
        ),
        ("server", "MAX_TENANTS_PER_THREAD", v(storefn_server::limits::MAX_TENANTS_PER_THREAD)),
        ("server", "MAX_INSTANCES_PER_THREAD", v(storefn_server::limits::MAX_INSTANCES_PER_THREAD)),
        ("server", "POLL_INTERVAL", v(storefn_server::limits::POLL_INTERVAL)),
        ("server", "SHUTDOWN_FLUSH_TIMEOUT", v(storefn_server::limits::SHUTDOWN_FLUSH_TIMEOUT)),
        ("server", "MAX_THREADS", v(storefn_server::limits::MAX_THREADS)),
        ("server", "FORWARD_TIMEOUT", v(storefn_server::limits::FORWARD_TIMEOUT)),
        ("server", "CONN_RX_START_BYTES", v(storefn_server::limits::CONN_RX_START_BYTES)),
        ("server", "CONN_KEEP_BYTES", v(storefn_server::limits::CONN_KEEP_BYTES)),
        ("server", "MAX_PREAUTH_FRAME_BYTES", v(storefn_server::limits::MAX_PREAUTH_FRAME_BYTES)),
        ("server", "MAX_PENDING_WRITE_BYTES", v(storefn_server::limits::MAX_PENDING_WRITE_BYTES)),
        ("server", "MAX_PENDING_LOADS", v(storefn_server::limits::MAX_PENDING_LOADS)),
        ("server", "MAX_CONNS", v(storefn_server::limits::MAX_CONNS)),
        ("server", "MAX_CONNS_PER_PEER", v(storefn_server::limits::MAX_CONNS_PER_PEER)),
        ("server", "MAX_PREAUTH_CONNS", v(storefn_server::limits::MAX_PREAUTH_CONNS)),
        (
            "server",
            "MAX_PREAUTH_CONNS_PER_PEER",
            v(storefn_server::limits::MAX_PREAUTH_CONNS_PER_PEER),
        ),
        ("server", "AUTH_TIMEOUT", v(storefn_server::limits::AUTH_TIMEOUT)),
        ("server", "MAX_RESPONSE_MSG_BYTES", v(storefn_server::limits::MAX_RESPONSE_MSG_BYTES)),
        ("server", "MAX_CONN_READ_BYTES", v(storefn_server::limits::MAX_CONN_READ_BYTES)),
        ("server", "MAX_SMALL_ANSWER_BYTES", v(storefn_server::limits::MAX_SMALL_ANSWER_BYTES)),
        ("server", "CONN_MEMORY_BOUND", v(storefn_server::limits::CONN_MEMORY_BOUND)),
        ("server", "DDS_CONN_MEMORY_BOUND", v(storefn_server::limits::DDS_CONN_MEMORY_BOUND)),
        ("server", "THREAD_MEMORY_BOUND", v(storefn_server::limits::THREAD_MEMORY_BOUND)),
        (
            "server",
            "DEFAULT_TENANT_INSN_BUDGET",
            v(storefn_server::limits::DEFAULT_TENANT_INSN_BUDGET),
        ),
        ("server", "DEFAULT_REGISTRY_BYTES", v(storefn_server::limits::DEFAULT_REGISTRY_BYTES)),
        ("server", "SERVER_INSN_BUDGET", v(storefn_server::limits::SERVER_INSN_BUDGET)),
        ("server", "MIN_SECRET_BYTES", v(storefn_server::limits::MIN_SECRET_BYTES)),
        ("server", "DEFAULT_GROW_QUOTA", v(storefn_server::limits::DEFAULT_GROW_QUOTA)),
        ("server", "MAX_SCOPE_DIRS", v(storefn_server::limits::MAX_SCOPE_DIRS)),
        ("server", "MAX_OFFLOAD_READS", v(storefn_server::limits::MAX_OFFLOAD_READS)),
        ("server", "RESERVE_DIV", v(storefn_server::limits::RESERVE_DIV)),
        ("server", "PASS_CPU_NS", v(storefn_server::limits::PASS_CPU_NS)),
    ]
}

#[test]
fn every_limit_of_every_crate_is_in_the_table() {
    let mut missing = Vec::new();
    for &(krate, src) in SOURCES {
        let n = names(src);
        assert!(n.len() >= 3, "storefn-{krate}: only {n:?} found");
        for name in n {
            if row_of(krate, &name).is_none() {
                missing.push(format!("storefn_{krate}::limits::{name}"));
            }
        }
    }
    assert!(missing.is_empty(), "not in DESIGN.md's limits table: {missing:#?}");
}

#[test]
fn the_table_gives_the_values_of_the_code() {
    let mut wrong = Vec::new();
    for (krate, name, val) in all() {
        let Some(cell) = row_of(krate, name) else {
            wrong.push(format!("{krate} {name} = {val:?}: no row"));
            continue;
        };
        let ok = match val {
            Val::Int(v) => forms(v).iter().any(|f| cell.contains(f.as_str())),
            Val::Share(s) => cell.contains(&format!("{}%", s * 100.0)),
            Val::Time(d) => cell.contains(&time_form(d)),
        };
        if !ok {
            wrong.push(format!("{krate} {name} = {val:?}, but its row says {cell:?}"));
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

#[test]
fn every_limit_with_a_value_is_checked() {
    // The value list above covers every public limit (the C API's are internal: named only).
    let listed: Vec<(&str, &str)> = all().iter().map(|&(k, n, _)| (k, n)).collect();
    for &(krate, src) in SOURCES.iter().filter(|(k, _)| *k != "capi") {
        for name in names(src) {
            assert!(
                listed.contains(&(krate, name.as_str())),
                "storefn_{krate}::limits::{name} has no value check"
            );
        }
    }
}
