#!/usr/bin/env bash
# Per-head Muon in the planner (docs/PLANNER.md, "TP-local per-head tasks"; docs/PERF.md,
# section 17): Qwen3-32B imported with --per-head qkvo at TP 8 gets TP-local tasks for every
# per-head matrix (width 8 from slot 0, no Gram panels), validate accepts the plan, and the
# simulator moves no TP traffic for its attention (against whole-block Muon's, which it does);
# a hand-made local task on the wrong slots and a local task with panels are refused; --coop
# keeps per-head matrices hosted, and without it every other matrix stays hosted whole; the
# per-head DeepSeek-V3 at TP 8 on 8,192 GPUs plans in under
# 2 s of CPU (times CZ_TIME_SCALE; the issue's 1 s is measured in docs/PERF.md section 17), in
# the optimized build.
set -u
: "${CZ:?CZ must point to the canzona binary}"
: "${CZ_SOURCE_DIR:?}"
command -v python3 >/dev/null || { echo "python3 not found"; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fails=0
fail() { echo "FAIL $*"; fails=$((fails + 1)); }
src=$CZ_SOURCE_DIR
c=$src/plans/clusters/h100-64-dp8-tp8.json

"$CZ" import-hf "$src/plans/hf/qwen3-32b.config.json" --tp-size 8 --per-head qkvo \
  -o "$work/h.json" || fail "import-hf --per-head qkvo"
"$CZ" import-hf "$src/plans/hf/qwen3-32b.config.json" --tp-size 8 -o "$work/w.json" ||
  fail "import-hf"
"$CZ" plan -q -m "$work/h.json" -c "$c" -o "$work/h.plan.json" || fail "per-head plan"
"$CZ" validate "$work/h.plan.json" -m "$work/h.json" -c "$c" >"$work/v.out" 2>&1 ||
  fail "validate the per-head plan: $(cat "$work/v.out")"
python3 - "$work/h.plan.json" <<'PY' || fail "the per-head plan's tasks are not all TP-local"
import json, sys
p = json.load(open(sys.argv[1]))
tp = p["topology"]["tp"]
heads = {q["id"] for q in p["params"] if "heads" in q}
seen = {}
for s in p["tp_schedule"]:
    for g in s["groups"]:
        for k, sl in enumerate(g["slots"]):
            for t in sl:
                pid = t["param"] if isinstance(t, dict) else t
                if pid in heads:
                    assert isinstance(t, dict) and t.get("width") == tp and "panels" not in t, t
                    seen[pid] = seen.get(pid, 0) + 1
# 64 layers x (QKV: its 3 blocks; proj: whole), each task listed on all 8 slots.
names = {q["id"]: q["name"] for q in p["params"]}
assert len(heads) == 128, len(heads)
for i in heads:
    want = 3 * tp if "linear_qkv" in names[i] else tp
    assert seen.get(i) == want, (names[i], seen.get(i), want)
print("per-head matrices", len(heads), "task entries", sum(seen.values()))
PY

# The attention alone: whole-block Muon gathers and scatters over TP, per-head moves nothing.
attention() {
  python3 - "$1" "$2" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
for e in m["params"]:
    if "repeat" in e:
        e["params"] = [x for x in e["params"]
                       if "self_attention" in x["name"] and x["optimizer"] == "matrix"]
m["params"] = [e for e in m["params"] if "repeat" in e]
json.dump(m, open(sys.argv[2], "w"))
PY
}
tp_comm() { # model: the simulated TP collective time of its plan, seconds
  "$CZ" plan -q -m "$1" -c "$c" -o "$1.plan" &&
    "$CZ" simulate -m "$1" -c "$c" -p "$1.plan" --json |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["rows"][0]["tp_comm_s"])'
}
attention "$work/h.json" "$work/ha.json"
attention "$work/w.json" "$work/wa.json"
ph=$(tp_comm "$work/ha.json") || fail "simulate the per-head attention"
wh=$(tp_comm "$work/wa.json") || fail "simulate the whole-block attention"
python3 -c "import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); sys.exit(0 if a == 0 and b > 0 else 1)" \
  "$ph" "$wh" || fail "TP traffic: per-head attention $ph s (want 0), whole-block $wh s (want > 0)"

# A local task moved to other slots, or given panels, is refused.
python3 - "$work/h.plan.json" "$work/bad1.json" "$work/bad2.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
del p["content_sha256"]
g = next(g for s in p["tp_schedule"] for g in s["groups"]
         if any(isinstance(t, dict) and "width" in t for t in g["slots"][0]))
t = next(t for t in g["slots"][0] if isinstance(t, dict) and "width" in t)
bad = json.loads(json.dumps(p))
# Width 4 on slots 0-3 only: a local task needs all 8.
gb = next(x for s in bad["tp_schedule"] for x in s["groups"] if x["id"] == g["id"])
for k in range(8):
    gb["slots"][k] = [x for x in gb["slots"][k] if x != t]
for k in range(4):
    gb["slots"][k].append(dict(t, width=4))
json.dump(bad, open(sys.argv[2], "w"))
bad = json.loads(json.dumps(p))
gb = next(x for s in bad["tp_schedule"] for x in s["groups"] if x["id"] == g["id"])
for k in range(8):
    gb["slots"][k] = [dict(x, panels=1) if x == t else x for x in gb["slots"][k]]
json.dump(bad, open(sys.argv[3], "w"))
PY
"$CZ" validate "$work/bad1.json" -m "$work/h.json" -c "$c" >"$work/b1.out" 2>&1 &&
  fail "validate accepted a local task on 4 of 8 slots"
grep -q "schedule.local" "$work/b1.out" || fail "no schedule.local: $(head -c 600 "$work/b1.out")"
"$CZ" validate "$work/bad2.json" -m "$work/h.json" -c "$c" >"$work/b2.out" 2>&1 &&
  fail "validate accepted a local task with Gram panels"
grep -q "TP-local" "$work/b2.out" || fail "panels on a local task: $(head -c 600 "$work/b2.out")"

# --coop: per-head matrices stay hosted (a cooperative task is one Newton-Schulz).
"$CZ" plan -q -m "$work/h.json" -c "$c" --coop 2 -o "$work/coop.json" || fail "--coop 2 plan"
"$CZ" validate "$work/coop.json" -m "$work/h.json" -c "$c" >"$work/vc.out" 2>&1 ||
  fail "validate the --coop 2 per-head plan: $(head -c 600 "$work/vc.out")"

# Planning time at 8,192 GPUs: the per-head DeepSeek-V3 at TP 8 (PP 16, DP 64, EP 64).
"$CZ" import-hf "$src/plans/hf/deepseek-v3.config.json" --make-vocab-size-divisible-by 1 \
  --tp-size 8 --per-head qkvo -o "$work/ds.json" || fail "import-hf deepseek-v3"
TIMEFORMAT='%U %S'
t=$( { time "$CZ" plan -q -m "$work/ds.json" -c "$src/plans/clusters/h100-8192-pp16-ep64.json" \
  --tp-size 8 --dp-size 64 -o "$work/ds.plan.json" >/dev/null; } 2>&1) || fail "deepseek plan"
# The bound is the optimized build's (the sanitizers' build runs the planner several times
# slower: there the time is printed, not checked), and twice the issue's 1 s target, times
# CZ_TIME_SCALE: a loaded machine measured 1.17 s where a quiet one takes about 0.5 s (the
# figure itself is docs/PERF.md's, section 17).
if ldd "$CZ" 2>/dev/null | grep -q "libasan"; then
  echo "deepseek-v3 per-head, 8192 GPUs: user sys $t (sanitizer build: not checked)"
else
  python3 -c "import sys; u, s = map(float, sys.argv[1].split()); sys.exit(0 if u + s < 2 * float(sys.argv[2]) else 1)" \
    "$t" "${CZ_TIME_SCALE:-1}" || fail "DeepSeek-V3 per-head at 8,192 GPUs took $t s of CPU"
  echo "deepseek-v3 per-head, 8192 GPUs: user sys $t"
fi

# A matrix without heads beside TP-local per-head ones stays hosted whole without --coop: test-
# heads with its FFN's first matrix wide (128 x 512, unfused), where a cooperative width would pay, once
# got one that the plan's settings (coop off) then denied, so validate refused the planner's
# own plan (found by fuzz_model).
python3 - "$src/plans/models/test-heads.json" "$work/wide.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
def walk(ps):
    for q in ps:
        if "params" in q:
            walk(q["params"])
        elif q["name"].endswith("linear_fc1.weight"):
            q["shape"] = [q["shape"][1], q["shape"][0]]
            q.pop("blocks", None)
walk(m["params"])
json.dump(m, open(sys.argv[2], "w"))
PY
for cl in "$src/tests/data/cluster_tiny.json" "$src/plans/clusters/cpu-4-dp2-tp2.json"; do
  "$CZ" plan -q -m "$work/wide.json" -c "$cl" -o "$work/wide.plan.json" ||
    fail "plan test-heads with a wide fc1 on $cl"
  "$CZ" validate "$work/wide.plan.json" -m "$work/wide.json" -c "$cl" >"$work/v.out" 2>&1 ||
    fail "validate test-heads with a wide fc1 on $cl: $(cat "$work/v.out")"
done

if [ "$fails" -ne 0 ]; then
  echo "$fails failure(s)"
  exit 1
fi
echo "plan_heads: all passed"
