#!/usr/bin/env bash
# The fully sharded layout (--layout fsdp, canzona.plan/4) through the CLI on test-small at
# DP 2 x TP 2: plan writes version 4 with shard rows and owners and no buckets; validate accepts
# it and refuses it against a job that contradicts it (another DP size, a parameter's shards
# edited), naming the parameter and the rule; inspect reports the shard group's micro-groups;
# simulate and compare put it beside the ZeRO-1 plan and the FSDP2 + torch.optim.Muon baseline;
# diff compares two of them and render draws one; HSDP (--replicate-size, both --hsdp-compute
# modes) plans, validates, inspects and simulates; --split and DP strategies refuse it with a
# message.
set -u
: "${CZ:?CZ must point to the canzona binary}"
src=${CZ_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
model="$src/plans/models/test-small.json"
cluster="$src/plans/clusters/cpu-4-dp2-tp2.json"
for f in "$model" "$cluster"; do
  [ -f "$f" ] || { echo "skip: bundled input $f missing"; exit 77; }
done
command -v python3 >/dev/null || { echo "skip: python3 missing"; exit 77; }
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
has() {
  if grep -qF -- "$2" "$work/out"; then pass "$1"; else fail "$1: no '$2' in output"; head -30 "$work/out"; fi
}

expect "plan fsdp" 0 "$CZ" plan -m "$model" -c "$cluster" --layout fsdp -o "$work/f.json"
has "summary names the layout" "layout   fsdp: every parameter Shard(0) over 2 DP ranks"
python3 - "$work/f.json" <<'PY' && pass "version 4: shard rows, owners, no buckets" || fail "plan file content"
import json, math, sys
p = json.load(open(sys.argv[1]))
assert p["schema"] == "canzona.plan/4" and p["settings"]["layout"] == "fsdp"
assert "buckets" not in p and "buckets_config" not in p and "tp_schedule" not in p
assert len(p["fsdp_schedule"]) == 1
for q in p["params"]:
    assert q["shard_rows"] == math.ceil(q["local_shape"][0] / 2), q
    if q["optimizer"] == "matrix":
        assert 0 <= q["owner"] < 4 and q["dp_owner"] == q["owner"] // 2, q
    else:
        assert q["owner"] == -1 and q["dp_owner"] == -1, q
hosted = sorted(t for g in p["fsdp_schedule"][0]["groups"] for s in g["slots"] for t in s)
assert hosted == sorted(q["id"] for q in p["params"] if q["optimizer"] == "matrix")
PY
expect "plan is deterministic" 0 "$CZ" plan -m "$model" -c "$cluster" --layout fsdp -o "$work/g.json"
cmp -s "$work/f.json" "$work/g.json" && pass "byte-identical plans" || fail "plans differ"

expect "validate fsdp" 0 "$CZ" validate "$work/f.json" -m "$model" -c "$cluster"
has "validate OK" "plan OK"
# Another DP size: FSDP2 would cut every parameter differently.
expect "validate other DP" 1 "$CZ" validate "$work/f.json" -m "$model" -c "$cluster" \
  --dp-size 1 --tp-size 2 --nodes 1 --gpus-per-node 2 --limit 0
has "rule fsdp.dp" "[fsdp.dp]"
has "names the parameter" "'embedding.word_embeddings.weight': the plan gives each DP rank 256 rows"
# A parameter's shard rows edited (content hash then fails too).
python3 - "$work/f.json" "$work/e.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
q = next(q for q in p["params"] if q["name"] == "extra.weight")
q["shard_rows"] = 64
json.dump(p, open(sys.argv[2], "w"), indent=1)
PY
expect "validate edited shards" 1 "$CZ" validate "$work/e.json" -m "$model" -c "$cluster" --limit 0
has "structural rule" "'extra.weight': shard_rows is 64 but FSDP2 (torch.chunk along dim 0) gives each of the 2 DP ranks ceil(64 / 2) = 32"
has "job rule" "[fsdp.shard_rows]"

expect "inspect fsdp" 0 "$CZ" inspect "$work/f.json"
has "inspect layout" "layout    fsdp:"
has "inspect groups" "fully sharded: 4 GPUs per schedule"
expect "inspect json" 0 "$CZ" inspect "$work/f.json" --json
has "inspect json fsdp" '"shard_group_gpus": 4'

expect "simulate plan" 0 "$CZ" simulate --plan "$work/f.json" -m "$model" -c "$cluster"
has "simulate zero1 row" "zero1"
has "simulate fsdp row" "fsdp "
has "simulate baseline row" "fsdp2+muon"
expect "simulate layout" 0 "$CZ" simulate -m "$model" -c "$cluster" --layout fsdp --json
python3 - "$work/out" <<'PY' && pass "simulate json rows" || fail "simulate json rows"
import json, sys
rows = {r["name"]: r for r in json.load(open(sys.argv[1]))}
assert set(rows) == {"zero1", "fsdp", "fsdp2+muon"}
assert rows["fsdp"]["makespan_over_lower_bound"] >= 1.0 - 1e-12
for r in rows.values():
    assert abs(r["step_s"] - r["grad_sync_s"] - r["optimizer_s"]) <= 1e-9 * r["step_s"]
# Every matrix on every GPU costs more than each on one owner.
assert rows["fsdp2+muon"]["optimizer_s"] > rows["fsdp"]["optimizer_s"]
PY
expect "compare layout" 0 "$CZ" compare -m "$model" -c "$cluster" --layout fsdp
has "compare rows" "zero1"

expect "diff identical" 0 "$CZ" diff "$work/f.json" "$work/g.json"
expect "plan one group" 0 "$CZ" plan -m "$model" -c "$cluster" --layout fsdp --capacity 1e9 -o "$work/one.json"
"$CZ" diff "$work/f.json" "$work/one.json" --json >"$work/d.json" 2>&1
python3 - "$work/d.json" "$work/f.json" "$work/one.json" <<'PY' && pass "diff of two fsdp plans" || { fail "diff of two fsdp plans"; head -c 2000 "$work/d.json"; }
import json, sys
d = json.load(open(sys.argv[1]))
a, b = (json.load(open(f)) for f in sys.argv[2:4])
moved = sum(1 for x, y in zip(a["params"], b["params"]) if x["owner"] != y["owner"] or x["dp_owner"] != y["dp_owner"])
assert d["moved"]["matched"] == len(a["params"]), d["moved"]
assert d["moved"]["any"] >= (1 if moved else 0), d["moved"]
assert d["buckets"]["a"] == 0 and d["buckets"]["b"] == 0
PY
expect "plan unified" 0 "$CZ" plan -m "$model" -c "$cluster" -o "$work/u.json"
expect "diff fsdp against unified refused" 1 "$CZ" diff "$work/f.json" "$work/u.json"
has "diff message" "has layout fsdp and the other not"
expect "inspect startup refused" 1 "$CZ" inspect "$work/f.json" --startup
has "startup message" "the start-up of a fully sharded plan (layout fsdp) is not modelled yet"
# render draws the per-GPU loads and the busiest stage's micro-groups; with a cluster, the
# simulated fully sharded step in the title.
expect "render fsdp" 0 "$CZ" render "$work/f.json" -o "$work/f.svg"
grep -qF "(b) the micro-groups of stage 0 over its 4 GPUs" "$work/f.svg" && pass "render: groups panel" ||
  fail "render: no groups panel"
grep -qF "fully sharded (FSDP2)" "$work/f.svg" && pass "render: layout in the title" || fail "render: title"
expect "render fsdp html with cluster" 0 "$CZ" render "$work/f.json" --cluster "$cluster" --html -o "$work/f.html"
grep -qF "simulated step" "$work/f.html" && pass "render: simulated step" || fail "render: no simulated step"
grep -qF "<th>buffer layout</th><td>fsdp:" "$work/f.html" && pass "render: html layout row" || fail "render: html layout row"
mkdir -p "$work/split"
expect "split refused" 1 "$CZ" plan -m "$model" -c "$cluster" --layout fsdp -o "$work/s.json" \
  --split "$work/split"
has "split message" "cannot be split into per-rank parts"
# HSDP: DP 4 as 2 replicas of 2 shard ranks. Redundant: each replica schedules every matrix
# over its own 2 GPUs; partitioned: over all 4, each matrix once.
dp4="$src/plans/clusters/cpu-4-dp4-tp1.json"
for mode in redundant partitioned; do
  expect "plan hsdp $mode" 0 "$CZ" plan -m "$model" -c "$dp4" --layout fsdp --replicate-size 2 \
    --hsdp-compute "$mode" -o "$work/h-$mode.json"
  has "hsdp $mode: summary" "HSDP: 2 replicas of 2 shard ranks"
  python3 - "$work/h-$mode.json" "$mode" <<'PY' && pass "hsdp $mode: file" || fail "hsdp $mode: file"
import json, math, sys
p = json.load(open(sys.argv[1])); mode = sys.argv[2]
assert p["settings"]["replicate"] == 2 and p["settings"]["hsdp_compute"] == mode, p["settings"]
slots = 2 if mode == "redundant" else 4
for q in p["params"]:
    assert q["shard_rows"] == math.ceil(q["local_shape"][0] / 2), q  # over the 2 shard ranks
    if q["optimizer"] == "matrix":
        assert 0 <= q["owner"] < slots, q
for g in p["fsdp_schedule"][0]["groups"]:
    assert len(g["slots"]) == slots and len(g["load"]) == slots, g
PY
  expect "validate hsdp $mode" 0 "$CZ" validate "$work/h-$mode.json" -m "$model" -c "$dp4"
  expect "inspect hsdp $mode" 0 "$CZ" inspect "$work/h-$mode.json"
  has "inspect hsdp $mode: layout" "fsdp, HSDP: 2 replicas of 2 shard ranks"
  has "inspect hsdp $mode: mode" "$mode: each matrix owned by one GPU"
done
# auto: both planned and simulated, the shorter kept and recorded (never "auto" in the file).
expect "plan hsdp auto" 0 "$CZ" plan -m "$model" -c "$dp4" --layout fsdp --replicate-size 2 \
  --hsdp-compute auto -o "$work/h-auto.json"
python3 - "$work/h-auto.json" "$work/h-redundant.json" "$work/h-partitioned.json" <<'PY' && pass "hsdp auto: one of the two modes" || fail "hsdp auto: file"
import json, sys
a, r, p = (json.load(open(f)) for f in sys.argv[1:4])
mode = a["settings"]["hsdp_compute"]
assert mode in ("redundant", "partitioned"), mode
same = r if mode == "redundant" else p
assert a["fsdp_schedule"] == same["fsdp_schedule"], "auto's plan is not that mode's plan"
PY
python3 -c 'import json,sys; p=json.load(open(sys.argv[1])); del p["content_sha256"]
p["settings"]["hsdp_compute"] = "auto"; json.dump(p, open(sys.argv[2], "w"))' "$work/h-auto.json" "$work/h-auto-edited.json"
expect "auto in a plan file refused" 1 "$CZ" inspect "$work/h-auto-edited.json"
has "auto in a plan file: message" "a plan records the mode it chose"
# Both modes are simulated side by side, whichever the plan is.
expect "simulate hsdp" 0 "$CZ" simulate -m "$model" -c "$dp4" --plan "$work/h-redundant.json"
has "simulate hsdp: redundant row" "hsdp redundant"
has "simulate hsdp: partitioned row" "hsdp partitioned"
has "simulate hsdp: baseline row" "hsdp2+muon"
expect "compare hsdp" 0 "$CZ" compare -m "$model" -c "$dp4" --layout fsdp --replicate-size 2
has "compare hsdp: rows" "hsdp partitioned"
expect "diff hsdp modes" 0 "$CZ" diff "$work/h-redundant.json" "$work/h-partitioned.json"
has "diff hsdp modes: the setting" "hsdp_compute"
# A plain FSDP plan relabelled HSDP (partitioned: its 4-slot schedule still reads): its shards
# are cut over 4 ranks, the job's over 2.
expect "plan fsdp dp4" 0 "$CZ" plan -m "$model" -c "$dp4" --layout fsdp -o "$work/f4.json"
python3 -c 'import json,sys; p=json.load(open(sys.argv[1])); del p["content_sha256"]
p["settings"]["replicate"] = 2; p["settings"]["hsdp_compute"] = "partitioned"
json.dump(p, open(sys.argv[2], "w"))' "$work/f4.json" "$work/h-edited.json"
expect "validate fsdp plan as hsdp" 1 "$CZ" validate "$work/h-edited.json" -m "$model" -c "$dp4" --limit 0
has "fsdp plan as hsdp: rule" "[fsdp.shard_rows]"
has "fsdp plan as hsdp: the shard ranks" "each of the 2 shard ranks"
python3 -c 'import json,sys; p=json.load(open(sys.argv[1])); del p["settings"]["hsdp_compute"]
json.dump(p, open(sys.argv[2], "w"))' "$work/h-redundant.json" "$work/h-half.json"
expect "replicate without hsdp_compute refused" 1 "$CZ" inspect "$work/h-half.json"
has "replicate without hsdp_compute: message" "replicate and hsdp_compute go together"
expect "hsdp: DP not a multiple" 1 "$CZ" plan -m "$model" -c "$dp4" --layout fsdp --replicate-size 3
has "hsdp: DP not a multiple: message" "DP size 4 is not a multiple of the replicate size 3"
expect "hsdp without fsdp" 1 "$CZ" plan -m "$model" -c "$dp4" --replicate-size 2
has "hsdp without fsdp: message" "applies to --layout fsdp only"
expect "hsdp-compute unknown" 2 "$CZ" plan -m "$model" -c "$dp4" --layout fsdp --replicate-size 2 \
  --hsdp-compute both
has "hsdp-compute unknown: message" "expected redundant"
expect "dp strategy refused" 1 "$CZ" plan -m "$model" -c "$cluster" --layout fsdp --dp alpha
has "dp strategy message" "--layout fsdp chooses every matrix's owner over the whole shard group"

[ "$fails" -eq 0 ] || { echo "$fails failed"; exit 1; }
echo "all passed"
