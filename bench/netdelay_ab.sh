#!/usr/bin/env bash
# Before/after of the delay proxy (docs/results/wiredtiger.md): one server and one client (NEW),
# two 200 us proxies in front of the server, OLD's and NEW's, and pushdown lookups through each
# in turn, ROUNDS times. What differs between the lines is only the proxy.
#
#   bench/netdelay_ab.sh OLD_STOREFN NEW_STOREFN
#
# Env: WTB (default /var/tmp/wtb, must hold the database built by bench/wiredtiger_remote.sh),
# ROUNDS (default 3), OPS (default 3000).
set -euo pipefail
OLD=$(realpath "$1"); NEW=$(realpath "$2")
W=${WTB:-/var/tmp/wtb}; ROUNDS=${ROUNDS:-3}; OPS=${OPS:-3000}
cd "$W"
$NEW serve --dir "$W/srv" --listen 127.0.0.1:7491 > serve-ab.log 2>&1 & SP=$!
$OLD net delay --listen 127.0.0.1:7492 --to 127.0.0.1:7491 --rtt-us 200 > /dev/null 2>&1 & PA=$!
$NEW net delay --listen 127.0.0.1:7493 --to 127.0.0.1:7491 --rtt-us 200 > /dev/null 2>&1 & PB=$!
trap 'kill $SP $PA $PB 2>/dev/null; wait $SP $PA $PB 2>/dev/null' EXIT
sleep 1
for round in $(seq "$ROUNDS"); do
    for port in 7492 7493; do
        label=$([ $port = 7492 ] && echo old || echo new)
        echo "$(date -u +%T) load $(cut -d' ' -f1 /proc/loadavg) proxy $label: $($NEW wt bench db \
            --table usertable --keys-file "$W/keys" --remote "127.0.0.1:$port" --path pushdown \
            --ops "$OPS" --warmup 200 --seed "$round" --json "$W/ab.json")"
    done
done
