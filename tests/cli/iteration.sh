#!/usr/bin/env bash
# canzona simulate / compare --iteration (docs/SIMULATOR.md, "The iteration"): the iteration's
# table and JSON, its arithmetic (without overlap: the passes plus the step; with overlap: no
# longer, and no shorter than the passes), the workload options, and clear errors on bad values.
set -u
: "${CZ:?CZ must point at the canzona binary}" "${CZ_SOURCE_DIR:?}"
[ -x "$CZ" ] || { echo "skip: $CZ not built"; exit 77; }
command -v python3 >/dev/null || { echo "skip: python3 missing"; exit 77; }

model="$CZ_SOURCE_DIR/plans/models/qwen3-1.7b.json"
cluster="$CZ_SOURCE_DIR/plans/clusters/h100-64-dp8-tp8.json"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
one=(--model "$model" --cluster "$cluster" --dp alpha --tp rollback)

# ---- simulate: the table and the JSON ---------------------------------------------------------
"$CZ" simulate "${one[@]}" --iteration >"$work/it.txt" 2>"$work/err" ||
    fail "simulate --iteration exited non-zero: $(cat "$work/err")"
cat "$work/it.txt"
grep -q "^iteration: 8 micro-batches of 1 x 4096 tokens" "$work/it.txt" ||
    fail "simulate --iteration: no iteration heading with the defaults"
grep -q "ovl-iter" "$work/it.txt" || fail "simulate --iteration: no ovl-iter column"
"$CZ" simulate "${one[@]}" --json >"$work/plain.json" || fail "simulate --json exited non-zero"
grep -q '"iteration"' "$work/plain.json" && fail "simulate --json without --iteration has one"
"$CZ" simulate "${one[@]}" --iteration --json >"$work/it8.json" ||
    fail "simulate --iteration --json exited non-zero"
# --micro-batches alone turns the iteration on.
"$CZ" simulate "${one[@]}" --micro-batches 1 --seq-len 2048 --micro-batch-size 2 \
    --pass-efficiency 0.5 --json >"$work/it1.json" ||
    fail "simulate --micro-batches 1 exited non-zero"
python3 - "$work/it8.json" "$work/it1.json" <<'PY' || fail "simulate --iteration: the figures"
import json, sys
a = json.load(open(sys.argv[1]))["rows"][0]
b = json.load(open(sys.argv[2]))["rows"][0]
ia, ib = a["iteration"], b["iteration"]
def close(x, y, what):
    if abs(x - y) > 1e-9 * max(abs(x), abs(y), 1e-12):
        sys.exit("%s: %r != %r" % (what, x, y))
for it, row in ((ia, a), (ib, b)):
    passes = it["forward_s"] + it["backward_s"]
    close(it["iteration_s"], passes + row["step_s"], "without overlap = passes + step")
    close(it["backward_s"], 2 * it["forward_s"], "backward = 2 x forward")
    assert it["overlap"] is True, it
    assert passes - 1e-12 <= it["overlap_iteration_s"] <= it["iteration_s"] + 1e-12, it
    close(it["overlap_speedup"], it["iteration_s"] / it["overlap_iteration_s"], "speed-up")
    # No order beats the DP link's bound.
    assert it["overlap_dp_bound_s"] <= it["overlap_exposed_step_s"] + 1e-12, it
    assert it["gather_order"] == "forward", it
assert (ia["seq_len"], ia["micro_batch_size"], ia["micro_batches"]) == (4096, 1, 8), ia
assert (ib["seq_len"], ib["micro_batch_size"], ib["micro_batches"]) == (2048, 2, 1), ib
close(ia["pass_tflops"], 0.6 * 600.0, "the default rate: 0.6 x the cluster's 600 TFLOP/s")
close(ib["pass_tflops"], 0.5 * 600.0, "--pass-efficiency 0.5")
# Same tokens per micro-batch: the matmuls are the same, attention (s^2 per sequence) halves;
# 8 micro-batches against 1, at 0.6 against 0.5 of the rate: more than 8 x 0.5 / 0.6.
assert ia["forward_s"] > 8 * ib["forward_s"] * 0.5 / 0.6, (ia["forward_s"], ib["forward_s"])
PY

# The all-gathers in the order they become ready: never better than in forward order here.
"$CZ" simulate "${one[@]}" --gather-order ready --json >"$work/ready.json" ||
    fail "simulate --gather-order ready exited non-zero"
python3 - "$work/it8.json" "$work/ready.json" <<'PY' || fail "simulate --gather-order ready"
import json, sys
f = json.load(open(sys.argv[1]))["rows"][0]["iteration"]
r = json.load(open(sys.argv[2]))["rows"][0]["iteration"]
assert r["gather_order"] == "ready", r
assert r["overlap_iteration_s"] >= f["overlap_iteration_s"] - 1e-12, (r, f)
PY

# Deferred updates (the executor's default: its NaN/Inf check on) are the default here too;
# early updates (--early-updates) are never worse, and each is said so in the table and the
# JSON; --deferred-updates or --early-updates alone turns the iteration on.
"$CZ" simulate "${one[@]}" --early-updates --json >"$work/early.json" ||
    fail "simulate --early-updates exited non-zero"
"$CZ" simulate "${one[@]}" --deferred-updates --json >"$work/deferred.json" ||
    fail "simulate --deferred-updates exited non-zero"
python3 - "$work/early.json" "$work/deferred.json" "$work/it8.json" <<'PY' || fail "simulate --deferred-updates"
import json, sys
e, d, default = (json.load(open(f))["rows"][0]["iteration"] for f in sys.argv[1:4])
assert e["updates"] == "early" and d["updates"] == "deferred", (e, d)
assert default == d, ("the default is not the deferred schedule", default, d)
assert d["overlap_iteration_s"] >= e["overlap_iteration_s"] - 1e-12, (d, e)
assert d["overlap_dp_bound_s"] <= d["overlap_exposed_step_s"] + 1e-12, d
PY
"$CZ" simulate "${one[@]}" --deferred-updates | grep -q "updates deferred to the end of backward" ||
    fail "simulate --deferred-updates: the table does not say so"
"$CZ" simulate "${one[@]}" --iteration | grep -q "updates deferred to the end of backward (the executor's default" ||
    fail "simulate --iteration: the table does not say the updates are deferred by default"
"$CZ" simulate "${one[@]}" --early-updates | grep -q "early updates (--early-updates" ||
    fail "simulate --early-updates: the table does not say so"

# ---- compare: the two iteration columns --------------------------------------------------------
"$CZ" compare --model "$CZ_SOURCE_DIR/plans/models/test-small.json" \
    --cluster "$CZ_SOURCE_DIR/plans/clusters/cpu-4-dp2-tp2.json" --repeats 1 --iteration \
    >"$work/cmp.txt" 2>"$work/err" || fail "compare --iteration exited non-zero: $(cat "$work/err")"
head -4 "$work/cmp.txt"
grep -q "iter ms *ovl-iter ms" "$work/cmp.txt" || fail "compare --iteration: no iteration columns"
# even+sc is not overlapped (its fragments are gathered first); alpha(cost)+rollback is.
awk '$1 == "even+sc" { exit !($(NF) == "-") }' "$work/cmp.txt" ||
    fail "compare --iteration: even+sc should show '-' for the overlapped iteration"
awk '$1 == "alpha(cost)+rollback" { exit !($(NF) + 0 >= 1) }' "$work/cmp.txt" ||
    fail "compare --iteration: alpha(cost)+rollback without an overlap speed-up"

# ---- bad values: a message naming the option, exit status 2 -----------------------------------
for bad in "--seq-len 0" "--seq-len x" "--micro-batches 0" "--micro-batch-size -1" \
    "--pass-efficiency 0" "--pass-efficiency 1.5" "--pass-efficiency nan" \
    "--gather-order sideways"; do
    opt=${bad%% *}
    # shellcheck disable=SC2086 # the option and its value are two words
    "$CZ" simulate "${one[@]}" $bad >/dev/null 2>"$work/err"
    st=$?
    [ "$st" = 2 ] || fail "simulate $bad: exit status $st, expected 2"
    grep -q -- "$opt" "$work/err" ||
        fail "simulate $bad: the message does not name $opt: $(cat "$work/err")"
done
# A model with expert groups: refused, saying why.
"$CZ" simulate --model "$CZ_SOURCE_DIR/plans/models/qwen3-30b-a3b.json" \
    --cluster "$CZ_SOURCE_DIR/plans/clusters/h100-64-tp4-ep8.json" --dp alpha --tp rollback \
    --iteration >/dev/null 2>"$work/err" &&
    fail "simulate --iteration accepted a model with experts"
grep -q "dense models" "$work/err" || fail "simulate --iteration on experts: $(cat "$work/err")"

[ "$fails" = 0 ] || { echo "$fails failure(s)"; exit 1; }
echo "ok"
