#!/usr/bin/env bash
# RocksDB: storefn's Gets against RocksDB's own (docs/results/rocksdb.md has the figures, this
# script the exact commands). Run from anywhere as root after
# `cargo build --release -p storefn`; databases live under $ROCKS (default /var/tmp/rocks).
#
#   bench/rocksdb.sh setup          build the databases: rocks_tool load (5 M keys, 100 B values,
#                                   4 KiB blocks, no compression, 10 bloom bits, CRC-32C; 555 MB)
#                                   and `storefn ycsb load` (550 k 1 KB records; 545 MB)
#   bench/rocksdb.sh answers        100,000 sampled keys after puts, overwrites and deletes over
#                                   L1..L3, two overlapping L0 files and a WAL tail: every path's
#                                   `rocks multiget` output equals RocksDB's own Get's
#   bench/rocksdb.sh local [DIR]    `storefn rocks bench`, one thread: read, xrp, native (RocksDB
#                                   Get), xrp-batch and native-multiget at 32 keys a call, each
#                                   path and round in its own 48 MiB memory group (data ~11x it)
#   bench/rocksdb.sh ycsb [DIR]     YCSB-C through `storefn ycsb run`: 1 thread, RocksDB's Get
#                                   (batch 1), its MultiGet (batch 32), storefn's batched chains
#                                   (batch 32) and single chains, 5 alternating rounds; then
#                                   16 threads, both stores; 48 MiB each
#   bench/rocksdb.sh remote         pushdown vs rpc-read through the delay proxy (0, 200, 1000 us)
#                                   at client caches of 1%, 10%, 100%; the plot
#   bench/rocksdb.sh zram [local|ycsb]  `local` and `ycsb` (or only the one named) on ext4 over
#                                   /dev/zram0 (the databases copied there); run it as
#                                   `flock /work/zram.lock bench/rocksdb.sh zram`
#
# DIR defaults to $ROCKS; JSON goes to $OUT (default docs/results), suffixed with the device
# (virtio or zram). Every figure is recorded with `uptime` beside it.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)
B=$(realpath "${STOREFN:-target/release/storefn}")
ROCKS=${ROCKS:-/var/tmp/rocks}
OUT=$(realpath "${OUT:-docs/results}")
LIMIT=50331648 # 48 MiB
# glibc keeps up to 8 malloc arenas per core: sixteen RocksDB readers churning its block cache
# fragment them past the budget (rocksdb-native at 16 threads was OOM-killed in 48 MiB on zram).
# RocksDB deployments use jemalloc or cap the arenas; every run here, both stores, caps them.
export MALLOC_ARENA_MAX=2
DEV=${DEV:-virtio}

die() { echo "rocksdb.sh: $*" >&2; exit 1; }
[ -x "$B" ] || die "no $B: cargo build --release -p storefn"
[ "$(id -u)" -eq 0 ] || die "needs root (memory groups, zram)"

setup() {
    mkdir -p "$ROCKS/served"
    cc -O2 -o "$ROCKS/rocks_tool" "$REPO/crates/storefn-rocksdb/tests/support/rocks_tool.c" -lrocksdb
    [ -e "$ROCKS/served/big/CURRENT" ] ||
        "$ROCKS/rocks_tool" load "$ROCKS/served/big" 5000000 100 4096 crc32c
    # The keys sampled: every key written and 5% never written.
    [ -s "$ROCKS/bigkeys" ] ||
        awk 'BEGIN { for (i = 0; i < 5250000; i++) printf "key%08d\n", i }' > "$ROCKS/bigkeys"
    [ -e "$ROCKS/ycsbdb/CURRENT" ] ||
        "$B" ycsb load --store "rocksdb:$ROCKS/ycsbdb" --records 550000
    du -sh "$ROCKS/served/big" "$ROCKS/ycsbdb"
}

answers() {
    local d="$ROCKS/served/answers" k="$ROCKS/answers.keys"
    [ -e "$d/CURRENT" ] || "$ROCKS/rocks_tool" build "$d" 9 150000 4096 no 10 crc32c
    awk 'BEGIN { srand(7); for (i = 0; i < 100000; i++) printf "key%08d\n", int(rand() * 152000) }' > "$k"
    # RocksDB's own answers, as `key<TAB>value` lines for the keys found.
    "$ROCKS/rocks_tool" get "$d" < "$k" | grep -v "	<absent>$" > "$ROCKS/answers.want"
    "$B" serve --dir "$ROCKS/served" --listen 127.0.0.1:7395 > "$ROCKS/serve-answers.log" 2>&1 &
    local sp=$!
    trap "kill $sp 2>/dev/null || true" EXIT
    sleep 1
    for p in read xrp xrp-batch native native-multiget pushdown rpc-read; do
        case $p in
        pushdown | rpc-read) "$B" rocks multiget answers --remote 127.0.0.1:7395 --path $p --keys-file "$k" ;;
        *) "$B" rocks multiget "$d" --path $p --keys-file "$k" ;;
        esac > "$ROCKS/answers.$p" 2> /dev/null
        if cmp -s "$ROCKS/answers.want" "$ROCKS/answers.$p"; then
            echo "$p: $(wc -l < "$ROCKS/answers.$p") of 100000 keys found, every line equal to RocksDB's"
        else
            echo "$p: DIFFERS from RocksDB's answers ($ROCKS/answers.$p)"; kill $sp; exit 1
        fi
    done
    kill $sp
}

local_bench() {
    local dir=${1:-$ROCKS}
    uptime
    "$B" rocks bench "$dir/served/big" --keys-file "$ROCKS/bigkeys" \
        --paths read,xrp,native,xrp-batch,native-multiget --batch 32 --direct \
        --memory-limit $LIMIT --reads 10000 --warmup 5000 --rounds 5 --json \
        > "$OUT/rocksdb-local-$DEV.json"
    uptime
    jq -r '.results[] | [.path, (.gets_per_s | floor), (.rounds_gets_per_s | map(floor) | join("/")),
        .p50_us, .p99_us, .cpu_us_per_get, .found, .gets, .memory_max_usage_bytes] | @tsv' \
        "$OUT/rocksdb-local-$DEV.json"
}

ycsb_bench() {
    local dir=${1:-$ROCKS} f="$OUT/rocksdb-ycsb-$DEV.json"
    rm -f "$f"
    run() { # STORE BATCH THREADS OPS
        "$B" ycsb run --workload c --store "$1:$dir/ycsbdb" --records 550000 --operations "$4" \
            --threads "$3" --batch "$2" --memory-limit $LIMIT --json "$f" | tail -n 1 ||
            echo "ycsb-c $1 threads=$3 batch=$2: FAILED (exit $?; killed by the group?)"
    }
    uptime
    for round in 1 2 3 4 5; do
        if [ $((round % 2)) = 1 ]; then
            order="rocksdb-native:1 rocksdb-native:32 rocksdb:32 rocksdb:1"
        else
            order="rocksdb:1 rocksdb:32 rocksdb-native:32 rocksdb-native:1"
        fi
        for sb in $order; do run "${sb%:*}" "${sb#*:}" 1 60000; done
    done
    for round in 1 2; do
        if [ $round = 1 ]; then order="rocksdb-native rocksdb"; else order="rocksdb rocksdb-native"; fi
        for s in $order; do run "$s" 1 16 120000; done
    done
    uptime
    ycsb_summary "$f"
}

# Per store, read batch and threads: the median run's ops/s (every run's, in run order) and
# the median CPU per operation (the whole process: RocksDB's threads and the refresher too).
ycsb_summary() {
    jq -rs 'group_by([.store, .read_batch, .threads])[]
        | (map(.ops_per_sec) | sort) as $o | (map(.cpu_us_per_op) | sort) as $c
        | [.[0].store, "batch=\(.[0].read_batch)", "threads=\(.[0].threads)",
           ($o[$o | length / 2 | floor] | floor), (map(.ops_per_sec | floor) | join("/")),
           ($c[$c | length / 2 | floor] * 10 | round / 10), (map(.read_p99_us | floor) | join("/"))]
        | @tsv' "$1"
}

remote_bench() {
    local f="$OUT/rocksdb-remote-budget.json"
    "$B" serve --dir "$ROCKS/served" --listen 127.0.0.1:7394 > "$ROCKS/serve.log" 2>&1 &
    local sp=$!
    trap "kill $sp 2>/dev/null || true" EXIT
    sleep 1
    uptime
    "$B" rocks bench big --remote 127.0.0.1:7394 --paths pushdown,rpc-read --rtt-us 0,200,1000 \
        --cache 0.01,0.1,1 --keys-file "$ROCKS/bigkeys" --reads 2000 --warmup 200 --rounds 5 \
        --json > "$f"
    uptime
    # The server's CPU over the whole run (pushdown does its work there).
    echo "server cpu ticks (utime stime): $(awk '{print $14, $15}' /proc/$sp/stat)"
    kill $sp
    "$B" rocks plot "$f" -o "$OUT/rocksdb-rtt.png"
    jq -r '.results[] | [.path, .rtt_us, .cache_fraction, (.gets_per_s | floor), .p99_us,
        .round_trips_per_get, .cache_refreshes, .fallbacks] | @tsv' "$f"
}

zram_bench() { # [local|ycsb]: both steps, or only one
    trap '"$REPO/bench/testbed.sh" down zram || echo "rocksdb.sh: zram teardown failed" >&2' EXIT
    local mnt
    mnt=$("$REPO/bench/testbed.sh" up zram --size 3G | tail -n 1)
    mkdir -p "$mnt/served"
    [ "${1:-}" = ycsb ] || cp -a "$ROCKS/served/big" "$mnt/served/"
    [ "${1:-}" = local ] || cp -a "$ROCKS/ycsbdb" "$mnt/"
    sync
    echo "zram: $(cat /sys/block/zram0/comp_algorithm) $(cat /sys/block/zram0/mm_stat)"
    [ "${1:-}" = ycsb ] || DEV=zram local_bench "$mnt"
    [ "${1:-}" = local ] || DEV=zram ycsb_bench "$mnt"
}

case ${1:-} in
setup) setup ;;
answers) answers ;;
local) local_bench "${2:-}" ;;
ycsb) ycsb_bench "${2:-}" ;;
remote) remote_bench ;;
zram) zram_bench "${2:-}" ;;
*) die "usage: $0 setup | answers | local [DIR] | ycsb [DIR] | remote | zram [local|ycsb]" ;;
esac
