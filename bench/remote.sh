#!/usr/bin/env bash
# Remote lookups, issue 12 item 10. One run on one device: a BPF-KV database of LAYERS levels
# in DIR, `storefn serve` on 127.0.0.1 (1 thread), then
#   local:  kv bench --path xrp, xrp-batch (--batch 32)        the same file, no network
#   remote: kv bench --remote --path rpc-read                  one READ per level + value
#           kv bench --remote --path pushdown --batch 1         one XRP round trip per lookup
#           kv bench --remote --path pushdown --batch 32        32 lookups per frame (RTT 0 only)
# RTT 0 connects to the server directly; every other RTT in RTTS goes through the delay proxy
# (`storefn net delay --rtt-us R`) in front of the server. Appends every run's JSON to
# OUT/remote.jsonl (remote runs carry rtt_us as measured through the path), prints the summary
# lines and draws OUT/remote-rtt.png (`storefn plot --rtt`: latency vs RTT, bound drawn). The
# server and the proxy are always stopped (trap). Loopback only.
#
# Environment: STOREFN (binary; default target/release/storefn), DIR (default
# /var/tmp/storefn-remote-bench; the database is kept between runs), LAYERS (5),
# REQUESTS (20000; RTT_REQUESTS for runs through the proxy, default 2000),
# RTTS ("0 50 200 1000"), OUT (bench/out/remote-<stamp>).
set -euo pipefail
cd "$(dirname "$0")/.."

BIN=${STOREFN:-target/release/storefn}
DIR=${DIR:-/var/tmp/storefn-remote-bench}
LAYERS=${LAYERS:-5}
REQUESTS=${REQUESTS:-20000}
RTT_REQUESTS=${RTT_REQUESTS:-2000}
RTTS=${RTTS:-0 50 200 1000}
OUT=${OUT:-bench/out/remote-$(date -u +%Y%m%dT%H%M%SZ)}
[ -x "$BIN" ] || cargo build --release -p storefn
mkdir -p "$DIR" "$OUT"
DB=db$LAYERS
[ -f "$DIR/$DB.meta" ] || "$BIN" kv create "$DIR/$DB" --layers "$LAYERS"

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
ADDR=127.0.0.1:$(free_port)
"$BIN" serve --dir "$DIR" --listen "$ADDR" --threads 1 2>"$OUT/serve.log" &
SERVER=$!
PROXY=
trap 'kill -TERM $SERVER $PROXY 2>/dev/null; wait 2>/dev/null || true' EXIT
for _ in $(seq 50); do grep -q "listening on" "$OUT/serve.log" && break; sleep 0.1; done

J=$OUT/remote.jsonl
run() { echo "== $*"; "$BIN" kv bench "$@" --json "$J" | grep -E '^(summary|remote) '; }
run "$DIR/$DB" --path xrp --requests "$REQUESTS"
run "$DIR/$DB" --path xrp-batch --batch 32 --requests "$REQUESTS"
for RTT in $RTTS; do
    REMOTE=$ADDR
    N=$REQUESTS
    if [ "$RTT" != 0 ]; then
        P=127.0.0.1:$(free_port)
        "$BIN" net delay --listen "$P" --to "$ADDR" --rtt-us "$RTT" >"$OUT/proxy-$RTT.log" 2>&1 &
        PROXY=$!
        for _ in $(seq 50); do grep -q "listening on" "$OUT/proxy-$RTT.log" && break; sleep 0.1; done
        REMOTE=$P
        N=$RTT_REQUESTS
    fi
    echo "== RTT +$RTT us (delay proxy) via $REMOTE"
    run "$DB" --remote "$REMOTE" --server-pid "$SERVER" --path rpc-read --requests "$N"
    run "$DB" --remote "$REMOTE" --server-pid "$SERVER" --path pushdown --batch 1 --requests "$N"
    if [ "$RTT" = 0 ]; then
        run "$DB" --remote "$REMOTE" --server-pid "$SERVER" --path pushdown --batch 32 --requests "$N"
    fi
    if [ -n "$PROXY" ]; then
        kill -TERM "$PROXY"
        wait "$PROXY" 2>/dev/null || true
        PROXY=
    fi
done
"$BIN" plot --rtt "$J" -o "$OUT/remote-rtt.png"
echo "results: $J"
