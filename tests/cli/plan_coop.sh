#!/usr/bin/env bash
# Block and cooperative tasks end to end on the bundled inputs (docs/PERF.md, section 11):
# Qwen3-32B at 256 GPUs with --coop auto meets the issue's target (TP makespan within 1.3x the
# average load; whole matrices give 2.1x), the bounds are ordered as they must be (lower bound <=
# makespan, lower bound < atomic bound; the average load is no bound once tasks may be
# cooperative: their Gram panels skip work the hosted cost counts), the plan is a version 2 file
# that validates against its inputs with the stored bounds recomputed, and plan and inspect print
# the bounds. Whole-matrix plans keep the atomic bound as their lower bound, and their summary points at
# --coop auto when the largest matrix is more than 1.3x the average load.
# Cooperative tasks record their Gram panel counts, which differ between tasks (Qwen3-8B).
set -u
: "${CZ:?CZ must point to the canzona binary}"
src=${CZ_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fails=0
fail() {
  echo "FAIL: $*" >&2
  fails=$((fails + 1))
}
model="$src/plans/models/qwen3-32b.json"

# bounds JSON-SUMMARY: prints "makespan average lower atomic" from a --json summary.
bounds() {
  python3 -c 'import json,sys; j=json.load(open(sys.argv[1]))
print(j["tp_makespan"], j["average_load"], j["split_lower_bound"], j["lower_bound"])' "$1"
}

for cluster in h100-256-dp32-tp8 h100-256-dp64-tp4; do
  c="$src/plans/clusters/$cluster.json"
  "$CZ" plan -m "$model" -c "$c" -o "$work/whole.json" --json >"$work/whole.out" ||
    fail "$cluster: whole plan"
  "$CZ" plan -m "$model" -c "$c" -o "$work/coop.json" --coop auto --json >"$work/coop.out" ||
    fail "$cluster: --coop auto plan"
  read -r mk avg lb atomic <<<"$(bounds "$work/whole.out")"
  python3 -c "import sys; mk,avg,lb,at=map(float,sys.argv[1:])
sys.exit(0 if lb == at and mk / avg > 2.0 else 1)" "$mk" "$avg" "$lb" "$atomic" ||
    fail "$cluster whole: lower bound $lb should equal the atomic $atomic, makespan/average > 2"
  read -r mk avg lb atomic <<<"$(bounds "$work/coop.out")"
  python3 -c "import sys; mk,avg,lb,at=map(float,sys.argv[1:])
sys.exit(0 if mk <= 1.3 * avg and lb <= mk * (1 + 1e-12) and lb < at else 1)" \
    "$mk" "$avg" "$lb" "$atomic" ||
    fail "$cluster --coop auto: makespan $mk average $avg lower bound $lb atomic $atomic"
  grep -q '"schema": "canzona.plan/2"' "$work/coop.json" || fail "$cluster: not a version 2 plan"
  grep -q '"split_lower_bound"' "$work/coop.json" || fail "$cluster: v2 plan lacks the bound"
  grep -q '"split_lower_bound"' "$work/whole.json" && fail "$cluster: v1 plan gained a key"
  "$CZ" validate "$work/coop.json" -m "$model" -c "$c" >"$work/validate.out" 2>&1 ||
    fail "$cluster: validate: $(cat "$work/validate.out")"
  "$CZ" inspect "$work/coop.json" >"$work/inspect.out" || fail "$cluster: inspect"
  for key in "average load" "lower bound" "atomic lower bound" "makespan / average load" \
    "makespan / lower bound" "makespan / atomic lower bound"; do
    grep -q "$key" "$work/inspect.out" || fail "$cluster: inspect lacks '$key'"
  done
done

# A stored bound that disagrees with the plan is caught by validate.
python3 -c 'import json,sys; p=json.load(open(sys.argv[1])); p["metrics"]["split_lower_bound"]*=0.5
del p["content_sha256"]; json.dump(p, open(sys.argv[2], "w"))' "$work/coop.json" "$work/bad.json"
if "$CZ" validate "$work/bad.json" -m "$model" -c "$c" >"$work/bad.out" 2>&1; then
  fail "validate accepted a halved split_lower_bound"
fi
grep -q 'split_lower_bound' "$work/bad.out" || fail "validate does not name the bound: $(cat "$work/bad.out")"

"$CZ" plan -m "$model" -c "$src/plans/clusters/h100-256-dp32-tp8.json" -o "$work/p.json" \
  --coop auto >"$work/plan.out" || fail "plan summary"
for key in "average load (total/GPUs)" "atomic lower bound" "makespan / average load" \
  "makespan / lower bound" "makespan / atomic lower bound"; do
  grep -q "$key" "$work/plan.out" || fail "plan summary lacks '$key'"
done
# The summary points at --coop auto where whole matrices cap the plan (the largest task more than
# 1.3x the average load), and not once the flag is given or where no matrix is that large.
grep -q "note .*the largest task" "$work/plan.out" && fail "--coop auto summary still suggests it"
"$CZ" plan -m "$model" -c "$src/plans/clusters/h100-256-dp32-tp8.json" >"$work/whole.txt" ||
  fail "plan summary, whole matrices"
grep -q "^note     the largest task (50.524 ms) is 2.11x the average load" "$work/whole.txt" ||
  fail "whole-matrix summary lacks the --coop auto note: $(grep -A3 '^note' "$work/whole.txt")"
grep -q -- "--coop auto plans fused blocks" "$work/whole.txt" || fail "the note does not name --coop auto"
"$CZ" plan -m "$model" -c "$src/plans/clusters/h100-64-dp8-tp8.json" >"$work/small.txt" ||
  fail "plan summary at 64 GPUs"
grep -q "the largest task" "$work/small.txt" && fail "note printed where the largest task is near the average"

# The planner records each cooperative task's Gram panel count, its least-cost one: on Qwen3-8B
# at DP 32 x TP 8 every cooperative task has "panels" (1 to min(8, a), a the task's short side),
# no hosted task has one, and the counts differ between tasks (the all-reduce latencies an
# extra panel adds weigh more over more ranks and on smaller matrices).
"$CZ" plan -m "$src/plans/models/qwen3-8b.json" -c "$src/plans/clusters/h100-256-dp32-tp8.json" \
  --coop auto -q -o "$work/p8b.json" || fail "qwen3-8b --coop auto plan"
python3 - "$work/p8b.json" >"$work/panels.out" 2>&1 <<'EOF' || fail "qwen3-8b panels: $(cat "$work/panels.out")"
import json, sys
p = json.load(open(sys.argv[1]))
counts, coop = set(), 0
for rs in p["tp_schedule"]:
    for g in rs["groups"]:
        for lst in g["slots"]:
            for t in lst:
                if not isinstance(t, dict):
                    continue
                if t.get("width", 1) == 1:
                    assert "panels" not in t, t
                    continue
                q = p["params"][t["param"]]
                shape = list(q["shape"])
                if "block" in t:
                    shape[q["blocks"]["dim"]] = q["blocks"]["sizes"][t["block"]]
                a = min(shape)
                assert isinstance(t.get("panels"), int) and 1 <= t["panels"] <= min(8, a), t
                counts.add(t["panels"])
                coop += 1
assert coop > 0, "no cooperative task"
assert len(counts) >= 2, counts
print(coop, sorted(counts))
EOF

[ $fails -eq 0 ] || exit 1
echo "plan_coop: all passed"
