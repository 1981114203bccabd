#!/usr/bin/env bash
# The device model and calibration files on the command line: a plan made with --calibration
# records it (inputs.calibration, device, time and hash) and costs differently; one made without
# records nothing (the golden plans are made so); validate needs the same calibration as plan
# had; simulate, compare and render take it; a cluster's device.kind turns the device model on;
# unreadable or wrong files are refused naming the file and the JSON path. Everything is written
# into one mktemp folder.
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
model="$src/plans/models/test-small.json"
cluster="$src/plans/clusters/cpu-4-dp2-tp2.json"
cal="$src/plans/calibration/h200.json"

"$CZ" plan -q -m "$model" -c "$cluster" -o "$work/flat.json" || fail "plan without calibration"
grep -q '"calibration"' "$work/flat.json" && fail "a plan made without --calibration records one"
"$CZ" plan -q -m "$model" -c "$cluster" --calibration "$cal" -o "$work/cal.json" ||
  fail "plan --calibration"
python3 - "$work/cal.json" "$work/flat.json" <<'PY' || fail "plan --calibration: the record or the costs"
import json, sys
p = json.load(open(sys.argv[1])); q = json.load(open(sys.argv[2]))
c = p["inputs"]["calibration"]
assert c["device"] == "NVIDIA H200", c
assert c["measured_at"] == "2026-11-27T12:16:46Z", c
assert len(c["sha256"]) == 64, c
assert p["params"][0]["cost"] != q["params"][0]["cost"], "same costs with and without"
PY
"$CZ" validate "$work/cal.json" -m "$model" -c "$cluster" --calibration "$cal" >"$work/v.txt" ||
  fail "validate with the plan's calibration: $(cat "$work/v.txt")"
if "$CZ" validate "$work/cal.json" -m "$model" -c "$cluster" >"$work/v.txt"; then
  fail "validate without the plan's calibration accepted it"
fi
grep -q 'give the same --calibration' "$work/v.txt" || fail "validate: no word on the calibration"
if "$CZ" validate "$work/flat.json" -m "$model" -c "$cluster" --calibration "$cal" >"$work/v.txt"; then
  fail "validate of a plan made without a calibration accepted one"
fi

# simulate, render and compare take it; render only with a cluster.
"$CZ" simulate --plan "$work/cal.json" -c "$cluster" --calibration "$cal" >"$work/s.txt" ||
  fail "simulate --calibration"
grep -q "device model on" "$work/s.txt" || fail "simulate --calibration: no note on the device model"
"$CZ" render "$work/cal.json" -c "$cluster" --calibration "$cal" -o "$work/r.svg" ||
  fail "render --calibration"
"$CZ" render "$work/cal.json" --calibration "$cal" -o "$work/r2.svg" 2>"$work/err"
[ $? = 2 ] || fail "render --calibration without --cluster: expected exit 2"
grep -q -- "--calibration needs --cluster" "$work/err" || fail "render: $(cat "$work/err")"
"$CZ" compare -m "$model" -c "$cluster" --calibration "$cal" --repeats 1 --muon-ns-batch-size 4 \
  --overlap-param-gather >"$work/c.txt" 2>"$work/err" || fail "compare --calibration: $(cat "$work/err")"
grep -q "layerwise(aug26)+sc(layer_sharded)" "$work/c.txt" || fail "compare: no layer-sharded row"

# Refusals: a missing file, an edited one, the calibration as the output.
"$CZ" plan -q -m "$model" -c "$cluster" --calibration "$work/nope.json" 2>"$work/err" &&
  fail "plan --calibration of a missing file"
grep -q "nope.json" "$work/err" || fail "missing calibration: $(cat "$work/err")"
python3 - "$cal" "$work/edited.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); c["gemm"][3]["seconds"] *= 2
json.dump(c, open(sys.argv[2], "w"))
PY
"$CZ" simulate -m "$model" -c "$cluster" --calibration "$work/edited.json" 2>"$work/err" >/dev/null &&
  fail "simulate accepted an edited calibration"
grep -q 'edited.json: $.gemm\[3\]: tflops is' "$work/err" || fail "edited calibration: $(cat "$work/err")"
# A measured collective over 0 ranks (or 1: no collective at all) is refused by plan and
# simulate, naming the file and the JSON path.
for ranks in 0 1; do
  python3 - "$src/tests/data/calibration_v2_example.json" "$work/ranks$ranks.json" "$ranks" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); c["collectives"][1]["ranks"] = int(sys.argv[3])
json.dump(c, open(sys.argv[2], "w"))
PY
  for cmd in plan simulate; do
    out=()
    [ $cmd = plan ] && out=(-q -o "$work/ranks.plan.json")
    "$CZ" $cmd -m "$model" -c "$cluster" --calibration "$work/ranks$ranks.json" "${out[@]}" \
      2>"$work/err" >/dev/null && fail "$cmd accepted collectives[1].ranks = $ranks"
    grep -q "ranks$ranks.json: \$.collectives\[1\].ranks: expected an integer in \[2, " "$work/err" ||
      fail "$cmd, collectives[1].ranks = $ranks: $(cat "$work/err")"
  done
done
cp "$cal" "$work/out.json"
"$CZ" plan -q -m "$model" -c "$cluster" --calibration "$work/out.json" -o "$work/out.json" \
  2>"$work/err" && fail "plan wrote over its calibration"
grep -q "the calibration" "$work/err" || fail "output = calibration: $(cat "$work/err")"

# device.kind: the device model without a calibration; an unknown kind is refused.
python3 - "$cluster" "$work/kind.json" "$work/badkind.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); c["device"]["kind"] = "H100"
json.dump(c, open(sys.argv[2], "w"))
c["device"]["kind"] = "A100"; json.dump(c, open(sys.argv[3], "w"))
PY
"$CZ" simulate -m "$model" -c "$work/kind.json" >"$work/s.txt" || fail "simulate with device.kind"
grep -q "device model on" "$work/s.txt" || fail "device.kind: no note on the device model"
"$CZ" plan -q -m "$model" -c "$work/badkind.json" 2>"$work/err" && fail "plan accepted kind A100"
grep -q 'badkind.json: $.device.kind: expected one of "H100", "H200", "B200", "GB300"' "$work/err" ||
  fail "unknown kind: $(cat "$work/err")"

# Megatron's options: --gtp-size for one sc configuration, layer sharding, the overlaps.
"$CZ" simulate -m "$model" -c "$cluster" --dp layerwise --tp sc --muon-tp layer_sharded \
  --gtp-size 2 --overlap-param-gather --overlap-grad-reduce --json >"$work/g.json" ||
  fail "simulate --gtp-size 2 --muon-tp layer_sharded"
python3 - "$work/g.json" <<'PY' || fail "simulate --overlap-*: the hidden collectives"
import json, sys
r = json.load(open(sys.argv[1]))["rows"][0]
assert r["muon_tp"] == "layer_sharded"
assert r["grad_sync_total_s"] >= r["grad_sync_s"] and r["param_sync_total_s"] >= r["param_sync_s"]
PY
"$CZ" simulate -m "$model" -c "$cluster" --gtp-size 2 2>"$work/err" >/dev/null &&
  fail "simulate: --gtp-size accepted for the table"
"$CZ" simulate -m "$model" -c "$cluster" --dp layerwise --tp sc --muon-tp duplicated \
  --gtp-size 3 2>"$work/err" >/dev/null && fail "simulate: --gtp-size 3 of TP 2 accepted"
grep -q "must divide the TP size" "$work/err" || fail "--gtp-size 3: $(cat "$work/err")"

[ "$fails" = 0 ] || exit 1
echo "ok"
