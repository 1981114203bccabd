#!/usr/bin/env bash
# canzona validate / inspect / diff on plans of the bundled models and clusters: real plans of
# two strategies validate and differ, a hand-corrupted plan fails validation at the corrupted
# parameter's path, and plans of different models are refused unless forced.
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
  if grep -qF -- "$2" "$work/out"; then pass "$1"; else fail "$1: no '$2' in output"; head -20 "$work/out"; fi
}

expect "plan alpha/rollback" 0 "$CZ" plan -m "$model" -c "$cluster" -o "$work/a.json" -q
expect "plan anchored/none" 0 "$CZ" plan -m "$model" -c "$cluster" -o "$work/b.json" -q \
  --dp anchored --tp none
expect "plan other model" 0 "$CZ" plan -m "$other" -c "$cluster" -o "$work/o.json" -q

# validate: both real plans pass.
for p in a b; do
  expect "validate $p" 0 "$CZ" validate "$work/$p.json" --model "$model" --cluster "$cluster"
  has "validate $p says OK" "plan OK: "
done
expect "validate --json" 0 "$CZ" validate "$work/a.json" -m "$model" -c "$cluster" --json
has "validate --json valid" '"valid": true'
expect "validate against the wrong model" 1 "$CZ" validate "$work/a.json" -m "$other" -c "$cluster"
has "wrong model: hash path" '$.inputs.model.sha256'
expect "validate usage" 2 "$CZ" validate "$work/a.json"
expect "validate unreadable plan" 1 "$CZ" validate "$work/missing.json" -m "$model" -c "$cluster"

# A hand-corrupted plan: the first matrix parameter gets the next DP rank as its owner.
if ! command -v python3 >/dev/null; then
  fail "python3 is needed to corrupt a plan"
else
  idx=$(python3 - "$work/a.json" "$work/bad.json" <<'EOF'
import json, sys
plan = json.load(open(sys.argv[1]))
dp = plan["topology"]["dp"]
for i, p in enumerate(plan["params"]):
    if p["optimizer"] == "matrix":
        p["dp_owner"] = (p["dp_owner"] + 1) % dp
        break
json.dump(plan, open(sys.argv[2], "w"), indent=1)
print(i)
EOF
  )
  expect "validate corrupted dp_owner" 1 "$CZ" validate "$work/bad.json" -m "$model" -c "$cluster"
  has "corrupted: param path" "\$.params[$idx].dp_owner"
  has "corrupted: summary" "plan INVALID"
  has "corrupted: content hash" "plan content hash mismatch: the plan was edited after it was written"
  # Without the content hash (an older plan) the same content validates against the model.
  python3 -c 'import json,sys; p=json.load(open(sys.argv[1])); del p["content_sha256"]; json.dump(p, open(sys.argv[2], "w"))' "$work/a.json" "$work/nohash.json"
  expect "validate a plan without content_sha256" 0 "$CZ" validate "$work/nohash.json" -m "$model" -c "$cluster"
  # Costs each finite that sum past the largest double (a fuzzer's find: inspect failed as if out
  # of memory, and leaked).
  python3 -c 'import json,sys; p=json.load(open(sys.argv[1])); del p["content_sha256"]
for q in p["params"][:2]: q["cost"] = 1.7e308
json.dump(p, open(sys.argv[2], "w"))' "$work/a.json" "$work/huge.json"
  expect "inspect costs that overflow" 1 "$CZ" inspect "$work/huge.json"
  has "overflowing costs: message" "\$.params: the parameter costs sum to more than a double holds"
  # A numel the reader takes (up to 2^52, CZ_PLAN_MAX_ELEMENTS) but that disagrees with the
  # local shape, on a plan whose parameters are updated in pieces (even): inspect and simulate
  # compared offset + numel with the DP ranges and overflowed (a fuzzer's find: UBSan in
  # memory.c, metrics.c); now they run, and validate names the field.
  expect "plan even/sc" 0 "$CZ" plan -m "$model" -c "$cluster" -o "$work/even.json" -q --dp even --tp sc
  edit() { # edit IN OUT PYTHON: OUT is IN without its content hash, after PYTHON ran on p
    python3 -c 'import json,sys; p=json.load(open(sys.argv[1])); del p["content_sha256"]
exec(sys.argv[3]); json.dump(p, open(sys.argv[2], "w"))' "$1" "$2" "$3"
  }
  edit "$work/even.json" "$work/bignumel.json" 'p["params"][1]["numel"] = 2**51'
  expect "inspect a numel of 2^51" 0 "$CZ" inspect "$work/bignumel.json"
  expect "render a numel of 2^51" 0 "$CZ" render "$work/bignumel.json" -o "$work/bignumel.svg"
  expect "simulate a numel of 2^51" 0 "$CZ" simulate -m "$model" -c "$cluster" --plan "$work/bignumel.json"
  expect "validate a numel of 2^51" 1 "$CZ" validate "$work/bignumel.json" -m "$model" -c "$cluster"
  has "numel of 2^51: the field" "\$.params[1].numel"
  # Values near INT64_MAX overflowed in one consumer after another (the fuzzer's finds: the
  # simulator's wire bytes, Megatron's layer-wise layout); the reader now refuses any count,
  # offset or size above 2^52, and sums of them above it, naming the field.
  edit "$work/even.json" "$work/hugenumel.json" 'p["params"][1]["numel"] = 2**63 - 1'
  expect "inspect a numel of INT64_MAX" 1 "$CZ" inspect "$work/hugenumel.json"
  has "inspect a numel of INT64_MAX: the field and the limit" \
    "\$.params[1].numel: expected an integer in [1, 4503599627370496], found 9223372036854775807"
  expect "render a numel of INT64_MAX" 1 "$CZ" render "$work/hugenumel.json" -o "$work/huge.svg"
  has "render a numel of INT64_MAX: the field" "\$.params[1].numel: expected an integer in [1, 4503599627370496]"
  edit "$work/a.json" "$work/bigsize.json" 'p["buckets"][0]["size"] = 2**63 - 1'
  expect "simulate a bucket size of INT64_MAX" 1 "$CZ" simulate -m "$model" -c "$cluster" --plan "$work/bigsize.json"
  has "bucket size of INT64_MAX: the field" "\$.buckets[0].size: expected an integer in [0, 4503599627370496]"
  edit "$work/a.json" "$work/sumsize.json" 'p["buckets"][0]["size"] = 2**52; p["buckets"][-1]["size"] = 2**52'
  expect "validate bucket sizes summing past 2^52" 1 "$CZ" validate "$work/sumsize.json" -m "$model" -c "$cluster"
  has "bucket sizes summing past 2^52: message" "\$.buckets: the buckets' sizes sum to"
  expect "validate corrupted --json" 1 "$CZ" validate "$work/bad.json" -m "$model" -c "$cluster" --json
  has "corrupted --json: path" "\"\$.params[$idx].dp_owner\""
fi

# inspect
expect "inspect" 0 "$CZ" inspect "$work/a.json"
for key in "topology  64 GPUs = DP 8 x TP 8 x PP 1" "DP load max/mean" "makespan / lower bound" \
  "busiest ranks" "micro-groups" "matrices heavier than the average GPU load"; do
  has "inspect shows '$key'" "$key"
done
expect "inspect --top 1 --all" 0 "$CZ" inspect "$work/a.json" --top 1 --all
has "inspect --all per-GPU table" "TP rank"
has "inspect shows the busiest GPU's memory" "memory of the busiest GPU"
expect "inspect --cluster" 0 "$CZ" inspect "$work/a.json" --cluster "$cluster"
has "inspect --cluster shows the headroom" "GiB: headroom "
expect "inspect --cluster of another topology" 1 "$CZ" inspect "$work/a.json" \
  --cluster "$src/plans/clusters/h100-8-dp8-tp1.json"
expect "inspect --json" 0 "$CZ" inspect "$work/a.json" --json
has "inspect --json busiest" '"busiest"'
expect "inspect bad --top" 2 "$CZ" inspect "$work/a.json" --top x

# diff
expect "diff identical" 0 "$CZ" diff "$work/a.json" "$work/a.json"
has "diff identical says so" "no differences"
expect "diff strategies" 0 "$CZ" diff "$work/a.json" "$work/b.json"
has "diff strategies: settings" "anchored"
expect "diff strategies --json" 0 "$CZ" diff "$work/a.json" "$work/b.json" --json --limit 3
moved=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["moved"]["any"])' "$work/out" 2>/dev/null || echo 0)
if [ "${moved:-0}" -gt 0 ]; then pass "diff strategies: $moved params moved"; else fail "diff strategies: no moved params"; fi
listed=$(python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["moved"]["list"]))' "$work/out" 2>/dev/null || echo -1)
[ "$listed" -le 3 ] && pass "diff --limit 3 lists $listed" || fail "diff --limit 3 lists $listed"
# The busiest ranks: named in the text, and on real plans the listed effects add up to each
# rank's makespan delta (whole owners: nothing unexplained), largest effect first.
expect "diff strategies: makespan section" 0 "$CZ" diff "$work/a.json" "$work/b.json"
has "diff names the busiest ranks" "makespan  "
has "diff explains the busiest rank" "what changed its makespan, largest effect first:"
expect "diff strategies --json, all changes" 0 "$CZ" diff "$work/a.json" "$work/b.json" --json --limit 100000
if python3 - "$work/out" <<'PY'; then pass "diff: effects add up, ranked"; else fail "diff: effects"; fi
import json, sys
r = json.load(open(sys.argv[1]))
mk, ranks = r["makespan"], r["metrics"]
busy = {(x["stage"], x["dp_rank"]): x for x in r["ranks"]}
assert mk["ranks"], "no busiest rank"
for x in mk["ranks"]:
    effects = [c["effect"] for c in x["list"]]
    assert len(effects) == x["changes"], (len(effects), x["changes"])
    assert abs(sum(effects) - x["delta"]) <= 1e-9 * max(x["makespan_a"], x["makespan_b"]), x
    assert all(abs(a) >= abs(b) for a, b in zip(effects, effects[1:])), effects
    row = busy[(x["stage"], x["dp_rank"])]
    assert abs(row["makespan_delta"] - x["delta"]) < 1e-15, (row, x)
    for w in (x["why_a"], x["why_b"]):
        assert w["bound"] in ("its largest task", "tasks stacked on a slot",
                              "micro-groups in sequence", "elementwise work"), w
        assert (w["bound"] == "micro-groups in sequence") == (w["groups"] > 1), w
b = mk["b"]
assert abs(b["makespan"] - max(v["makespan_a"] + v["makespan_delta"] for v in r["ranks"])) < 1e-12
PY
expect "diff other model refused" 1 "$CZ" diff "$work/a.json" "$work/o.json"
has "refusal names the models" "different models"
expect "diff other model --force" 0 "$CZ" diff --force "$work/a.json" "$work/o.json"
has "forced diff matched by name" "matched by name"
expect "diff usage" 2 "$CZ" diff "$work/a.json"

echo "$fails failed"
[ $fails -eq 0 ]
