#!/usr/bin/env bash
# canzona plan --ns-coeffs: a table's row count becomes ns_steps when --ns-steps is not given,
# in either option order a disagreeing --ns-steps is refused (with the planner's message), the
# set is recorded in $.settings.ns_coeffs (canonical) only when it is not jordan, Muon's costs
# follow the iteration count, validate accepts the plan, inspect shows the set, and an unknown
# set or a malformed row is refused naming what is wrong.
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
command -v python3 >/dev/null || { echo "python3 not found"; exit 77; }
m="$src/plans/models/test-small.json"
c="$src/plans/clusters/cpu-4-dp2-tp2.json"
plan() { "$CZ" plan -q --model "$m" --cluster "$c" "$@"; }
setting() { # FILE KEY: the settings value, "-" when absent
  python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["settings"].get(sys.argv[2], "-"))' "$1" "$2"
}

plan -o "$work/jordan.json" || fail "default plan"
plan --ns-coeffs jordan -o "$work/jordan2.json" || fail "jordan by name"
cmp -s "$work/jordan.json" "$work/jordan2.json" || fail "jordan by name differs from the default"
[ "$(setting "$work/jordan.json" ns_coeffs)" = - ] || fail "a default plan records ns_coeffs"

plan --ns-coeffs polar_express -o "$work/pe.json" || fail "polar_express"
[ "$(setting "$work/pe.json" ns_coeffs)" = polar_express ] || fail "polar_express not recorded"
[ "$(setting "$work/pe.json" ns_steps)" = 5 ] || fail "polar_express: ns_steps is not 5"
"$CZ" inspect "$work/pe.json" | grep -q "^muon      Newton-Schulz coefficients polar_express: 5 iterations priced$" ||
  fail "inspect does not show the set"

plan --ns-coeffs " 3,-3.2,1.2; 2,-1.5,0.5;1.875,-1.25,0.375;" -o "$work/t3.json" || fail "3-row table"
[ "$(setting "$work/t3.json" ns_coeffs)" = "3,-3.2000000000000002,1.2;2,-1.5,0.5;1.875,-1.25,0.375" ] ||
  fail "the table is not recorded canonically: $(setting "$work/t3.json" ns_coeffs)"
[ "$(setting "$work/t3.json" ns_steps)" = 3 ] || fail "the table's 3 rows are not the ns_steps"
"$CZ" validate "$work/t3.json" --model "$m" --cluster "$c" >/dev/null || fail "validate the table plan"
plan --ns-steps 3 -o "$work/three.json" || fail "jordan, 3 steps"
python3 - "$work/t3.json" "$work/three.json" "$work/jordan.json" <<'PY' || fail "costs do not follow the rows"
import json, sys
t3, three, five = (json.load(open(f))["params"] for f in sys.argv[1:])
for a, b, c in zip(t3, three, five):
    assert a["cost"] == b["cost"], (a["name"], a["cost"], b["cost"])
    if a["optimizer"] == "matrix":
        assert a["cost"] < c["cost"], (a["name"], a["cost"], c["cost"])
PY

for order in "--ns-steps 8 --ns-coeffs polar_express" "--ns-coeffs polar_express --ns-steps 8"; do
  # shellcheck disable=SC2086
  if plan $order -o "$work/bad.json" 2>"$work/err"; then
    fail "$order accepted"
  fi
  grep -q "ns_steps = 8, but the Newton-Schulz coefficient table 'polar_express' has 5 rows" "$work/err" ||
    fail "$order: $(cat "$work/err")"
done
plan --ns-steps 5 --ns-coeffs polar_express -o "$work/pe5.json" || fail "--ns-steps 5 with polar_express"
cmp -s "$work/pe.json" "$work/pe5.json" || fail "an agreeing --ns-steps changes the plan"

plan --ns-coeffs quintic -o "$work/bad.json" 2>"$work/err" && fail "unknown set accepted"
grep -q "unknown Newton-Schulz coefficient set 'quintic' (known: jordan, cubic, polar_express" "$work/err" ||
  fail "unknown set: $(cat "$work/err")"
plan --ns-coeffs "1,2,3;4,5" -o "$work/bad.json" 2>"$work/err" && fail "short row accepted"
grep -q "row 2 has fewer than 3 numbers" "$work/err" || fail "short row: $(cat "$work/err")"
[ ! -e "$work/bad.json" ] || fail "a refused plan was written"

[ "$fails" -eq 0 ] || exit 1
echo "plan --ns-coeffs: OK"
