#!/usr/bin/env bash
# CPU timings of the executor: plans MODEL on CLUSTER with each TP strategy (--dp alpha) and runs
# canzona-bench RUNS times per strategy; prints the median over runs of each run's median step
# phases, and the ratio of the first strategy's step time to each other's.
# The strategies alternate run by run (round 1: sc, rollback; round 2: sc, rollback; ...), so that
# a change in the machine's load hits every strategy alike and the ratio of one round compares
# runs taken under the same load: the ratios are the figures to compare, not the absolute times.
# Usage: tools/bench/cpu_timings.sh MODEL CLUSTER [RUNS] [STEPS] [TP strategies...]
# Env: CZ (canzona binary, default build/canzona), CZ_BENCH (default build/executor/canzona-bench),
#      CZ_TIMINGS_JSON (when set, also writes every run's phase medians and the summary there:
#      what tools/exec_timings.py reads)
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
  "$CZ" plan -q --model "$model" --cluster "$cluster" --dp alpha --tp "$tp" -o "$tmp/$tp.plan.json"
done
for r in $(seq 1 "$runs"); do
  for tp in "${strategies[@]}"; do
    mpirun --oversubscribe -np "$np" "$CZ_BENCH" --plan "$tmp/$tp.plan.json" --model "$model" \
      --steps "$steps" --warmup 1 --json "$tmp/$tp.$r.json" >"$tmp/log" 2>&1 || { cat "$tmp/log" >&2; exit 1; }
  done
done
python3 - "$tmp" "$runs" "$steps" "${CZ_TIMINGS_JSON:-}" "${strategies[@]}" <<'PY'
import json, statistics, sys
tmp, runs, steps, out, strategies = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5:]
keys = ["reduce_scatter", "elementwise", "matrix", "all_gather", "total"]
per = {tp: [json.load(open(f"{tmp}/{tp}.{r}.json"))["median_s"] for r in range(1, runs + 1)]
       for tp in strategies}
med = {tp: {k: statistics.median(m[k] for m in per[tp]) for k in keys} for tp in strategies}
for tp in strategies:
    print(f"tp={tp:9s} " + "  ".join(f"{k} {med[tp][k]:.4f}" for k in keys)
          + "   (total per run: " + ", ".join(f"{m['total']:.4f}" for m in per[tp]) + ")")
base = strategies[0]
for tp in strategies[1:]:
    rounds = [a["total"] / b["total"] for a, b in zip(per[base], per[tp])]
    print(f"{base} / {tp}: {med[base]['total'] / med[tp]['total']:.2f}x (medians); per round "
          + ", ".join(f"{x:.2f}" for x in rounds) + f" (median {statistics.median(rounds):.2f}x)")
if out:
    with open(out, "w") as f:
        json.dump({"runs": runs, "steps": steps, "warmup": 1, "strategies": strategies,
                   "phases": keys, "per_run": per, "median": med}, f, indent=1)
PY
