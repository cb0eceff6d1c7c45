#!/usr/bin/env bash
# Before/after of remote pushdown from the leaf (docs/results/wiredtiger.md), interleaved: two
# storefn binaries, OLD and NEW, each with its own `storefn serve` and 200 us delay proxy over the
# same database (built by bench/wiredtiger_remote.sh), each client talking to its own server
# (the client ships the function), ROUNDS rounds in alternating order, through the proxy and
# straight to the server; medians of rounds, the server's CPU per lookup from /proc. The bound's
# device part: `storefn wt leaf-bound DIR --table usertable --depth 1` (run separately).
#
#   bench/wiredtiger_remote_ab.sh OLD_STOREFN NEW_STOREFN
#
# Env: WTB (default /var/tmp/wtb, must hold the database), ROUNDS (default 3), OPS (default 3000).
set -euo pipefail
OLD=$(realpath "$1") NEW=$(realpath "$2"); W=${WTB:-/var/tmp/wtb}; ROUNDS=${ROUNDS:-3}
OPS=${OPS:-3000}
[ -f "$W/srv/db/usertable.wt" ] || { echo "no database in $W: run bench/wiredtiger_remote.sh first" >&2; exit 1; }
mkdir -p "$W/ab" && cd "$W/ab"
pids=()
start() { # bin port
    "$1" serve --dir "$W/srv" --listen 127.0.0.1:$2 > serve.$2.log 2>&1 & pids+=($!); echo $! > srv.$2
    "$1" net delay --listen 127.0.0.1:$(($2+1)) --to 127.0.0.1:$2 --rtt-us 200 > delay.$2.log 2>&1 & pids+=($!)
}
trap 'kill ${pids[@]} 2>/dev/null; wait 2>/dev/null' EXIT
start "$OLD" 7601; start "$NEW" 7611; sleep 1
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
run() { # label bin port
    local sp; sp=$(cat srv.$(( $3 / 10 * 10 + 1 )))
    local t0; t0=$(ticks $sp)
    local line; line=$("$2" wt bench db --table usertable --keys-file "$W/keys" --remote 127.0.0.1:$3 \
        --path pushdown --ops "$OPS" --warmup 300 --seed "$round" --json one.json)
    local cpu; cpu=$(awk -v a="$t0" -v b="$(ticks $sp)" -v n="$OPS" 'BEGIN {printf "%.1f", (b - a) * 1e6 / 100 / (n + 300 + 50)}')
    python3 -c "import json,sys; j=json.load(open('one.json')); j['label']=sys.argv[1]; j['server_cpu_us']=float(sys.argv[2]); print(json.dumps(j))" "$1" "$cpu" >> r.json
    echo "$(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg) | $1: $line, server CPU $cpu us/lookup"
}
rm -f r.json
for round in $(seq "$ROUNDS"); do
    if [ $((round % 2)) = 1 ]; then
        run old "$OLD" 7602; run new "$NEW" 7612; run old-noproxy "$OLD" 7601; run new-noproxy "$NEW" 7611
    else
        run new "$NEW" 7612; run old "$OLD" 7602; run new-noproxy "$NEW" 7611; run old-noproxy "$OLD" 7601
    fi
done
python3 - <<'PY'
import json, statistics
runs = [json.loads(l) for l in open("r.json")]
for label in ["old", "new", "old-noproxy", "new-noproxy"]:
    rs = [r for r in runs if r["label"] == label]
    m = lambda k: statistics.median(r[k] for r in rs)
    print(f"{label}: mean {m('mean_us'):.1f} p50 {m('p50_us'):.1f} p99 {m('p99_us'):.1f} rtt {m('rtt_us'):.1f} server CPU {m('server_cpu_us'):.1f} us/lookup (median of {len(rs)})")
PY
