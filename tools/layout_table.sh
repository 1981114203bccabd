#!/usr/bin/env bash
# The unified and split buffer layouts side by side (docs/PERF.md, "Buffer layouts"): every
# bundled Qwen3 model on every bundled H100 cluster, planned with the defaults (alpha +
# rollback, time unit) in each layout, and simulated (alpha + rollback, one configuration).
# usage: tools/layout_table.sh [extra canzona plan/simulate options]
# Columns: LB = max(total cost / GPUs, largest matrix update), the bound both layouts share (the
# unified layout also counts a whole elementwise parameter on one DP rank as a task; the split
# layout cuts those between ranks); makespan = the busiest DP rank's TP makespan; max load =
# the largest per-DP-rank load (cost summed over its TP group); no-matrix ranks = DP ranks
# (all stages) that update no matrix at all; step = simulate's optimizer step (grad + update +
# param); tpaware = the same step with --dp tpaware, which needs the unified layout. Pairs
# Megatron-Core refuses (Qwen3-30B-A3B's 4 KV heads at TP 8) are listed as such.
set -euo pipefail
cd "$(dirname "$0")/.."
cz=${CZ:-build/canzona}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "| cluster | model | LB ms | makespan ms U / S | makespan/LB U / S | max load ms U / S | no-matrix ranks U / S | step ms U / S | step ms tpaware |"
echo "|---|---|---|---|---|---|---|---|---|"
for c in plans/clusters/h100-*.json; do
  for m in 0.6b 1.7b 4b 8b 14b 32b 30b-a3b; do
    mf=plans/models/qwen3-$m.json
    ok=1
    for l in unified split; do
      if ! "$cz" plan -q -m "$mf" -c "$c" --layout "$l" --allow-oversubscribed-memory \
        -o "$tmp/$l.json" "$@" 2> "$tmp/err"; then
        ok=0
        break
      fi
      "$cz" simulate -m "$mf" -c "$c" --dp alpha --tp rollback --layout "$l" --json "$@" \
        > "$tmp/$l.sim.json"
    done
    [ "$ok" = 1 ] && "$cz" simulate -m "$mf" -c "$c" --dp tpaware --tp rollback --json "$@" \
      > "$tmp/tpaware.sim.json"
    if [ "$ok" = 0 ]; then
      echo "| $(basename "$c" .json) | $m | refused: $(sed 's/^canzona plan: //; s/|/\//g' "$tmp/err" | head -c 90)… | | | | | | |"
      continue
    fi
    python3 - "$tmp" "$(basename "$c" .json)" "$m" <<'PY'
import json, sys
d, c, m = sys.argv[1:]
row = {}
for l in ("unified", "split"):
    p = json.load(open(f"{d}/{l}.json"))
    s = json.load(open(f"{d}/{l}.sim.json"))["rows"][0]
    mt = p["metrics"]
    tp, dp, pp = p["topology"]["tp"], p["topology"]["dp"], p["topology"]["pp"]
    matrix = [q for q in p["params"] if q["optimizer"] == "matrix"]
    gpus = tp * dp * pp
    lb = max(mt["total_cost"] / gpus, max(q["cost"] for q in matrix))
    hosts = {(q["stage"], q["dp_owner"]) for q in matrix}
    row[l] = dict(lb=lb, mk=mt["tp"]["makespan"], load=max(mt["dp"]["load"]),
                  idle=pp * dp - len(hosts), step=s["step_s"])
assert abs(row["unified"]["lb"] - row["split"]["lb"]) <= 1e-9 * row["unified"]["lb"]
u, s = row["unified"], row["split"]
tpa = json.load(open(f"{d}/tpaware.sim.json"))["rows"][0]["step_s"]
lb = u["lb"]
print(f"| {c} | {m} | {lb * 1e3:.2f} | {u['mk'] * 1e3:.2f} / {s['mk'] * 1e3:.2f} | "
      f"{u['mk'] / lb:.3f} / {s['mk'] / lb:.3f} | {u['load'] * 1e3:.1f} / {s['load'] * 1e3:.1f} | "
      f"{u['idle']} / {s['idle']} | {u['step'] * 1e3:.1f} / {s['step'] * 1e3:.1f} | "
      f"{tpa * 1e3:.1f} |")
PY
  done
done
