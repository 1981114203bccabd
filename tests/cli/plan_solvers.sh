#!/usr/bin/env bash
# canzona plan with the exact solver (GLPK) and the TP-aware DP strategy on bundled inputs: the
# plans validate, record the solver's outcome, and are never worse than the greedy alpha plan
# (--dp alpha, which both start from; the default joint strategy is another partition).
set -u
: "${CZ:?CZ must point to the canzona binary}"
src=${CZ_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$src" || exit 1
fails=0
total=0
check() { # name condition...
  total=$((total + 1))
  if "${@:2}"; then echo "ok   $1"; else echo "FAIL $1"; fails=$((fails + 1)); fi
}
field() { # file python-expression-on-d
  python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print($2)" "$1"
}
M=plans/models/qwen3-0.6b.json
C=plans/clusters/h100-8-dp8-tp1.json

"$CZ" plan -m $M -c $C --dp alpha --json >"$work/greedy.json" || fails=$((fails + 1))
"$CZ" plan -m $M -c $C --dp alpha --solver ilp --time-limit 5 -o "$work/ilp.plan.json" --json \
  >"$work/ilp.json" 2>"$work/ilp.err"
check "ilp plan written" test -s "$work/ilp.plan.json"
check "ilp plan validates" "$CZ" validate "$work/ilp.plan.json" -m $M -c $C
check "ilp records its outcome" \
  test "$(field "$work/ilp.plan.json" "d['solver_result']['status'] in ('optimal','feasible','timeout')")" = True
g=$(field "$work/greedy.json" "d['tp_makespan']")
i=$(field "$work/ilp.json" "d['tp_makespan']")
check "ilp no worse than greedy ($i vs $g)" python3 -c "import sys; sys.exit(not $i <= $g * (1 + 1e-9))"

"$CZ" plan -m $M -c $C --dp tpaware -o "$work/tpa.plan.json" --json >"$work/tpa.json"
check "tpaware plan validates" "$CZ" validate "$work/tpa.plan.json" -m $M -c $C
t=$(field "$work/tpa.json" "d['tp_makespan']")
check "tpaware no worse than alpha ($t vs $g)" python3 -c "import sys; sys.exit(not $t <= $g * (1 + 1e-9))"
check "greedy plans carry no solver_result" \
  test "$(field "$work/tpa.plan.json" "'solver_result' in d")" = False

# Issue 15 item 12: where alpha is already at (or within 1e-5 of) the lower bound, the search
# used to reach it by raising the DP imbalance for nothing (Qwen2.5-7B at DP64 x TP8: 2.14 ->
# 8.36; Qwen3-4B at DP64 x TP4: 1.73 -> 3.04; Qwen3-1.7B at DP32 x TP8: 1.40 -> 3.33). tpaware
# must never be worse than its start, and must not raise the DP imbalance without a makespan
# gain of at least 1e-4 (docs/PLANNER.md). Qwen2.5-7B (28 heads) now plans at TP 4 at most.
"$CZ" import-hf tests/data/hf/qwen2.5-7b.config.json -o "$work/qwen25.json" >"$work/import.out"
tpaware_case() { # name model cluster [size options]
  local name=$1 m=$2 c=$3
  shift 3
  "$CZ" plan -m "$m" -c "$c" "$@" --dp alpha --json >"$work/$name-alpha.json" &&
    "$CZ" plan -m "$m" -c "$c" "$@" --dp tpaware --json >"$work/$name-tpa.json" &&
    python3 - "$work/$name-alpha.json" "$work/$name-tpa.json" <<'PY'
import json, sys
a, t = (json.load(open(f)) for f in sys.argv[1:3])
print(f"alpha mk/LB {a['makespan_over_lower_bound']:.9f} dp {a['dp_imbalance']:.4f}; "
      f"tpaware mk/LB {t['makespan_over_lower_bound']:.9f} dp {t['dp_imbalance']:.4f}")
ok = t["tp_makespan"] <= a["tp_makespan"] * (1 + 1e-12)
if t["dp_imbalance"] > a["dp_imbalance"] * (1 + 1e-9):
    ok &= t["tp_makespan"] <= a["tp_makespan"] * (1 - 1e-4)
sys.exit(not ok)
PY
}
check "qwen3-4b dp64 tp4: tpaware never worse, DP balance only for a gain" \
  tpaware_case q4 plans/models/qwen3-4b.json plans/clusters/h100-256-dp64-tp4.json
check "qwen3-1.7b dp32 tp8: tpaware never worse, DP balance only for a gain" \
  tpaware_case q17 plans/models/qwen3-1.7b.json plans/clusters/h100-256-dp32-tp8.json
for tp in 1 2 4; do
  check "qwen2.5-7b dp64 tp$tp: tpaware never worse, DP balance only for a gain" \
    tpaware_case q25-$tp "$work/qwen25.json" plans/clusters/h100-256-dp64-tp4.json \
    --tp-size $tp --dp-size 64
done

# The time limit: the MoE model's search takes several CPU seconds unbounded (4.2 s in a release
# build); with a limit of 0.2 CPU s the tpaware command may take at most 1 CPU s more than the
# alpha command (the same loading, alpha and writing; a sanitizer build is slower at both), must
# say that it stopped at the limit, and still give a valid plan no worse than alpha.
check "tpaware honours --tpaware-time-limit" python3 - "$CZ" "$work" <<'PY'
import json, resource, subprocess, sys
cz, work = sys.argv[1:3]
m, c = "plans/models/qwen3-30b-a3b.json", "plans/clusters/h100-256-dp64-tp4.json"
def run(args, out):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    r = subprocess.run([cz, "plan", "-m", m, "-c", c, "-o", out, "--json"] + args,
                       capture_output=True, text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
ra, cpu_a = run(["--dp", "alpha"], work + "/moe-alpha.plan.json")
rt, cpu_t = run(["--dp", "tpaware", "--tpaware-time-limit", "0.2"], work + "/moe.plan.json")
a, t = json.loads(ra.stdout), json.loads(rt.stdout)
print(f"cpu alpha {cpu_a:.2f} s, tpaware {cpu_t:.2f} s; mk {t['tp_makespan']:.9g} vs alpha "
      f"{a['tp_makespan']:.9g}; {rt.stderr.strip()}")
ok = ra.returncode == 0 and rt.returncode == 0 and cpu_t < cpu_a + 1.0
ok &= "time limit" in rt.stderr and t["tp_makespan"] <= a["tp_makespan"] * (1 + 1e-12)
ok &= subprocess.run([cz, "validate", work + "/moe.plan.json", "-m", m, "-c", c],
                     capture_output=True).returncode == 0
sys.exit(not ok)
PY

echo "$((total - fails)) passed, $fails failed"
[ $fails -eq 0 ]
