#!/usr/bin/env bash
# The server under hostile clients, for one or more storefn binaries in alternation:
# `storefn attack --rounds 5 --reads 400 --json` per binary per pass (binaries in order, then
# reversed on the next pass), each run's JSON with the load average before and after, then one
# table of the medians over the passes per binary and attack.
# usage: attack_compare.sh OUT PASSES BIN [BIN ...]
set -euo pipefail
OUT=$1; PASSES=$2; shift 2
BINS=("$@")
mkdir -p "$OUT"
DIR=$(mktemp -d /var/tmp/sfattack.XXXXXX)
trap 'rm -rf "$DIR"' EXIT
for ((p = 1; p <= PASSES; p++)); do
  order=("${BINS[@]}")
  if ((p % 2 == 0)); then
    order=(); for ((i = ${#BINS[@]} - 1; i >= 0; i--)); do order+=("${BINS[i]}"); done
  fi
  for b in "${order[@]}"; do
    name=$(basename "$b")
    before=$(cut -d' ' -f1 /proc/loadavg)
    "$b" attack --rounds 5 --reads 400 --dir "$DIR/a" --json > "$OUT/$name-$p.json"
    after=$(cut -d' ' -f1 /proc/loadavg)
    echo "$name pass $p $(date -u +%FT%TZ) load $before -> $after" | tee -a "$OUT/loads.txt"
  done
done
python3 - "$OUT" "${BINS[@]}" <<'EOF'
import json, statistics, sys, os
out, bins = sys.argv[1], [os.path.basename(b) for b in sys.argv[2:]]
runs = {b: [json.load(open(os.path.join(out, f))) for f in sorted(os.listdir(out))
            if f.startswith(b + "-") and f.endswith(".json")] for b in bins}
attacks = [a["attack"] for a in next(iter(runs.values()))[0]["attacks"]]
print("| attack | " + " | ".join(f"{b}: idle → attacked µs (ratio), attacker ops" for b in bins) + " |")
print("|---|" + "---|" * len(bins))
for name in attacks:
    cells = []
    for b in bins:
        rows = [a for r in runs[b] for a in r["attacks"] if a["attack"] == name]
        med = lambda k: statistics.median(a[k] for a in rows)
        cells.append(f"{med('idle_p99_us'):,.0f} → {med('attacked_p99_us'):,.0f} "
                     f"({med('ratio'):.2f}x), {med('attacker_ops'):,.0f}")
    print(f"| {name} | " + " | ".join(cells) + " |")
EOF
