#!/bin/sh
# λ-IO bench against a storefn server on loopback: local (READ frames through the client
# cache) / server (LAMBDA frame) / auto, per workload x client cache x RTT (delay proxy),
# conditions changing midway, and the server's CPU capped (cgroup v1; root).
# Usage: bench/lambda_remote.sh OUTDIR [REQUESTS] [CPU_CAP_PERCENT]
set -eu
out=${1:?usage: bench/lambda_remote.sh OUTDIR [REQUESTS] [CPU_CAP_PERCENT]}
requests=${2:-400}
cap=${3:-20}
bin=${STOREFN:-target/release/storefn}
mkdir -p "$out/data"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$bin" serve --dir "$out/data" --listen "127.0.0.1:$port" 2>"$out/serve.log" &
srv=$!
trap 'kill $srv 2>/dev/null; wait $srv 2>/dev/null || true' EXIT
sleep 0.5
capargs=""
if [ "$(id -u)" = 0 ]; then capargs="--cpu-cap $cap --server-pid $srv"; fi
rm -f "$out/lambda_remote.json"
# shellcheck disable=SC2086
"$bin" lambda bench --dir "$out/data" --server "127.0.0.1:$port" \
    --workloads stats64,stats32,knn,grep --requests "$requests" --request-bytes 4K \
    --file-bytes 4M --rtts-us 0,200,1000 --changes $capargs \
    --json "$out/lambda_remote.json" --plot "$out/lambda_remote.png" | tee "$out/lambda_remote.txt"
