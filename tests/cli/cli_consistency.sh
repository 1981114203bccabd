#!/usr/bin/env bash
# The CLI behaves the same way across commands: 'canzona help CMD', messages for unknown or
# malformed options (program name, closest option, pointer to --help), one --time-limit default
# per help text, --limit 0 = all for validate and diff, readable zeros and capacities, the reason
# a file cannot be read, and a short report when a plan is validated against another model.
set -u
: "${CZ:?CZ must point to the canzona binary}"
src=${CZ_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
model="$src/plans/models/qwen3-1.7b.json"
other="$src/plans/models/qwen3-0.6b.json"
cluster="$src/plans/clusters/h100-64-dp8-tp8.json"
for f in "$model" "$other" "$cluster"; do
  [ -f "$f" ] || { echo "skip: bundled input $f missing"; exit 77; }
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fails=0
pass() { echo "ok   $1"; }
fail() { echo "FAIL $1"; fails=$((fails + 1)); }
expect() { # expect NAME STATUS COMMAND...: output (stdout + stderr) in $work/out
  local name=$1 want=$2
  shift 2
  "$@" >"$work/out" 2>&1
  local got=$?
  if [ "$got" -eq "$want" ]; then pass "$name"; else
    fail "$name: exit $got, expected $want"; head -20 "$work/out"
  fi
}
has() { # has NAME STRING: the last output contains the fixed string
  if grep -qF -- "$2" "$work/out"; then pass "$1"; else fail "$1: no '$2' in output"; head -20 "$work/out"; fi
}
hasnt() {
  if grep -qF -- "$2" "$work/out"; then fail "$1: '$2' in output"; head -20 "$work/out"; else pass "$1"; fi
}

# 'canzona help CMD' is 'canzona CMD --help', for every command.
for cmd in plan inspect diff validate import-hf simulate render compare; do
  "$CZ" "$cmd" --help >"$work/direct" 2>&1
  expect "help $cmd" 0 "$CZ" help "$cmd"
  if cmp -s "$work/direct" "$work/out"; then pass "help $cmd = $cmd --help"; else
    fail "help $cmd differs from $cmd --help"; head -3 "$work/out"; fi
done
expect "help of an unknown command" 2 "$CZ" help nope
has "help of an unknown command names it" "canzona help: unknown command 'nope'"

# Unknown and malformed options: program name, the option, a suggestion, a pointer to --help.
expect "plan --x" 2 "$CZ" plan --x
has "plan --x message" "canzona plan: unrecognized option '--x' (see 'canzona plan --help')"
expect "plan typo" 2 "$CZ" plan --tim-limit 3
has "plan typo suggestion" "canzona plan: unrecognized option '--tim-limit'; did you mean '--time-limit'?"
expect "plan swapped letters" 2 "$CZ" plan --optimzier muon
has "plan swapped letters suggestion" "did you mean '--optimizer'?"
expect "ambiguous abbreviation" 2 "$CZ" plan --alph 1
has "ambiguous abbreviation lists both" "option '--alph' is ambiguous; possibilities: '--alpha' '--alpha-loads'"
expect "missing argument" 2 "$CZ" plan --time-limit
has "missing argument message" "canzona plan: option '--time-limit' requires an argument (see 'canzona plan --help')"
expect "short option missing argument" 2 "$CZ" validate -m
has "short option message" "canzona validate: option '-m' requires an argument"
expect "unknown short option" 2 "$CZ" inspect -z x.json
has "unknown short option message" "canzona inspect: unrecognized option '-z' (see 'canzona inspect --help')"
expect "flag given a value" 2 "$CZ" diff --json=1 a b
has "flag given a value message" "canzona diff: option '--json' takes no argument"
for cmd in simulate render compare import-hf; do
  expect "$cmd --x" 2 "$CZ" "$cmd" --x
  has "$cmd --x message" "canzona $cmd: unrecognized option '--x' (see 'canzona $cmd --help')"
done

# One default per option in each help text; compare's own default where it differs.
"$CZ" compare --help >"$work/out"
if grep -q 'time-limit.*default 10)' "$work/out" && ! grep -q 'default 60' "$work/out"; then
  pass "compare --help: --time-limit default 10 only"
else fail "compare --help time limit defaults"; grep -n 'time-limit\|10 s\|60' "$work/out"; fi
"$CZ" plan --help >"$work/out"
has "plan --help: --time-limit default 60" "ILP time limit in seconds (default 60)"

# import-hf on a file that cannot be read says why.
expect "import-hf missing file" 1 "$CZ" import-hf "$work/missing.config.json" -o "$work/m.json"
has "import-hf gives the reason" "No such file or directory"

# Plans for the rest.
expect "plan a" 0 "$CZ" plan -m "$model" -c "$cluster" -o "$work/a.json" -q
expect "plan b" 0 "$CZ" plan -m "$model" -c "$cluster" -o "$work/b.json" -q --capacity 0.001
expect "plan c" 0 "$CZ" plan -m "$model" -c "$cluster" -o "$work/c.json" -q --dp anchored --tp none

# Against another model: the input mismatches and one line, not 50 consequences.
expect "validate against another model" 1 "$CZ" validate "$work/a.json" -m "$other" -c "$cluster"
lines=$(wc -l <"$work/out")
has "wrong model: the hash" '$.inputs.model.sha256'
has "wrong model: what happened" "plan INVALID: made for another model, cluster or calibration than the one given"
hasnt "wrong model: no consequences listed" "[param.shape]"
[ "$lines" -le 4 ] && pass "wrong model: $lines lines" || fail "wrong model: $lines lines, expected <= 4"
expect "validate --limit 0 lists all" 1 "$CZ" validate "$work/a.json" -m "$other" -c "$cluster" --limit 0
total=$(sed -n 's/^plan INVALID: \([0-9]*\) violations.*/\1/p' "$work/out")
listed=$(grep -c '^\$' "$work/out")
[ -n "$total" ] && [ "$listed" -eq "$total" ] && [ "$total" -gt 50 ] &&
  pass "validate --limit 0: $listed of $total" || fail "validate --limit 0: $listed of '$total'"
expect "validate --limit 2" 1 "$CZ" validate "$work/a.json" -m "$other" -c "$cluster" --limit 2
[ "$(grep -c '^\$' "$work/out")" -eq 2 ] && pass "validate --limit 2 lists 2" || fail "validate --limit 2"

# diff --limit 0 means all, as for validate.
expect "diff --limit 0" 0 "$CZ" diff "$work/a.json" "$work/c.json" --limit 0
moved=$(sed -n 's/^params .*; \([0-9]*\) moved:.*/\1/p' "$work/out")
listed=$(grep -cE '^  +[-0-9>]+ +[-0-9>]+ +[-0-9>]+  [a-z]' "$work/out")
[ -n "$moved" ] && [ "$moved" -gt 20 ] && [ "$listed" -eq "$moved" ] &&
  pass "diff --limit 0 lists all $moved" || fail "diff --limit 0 lists $listed of '$moved'"
hasnt "diff --limit 0: nothing left out" "more (--limit)"
expect "diff --limit 3" 0 "$CZ" diff "$work/a.json" "$work/c.json" --limit 3
has "diff --limit 3 leaves the rest out" "... $((moved - 3)) more (--limit)"

# Capacity with a unit (0 = automatic), zeros without fake precision.
expect "diff capacities" 0 "$CZ" diff "$work/a.json" "$work/b.json"
if grep -qE '^  capacity +automatic -> 1\.000 ms$' "$work/out"; then pass "diff capacity with unit"
else fail "diff capacity with unit"; grep capacity "$work/out"; fi
if grep -qE '^  capacity_used +[0-9.]+ ms -> 1\.000 ms$' "$work/out"; then pass "diff capacity_used with unit"
else fail "diff capacity_used with unit"; grep capacity "$work/out"; fi
hasnt "diff: no 0.000 us" "0.000 us"
if grep -qE '^total_cost .* 0 s +\+0\.00%$' "$work/out"; then pass "diff: zero delta as 0 s"
else fail "diff: zero delta"; grep total_cost "$work/out"; fi
expect "inspect of a plan with empty ranks" 0 "$CZ" inspect "$work/c.json" --all
hasnt "inspect: no 0.000 us" "0.000 us"

echo "$fails failure(s)"
[ "$fails" -eq 0 ]
