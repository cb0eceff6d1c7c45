#!/usr/bin/env bash
# YCSB on WiredTiger's own files: WiredTiger alone (`wiredtiger-native`) vs reads by the storefn
# function (`wiredtiger`), same database, same 64 MiB cgroup v1 budget (page cache counted),
# 700,000 records of 10 x 100 B (a 744 MB table: 11x the budget), the page cache of the database
# dropped before each run, rounds in alternating order (docs/results/ycsb.md).
#
#   bench/wiredtiger_ycsb.sh vda                                  database on the virtio disk
#   flock /work/zram.lock bench/wiredtiger_ycsb.sh zram           database on /dev/zram0 (ext4)
#
# Env: STOREFN (default target/release/storefn), WTY (vda work dir, default /var/tmp/wty),
# ROUNDS (default 2), OPS (C's operations, default 100000), OPS_B (B's, default 30000),
# BATCH (the function store's --batch, default 512). Needs root (cgroups, drop_caches, zram).
# Writes OUT (default $WTY/out-<dev>): ycsb.json (one line per run), runs.log (each run's
# summary after the UTC time and load average), leaf-bound.json (the device's own bound for
# the table's leaves); then prints the medians and the ratios the goals name.
set -euo pipefail
dev=${1:-vda}
cd "$(dirname "$0")/.."
B=$(realpath "${STOREFN:-target/release/storefn}")
ROUNDS=${ROUNDS:-2}; OPS=${OPS:-100000}; OPS_B=${OPS_B:-30000}; BATCH=${BATCH:-512}
RECORDS=700000; BUDGET=67108864
case $dev in
vda) base=${WTY:-/var/tmp/wty} ;;
zram)
    base=$(bench/testbed.sh up zram --size 4G)
    trap 'bench/testbed.sh down zram' EXIT
    ;;
*) echo "usage: $0 vda|zram" >&2; exit 2 ;;
esac
db=$base/db
out=${OUT:-${WTY:-/var/tmp/wty}/out-$dev}
mkdir -p "$out"
rm -f "$out/ycsb.json" "$out/runs.log"
[ -f "$db/usertable.wt" ] || $B ycsb load --store "wiredtiger:$db:usertable" --records $RECORDS
# The block device under the database (it exists once loaded): its read counters bracket each run.
blk=$(basename "$(df --output=source "$base" | tail -1)")
blk=${blk%%[0-9]*}; [ "$dev" = zram ] && blk=zram0

log() { echo "$(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg) | $*" | tee -a "$out/runs.log"; }
# Reads completed and sectors read on the device so far (/sys/block/DEV/stat fields 1 and 3).
dstat() { awk '{print $1, $3}' "/sys/block/$blk/stat"; }
run() { # workload ops threads store [args...]
    local w=$1 n=$2 t=$3 s=$4; shift 4
    local d0 line d1
    d0=$(dstat)
    # A run that fails (the memory group's OOM killer: WiredTiger's cache plus 16 sessions'
    # overshoot) is logged and the bench goes on.
    line=$($B ycsb run --workload "$w" --store "$s:$db:usertable" --records $RECORDS \
        --memory-limit $BUDGET --seed "$round" --operations "$n" --threads "$t" \
        --json "$out/ycsb.json" "$@" 2>&1) || line="FAILED (exit $?): $w $t $s $*: $line"
    d1=$(dstat)
    # The device's reads during the run (other processes' too: an upper bound).
    log "$line | $blk: $(echo "$d0 $d1" | awk '{printf "%d reads, %.0f MiB", $3-$1, ($4-$2)/2048}')"
}
log "$($B wt leaf-bound "$db" --table usertable --depth 64 --reads 20000 \
    --json "$out/leaf-bound.json")"
cases=(
    "c $OPS 1 wiredtiger-native"
    "c $OPS 1 wiredtiger --batch $BATCH"
    "c $OPS 16 wiredtiger-native"
    "b $OPS_B 1 wiredtiger-native"
    "b $OPS_B 1 wiredtiger --batch 32"
    "b $OPS_B 1 wiredtiger --batch 32 --batch-updates"
)
for round in $(seq "$ROUNDS"); do
    order=$(seq 0 $((${#cases[@]} - 1)))
    [ $((round % 2)) = 0 ] && order=$(echo "$order" | tac)
    for i in $order; do
        # shellcheck disable=SC2086
        run ${cases[$i]}
    done
done

python3 - "$out" <<'EOF'
import json, statistics, sys
out = sys.argv[1]
runs = [json.loads(l) for l in open(f"{out}/ycsb.json")]
lb = json.load(open(f"{out}/leaf-bound.json"))
def key(r):
    return (r["workload"], r["store"], r["threads"], r["batch"], r["batch_updates"])
groups = {}
for r in runs:
    groups.setdefault(key(r), []).append(r)
med = {}
print(f"device bound for the table's leaves: {lb['leaves']} leaves of {lb['mean_leaf_bytes']:.0f} B,"
      f" QD1 mean {lb['qd1_mean_us']:.1f} us (p50 {lb['qd1_p50_us']:.1f}),"
      f" QD{lb['depth']} {lb['qdn_reads_per_sec']:.0f} reads/s ({lb['qdn_mib_per_sec']:.0f} MiB/s)")
for k, rs in sorted(groups.items()):
    ops = statistics.median(r["ops_per_sec"] for r in rs)
    cpu = statistics.median(r["cpu_us_per_op"] for r in rs)
    med[k] = (ops, cpu)
    hits = [r.get("leaf_hits", 0) / max(1, r.get("leaf_hits", 0) + r.get("leaf_misses", 0)) for r in rs]
    each = ", ".join("%.0f" % r["ops_per_sec"] for r in rs)
    # Leaves read per read the function served (warm-up included, as the counters are).
    reads = [r.get("leaf_misses", 0) / max(1, r.get("function_reads", 0)) for r in rs]
    print(f"{k}: median of {len(rs)}: {ops:.0f} ops/s, {cpu:.1f} us CPU/op (runs: {each})"
          + (f", leaf hit rate {statistics.median(hits):.2f}, leaf reads per read"
             f" {statistics.median(reads):.2f}" if rs[0]["store"] == "wiredtiger" else ""))
def get(w, s, t, up=False):
    return next((v for k, v in med.items() if k[0] == w and k[1] == s and k[2] == t and k[4] == up), None)
nc, fc, n16 = get("c", "wiredtiger-native", 1), get("c", "wiredtiger", 1), get("c", "wiredtiger-native", 16)
nb, fb, fbu = get("b", "wiredtiger-native", 1), get("b", "wiredtiger", 1), get("b", "wiredtiger", 1, True)
if nc and fc:
    print(f"YCSB-C 1 thread: function store {fc[0] / nc[0]:.2f}x WiredTiger's throughput (goal >= 2),"
          f" {fc[1] / nc[1]:.2f}x its CPU per op (goal <= 0.5)")
if n16 and fc:
    print(f"YCSB-C: function store at 1 thread {fc[0] / n16[0]:.2f}x WiredTiger at 16 threads (goal >= 1)")
if nb and fb:
    print(f"YCSB-B 1 thread: {fb[0] / nb[0]:.2f}x (goal >= 1.5)"
          + (f"; with --batch-updates {fbu[0] / nb[0]:.2f}x" if fbu else ""))
EOF
