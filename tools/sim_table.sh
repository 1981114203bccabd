#!/usr/bin/env bash
# Regenerates the simulated optimizer-step table of docs/PERF.md and docs/SIMULATOR.md:
# Qwen3 1.7B-32B on a cluster (default: 256 H100, DP32 x TP8), the four strategies side by side.
# usage: tools/sim_table.sh [CLUSTER.json] [extra canzona simulate options]
set -euo pipefail
cd "$(dirname "$0")/.."
cz=${CZ:-build/canzona}
cluster=${1:-plans/clusters/h100-256-dp32-tp8.json}
shift || true
echo "| model | row | DP imb. | makespan/LB | grad | update | param | opt | step | update × | opt × | step × |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
for m in 1.7b 4b 8b 14b 32b; do
  "$cz" simulate --model "plans/models/qwen3-$m.json" --cluster "$cluster" "$@" |
    awk -v m="$(echo "$m" | tr a-z A-Z)" '
      $1 == "sync-compute" || $1 == "layer-wise" || $1 == "async" || $1 == "canzona" {
        row = ($1 == "sync-compute") ? "sync" : ($1 == "layer-wise") ? "layer" : $1
        printf "| %s | %s | %.3f | %.3f | %.1f | %.1f | %.1f | %.1f | %.1f | %.2f | %.2f | %.2f |\n",
               m, row, $3, $4, $5, $6, $7, $8, $9, $11, $12, $13
      }'
done
