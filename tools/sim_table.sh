#!/usr/bin/env bash
# Regenerates the simulated optimizer-step tables of docs/PERF.md and docs/SIMULATOR.md:
# Qwen3 1.7B-32B on a cluster (default: 256 H100, DP32 x TP8), every row of `canzona simulate`
# (the synchronous-compute baseline, Megatron's two layer-wise rules in each of its Muon TP
# modes, async, Canzona).
# usage: tools/sim_table.sh [--speedups] [CLUSTER.json ...] [-- extra canzona simulate options]
#   default      one markdown table for the first cluster, every row
#   --speedups   one line per (cluster, model): Canzona's update / opt / step speed-up over each
#                Megatron layer-wise row, for every cluster given
#   --ranges     the same speed-ups as min-max over the models, one line per (cluster, row)
set -euo pipefail
cd "$(dirname "$0")/.."
cz=${CZ:-build/canzona}
speedups=0
clusters=()
while [ $# -gt 0 ]; do
  case "$1" in
    --speedups) speedups=1; shift ;;
    --ranges) speedups=2; shift ;;
    --) shift; break ;;
    *) clusters+=("$1"); shift ;;
  esac
done
[ ${#clusters[@]} -gt 0 ] || clusters=(plans/clusters/h100-256-dp32-tp8.json)
models="1.7b 4b 8b 14b 32b"

# simulate's table: label dp+tp+mode DP-imb mk/LB grad update param opt step comm upd-x opt-x step-x
if [ "$speedups" = 0 ]; then
  echo "| model | row | DP imb. | makespan/LB | grad | update | param | opt | step | update × | opt × | step × |"
  echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
  for m in $models; do
    "$cz" simulate --model "plans/models/qwen3-$m.json" --cluster "${clusters[0]}" "$@" |
      awk -v m="$(echo "$m" | tr a-z A-Z)" '
        NF == 13 && $3 ~ /^[0-9.]+$/ {
          row = ($1 == "sync-compute") ? "sync" : $1
          printf "| %s | %s | %.3f | %.3f | %.1f | %.1f | %.1f | %.1f | %.1f | %.2f | %.2f | %.2f |\n",
                 m, row, $3, $4, $5, $6, $7, $8, $9, $11, $12, $13
        }'
  done
  exit 0
fi

per_model() {
for c in "${clusters[@]}"; do
  for m in $models; do
    "$cz" simulate --model "plans/models/qwen3-$m.json" --cluster "$c" "$@" |
      awk -v m="$(echo "$m" | tr a-z A-Z)" -v c="$(basename "$c" .json)" '
        NF == 13 && $3 ~ /^[0-9.]+$/ { upd[$1] = $6; opt[$1] = $8; step[$1] = $9; order[n++] = $1 }
        END {
          for (i = 0; i < n; i++) {
            r = order[i]
            if (r !~ /^lw-/) continue
            printf "| %s | %s | %s | %.2f | %.2f | %.2f |\n", c, m, r,
                   upd[r] / upd["canzona"], opt[r] / opt["canzona"], step[r] / step["canzona"]
          }
        }'
  done
done
}

if [ "$speedups" = 1 ]; then
  echo "| cluster | model | Canzona over | update × | opt × | step × |"
  echo "|---|---|---|---|---|---|"
  per_model "$@"
  exit 0
fi
echo "| cluster | Canzona over | update × | opt × | step × |"
echo "|---|---|---|---|---|"
per_model "$@" | awk -F' *[|] *' '
  function lo(a, b) { return a == "" || b < a ? b : a }
  function hi(a, b) { return a == "" || b > a ? b : a }
  { k = $2 " | " $4; if (!(k in seen)) { seen[k] = 1; keys[n++] = k }
    ul[k] = lo(ul[k], $5 + 0); uh[k] = hi(uh[k], $5 + 0)
    ol[k] = lo(ol[k], $6 + 0); oh[k] = hi(oh[k], $6 + 0)
    sl[k] = lo(sl[k], $7 + 0); sh[k] = hi(sh[k], $7 + 0) }
  END { for (i = 0; i < n; i++) { k = keys[i]
          printf "| %s | %.2f–%.2f | %.2f–%.2f | %.2f–%.2f |\n", k, ul[k], uh[k], ol[k], oh[k], sl[k], sh[k] } }'
