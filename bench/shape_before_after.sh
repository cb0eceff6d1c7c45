#!/usr/bin/env bash
# One run of the server rework's three before/after figures for one storefn binary: remote BPF-KV pushdown and
# rpc-read, the λ server sweep, the page server spawn bench. usage: shape_before_after.sh BIN OUT [SCALE]
set -euo pipefail
BIN=$1; OUT=$2; SCALE=${3:-1}
mkdir -p "$OUT"
D=$(mktemp -d /var/tmp/sfba.XXXXXX)
cleanup() { [[ -n "${SP:-}" ]] && kill "$SP" 2>/dev/null; wait 2>/dev/null; rm -rf "$D"; }
trap cleanup EXIT
PORT=$((7400 + RANDOM % 500))
"$BIN" kv create --layers 4 "$D/db" >/dev/null
"$BIN" serve --dir "$D" --listen 127.0.0.1:$PORT 2>"$OUT/serve.log" &
SP=$!
sleep 1
for p in pushdown rpc-read; do
  "$BIN" kv bench db --remote 127.0.0.1:$PORT --path $p --requests $((20000*SCALE)) --server-pid $SP --json "$OUT/kv.json" | tail -3
done
mkdir -p "$D/l"
kill $SP; wait $SP 2>/dev/null || true
"$BIN" serve --dir "$D/l" --listen 127.0.0.1:$PORT 2>>"$OUT/serve.log" &
SP=$!
sleep 1
"$BIN" lambda bench --dir "$D/l" --server 127.0.0.1:$PORT --rtts-us 0,200 --requests $((50*SCALE)) --file-bytes 16M --json "$OUT/lambda.json" | tail -12
kill $SP; wait $SP 2>/dev/null || true; SP=
"$BIN" pageserver bench --spawn --requests $((10000*SCALE)) --json "$OUT/pageserver.json" 2>&1 | tail -4 || \
"$BIN" pageserver bench --spawn --insecure-no-auth --requests $((10000*SCALE)) --json "$OUT/pageserver.json" 2>&1 | tail -4
