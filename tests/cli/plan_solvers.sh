#!/usr/bin/env bash
# canzona plan with the exact solver (GLPK) and the TP-aware DP strategy on bundled inputs: the
# plans validate, record the solver's outcome, and are never worse than the greedy alpha plan.
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

"$CZ" plan -m $M -c $C --json >"$work/greedy.json" || fails=$((fails + 1))
"$CZ" plan -m $M -c $C --solver ilp --time-limit 5 -o "$work/ilp.plan.json" --json \
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

echo "$((total - fails)) passed, $fails failed"
[ $fails -eq 0 ]
