#!/usr/bin/env bash
# CPU timings of the executor: plans MODEL on CLUSTER with each TP strategy and runs
# canzona-bench RUNS times; prints the median over runs of each run's median step phases.
# Usage: tools/bench/cpu_timings.sh MODEL CLUSTER [RUNS] [STEPS] [TP strategies...]
# Env: CZ (canzona binary, default build/canzona), CZ_BENCH (default build/executor/canzona-bench)
set -euo pipefail
model=$1 cluster=$2 runs=${3:-3} steps=${4:-5}
shift $(( $# < 4 ? $# : 4 ))
strategies=("$@")
[ ${#strategies[@]} -gt 0 ] || strategies=(sc rollback)
CZ=${CZ:-build/canzona}
CZ_BENCH=${CZ_BENCH:-build/executor/canzona-bench}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
np=$(python3 -c "import json,sys; c=json.load(open(sys.argv[1])); print(c['dp']*c['tp']*c['pp'])" "$cluster")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for tp in "${strategies[@]}"; do
  "$CZ" plan -q --model "$model" --cluster "$cluster" --dp alpha --tp "$tp" -o "$tmp/plan.json"
  for r in $(seq 1 "$runs"); do
    mpirun --oversubscribe -np "$np" "$CZ_BENCH" --plan "$tmp/plan.json" --model "$model" \
      --steps "$steps" --warmup 1 --json "$tmp/$tp.$r.json" >/dev/null
  done
  python3 - "$tp" "$tmp" "$runs" <<'PY'
import json, statistics, sys
tp, tmp, runs = sys.argv[1], sys.argv[2], int(sys.argv[3])
ms = [json.load(open(f"{tmp}/{tp}.{r}.json"))["median_s"] for r in range(1, runs + 1)]
keys = ["reduce_scatter", "elementwise", "matrix", "all_gather", "total"]
med = {k: statistics.median(m[k] for m in ms) for k in keys}
print(f"tp={tp:9s} " + "  ".join(f"{k} {med[k]:.4f}" for k in keys)
      + "   (total per run: " + ", ".join(f"{m['total']:.4f}" for m in ms) + ")")
PY
done
