#!/usr/bin/env bash
# Raw mode (metadata digest) vs the file path, issue 6 item 6. One run, single thread, on two
# testbeds (bench/testbed.sh): ext4 on /dev/zram0 (the fast device) and ext4 on a loop device
# over an image on the virtio disk. Per testbed, ROUNDS times (the machine is noisy: compare
# within one run):
#   storefn io bench --io file|raw      chains over random pointers (latency and CPU per hop),
#                                       the two modes alternating
#   storefn kv bench --path P --io file,raw --rounds KV_ROUNDS   5-layer 512 B-node BPF-KV
#                                       database (~2.3 GB), P = xrp (the goal) and read (one
#                                       pread per hop: the user-space bound), both modes
#                                       interleaved in one process over the same keys
# Writes bench/out/raw_vs_file-<stamp>/{io-*.json,kv-*.jsonl,summary.json} and prints the
# summary. ALWAYS tears the testbeds down (trap), even on failure or Ctrl-C. Needs root.
#
# Environment: STOREFN (binary; default target/release/storefn, built if missing),
# ROUNDS (3), KV_ROUNDS (20), LAYERS (5), IO_REQUESTS (3000), KV_REQUESTS (40000 on zram,
# KV_REQUESTS_LOOP 4000 on the loop device), TESTBEDS ("zram loop"), SIZE (testbed size, 4G),
# CPU (pin the benchmarks to this CPU with taskset; default 1, "" = no pinning).
set -euo pipefail
cd "$(dirname "$0")/.."

BIN=${STOREFN:-target/release/storefn}
ROUNDS=${ROUNDS:-3}
KV_ROUNDS=${KV_ROUNDS:-20}
CPU=${CPU-1}
LAYERS=${LAYERS:-5}
IO_REQUESTS=${IO_REQUESTS:-3000}
KV_REQUESTS=${KV_REQUESTS:-40000}
KV_REQUESTS_LOOP=${KV_REQUESTS_LOOP:-4000}
TESTBEDS=${TESTBEDS:-"zram loop"}
SIZE=${SIZE:-4G}
OUT=bench/out/raw_vs_file-$(date -u +%Y%m%dT%H%M%SZ)

say() { echo "raw_vs_file: $*" >&2; }
pin() { if [ -n "$CPU" ]; then taskset -c "$CPU" "$@"; else "$@"; fi; }

[ "$(id -u)" -eq 0 ] || { say "needs root (testbeds)"; exit 1; }
if [ ! -x "$BIN" ]; then
    say "building $BIN"
    cargo build --release -p storefn
fi

teardown() {
    local rc=$?
    bench/testbed.sh down zram || true
    bench/testbed.sh down loop || true
    exit $rc
}
trap teardown EXIT
trap 'exit 130' INT TERM

mkdir -p "$OUT"
for tb in $TESTBEDS; do
    MNT=$(bench/testbed.sh up "$tb" --size "$SIZE")
    say "$tb: testbed on $MNT"
    kv_requests=$KV_REQUESTS
    [ "$tb" = loop ] && kv_requests=$KV_REQUESTS_LOOP
    say "$tb: creating a $LAYERS-layer database"
    "$BIN" kv create "$MNT/db" --layers "$LAYERS" >&2
    sync
    for r in $(seq "$ROUNDS"); do
        for io in file raw; do
            say "$tb round $r: io bench --io $io"
            pin "$BIN" io bench --io "$io" --file "$MNT/ptr" --size-mb 256 --depth 5 \
                --requests "$IO_REQUESTS" --warmup 200 --chains 32 --seed 1 \
                --json "$OUT/io-$tb-$io-$r.json" | grep '^io bench' >&2
        done
        for path in xrp read; do
            say "$tb round $r: kv bench --path $path --io file,raw"
            pin "$BIN" kv bench "$MNT/db" --path "$path" --io file,raw --rounds "$KV_ROUNDS" \
                --threads 1 --requests "$kv_requests" --warmup 500 --seed "$r" \
                --json "$OUT/kv-$tb-$path.jsonl" | grep '^compare' >&2
        done
    done
    rm -f "$MNT/ptr" "$MNT/db" "$MNT/db.meta"
    bench/testbed.sh down "$tb"
done

python3 - "$OUT" $TESTBEDS <<'EOF'
import json, statistics, sys, glob
out, beds = sys.argv[1], sys.argv[2:]
summary = {"bench": "bench/raw_vs_file.sh", "testbeds": {}}
def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None
for tb in beds:
    res = {"io_bench": {}, "kv": {}}
    for io in ("file", "raw"):
        runs = [json.load(open(p)) for p in sorted(glob.glob(f"{out}/io-{tb}-{io}-*.json"))]
        chain = [next(c for c in r["cases"] if c["case"] == "c_one_chain") for r in runs]
        res["io_bench"][io] = {
            "device": runs[0]["device"] if runs else None,
            "mode_used": sorted({r["mode"] for r in runs}),
            "chain_hop_mean_us": med([c["hop_latency_us"]["mean"] for c in chain]),
            "chain_hop_p50_us": med([c["hop_latency_us"]["p50"] for c in chain]),
            "chain_cpu_us_per_hop": med([c["cpu_us_per_hop"] for c in chain]),
        }
    f, r = res["io_bench"]["file"], res["io_bench"]["raw"]
    if f["chain_hop_mean_us"] and r["chain_hop_mean_us"]:
        res["io_bench"]["raw_lower_by_pct"] = 100.0 * (1 - r["chain_hop_mean_us"] / f["chain_hop_mean_us"])
    for path in ("xrp", "read"):
        runs = [json.loads(l) for l in open(f"{out}/kv-{tb}-{path}.jsonl")]
        res["kv"][path] = {
            "runs": len(runs),
            "rounds_per_run": runs[0]["rounds"] if runs else None,
            "raw_in_use": all(x["raw_in_use"] for x in runs),
            "file_mean_us": med([x["file"]["mean_us"] for x in runs]),
            "raw_mean_us": med([x["raw"]["mean_us"] for x in runs]),
            "file_p99_us": med([x["file"]["p99_us"] for x in runs]),
            "raw_p99_us": med([x["raw"]["p99_us"] for x in runs]),
            "file_cpu_us_per_op": med([x["file"]["cpu_us_per_op"] for x in runs]),
            "raw_cpu_us_per_op": med([x["raw"]["cpu_us_per_op"] for x in runs]),
            "raw_mean_lower_pct_per_run": [round(x["raw_mean_lower_pct"], 2) for x in runs],
            "raw_mean_lower_pct": med([x["raw_mean_lower_pct"] for x in runs]),
            "median_round_lower_pct": med([x["median_round_lower_pct"] for x in runs]),
            "raw_cpu_lower_pct": med([x["raw_cpu_lower_pct"] for x in runs]),
            "fallbacks": sum(x["file"]["fallbacks"] + x["raw"]["fallbacks"] for x in runs),
        }
    summary["testbeds"][tb] = res
if "zram" in summary["testbeds"]:
    g = summary["testbeds"]["zram"]["kv"]["xrp"]["raw_mean_lower_pct"]
    summary["goal_zram_ext4_xrp_raw_mean_at_least_15pct_lower"] = g is not None and g >= 15.0
json.dump(summary, open(f"{out}/summary.json", "w"), indent=2)
print(json.dumps(summary, indent=2))
EOF
say "results in $OUT"
