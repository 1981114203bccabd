#!/usr/bin/env bash
# CPU step cost of the matrix optimizers (Muon, SOAP, Shampoo) against the planner's cost
# model: plans MODEL on CLUSTER (--dp alpha --tp rollback) with each optimizer, runs
# canzona-bench RUNS times with 1 warm-up and STEPS timed steps (STEPS = the plan's
# precondition_frequency, default 10, so the timed steps hold exactly one preconditioner
# refresh: the mean is the amortized cost the model predicts), and prints per optimizer the
# median over runs of the mean matrix-phase time per step (slowest rank), of the median one
# (no refresh), and the model's total matrix cost (sum of the plan's per-parameter costs),
# each relative to Muon's.
# Usage: tools/bench/optim_timings.sh MODEL CLUSTER [RUNS] [STEPS]
# Env: CZ (canzona binary, default build/canzona), CZ_BENCH (default build/executor/canzona-bench)
set -euo pipefail
model=$1 cluster=$2 runs=${3:-3} steps=${4:-10}
CZ=${CZ:-build/canzona}
CZ_BENCH=${CZ_BENCH:-build/executor/canzona-bench}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
np=$(python3 -c "import json,sys; c=json.load(open(sys.argv[1])); print(c['dp']*c['tp']*c['pp'])" "$cluster")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for opt in muon soap shampoo; do
  "$CZ" plan -q --model "$model" --cluster "$cluster" --dp alpha --tp rollback \
    --optimizer "$opt" --precondition-frequency "$steps" -o "$tmp/$opt.plan.json"
  for r in $(seq 1 "$runs"); do
    # Shampoo unblocked (as the cost model assumes: one factor per side up to max_precond_dim).
    mpirun --oversubscribe -np "$np" "$CZ_BENCH" --plan "$tmp/$opt.plan.json" --model "$model" \
      --steps "$steps" --warmup 1 --shampoo-max-dim 100000 --json "$tmp/$opt.$r.json" >"$tmp/log"
  done
done
python3 - "$tmp" "$runs" <<'PY'
import json, statistics, sys
tmp, runs = sys.argv[1], int(sys.argv[2])
rows = {}
for opt in ("muon", "soap", "shampoo"):
    js = [json.load(open(f"{tmp}/{opt}.{r}.json")) for r in range(1, runs + 1)]
    mean = statistics.median(statistics.mean(j["per_step_s"]["matrix"]) for j in js)
    med = statistics.median(j["median_s"]["matrix"] for j in js)
    tot = statistics.median(statistics.mean(j["per_step_s"]["total"]) for j in js)
    plan = json.load(open(f"{tmp}/{opt}.plan.json"))
    params = plan["params"]
    cost = sum(p["cost"] for p in params if p.get("kind", p.get("optimizer")) in ("matrix",))
    rows[opt] = (mean, med, tot, cost, [statistics.mean(j["per_step_s"]["matrix"]) for j in js])
m = rows["muon"]
print(f"{'optimizer':9s} {'matrix mean s':>13s} {'rel':>6s} {'no-refresh s':>12s} {'rel':>6s} "
      f"{'step mean s':>11s} {'model cost':>12s} {'rel':>6s}  matrix means of the runs")
for opt, (mean, med, tot, cost, per) in rows.items():
    print(f"{opt:9s} {mean:13.4f} {mean / m[0]:6.2f} {med:12.4f} {med / m[1]:6.2f} {tot:11.4f} "
          f"{cost:12.4g} {cost / m[3] if m[3] else float('nan'):6.2f}  "
          + " ".join(f"{x:.3f}" for x in per))
PY
