#!/usr/bin/env bash
# Remote lookups in a WiredTiger table at 200 us RTT (docs/results/wiredtiger.md):
# `pushdown` (the client's cached internal pages name the leaf; the function runs on the server
# over that one block), `pushdown --no-internal-cache` (the chain starts at the root on the
# server) and `rpc-read` (a READ frame per page), in alternating order, through the delay proxy;
# then pushdown straight to the server (no proxy) to separate the server's part, and the bound's
# parts: the STAT round trip through the proxy (probed before and after each run: its mean
# bounds the lookups' mean, its median their median), the device's QD1 read of the
# table's leaves (`wt leaf-bound --depth 1`) and the local O_DIRECT chain from the root.
# The server's CPU per lookup is read from /proc around each run.
#
#   bench/wiredtiger_remote.sh
#
# Env: STOREFN (default target/release/storefn), WTB (work dir, default /var/tmp/wtb; the
# database is built there by scripts/wiredtiger/load.c if missing), ROUNDS (default 3),
# OPS (lookups per run, default 3000).
set -euo pipefail
cd "$(dirname "$0")/.."
B=$(realpath "${STOREFN:-target/release/storefn}")
W=${WTB:-/var/tmp/wtb}; ROUNDS=${ROUNDS:-3}; OPS=${OPS:-3000}
mkdir -p "$W/srv/db"
if [ ! -f "$W/srv/db/usertable.wt" ]; then
    cc -O2 -o "$W/load" scripts/wiredtiger/load.c -lwiredtiger
    "$W/load" "$W/srv/db" 1000000 "$W/keys"
fi
cd "$W"
rm -f r.json runs.log
$B serve --dir "$W/srv" --listen 127.0.0.1:7481 > serve.log 2>&1 &
SP=$!
$B net delay --listen 127.0.0.1:7482 --to 127.0.0.1:7481 --rtt-us 200 > delay.log 2>&1 &
DP=$!
trap 'kill $SP $DP 2>/dev/null; wait $SP $DP 2>/dev/null' EXIT
sleep 1
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
log() { echo "$(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg) | $*" | tee -a runs.log; }
bench() { # label port args...
    local label=$1 port=$2; shift 2
    local t0 line
    t0=$(ticks $SP)
    line=$($B wt bench db --table usertable --keys-file "$W/keys" --remote "127.0.0.1:$port" \
        --ops "$OPS" --warmup 300 --seed "$round" --json "$W/one.json" "$@")
    local cpu_us
    cpu_us=$(awk -v a="$t0" -v b="$(ticks $SP)" -v n="$OPS" \
        'BEGIN {printf "%.1f", (b - a) * 1e6 / 100 / (n + 300 + 50)}')
    python3 - "$label" "$cpu_us" <<'EOF' >> r.json
import json, sys
j = json.load(open("one.json")); j["label"] = sys.argv[1]; j["server_cpu_us"] = float(sys.argv[2])
print(json.dumps(j))
EOF
    log "$label: $line, server CPU ${cpu_us} us/lookup"
}
for round in $(seq "$ROUNDS"); do
    order="pushdown pushdown-root rpc-read"
    [ $((round % 2)) = 0 ] && order="rpc-read pushdown-root pushdown"
    for p in $order; do
        case $p in
        pushdown) bench pushdown 7482 --path pushdown ;;
        pushdown-root) bench pushdown-root 7482 --path pushdown --no-internal-cache ;;
        rpc-read) bench rpc-read 7482 --path rpc-read ;;
        esac
    done
    bench pushdown-noproxy 7481 --path pushdown
done
log "$($B wt leaf-bound srv/db --table usertable --depth 1 --reads 5000 --json leaf.json)"
round=1
log "local xrp --direct: $($B wt bench srv/db --table usertable --keys-file "$W/keys" \
    --path xrp --direct --ops "$OPS" --warmup 300 --seed 1 --json local.json)"
python3 - <<'EOF'
import json, statistics
runs = [json.loads(l) for l in open("r.json")]
leaf = json.load(open("leaf.json"))
local = json.load(open("local.json"))
print(f"device: a leaf ({leaf['mean_leaf_bytes']:.0f} B) at QD1: mean {leaf['qd1_mean_us']:.1f} us,"
      f" p50 {leaf['qd1_p50_us']:.1f}; an internal page: mean {leaf['internal_qd1_mean_us']:.1f} us;"
      f" local O_DIRECT chain from the root (reads and function): mean {local['mean_us']:.1f} us")
for label in ["pushdown", "pushdown-root", "rpc-read", "pushdown-noproxy"]:
    rs = [r for r in runs if r["label"] == label]
    if not rs:
        continue
    m = lambda k: statistics.median(r[k] for r in rs)
    # Like with like: the lookups' mean against the probes' mean RTT and the leaf's mean read,
    # their median against the probes' median and the leaf's median read.
    rtt, rtt_mean = m("rtt_us"), m("rtt_mean_us")
    # The lookup's device reads at QD1: its leaf, and the internal pages the server (or the
    # reader) reads first (pages per lookup - 1).
    internal = (m("pages_per_lookup") - 1) * leaf["internal_qd1_mean_us"]
    bound = rtt_mean + leaf["qd1_mean_us"] + internal
    bound50 = rtt + leaf["qd1_p50_us"] + internal
    print(f"{label}: median of {len(rs)}: mean {m('mean_us'):.1f} us, p50 {m('p50_us'):.1f},"
          f" p99 {m('p99_us'):.1f}; {m('round_trips_per_lookup'):.3f} round trips,"
          f" {m('pages_per_lookup'):.2f} pages per lookup; rtt mean {rtt_mean:.1f} us,"
          f" p50 {rtt:.1f}; bound (rtt + device reads) mean {bound:.1f} us, p50 {bound50:.1f}:"
          f" mean {m('mean_us') / bound:.2f}x, p50 {m('p50_us') / bound50:.2f}x;"
          f" server CPU {m('server_cpu_us'):.1f} us/lookup")
    # Each round against its own probes: a round whose link ran slow is slow in both, so the
    # median of these ratios does not mix one round's lookups with another's RTT.
    per = lambda r: (r["mean_us"] / (r["rtt_mean_us"] + leaf["qd1_mean_us"] + internal))
    ratios = [per(r) for r in rs]
    print(f"{label}: mean / bound per round {', '.join(f'{x:.2f}' for x in ratios)};"
          f" median {statistics.median(ratios):.2f}x")
EOF
