#!/usr/bin/env bash
# Block and cooperative tasks (canzona.plan/2) in the analysis commands, on test-small at
# DP1 x TP4: validate accepts the planner's plans and finds hand edits (a task's cost, the
# settings that made the tasks, the schema version, a cooperative width the matrix cannot
# take, slots that list cooperative tasks in different orders, Gram panel counts: the cost
# at the recorded count, an absent one as 1, counts no executor can run), each at its JSON path;
# inspect lists and counts the tasks; diff matches them by (parameter, block) and explains the
# busiest rank's makespan change in full.
set -u
: "${CZ:?CZ must point to the canzona binary}"
src=${CZ_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
model="$src/plans/models/test-small.json"
cluster="$src/plans/clusters/cpu-4-dp1-tp4.json"
for f in "$model" "$cluster"; do
  [ -f "$f" ] || { echo "skip: bundled input $f missing"; exit 77; }
done
command -v python3 >/dev/null || { echo "skip: python3 missing"; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fails=0
pass() { echo "ok   $1"; }
fail() { echo "FAIL $1"; fails=$((fails + 1)); }
# expect NAME STATUS COMMAND...: runs the command, output in $work/out, checks the exit status.
expect() {
  local name=$1 want=$2
  shift 2
  "$@" >"$work/out" 2>&1
  local got=$?
  if [ "$got" -eq "$want" ]; then pass "$name"; else
    fail "$name: exit $got, expected $want"; head -20 "$work/out"
  fi
}
has() { # has NAME PATTERN: the last output contains the fixed string
  if grep -qF -- "$2" "$work/out"; then pass "$1"; else fail "$1: no '$2' in output"; head -30 "$work/out"; fi
}
hasnt() {
  if grep -qF -- "$2" "$work/out"; then fail "$1: '$2' in output"; head -30 "$work/out"; else pass "$1"; fi
}
# edit IN OUT PYTHON: OUT is IN with the python statements applied to the plan object p.
edit() {
  python3 - "$1" "$2" "$3" <<'EOF'
import json, sys
p = json.load(open(sys.argv[1]))
exec(sys.argv[3])
json.dump(p, open(sys.argv[2], "w"), indent=1)
EOF
}
# violation CODE PATH FILE: validate --json of FILE lists a violation CODE at PATH.
violation() {
  "$CZ" validate "$3" --model "$model" --cluster "$cluster" --json >"$work/v.json" 2>"$work/err"
  if python3 - "$work/v.json" "$1" "$2" <<'EOF'; then pass "validate: $1 at $2 ($3)"; else
import json, sys
r = json.load(open(sys.argv[1]))
sys.exit(0 if any(v["code"] == sys.argv[2] and v["path"] == sys.argv[3]
                  for v in r["violations"]) else 1)
EOF
    fail "validate: no $1 at $2 in $(basename "$3")"; head -c 3000 "$work/v.json"; cat "$work/err"
  fi
}
plan() { "$CZ" plan --model "$model" --cluster "$cluster" -q "$@"; }

expect "plan whole" 0 plan -o "$work/whole.json"
expect "plan blocks" 0 plan --split-blocks -o "$work/blocks.json"
expect "plan blocks coop 2" 0 plan --split-blocks --coop 2 -o "$work/coop2.json"
expect "plan coop 2" 0 plan --coop 2 -o "$work/coop2w.json"
expect "plan blocks coop auto" 0 plan --split-blocks --coop auto -o "$work/auto.json"
for p in whole blocks coop2 coop2w auto; do
  expect "validate $p" 0 "$CZ" validate "$work/$p.json" --model "$model" --cluster "$cluster"
  has "validate $p: OK" "plan OK"
done
grep -q '"schema": "canzona.plan/1"' "$work/whole.json" && pass "whole plan is version 1" ||
  fail "whole plan is not canzona.plan/1"
grep -q '"schema": "canzona.plan/2"' "$work/coop2.json" && pass "coop plan is version 2" ||
  fail "coop plan is not canzona.plan/2"

# ---- validate: hand edits ---------------------------------------------------------------------
# The first task of group 0 is a cooperative block task on slots 0 and 1 (fc1's block 0 under
# --coop 2 here); its cost, doubled in both slots, disagrees with the cost model.
edit "$work/coop2.json" "$work/cost.json" '
g = p["tp_schedule"][0]["groups"][0]["slots"]
t = g[0][0]
assert isinstance(t, dict) and t.get("width") == 2, t
c = t["cost"]
for s in (0, 1):
    g[s][0]["cost"] = c * 2'
violation schedule.task_cost '$.tp_schedule[0].groups[0].slots[0][0].cost' "$work/cost.json"
violation schedule.load '$.tp_schedule[0].groups[0].load[0]' "$work/cost.json"

# A hosted block task's cost (a --split-blocks plan without --coop).
edit "$work/blocks.json" "$work/bcost.json" '
def first_block():
    for g in p["tp_schedule"][0]["groups"]:
        for s, lst in enumerate(g["slots"]):
            for i, t in enumerate(lst):
                if isinstance(t, dict) and "block" in t:
                    t["cost"] *= 1.5
                    return "$.tp_schedule[0].groups[%d].slots[%d][%d].cost" % (g["id"], s, i)
print(first_block())' >"$work/bpath"
violation schedule.task_cost "$(cat "$work/bpath")" "$work/bcost.json"

# Block tasks in a plan whose settings lack split_blocks; cooperative tasks with coop off.
edit "$work/blocks.json" "$work/nosplit.json" 'del p["settings"]["split_blocks"]'
violation settings.split_blocks '$.settings' "$work/nosplit.json"
edit "$work/coop2.json" "$work/nocoop.json" 'del p["settings"]["coop"]'
violation settings.coop '$.settings' "$work/nocoop.json"
edit "$work/coop2.json" "$work/coopoff.json" 'p["settings"]["coop"] = "off"'
violation settings.coop '$.settings' "$work/coopoff.json"
# split_blocks on a plan that schedules blocked matrices whole.
edit "$work/whole.json" "$work/wholesplit.json" 'p["settings"]["split_blocks"] = True'
violation settings.split_blocks '$.settings.split_blocks' "$work/wholesplit.json"
# --coop 4 would give every task width 4: the width-2 tasks do not match it.
edit "$work/coop2.json" "$work/coop4.json" 'p["settings"]["coop"] = "4"'
violation settings.coop '$.settings.coop' "$work/coop4.json"
# Cooperative tasks under another TP strategy than rollback.
edit "$work/coop2.json" "$work/slot.json" 'p["settings"]["tp_strategy"] = "slot"'
violation settings.coop '$.settings.tp_strategy' "$work/slot.json"

# Schema: a version 2 file without a block or cooperative task; the reader refuses task
# objects in a version 1 file.
edit "$work/whole.json" "$work/v2whole.json" 'p["schema"] = "canzona.plan/2"'
violation plan.schema '$.schema' "$work/v2whole.json"
edit "$work/coop2.json" "$work/v1coop.json" 'p["schema"] = "canzona.plan/1"'
expect "validate v1 with task objects" 1 "$CZ" validate "$work/v1coop.json" --model "$model" \
  --cluster "$cluster"
has "v1 with task objects: message" "needs schema \"canzona.plan/2\""

# A cooperative task on a whole matrix of several blocks (structural, shared with the
# executor): --coop makes block tasks of blocked matrices, so drop the block of the first
# cooperative block task in every slot that lists it.
edit "$work/coop2.json" "$work/wholecoop.json" '
where, key = None, None
for g in p["tp_schedule"][0]["groups"]:
    for s, lst in enumerate(g["slots"]):
        for i, t in enumerate(lst):
            if not isinstance(t, dict) or t.get("width", 1) < 2 or "block" not in t:
                continue
            if key is None:
                key = (g["id"], t["param"], t["block"])
                where = "$.tp_schedule[0].groups[%d].slots[%d][%d]" % (g["id"], s, i)
            if key == (g["id"], t["param"], t["block"]):
                del t["block"]
print(where)' >"$work/wcpath"
violation schedule.coop "$(head -1 "$work/wcpath")" "$work/wholecoop.json"

# The ordering rule: slots 0 and 1 list the cooperative tasks they share in different orders.
edit "$work/coop2.json" "$work/order.json" '
g = [g for g in p["tp_schedule"][0]["groups"] if len(g["slots"][0]) > 1][0]
g["slots"][0].reverse()
print(g["id"])' >"$work/ordg"
expect "validate swapped cooperative order" 1 "$CZ" validate "$work/order.json" --model "$model" \
  --cluster "$cluster"
has "swapped order: message" "in one order"

# A cooperative task wider than its matrix's long side: a 2 x 3 matrix on 4 slots.
cat >"$work/tiny.json" <<'EOF'
{"schema": "canzona.model/1", "name": "tiny", "dtype": "fp32",
 "params": [{"name": "w", "shape": [2, 3], "tp_dim": null, "optimizer": "matrix"},
            {"name": "v", "shape": [64, 64], "tp_dim": 0, "optimizer": "matrix"}]}
EOF
expect "plan tiny coop 4" 0 "$CZ" plan --model "$work/tiny.json" --cluster "$cluster" --coop 4 \
  -q -o "$work/tiny_plan.json"
edit "$work/tiny_plan.json" "$work/tiny_wide.json" '
g = p["tp_schedule"][0]["groups"]
v = [t for grp in g for lst in grp["slots"] for t in lst if isinstance(t, dict)][0]
for grp in g:
    for lst in grp["slots"]:
        lst[:] = [t for t in lst if t != 0]
g[0]["slots"] = [[{"param": 0, "width": 4, "cost": 1e-6}] + lst for lst in g[0]["slots"]]'
"$CZ" validate "$work/tiny_wide.json" --model "$work/tiny.json" --cluster "$cluster" \
  --json >"$work/out" 2>&1
has "validate: width 4 on a 2 x 3 matrix" '"code": "schedule.coop"'
has "validate: width 4 on a 2 x 3 matrix: path" '"path": "$.tp_schedule[0].groups[0].slots[0][0]"'

# ---- Gram panels: recorded per cooperative task, read back, refused where none can run -------
if python3 - "$work/coop2.json" <<'EOF'; then pass "coop2: every cooperative task records its panels"; else fail "coop2: panels"; fi
import json, sys
p = json.load(open(sys.argv[1]))
ts = [t for g in p["tp_schedule"][0]["groups"] for lst in g["slots"] for t in lst if isinstance(t, dict)]
assert all(isinstance(t.get("panels"), int) and 1 <= t["panels"] <= 8 for t in ts if t.get("width", 1) > 1), ts
assert all("panels" not in t for t in ts if t.get("width", 1) == 1), ts
assert len({t["panels"] for t in ts}) >= 2, ts
EOF
# validate costs a cooperative task at the count the plan records: the first task of group 0
# (fc1's block 0, 7 panels) set to 1 in both its slots disagrees with its cost.
edit "$work/coop2.json" "$work/panels1.json" '
g = p["tp_schedule"][0]["groups"][0]["slots"]
assert g[0][0]["panels"] > 1, g[0][0]
for s in (0, 1):
    g[s][0]["panels"] = 1'
violation schedule.task_cost '$.tp_schedule[0].groups[0].slots[0][0].cost' "$work/panels1.json"
# An absent count is one panel, how plans written before the key ran: dropping the key where the
# planner chose 1 changes nothing.
edit "$work/coop2.json" "$work/nokey.json" '
n = 0
for g in p["tp_schedule"][0]["groups"]:
    for lst in g["slots"]:
        for t in lst:
            if isinstance(t, dict) and t.get("panels") == 1:
                del t["panels"]
                n += 1
assert n > 0
del p["content_sha256"]'
expect "validate: panels 1 left out" 0 "$CZ" validate "$work/nokey.json" --model "$model" \
  --cluster "$cluster"
# The reader refuses a count on a hosted task, outside 1 .. 8 or above the task's short side,
# and a cooperative task whose slots disagree on it, each at the key's path.
edit "$work/blocks.json" "$work/hostedp.json" '
t = [t for g in p["tp_schedule"][0]["groups"] for lst in g["slots"] for t in lst if isinstance(t, dict)][0]
t["panels"] = 2'
expect "read: panels on a hosted task" 1 "$CZ" validate "$work/hostedp.json" --model "$model" \
  --cluster "$cluster"
has "read: panels on a hosted task: message" "only for a cooperative task"
has "read: panels on a hosted task: path" ".panels"
for v in 0 9; do
  edit "$work/coop2.json" "$work/panels$v.json" "
g = p['tp_schedule'][0]['groups'][0]['slots']
for s in (0, 1):
    g[s][0]['panels'] = $v"
  expect "read: panels $v" 1 "$CZ" validate "$work/panels$v.json" --model "$model" --cluster "$cluster"
  has "read: panels $v: message" "slots[0][0].panels: expected an integer in [1, 8], found $v"
done
edit "$work/coop2.json" "$work/panelsx.json" '
g = p["tp_schedule"][0]["groups"][0]["slots"]
g[0][0]["panels"] = 6'
expect "read: slots disagree on panels" 1 "$CZ" validate "$work/panelsx.json" --model "$model" \
  --cluster "$cluster"
has "read: slots disagree on panels: message" "in one order"
# tiny's 2 x 3 matrix (above) over 2 ranks: a Gram of 2 rows has at most 2 panels.
expect "plan tiny coop 2" 0 "$CZ" plan --model "$work/tiny.json" --cluster "$cluster" --coop 2 \
  -q -o "$work/tiny2.json"
edit "$work/tiny2.json" "$work/tiny2p.json" '
for g in p["tp_schedule"][0]["groups"]:
    for lst in g["slots"]:
        for t in lst:
            if isinstance(t, dict) and t["param"] == 0:
                assert t["width"] == 2, t
                t["panels"] = 3'
expect "read: panels above a" 1 "$CZ" validate "$work/tiny2p.json" --model "$work/tiny.json" \
  --cluster "$cluster"
has "read: panels above a: message" "3 Gram panels, more than the 2 rows of the task's Gram"

# ---- inspect: block and cooperative tasks ---------------------------------------------------
expect "inspect coop2" 0 "$CZ" inspect "$work/coop2.json"
has "inspect: section" "block and cooperative tasks (canzona.plan/2)"
# test-small has 2 x (qkv: 3 blocks, fc1: 2 blocks) = 10 block tasks; --coop 2 makes every
# task cooperative (each one's long side allows it): 10 blocks + 5 matrices without blocks.
has "inspect: counts" "0 whole matrices, 10 block tasks, 15 cooperative tasks (width 2: 15)"
has "inspect: a block task labelled as its block" "decoder.layers.0.mlp.linear_fc1.weight[0]"
has "inspect: the panels column" "cost/slot width panels   slots"
expect "inspect whole" 0 "$CZ" inspect "$work/whole.json"
hasnt "inspect whole: no task section" "block and cooperative tasks"
expect "inspect coop2 --json" 0 "$CZ" inspect "$work/coop2.json" --json
cp "$work/out" "$work/inspect.json"
if python3 - "$work/inspect.json" "$work/coop2.json" <<'EOF'; then pass "inspect --json: tasks match the plan file"; else fail "inspect --json: tasks"; fi
import json, sys
r, p = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
t = r["tasks"]
# Every task object of the file, a cooperative one once (at its first slot).
seen = []
for g in p["tp_schedule"][0]["groups"]:
    for s, lst in enumerate(g["slots"]):
        for e in lst:
            if isinstance(e, dict) and s % e.get("width", 1) == 0:
                seen.append((g["id"], e["param"], e.get("block", -1), e.get("width", 1), s,
                             e.get("panels", 1), e["cost"]))
got = [(x["group"], x["id"], x["block"], x["width"], x["slots"][0], x["panels"], x["cost"])
       for x in t["list"]]
# inspect --json prints 12 significant digits.
key = lambda v: [(a, b, c, d, e, p, float("%.11g" % f)) for a, b, c, d, e, p, f in sorted(v)]
assert key(seen) == key(got), (seen, got)
assert [x["cost"] for x in t["list"]] == sorted((x["cost"] for x in t["list"]), reverse=True)
assert all(x["slots"][1] == x["slots"][0] + x["width"] - 1 for x in t["list"])
assert t["blocks"] == sum(1 for x in got if x[2] >= 0) == 10
assert t["cooperative"] == 15 and t["widths"] == [{"width": 2, "tasks": 15}]
big = r["microgroups"][0]["largest_task"]
assert big["cost"] == max(x[6] for x in got) and big["width"] == 2, big
EOF

# ---- diff: tasks keyed by (parameter, block) --------------------------------------------------
expect "diff whole coop2" 0 "$CZ" diff "$work/whole.json" "$work/coop2.json" --limit 0
has "diff: settings split_blocks" "split_blocks           false -> true"
has "diff: settings coop" "coop                   off -> 2"
# qkv (3 blocks) and fc1 (2 blocks) of both layers: whole in A, blocks in B.
has "diff: split count" "4 split into blocks, 0 merged into whole matrices"
has "diff: whole -> blocks" "whole -> 3 blocks"
has "diff: width change" "width 1 -> 2"
expect "diff coop2 whole" 0 "$CZ" diff "$work/coop2.json" "$work/whole.json" --limit 0
has "diff: merged" "3 blocks -> whole"
expect "diff blocks coop2" 0 "$CZ" diff "$work/blocks.json" "$work/coop2.json" --json
if python3 - "$work/out" <<'EOF'; then pass "diff --json: blocks -> cooperative blocks"; else fail "diff --json: blocks vs coop2"; fi
import json, sys
r = json.load(open(sys.argv[1]))
t = r["tasks"]
# Same blocks in both: no split or merge; every task (10 blocks and 5 matrices) gets width 2.
assert t["split"] == 0 and t["merged"] == 0, t
assert t["width_changed"] == 15, t
w = [x for x in t["list"] if x["change"] == "width"]
assert all(x["width"] == [1, 2] for x in w), w
assert any(x["block"] >= 0 for x in w)
# The busiest rank's makespan change is explained in full, block and cooperative tasks
# counted at their own cost on every slot they occupy.
for k in r["makespan"]["ranks"]:
    assert abs(k["unexplained"]) <= 1e-9 * max(k["makespan_a"], k["makespan_b"]), k
EOF
expect "diff coop2 coop2" 0 "$CZ" diff "$work/coop2.json" "$work/coop2.json"
has "diff: identical" "no differences"

# ---- simulate: cooperative all-reduces ---------------------------------------------------------
expect "simulate coop2" 0 "$CZ" simulate --plan "$work/coop2.json" --cluster "$cluster"
has "simulate: cooperative line" "15 cooperative tasks on the critical DP rank"
expect "simulate whole" 0 "$CZ" simulate --plan "$work/whole.json" --cluster "$cluster"
hasnt "simulate whole: no cooperative line" "cooperative task"
expect "simulate coop2 --json" 0 "$CZ" simulate --plan "$work/coop2.json" --cluster "$cluster" --json
cp "$work/out" "$work/sim.json"
expect "simulate blocks --json" 0 "$CZ" simulate --plan "$work/blocks.json" --cluster "$cluster" --json
if python3 - "$work/sim.json" "$work/out" "$work/coop2.json" "$work/blocks.json" <<'EOF'; then pass "simulate: the step follows the plan's makespan"; else fail "simulate: step vs makespan"; fi
import json, sys
coop, blocks = (json.load(open(f))["rows"][0] for f in sys.argv[1:3])
pc, pb = (json.load(open(f)) for f in sys.argv[3:5])
assert coop["coop_tasks"] == 15 and coop["coop_allreduce_s"] > 0, coop
assert "coop_tasks" not in blocks
# DP 1: the step is the update; with tasks at their own cost (not whole matrices per block)
# it is the plan's TP makespan plus the exposed gathers and scatters, within 10 %.
for row, plan in ((coop, pc), (blocks, pb)):
    mk = plan["metrics"]["tp"]["makespan"]
    assert mk <= row["step_s"] <= 1.1 * mk, (row["step_s"], mk)
EOF

# ---- render: block labels, cooperative boxes across their lanes ---------------------------------
expect "render coop2" 0 "$CZ" render "$work/coop2.json" --cluster "$cluster" -o "$work/coop2.svg"
if command -v xmllint >/dev/null; then
  expect "render coop2: well-formed" 0 xmllint --noout "$work/coop2.svg"
fi
n=$(grep -c 'class="coop-task"' "$work/coop2.svg")
[ "$n" = 15 ] && pass "render: 15 cooperative boxes" || fail "render: $n cooperative boxes, expected 15"
grep -q 'cooperative task (one box across its TP ranks)' "$work/coop2.svg" &&
  pass "render: legend" || fail "render: no cooperative legend"
grep -q 'linear_fc1\[0\] x2' "$work/coop2.svg" && pass "render: block label" ||
  fail "render: no 'linear_fc1[0] x2' label"
grep -q 'linear_fc1.weight\[0\] (cooperative on TP 0-1, 7 Gram panels)' "$work/coop2.svg" &&
  pass "render: panels in the task list" || fail "render: no '(cooperative on TP 0-1, 7 Gram panels)'"
# A box spans its k lanes: two lanes of 14 px at a pitch of 17 px.
grep -q 'class="coop-task"[^>]*height="31"' "$work/coop2.svg" && pass "render: box across 2 lanes" ||
  fail "render: no cooperative box 31 px high"
expect "render whole" 0 "$CZ" render "$work/whole.json" --cluster "$cluster" -o "$work/whole.svg"
grep -q 'coop' "$work/whole.svg" && fail "render whole: cooperative marks" ||
  pass "render whole: no cooperative marks"
if command -v rsvg-convert >/dev/null; then
  expect "render coop2: PNG" 0 rsvg-convert -o "$work/coop2.png" "$work/coop2.svg"
fi

[ "$fails" -eq 0 ] || { echo "$fails check(s) failed"; exit 1; }
echo "all checks passed"
