#!/bin/sh
# Remote pushdown vs rpc-read at 200 us RTT, alternating order, 3 rounds each.
set -e
B=$(realpath "${STOREFN:-target/release/storefn}")
W=${WTB:-/var/tmp/wtb}; cd "$W"
$B serve --dir $W/srv --listen 127.0.0.1:7481 --insn-budget ${BUDGET:-262144} > serve.log 2>&1 &
SP=$!
$B net delay --listen 127.0.0.1:7482 --to 127.0.0.1:7481 --rtt-us 200 > delay.log 2>&1 &
DP=$!
sleep 1
rm -f r.json
for round in 1 2 3; do
  if [ $((round % 2)) = 1 ]; then order="pushdown rpc-read"; else order="rpc-read pushdown"; fi
  for p in $order; do
    $B wt bench db --table usertable --keys-file $W/keys --remote 127.0.0.1:7482 \
      --path $p --ops 2000 --warmup 200 --seed $round --json r.json
  done
done
$B wt bench $W/srv/db --table usertable --keys-file $W/keys --path read \
  --ops 20000 --warmup 2000 --seed 7 --json l.json
kill $SP $DP
uptime
