#!/usr/bin/env bash
# Caches on every path (issue 11, item 11): the read path and xrp-batch with the same block LRU
# under zipf 0.99 on a 5-layer BPF-KV database with 2 cached levels. ROUNDS rounds, the two
# paths alternating within each round (the VM drifts over seconds: compare within one run);
# prints each run's summary line and the medians of I/Os per lookup and throughput.
#
# Environment: STOREFN (binary; default target/release/storefn), DB (a 5-layer database;
# default /var/tmp/storefn-kv-cache/db5, created if missing and KEEP_DB unset -> removed at the
# end), ROUNDS (3), REQUESTS (200000), WARMUP (100000), CACHE_BYTES (67108864), BATCH (32).
set -euo pipefail
cd "$(dirname "$0")/.."

BIN=${STOREFN:-target/release/storefn}
ROUNDS=${ROUNDS:-3}
REQUESTS=${REQUESTS:-200000}
WARMUP=${WARMUP:-100000}
CACHE_BYTES=${CACHE_BYTES:-67108864}
BATCH=${BATCH:-32}
DB=${DB:-/var/tmp/storefn-kv-cache/db5}
OUT=bench/out/kv_cache-$(date -u +%Y%m%dT%H%M%SZ)
mkdir -p "$OUT"

made=""
cleanup() { if [[ -n "$made" && -z "${KEEP_DB:-}" ]]; then rm -f "$DB" "$DB.meta" "$DB.wal"; fi; }
trap cleanup EXIT
if [[ ! -f "$DB" ]]; then
    mkdir -p "$(dirname "$DB")"
    "$BIN" kv create "$DB" --layers 5
    made=1
fi

for r in $(seq 1 "$ROUNDS"); do
    for path in read xrp-batch; do
        extra=()
        [[ $path == xrp-batch ]] && extra=(--batch "$BATCH")
        "$BIN" kv bench "$DB" --path "$path" "${extra[@]}" --cache-levels 2 \
            --cache-bytes "$CACHE_BYTES" --dist zipf:0.99 --requests "$REQUESTS" \
            --warmup "$WARMUP" --seed "$r" --json "$OUT/runs.jsonl" | grep '^summary'
    done
done
python3 - "$OUT/runs.jsonl" <<'PY'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
med = lambda p, k: statistics.median(r[k] for r in runs if r["path"] == p)
for k in ("ios_per_op", "ops_per_sec", "mean_us", "cpu_us_per_op"):
    print(f"median {k}: read {med('read', k):.3f}  xrp-batch {med('xrp-batch', k):.3f}")
ri, xi = med("read", "ios_per_op"), med("xrp-batch", "ios_per_op")
print(f"xrp-batch I/Os per lookup {100 * (xi - ri) / ri:+.1f}% vs read; "
      f"throughput x{med('xrp-batch', 'ops_per_sec') / med('read', 'ops_per_sec'):.2f}")
PY
