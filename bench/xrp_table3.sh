#!/usr/bin/env bash
# Reproduces the shapes of XRP's Table 3 (mean lookup latency by index I/Os) and Fig. 6
# (throughput vs threads) with BPF-KV on this machine (issue 5 item 9):
#   1. for layers 1..5 (--layers6: also 6) create bench/out/db/L<n> if absent, run
#      `storefn kv bench` at 1 thread for every path;
#   2. at 5 layers, run every path at threads 1 2 4 8 16;
#   3. JSON (one object per run) -> bench/out/table3.json, bench/out/fig6.json;
#      figure -> bench/out/xrp_table3.png (storefn plot); a latency table on stdout.
# Options:
#   --requests N     lookups per run (default 20000; XRP used millions: raise for stable p99.9)
#   --paths "a b"    paths to run (default: read uring xrp xrp-batch device)
#   --layers6        add 6 layers (a 2.2 GiB database; slow to create)
#   --zram           run on ext4 over /dev/zram0 (BRIEF §5's fast device) via bench/testbed.sh;
#                    uses 4096 B nodes (zram has 4 KiB logical blocks); always torn down on exit
#   --node-size B    512 (BPF-KV) or 4096 (default 512; 4096 with --zram)
#   --out DIR        output directory (default bench/out)
#   --bin PATH       storefn binary (default: target/release/storefn, built if missing)
# A path the binary does not support fails the script with the binary's error message.
set -euo pipefail
cd "$(dirname "$0")/.."

REQUESTS=20000
PATHS="read uring xrp xrp-batch device"
MAX_LAYERS=5
ZRAM=0
NODE_SIZE=""
OUT=bench/out
BIN=target/release/storefn
# Thread counts of the Fig. 6 sweep; 16 threads on 2 vCPUs tests for polling collapse.
THREADS="1 2 4 8 16"

die() { echo "xrp_table3: $*" >&2; exit 1; }

while [ $# -gt 0 ]; do
    case $1 in
    --requests) REQUESTS=${2:?--requests needs a value}; shift 2 ;;
    --paths) PATHS=${2:?--paths needs a value}; shift 2 ;;
    --layers6) MAX_LAYERS=6; shift ;;
    --zram) ZRAM=1; shift ;;
    --node-size) NODE_SIZE=${2:?--node-size needs a value}; shift 2 ;;
    --out) OUT=${2:?--out needs a value}; shift 2 ;;
    --bin) BIN=${2:?--bin needs a value}; shift 2 ;;
    -h|--help) sed -n '2,21p' "$0"; exit 0 ;;
    *) die "unknown option $1 (see --help)" ;;
    esac
done
[[ $REQUESTS =~ ^[0-9]+$ ]] && [ "$REQUESTS" -gt 0 ] || die "--requests must be a positive integer"

if [ ! -x "$BIN" ]; then
    [ "$BIN" = target/release/storefn ] || die "$BIN: not an executable"
    cargo build --release -p storefn
fi

DB_DIR=$OUT/db
if [ "$ZRAM" = 1 ]; then
    [ "$(id -u)" -eq 0 ] || die "--zram needs root"
    trap 'bench/testbed.sh down zram || echo "xrp_table3: zram teardown failed" >&2' EXIT
    MNT=$(bench/testbed.sh up zram | tail -n 1)
    DB_DIR=$MNT/db
    NODE_SIZE=${NODE_SIZE:-4096}
fi
NODE_SIZE=${NODE_SIZE:-512}
mkdir -p "$OUT" "$DB_DIR"
TABLE_JSON=$OUT/table3.json
FIG_JSON=$OUT/fig6.json
: > "$TABLE_JSON"
: > "$FIG_JSON"

db_for() { echo "$DB_DIR/L$1-n$NODE_SIZE"; }

# Creates the database unless a complete one (tree + sidecar) is already there.
ensure_db() {
    local db; db=$(db_for "$1")
    if [ -f "$db" ] && [ -f "$db.meta" ]; then
        return
    fi
    echo "== creating $db ($1 layers, $NODE_SIZE B nodes)" >&2
    "$BIN" kv create "$db" --layers "$1" --node-size "$NODE_SIZE"
}

# Runs one benchmark; a failure (e.g. a path this binary does not support) stops the script.
bench() {
    local layers=$1 path=$2 threads=$3 json=$4
    echo "== layers $layers path $path threads $threads" >&2
    if ! "$BIN" kv bench "$(db_for "$layers")" --path "$path" --threads "$threads" \
        --requests "$REQUESTS" --json "$json" >&2; then
        die "storefn kv bench --path $path failed (layers $layers, threads $threads): see above"
    fi
}

for layers in $(seq 1 "$MAX_LAYERS"); do
    ensure_db "$layers"
    for path in $PATHS; do
        bench "$layers" "$path" 1 "$TABLE_JSON"
    done
done
for threads in $THREADS; do
    for path in $PATHS; do
        bench 5 "$path" "$threads" "$FIG_JSON"
    done
done

"$BIN" plot "$TABLE_JSON" "$FIG_JSON" -o "$OUT/xrp_table3.png"

# Table 3's shape: mean latency (us) by layers, one row per path.
python3 - "$TABLE_JSON" "$MAX_LAYERS" <<'PY' || echo "xrp_table3: (python3 missing: table skipped)" >&2
import json, sys
runs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
layers = range(1, int(sys.argv[2]) + 1)
print("mean latency (us), 1 thread  " + " ".join(f"{l:>8}" for l in layers))
for p in dict.fromkeys(r["path"] for r in runs):
    row = {r["layers"]: r["mean_us"] for r in runs if r["path"] == p}
    print(f"{p:<28}" + " ".join(f"{row.get(l, float('nan')):8.1f}" for l in layers))
PY
echo "xrp_table3: JSON in $TABLE_JSON $FIG_JSON, figure $OUT/xrp_table3.png" >&2
