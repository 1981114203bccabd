#!/usr/bin/env bash
# Expert groups from the command line (issue 27, planner side): --ep-size and --etp-size plan
# the routed experts in buffers of their own (canzona.plan/3) that validate, inspect, diff,
# simulate, render and compare understand; every invalid layout is refused with the rule named;
# a plan without experts under EP is what it always was; a consumer that does not run expert
# groups (the executor) refuses such a plan. Everything is written to a temporary folder.
set -u
: "${CZ:?CZ must point to the canzona binary}"
src=${CZ_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
check() {
  local what=$1
  shift
  if "$@"; then
    echo "ok   $what"
  else
    echo "FAIL $what" >&2
    fail=1
  fi
}
refused() { # refused WHAT NEEDLE COMMAND...: fails with exit 1 and NEEDLE in its message
  local what=$1 needle=$2
  shift 2
  "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  if [ $rc -ne 1 ] || ! grep -qF -- "$needle" "$tmp/err"; then
    echo "FAIL $what (exit $rc):" >&2
    head -5 "$tmp/err" >&2
    fail=1
  else
    echo "ok   $what"
  fi
}
M=$src/plans/models/test-moe.json
C=$src/plans/clusters/cpu-4-dp4-tp1.json
CE=$src/plans/clusters/cpu-4-dp4-ep2.json

# A plan with expert groups, from the options and from a cluster file that says the same.
check "plan --ep-size 2" "$CZ" plan -q -m "$M" -c "$C" --ep-size 2 -o "$tmp/ep2.json"
check "plan on cpu-4-dp4-ep2" "$CZ" plan -q -m "$M" -c "$CE" -o "$tmp/ep2f.json"
check "schema canzona.plan/3" grep -q '"schema": "canzona.plan/3"' "$tmp/ep2.json"
check "topology names the expert grid" \
  grep -q '"ep": 2,' "$tmp/ep2.json"
check "expert buffers' buckets" grep -q '"buffer": "expert",' "$tmp/ep2.json"
check "expert schedules" grep -q '"expert_schedule": \[' "$tmp/ep2.json"
check "validate" "$CZ" validate "$tmp/ep2.json" -m "$M" -c "$C" --ep-size 2
check "validate (cluster file)" "$CZ" validate "$tmp/ep2f.json" -m "$M" -c "$CE"
"$CZ" inspect "$tmp/ep2.json" >"$tmp/inspect.txt"
check "inspect shows the expert ranks" grep -q "expert groups: EP 2 x ETP 1 x expert-DP 2" \
  "$tmp/inspect.txt"
check "inspect --json has experts" bash -c '"$0" inspect "$1" --json | grep -q "\"experts\""' \
  "$CZ" "$tmp/ep2.json"
check "render with the expert cluster" "$CZ" render "$tmp/ep2f.json" -c "$CE" -o "$tmp/ep2.svg"
check "render shows the expert work" grep -q 'class="expert"' "$tmp/ep2.svg"
check "render names the grid" grep -q "EP 2 x ETP 1 x expert-DP 2" "$tmp/ep2.svg"
check "render --html has the expert table" \
  bash -c '"$0" render "$1" --html -o "$2" && grep -q "Expert ranks" "$2"' \
  "$CZ" "$tmp/ep2.json" "$tmp/ep2.html"
"$CZ" simulate -m "$M" -c "$C" --ep-size 2 >"$tmp/sim.txt"
check "simulate with the same EP for every row" grep -q "expert groups: each GPU runs" \
  "$tmp/sim.txt"
check "simulate lists Megatron's layer-wise rules" grep -q "lw-aug26-dup" "$tmp/sim.txt"
check "simulate --json has expert_s" \
  bash -c '"$0" simulate -p "$1" -c "$2" --json | grep -q "\"expert_s\""' "$CZ" "$tmp/ep2f.json" \
  "$CE"
check "compare names the grid" \
  bash -c '"$0" compare -m "$1" -c "$2" --ep-size 2 --repeats 1 | head -1 | grep -q "EP 2 x ETP 1"' \
  "$CZ" "$M" "$C"
"$CZ" plan -q -m "$M" -c "$C" --ep-size 2 --dp anchored -o "$tmp/ep2a.json"
check "diff of two expert plans" bash -c '"$0" diff "$1" "$2" --json | grep -q "\"expert_ranks\""' \
  "$CZ" "$tmp/ep2.json" "$tmp/ep2a.json"

# ETP != TP with EP 1 is expert groups too (Megatron-Core's use_expert_pgs).
check "plan --etp-size 1 on TP 2" \
  "$CZ" plan -q -m "$M" -c "$src/plans/clusters/cpu-4-dp2-tp2.json" --etp-size 1 -o "$tmp/etp.json"
check "ETP 1, EP 1 on TP 2: expert-DP 4" grep -q '"edp": 4' "$tmp/etp.json"

# Without experts under EP a plan is byte for byte what it was: --ep-size 1 and --etp-size equal
# to TP write nothing into the cluster (its hash included).
"$CZ" plan -q -m "$M" -c "$C" -o "$tmp/plain.json"
"$CZ" plan -q -m "$M" -c "$C" --ep-size 1 --etp-size 1 -o "$tmp/plain1.json"
check "--ep-size 1 --etp-size TP: the same plan" cmp -s "$tmp/plain.json" "$tmp/plain1.json"
check "no expert groups: schema canzona.plan/1" grep -q '"schema": "canzona.plan/1"' \
  "$tmp/plain.json"

# Invalid layouts, each refused with its numbers and the rule.
refused "experts not divisible by EP" "8 experts, which EP 3" \
  "$CZ" plan -q -m "$M" -c "$C" --dp-size 6 --ep-size 3 -o "$tmp/x.json"
refused "... the rule named" "num_moe_experts % ep_size == 0" \
  "$CZ" plan -q -m "$M" -c "$C" --dp-size 6 --ep-size 3 -o "$tmp/x.json"
refused "EP x ETP not dividing the stage" "ETP 2 x EP 4 x PP 1 = 8 does not divide the 4 GPUs" \
  "$CZ" plan -q -m "$M" -c "$C" --ep-size 4 --etp-size 2 -o "$tmp/x.json"
refused "... the rule named" "initialize_model_parallel" \
  "$CZ" plan -q -m "$M" -c "$C" --ep-size 4 --etp-size 2 -o "$tmp/x.json"
refused "EP for a dense model" "no expert parameters" \
  "$CZ" plan -q -m "$src/plans/models/test-small.json" -c "$C" --ep-size 2 -o "$tmp/x.json"
refused "tpaware with expert groups" "--dp tpaware with expert groups" \
  "$CZ" plan -q -m "$M" -c "$C" --ep-size 2 --dp tpaware -o "$tmp/x.json"
check "nothing written on a refusal" test ! -e "$tmp/x.json"

# A plan for another EP: validate, simulate and diff refuse or report it.
"$CZ" validate "$tmp/ep2.json" -m "$M" -c "$C" --ep-size 4 --limit 0 >"$tmp/v.txt"
check "validate: a plan for another EP is invalid" test $? -eq 1
check "validate names EP" grep -q "made for EP 2 and ETP 1 but the cluster has EP 4" "$tmp/v.txt"
"$CZ" validate "$tmp/plain.json" -m "$M" -c "$C" --ep-size 2 --limit 0 >"$tmp/v.txt"
check "validate: a plan without expert groups for an EP cluster" \
  grep -q "the plan has no expert groups" "$tmp/v.txt"
refused "simulate a plan for another EP" "do not match cluster" \
  "$CZ" simulate -p "$tmp/ep2.json" -c "$C" --ep-size 4
"$CZ" plan -q -m "$M" -c "$C" --ep-size 4 -o "$tmp/ep4.json"
refused "diff plans of other EPs" "different topologies" "$CZ" diff "$tmp/ep2.json" "$tmp/ep4.json"

# The executor runs expert groups (tests/mpi/experts.sh); on one process canzona-bench refuses
# the 4-rank plan, naming the world it needs.
bench=${CZ_BUILD_DIR:-}/executor/canzona-bench
if [ -n "${CZ_BUILD_DIR:-}" ] && [ -x "$bench" ]; then
  "$bench" --plan "$tmp/ep2.json" --model "$M" --steps 1 --comm self >"$tmp/b.out" 2>&1
  rc=$?
  check "canzona-bench refuses a 4-rank plan with expert groups on one process" test $rc -ne 0
  check "... naming the world it needs" grep -q 'the plan needs dp\*tp\*pp' "$tmp/b.out"
else
  echo "skip canzona-bench refusal (no executor build)"
fi

[ $fail -eq 0 ] && echo "all expert-group checks passed"
exit $fail
