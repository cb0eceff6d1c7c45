#!/usr/bin/env bash
# The VM's call-path figures (fixed cost per call and the BPF-KV node searches), two storefn
# binaries alternated: three runs of each, old then new, each `prog bench` the median of 9
# rounds; then the median of the three per engine, with the load average of every run.
# usage: vm_call_path.sh OLD_BIN NEW_BIN OUT_DIR
set -euo pipefail
OLD=$1; NEW=$2; OUT=$3
mkdir -p "$OUT"
: >"$OUT/loads.txt"
for i in 1 2 3; do
  for which in old new; do
    bin=$OLD; [[ $which == new ]] && bin=$NEW
    echo "$which run $i: $(uptime)" >>"$OUT/loads.txt"
    "$bin" prog bench --workload empty,node512,node4k --rounds 9 --json "$OUT/$which-$i.json" \
      >"$OUT/$which-$i.txt"
  done
done
cat "$OUT/loads.txt"
python3 - "$OUT" <<'PY'
import glob, json, os, statistics, sys
d = sys.argv[1]
rows = {}
for which in ("old", "new"):
    for f in sorted(glob.glob(os.path.join(d, f"{which}-*.json"))):
        for r in json.load(open(f)):
            rows.setdefault((r["program"], r["engine"], which), []).append(r["ns_per_call"])
med = lambda p, e, w: statistics.median(rows[(p, e, w)])
print(f"{'program':8} {'engine':9} {'old ns':>7} {'new ns':>7} {'old/nat':>8} {'new/nat':>8}")
for p in ("empty", "node512", "node4k"):
    for e in ("jit", "native", "interp", "rbpf-jit"):
        o, n = med(p, e, "old"), med(p, e, "new")
        print(f"{p:8} {e:9} {o:7.1f} {n:7.1f} {o / med(p, 'native', 'old'):8.2f}"
              f" {n / med(p, 'native', 'new'):8.2f}")
PY
