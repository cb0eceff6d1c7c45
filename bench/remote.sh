#!/usr/bin/env bash
# Remote lookups, issue 12 item 10, at loopback RTT (the delay proxy `storefn net delay` comes
# from another branch; with it, point REMOTE at the proxy). One run on one device: a BPF-KV
# database of LAYERS levels in DIR, `storefn serve` on 127.0.0.1 (1 thread), then
#   local:  kv bench --path xrp, xrp-batch (--batch 32)        the same file, no network
#   remote: kv bench --remote --path rpc-read                  one READ per level + value
#           kv bench --remote --path pushdown --batch 1         one XRP round trip per lookup
#           kv bench --remote --path pushdown --batch 32        32 lookups per frame
# Appends every run's JSON to OUT/remote.jsonl and prints the summary lines. The server is
# always stopped (trap). Loopback only.
#
# Environment: STOREFN (binary; default target/release/storefn), DIR (default
# /var/tmp/storefn-remote-bench; the database is kept between runs), LAYERS (5),
# REQUESTS (20000), OUT (bench/out/remote-<stamp>), REMOTE (see below).
set -euo pipefail
cd "$(dirname "$0")/.."

BIN=${STOREFN:-target/release/storefn}
DIR=${DIR:-/var/tmp/storefn-remote-bench}
LAYERS=${LAYERS:-5}
REQUESTS=${REQUESTS:-20000}
OUT=${OUT:-bench/out/remote-$(date -u +%Y%m%dT%H%M%SZ)}
[ -x "$BIN" ] || cargo build --release -p storefn
mkdir -p "$DIR" "$OUT"
DB=db$LAYERS
[ -f "$DIR/$DB.meta" ] || "$BIN" kv create "$DIR/$DB" --layers "$LAYERS"

PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
ADDR=127.0.0.1:$PORT
"$BIN" serve --dir "$DIR" --listen "$ADDR" --threads 1 2>"$OUT/serve.log" &
SERVER=$!
trap 'kill -TERM $SERVER 2>/dev/null; wait $SERVER 2>/dev/null || true' EXIT
for _ in $(seq 50); do grep -q "listening on" "$OUT/serve.log" && break; sleep 0.1; done

# REMOTE: where the remote runs connect (default the server itself; set it to a delay proxy
# in front of ADDR to add round-trip time).
REMOTE=${REMOTE:-$ADDR}
J=$OUT/remote.jsonl
run() { echo "== $*"; "$BIN" kv bench "$@" --requests "$REQUESTS" --json "$J" | grep -E '^(summary|remote) '; }
run "$DIR/$DB" --path xrp
run "$DIR/$DB" --path xrp-batch --batch 32
run "$DB" --remote "$REMOTE" --server-pid "$SERVER" --path rpc-read
run "$DB" --remote "$REMOTE" --server-pid "$SERVER" --path pushdown --batch 1
run "$DB" --remote "$REMOTE" --server-pid "$SERVER" --path pushdown --batch 32
echo "results: $J"
