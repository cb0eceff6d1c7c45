#!/usr/bin/env bash
# Raw mode (metadata digest) vs the file path, issue 6 item 6. One run, single thread, on two
# testbeds (bench/testbed.sh): ext4 on /dev/zram0 (the fast device) and ext4 on a loop device
# over an image on the virtio disk. Per testbed, alternating --io file / --io raw ROUNDS times
# (the machine is noisy: compare within one run):
#   storefn io bench --io file|raw      chains over random pointers (latency and CPU per hop)
#   storefn kv bench --path xrp --io file|raw   5-layer 512 B-node BPF-KV database (~2.3 GB)
# Writes bench/out/raw_vs_file-<stamp>/{io-*.json,kv.jsonl,summary.json} and prints the
# summary. ALWAYS tears the testbeds down (trap), even on failure or Ctrl-C. Needs root.
#
# Environment: STOREFN (binary; default target/release/storefn, built if missing),
# ROUNDS (3), LAYERS (5), IO_REQUESTS (3000), KV_REQUESTS (20000 on zram, KV_REQUESTS_LOOP
# 3000 on the loop device), TESTBEDS ("zram loop"), SIZE (testbed size, 4G).
set -euo pipefail
cd "$(dirname "$0")/.."

BIN=${STOREFN:-target/release/storefn}
ROUNDS=${ROUNDS:-3}
LAYERS=${LAYERS:-5}
IO_REQUESTS=${IO_REQUESTS:-3000}
KV_REQUESTS=${KV_REQUESTS:-20000}
KV_REQUESTS_LOOP=${KV_REQUESTS_LOOP:-3000}
TESTBEDS=${TESTBEDS:-"zram loop"}
SIZE=${SIZE:-4G}
OUT=bench/out/raw_vs_file-$(date -u +%Y%m%dT%H%M%SZ)

say() { echo "raw_vs_file: $*" >&2; }

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
            "$BIN" io bench --io "$io" --file "$MNT/ptr" --size-mb 256 --depth 5 \
                --requests "$IO_REQUESTS" --warmup 200 --chains 32 --seed 1 \
                --json "$OUT/io-$tb-$io-$r.json" | grep '^io bench' >&2
            say "$tb round $r: kv bench --path xrp --io $io"
            "$BIN" kv bench "$MNT/db" --path xrp --io "$io" --threads 1 \
                --requests "$kv_requests" --warmup 500 --seed "$r" \
                --json "$OUT/kv-$tb-$io.jsonl" | grep '^summary' >&2
        done
    done
    rm -f "$MNT/ptr" "$MNT/db" "$MNT/db.meta"
    bench/testbed.sh down "$tb"
done

python3 - "$OUT" $TESTBEDS <<'EOF'
import json, statistics, sys, glob, os
out, beds = sys.argv[1], sys.argv[2:]
summary = {"bench": "bench/raw_vs_file.sh", "testbeds": {}}
def med(xs):
    return statistics.median(xs) if xs else None
for tb in beds:
    res = {}
    for io in ("file", "raw"):
        runs = [json.load(open(p)) for p in sorted(glob.glob(f"{out}/io-{tb}-{io}-*.json"))]
        chain = [next(c for c in r["cases"] if c["case"] == "c_one_chain") for r in runs]
        kv = [json.loads(l) for p in glob.glob(f"{out}/kv-{tb}-{io}.jsonl") for l in open(p)]
        res[io] = {
            "device": runs[0]["device"] if runs else None,
            "mode_used": sorted({r["mode"] for r in runs}),
            "io_chain_hop_mean_us": med([c["hop_latency_us"]["mean"] for c in chain]),
            "io_chain_hop_p50_us": med([c["hop_latency_us"]["p50"] for c in chain]),
            "io_chain_cpu_us_per_hop": med([c["cpu_us_per_hop"] for c in chain]),
            "kv_xrp_mean_us": med([k["mean_us"] for k in kv]),
            "kv_xrp_p50_us": med([k["p50_us"] for k in kv]),
            "kv_xrp_p99_us": med([k["p99_us"] for k in kv]),
            "kv_xrp_cpu_us_per_op": med([k["cpu_us_per_op"] for k in kv]),
            "kv_xrp_device_ios_per_op": med([k.get("device_ios_per_op", 0) for k in kv]),
            "kv_fallbacks": sum(k["fallbacks"] for k in kv),
            "rounds": len(runs),
        }
    f, r = res["file"], res["raw"]
    def gain(key):
        if f[key] and r[key]:
            return 100.0 * (f[key] - r[key]) / f[key]
        return None
    res["raw_lower_by_pct"] = {
        "io_chain_hop_mean": gain("io_chain_hop_mean_us"),
        "kv_xrp_mean": gain("kv_xrp_mean_us"),
        "kv_xrp_cpu_per_op": gain("kv_xrp_cpu_us_per_op"),
    }
    summary["testbeds"][tb] = res
if "zram" in summary["testbeds"]:
    g = summary["testbeds"]["zram"]["raw_lower_by_pct"]["kv_xrp_mean"]
    summary["goal_zram_ext4_xrp_raw_mean_at_least_15pct_lower"] = g is not None and g >= 15.0
json.dump(summary, open(f"{out}/summary.json", "w"), indent=2)
print(json.dumps(summary, indent=2))
EOF
say "results in $OUT"
