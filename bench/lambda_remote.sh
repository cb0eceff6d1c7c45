#!/bin/sh
# λ-IO bench against a storefn server on loopback: local (READ frames through the client
# cache) / server (LAMBDA frame) / auto, taking turns in rounds, per workload x client cache x
# RTT (delay proxy), conditions changing midway, and the server's CPU capped (cgroup v1; root).
# Two request sizes: 64 KiB (the client reads cold ranges faster than the server stages them)
# and 1 MiB (only the result crosses the link). Requests per row: enough that one probe of the
# losing side costs well under 1% of a row (1,200 x 64 KiB, 240 x 1 MiB by default).
# Usage: bench/lambda_remote.sh OUTDIR [REQUESTS_64K] [REQUESTS_1M] [CPU_CAP_PERCENT]
set -eu
out=${1:?usage: bench/lambda_remote.sh OUTDIR [REQUESTS_64K] [REQUESTS_1M] [CPU_CAP_PERCENT]}
req64=${2:-1200}
req1m=${3:-240}
cap=${4:-20}
bin=${STOREFN:-target/release/storefn}
mkdir -p "$out/data"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$bin" serve --dir "$out/data" --listen "127.0.0.1:$port" 2>"$out/serve.log" &
srv=$!
trap 'kill $srv 2>/dev/null; wait $srv 2>/dev/null || true' EXIT
sleep 0.5
capargs=""
if [ "$(id -u)" = 0 ]; then capargs="--cpu-cap $cap --server-pid $srv"; fi
uptime | tee "$out/uptime.txt"
for size in 64K 1M; do
    if [ "$size" = 64K ]; then requests=$req64; else requests=$req1m; fi
    rm -f "$out/lambda_remote_$size.json"
    # shellcheck disable=SC2086
    "$bin" lambda bench --dir "$out/data" --server "127.0.0.1:$port" \
        --workloads stats64,stats32,knn,grep --requests "$requests" --request-bytes "$size" \
        --file-bytes 16M --rtts-us 0,200,1000 --changes $capargs \
        --json "$out/lambda_remote_$size.json" --plot "$out/lambda_remote_$size.png" |
        tee "$out/lambda_remote_$size.txt"
    uptime | tee -a "$out/uptime.txt"
done
