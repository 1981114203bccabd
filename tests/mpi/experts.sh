#!/usr/bin/env bash
# Expert groups in the executor (issue 27): the small MoE (test-moe: 2 layers of 8 experts) on
# 4 MPI ranks against the single-process step. Usage:
#   experts.sh verify NAME [fp32|bf16] [PLAN SIZE OPTION...]   (the grid from the options)
#   experts.sh invalid (layouts that break Megatron-Core's rules: refused on every rank)
#   experts.sh overlap PLAN SIZE OPTION... (the bucket-wise step against the plain one, bit for
#   bit, with and without early updates: expert buckets reduced and gathered over the expert-DP
#   plane, expert micro-groups over the ETP plane)
# Env: CZ (canzona), CZ_BENCH (canzona-bench), CZ_SOURCE_DIR. Exit 77 = skipped.
set -euo pipefail
. "$(dirname "$0")/mpi_env.sh"
command -v python3 >/dev/null || { echo "python3 not found"; exit 77; }
src=${CZ_SOURCE_DIR:?}
model=$src/plans/models/test-moe.json
cluster=$src/plans/clusters/cpu-4-dp4-ep2.json
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# mpi and mpi_fails: mpi_env.sh.

case "$1" in
verify)
  dtype=${3:-fp32}
  "$CZ" plan -q -m "$model" -c "$cluster" "${@:4}" -o "$tmp/plan.json"
  "$CZ" validate "$tmp/plan.json" -m "$model" -c "$cluster" "${@:4}" >/dev/null
  # The plan must have expert groups, or the test would not reach them.
  python3 - "$tmp/plan.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
t = p["topology"]
assert p["schema"] == "canzona.plan/3" and t.get("ep", 1) * t.get("edp", 0) > 0, t
print("plan: TP %d DP %d EP %d ETP %d expert-DP %d" % (t["tp"], t["dp"], t["ep"], t["etp"], t["edp"]))
PY
  extra=()
  [ "$dtype" = bf16 ] && extra=(--dtype bf16 --tolerance 3e-2 --update-tolerance 0.25)
  mpi -np 4 "$CZ_BENCH" --plan "$tmp/plan.json" --model "$model" --steps 3 --verify \
    "${extra[@]}" | tee "$tmp/out"
  grep -q "verify: OK" "$tmp/out"
  grep -q "executor allocations in steps 2..4 (most on one rank): 0$" "$tmp/out"
  ;;
invalid)
  # Plans edited past Megatron-Core's rules (the content hash recomputed, so that the plan
  # reader and the structural check are what refuse): each refused on every rank with the
  # rule, no hang.
  "$CZ" plan -q -m "$model" -c "$cluster" -o "$tmp/ep2.json"
  # 1. experts not divisible by EP: EP 3 over 6 ranks (8 experts per layer).
  "$CZ" plan -q -m "$model" -c "$cluster" --dp-size 6 -o "$tmp/ep2x3.json"
  python3 "$src/tests/mpi/plan_edit.py" "$tmp/ep2x3.json" "$tmp/ep3.json" <<'PY'
p["topology"]["ep"] = 3
p["topology"]["edp"] = 2
# What the reader checks before the structural rules: one range per expert-DP rank, one
# schedule per expert rank in (expert-DP, EP) order.
for b in p["buckets"]:
    if b.get("buffer") == "expert":
        r = b["ranges"]
        b["ranges"] = [r[0], [r[1][0], r[2][1]]]
for i, e in enumerate(p["expert_schedule"]):
    e["ep_rank"], e["edp_rank"] = i % 3, i // 3
for q in p["params"]:
    if "ep_rank" in q and q["dp_owner"] > 1:
        q["dp_owner"] = 1
PY
  mpi_fails -np 6 "$CZ_BENCH" --plan "$tmp/ep3.json" --model "$model" --steps 1
  [ "$(grep -c 'which EP 3 does not divide (Megatron-Core: num_moe_experts % ep_size == 0)' \
    "$tmp/out")" -eq 6 ]
  # 2. an expert grid that does not cover the stage: ETP 1 x EP 2 x expert-DP 3 over 4 ranks.
  python3 "$src/tests/mpi/plan_edit.py" "$tmp/ep2.json" "$tmp/grid.json" <<'PY'
p["topology"]["edp"] = 3
PY
  mpi_fails -np 4 "$CZ_BENCH" --plan "$tmp/grid.json" --model "$model" --steps 1
  [ "$(grep -c "etp\*ep\*edp = 1\*2\*3 does not cover the 1\*4 ranks of tp\*dp: Megatron-Core's" \
    "$tmp/out")" -eq 4 ]
  # 3. a plan for another EP: an expert placed as under EP 4 (expert 2 on EP rank 1) in a plan
  # of EP 2, where Megatron-Core puts it on EP rank 0.
  python3 "$src/tests/mpi/plan_edit.py" "$tmp/ep2.json" "$tmp/other.json" <<'PY'
q = [q for q in p["params"] if ".local_experts.2." in q["name"]][0]
q["ep_rank"] = 1
PY
  mpi_fails -np 4 "$CZ_BENCH" --plan "$tmp/other.json" --model "$model" --steps 1
  [ "$(grep -c 'which Megatron-Core places on EP rank 0 of 2' "$tmp/out")" -eq 4 ]
  echo "ok"
  ;;
overlap)
  "$CZ" plan -q -m "$model" -c "$cluster" "${@:2}" --bucket-size 20000 -o "$tmp/plan.json"
  run() { # out-dir options...
    local d=$1
    shift
    mpi -np 4 "$CZ_BENCH" --plan "$tmp/plan.json" --model "$model" --steps 3 --warmup 0 \
      --max-grad-norm 0.05 --dump-dir "$tmp/$d" "$@" | tee "$tmp/$d.out"
  }
  same() { # dir-a dir-b
    local n=0 f
    for f in "$tmp/$1"/*.npy; do
      cmp "$f" "$tmp/$2/$(basename "$f")" || { echo "differs: $1 $2 $(basename "$f")"; exit 1; }
      n=$((n + 1))
    done
    [ "$n" -gt 40 ] || { echo "expected every parameter, compared $n"; exit 1; }
  }
  run plain
  run ovl --overlap --delay-bucket 1 --verify
  grep -q "verify: OK" "$tmp/ovl.out"
  same plain ovl
  # Early updates: the expert pipeline's micro-groups too, in readiness order.
  run eplain --max-grad-norm 0
  run early --max-grad-norm 0 --overlap --early-updates --delay-bucket 1
  grep -q "micro-groups updated early in the last step .*summed): [1-9]" "$tmp/early.out"
  same eplain early
  # And with one rank declaring its buckets highest first (issue 39): the same bits.
  run erev --max-grad-norm 0 --overlap --early-updates --bucket-order reverse --order-rank 1
  same eplain erev
  ;;
*)
  echo "usage: experts.sh verify NAME [fp32|bf16] [PLAN OPTION...] | invalid | overlap PLAN OPTION..."; exit 2 ;;
esac
