#!/usr/bin/env bash
# λ-IO local side (issue 14): time per request of every workload with a cold and a warm client
# cache (page cache dropped per request range with POSIX_FADV_DONTNEED, or the whole file read
# first), one run, plus the write path (bitmap: run-length decode + write + fdatasync).
# Writes bench/out/lambda_local-<stamp>/{lambda.jsonl,lambda.png} and prints the rows.
# The server, auto and RTT conditions (through `storefn net delay`) join when storefn-server's
# LAMBDA frame is merged.
#
# Environment: STOREFN (binary; default target/release/storefn, built if missing), DIR (data
# files, default /tmp/storefn-lambda-bench), REQUESTS (500), REQUEST_BYTES (256K),
# FILE_BYTES (64M), CPU (pin to this CPU with taskset; "" = no pinning, the default).
set -euo pipefail
cd "$(dirname "$0")/.."

BIN=${STOREFN:-target/release/storefn}
DIR=${DIR:-/tmp/storefn-lambda-bench}
REQUESTS=${REQUESTS:-500}
REQUEST_BYTES=${REQUEST_BYTES:-256K}
FILE_BYTES=${FILE_BYTES:-64M}
CPU=${CPU-}

[ -x "$BIN" ] || cargo build --release -p storefn
OUT="bench/out/lambda_local-$(date -u +%Y%m%dT%H%M%SZ)"
mkdir -p "$OUT"
PIN=()
[ -n "$CPU" ] && PIN=(taskset -c "$CPU")
"${PIN[@]}" "$BIN" lambda bench --dir "$DIR" --requests "$REQUESTS" \
    --request-bytes "$REQUEST_BYTES" --file-bytes "$FILE_BYTES" \
    --json "$OUT/lambda.jsonl" --plot "$OUT/lambda.png"
echo "results: $OUT"
