#!/usr/bin/env bash
# Inputs the readers must refuse quickly and clearly: devices such as /dev/zero and oversized
# files (refused before reading, within a second), parameter names that would become paths
# outside a folder, and models whose element count (one parameter or the total) is beyond what
# 64-bit offsets and sums can hold. Every case names the file and, for JSON content, the path.
set -u
: "${CZ:?CZ must point at the canzona binary}" "${CZ_SOURCE_DIR:?}"
[ -x "$CZ" ] || { echo "skip: $CZ not built"; exit 77; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
M="$CZ_SOURCE_DIR/tests/data/model_tiny.json"
# One stage, so that models without repeat blocks plan.
cat >"$work/cluster.json" <<EOF
{"schema": "canzona.cluster/1", "name": "c", "gpus": 2, "dp": 2, "tp": 1, "pp": 1,
 "gpus_per_node": 8, "device": {"name": "x", "matmul_tflops": 100, "mem_gbps": 1000,
 "memory_gib": 80}, "links": {"intra_node_gbps": 100, "inter_node_gbps": 10, "latency_us": 5}}
EOF
C="$work/cluster.json"
H="$CZ_SOURCE_DIR/tests/data/hf/mixtral-tiny.config.json"
"$CZ" plan -m "$M" -c "$C" -o "$work/plan.json" -q || { echo "FAIL: cannot build a plan"; exit 1; }
P="$work/plan.json"
fails=0
total=0
pass() { total=$((total + 1)); echo "ok   $*"; }
fail() { total=$((total + 1)); fails=$((fails + 1)); echo "FAIL $*"; }

# expect NAME EXIT PATTERN COMMAND...: the exit status and a stderr line matching PATTERN, within
# 5 seconds (scaled by CZ_TIME_SCALE; timeout's 124 is never the expected status). An empty
# PATTERN wants no message. With max_read set, the bytes the command read (the kernel's count
# of what its read calls returned, read_bytes.py) must stay under it: a refusal before reading
# reads only what starting the program reads (its libraries, the other inputs: some KiB),
# while reading /dev/zero or a huge file up to the size limit reads a gigabyte. With max_rss
# set (KiB), its peak resident memory must: a description refused before it is expanded
# holds some MiB, its expansion hundreds. Counts, not times, so that a loaded machine cannot
# fail the test.
expect() {
  local name=$1 want=$2 pattern=$3
  shift 3
  local got read rss
  got=0
  python3 "$(dirname "$0")/read_bytes.py" "$work/read" $((5 * ${CZ_TIME_SCALE:-1})) "$@" \
    >"$work/stdout" 2>"$work/stderr" || got=$?
  read -r read rss <"$work/read"
  if [ "$got" -ne "$want" ]; then
    fail "$name: exit $got (expected $want) after reading $read bytes: $(head -c 400 "$work/stderr")"
  elif [ -n "${max_read:-}" ] && [ "$read" -gt "$max_read" ]; then
    fail "$name: read $read bytes; expected a refusal before reading (under $max_read bytes)"
  elif [ -n "${max_rss:-}" ] && [ "$rss" -gt "$max_rss" ]; then
    fail "$name: held $rss KiB at its peak; expected a refusal before expanding (under $max_rss KiB)"
  elif [ -z "$pattern" ] && [ -s "$work/stderr" ]; then
    fail "$name: expected no message: $(head -c 400 "$work/stderr")"
  elif [ -n "$pattern" ] && ! grep -Eq -- "$pattern" "$work/stderr"; then
    fail "$name: stderr does not match /$pattern/: $(head -c 400 "$work/stderr")"
  else
    pass "$name"
  fi
}

# ---- devices and oversized files: refused before reading ----------------------------------
max_read=$((4 << 20))
dev='/dev/zero: is a character device, not a regular file'
expect "plan --model /dev/zero" 1 "$dev" "$CZ" plan -m /dev/zero -c "$C"
expect "plan --cluster /dev/zero" 1 "$dev" "$CZ" plan -m "$M" -c /dev/zero
expect "validate /dev/zero" 1 "$dev" "$CZ" validate /dev/zero -m "$M" -c "$C"
expect "render /dev/zero" 1 "$dev" "$CZ" render /dev/zero -o "$work/out.svg"
expect "inspect /dev/zero" 1 "$dev" "$CZ" inspect /dev/zero
expect "simulate --plan /dev/zero" 1 "$dev" "$CZ" simulate -m "$M" -c "$C" --plan /dev/zero
expect "import-hf /dev/zero" 1 "$dev" "$CZ" import-hf /dev/zero
expect "plan --model FOLDER" 1 "is a folder" "$CZ" plan -m "$work" -c "$C"
# A sparse file takes no disk space; its size alone must refuse it.
if truncate -s 3G "$work/huge.json" 2>/dev/null; then
  expect "plan --model 3 GiB file" 1 "huge.json: is 3221225472 bytes; files larger than" \
    "$CZ" plan -m "$work/huge.json" -c "$C"
  expect "import-hf 3 GiB file" 1 "huge.json: is 3221225472 bytes" "$CZ" import-hf "$work/huge.json"
fi
max_read=
# A pipe (process substitution) is still read.
expect "plan --model <(pipe)" 0 "" "$CZ" plan -q -m <(cat "$M") -c "$C"

# ---- parameter names that are unsafe as file names -----------------------------------------
model() { # file params-json
  printf '{"schema": "canzona.model/1", "name": "t", "dtype": "bf16", "params": [%s]}\n' "$2" \
    >"$work/$1.json"
  echo "$work/$1.json"
}
for bad in '../escape' 'a/b' '/abs' 'a\\b' '..' '.' '.hidden' 'tab\there' \
  "$(printf 'x%.0s' $(seq 1 201))"; do
  f=$(model name "{\"name\": \"$bad\", \"shape\": [4, 4], \"tp_dim\": null}")
  expect "name '${bad:0:20}' refused" 1 \
    'name.json: \$\.params\[0\]\.name: parameter name .*(contains|starts with|longer)' \
    "$CZ" plan -m "$f" -c "$C"
done
# Through a repeat block's prefix: the full name counts, the path is the inner name's.
f=$(model prefix '{"name": "ok", "shape": [4], "tp_dim": null},
  {"repeat": 2, "prefix": "../l{i}.", "params": [{"name": "w", "shape": [4, 4], "tp_dim": null}]}')
expect "prefix '../l{i}.' refused" 1 \
  'prefix.json: \$\.params\[1\]\.params\[0\]\.name: parameter name "\.\./l0\.w" starts with' \
  "$CZ" plan -m "$f" -c "$C"
# A plan edited by hand to hold such a name is refused by the plan reader too (the executor
# reads plans, not models).
sed 's|"name": "layers.0.qkv"|"name": "../../layers.0.qkv"|' "$P" >"$work/evil-plan.json"
grep -q '"\.\./\.\./layers' "$work/evil-plan.json" || fail "could not plant a bad name in the plan"
expect "plan file with name '../../layers.0.qkv'" 1 \
  'evil-plan.json: \$\.params\[[0-9]+\]\.name: parameter name "\.\./\.\./layers\.0\.qkv" starts with' \
  "$CZ" inspect "$work/evil-plan.json"
# Dots inside names, as every bundled model has them, stay valid.
f=$(model dots '{"name": "layers.0.self_attention.linear_qkv.weight", "shape": [4, 4], "tp_dim": 0},
  {"name": "a..b", "shape": [4], "tp_dim": null}')
expect "names with dots accepted" 0 "" "$CZ" plan -q -m "$f" -c "$C"
# The small test cluster cannot hold the large models' optimizer state; memory is checked
# elsewhere (cli.plan_bad_input), here only the input limits matter.
for m in "$CZ_SOURCE_DIR"/plans/models/*.json; do
  "$CZ" plan -q --allow-oversubscribed-memory -m "$m" -c "$C" >"$work/out" 2>&1 || fail "bundled model $(basename "$m") no longer plans: $(cat "$work/out")"
done

# ---- element counts: one parameter and the model's total -----------------------------------
big=$((1 << 49)) # 2^49: two fit (2^50 is the limit), three do not
expect "one parameter above 2^50 elements" 1 'one.json: \$\.params\[0\]\.shape: .*at most 1125899906842624' \
  "$CZ" plan -m "$(model one "{\"name\": \"w\", \"shape\": [$((1 << 26)), $((1 << 25))], \"tp_dim\": null}")" -c "$C"
expect "total above 2^50 elements" 1 \
  'sum.json: \$\.params\[1\]\.params\[0\]\.shape: .*more than 1125899906842624 .* in total' \
  "$CZ" plan -m "$(model sum "{\"name\": \"a\", \"shape\": [$big], \"tp_dim\": null},
    {\"repeat\": 2, \"prefix\": \"l{i}.\", \"params\": [{\"name\": \"w\", \"shape\": [$big], \"tp_dim\": null}]}")" -c "$C"
# Each parameter within int64 but their running bucket offset is not: before the bound this
# planned with exit 0 and negative bucket offsets (and aborted under UBSan).
q=$((1 << 61))
expect "three parameters of 2^62 elements" 1 'wrap.json: \$\.params\[0\]\.shape: .*at most' \
  "$CZ" plan -m "$(model wrap "{\"name\": \"a\", \"shape\": [$q, 2], \"tp_dim\": null},
    {\"name\": \"b\", \"shape\": [$q, 2], \"tp_dim\": null}, {\"name\": \"c\", \"shape\": [$q, 2], \"tp_dim\": null}")" -c "$C"
# At the limit the model plans, and its buckets are laid out without overflow.
expect "exactly 2^50 elements plans" 0 "" \
  "$CZ" plan -q --allow-oversubscribed-memory -m "$(model edge "{\"name\": \"a\", \"shape\": [$big], \"tp_dim\": null},
    {\"name\": \"b\", \"shape\": [$big], \"tp_dim\": null}")" -c "$C" -o "$work/edge-plan.json"
if [ -s "$work/edge-plan.json" ] && ! grep -q '"size": -' "$work/edge-plan.json" &&
  ! grep -q '"offset": -' "$work/edge-plan.json"; then
  pass "2^50 elements: no negative size or offset in the plan"
else
  fail "2^50 elements: negative size or offset in the plan"
fi

# ---- extreme figures keep their unit in the summaries -----------------------------------------
# A device of 1e-300 TFLOP/s makes every time about 1e295 s: fixed-point printing gave 296
# digits, cut at 63 by the summary's buffers, unit lost.
sed 's/"matmul_tflops": *[0-9.e+]*/"matmul_tflops": 1e-300/; s/"mem_gbps": *[0-9.e+]*/"mem_gbps": 1e-300/' \
  "$C" >"$work/slow-cluster.json"
if "$CZ" plan -m "$M" -c "$work/slow-cluster.json" -o "$work/slow-plan.json" >"$work/summary" 2>&1 &&
  "$CZ" inspect "$work/slow-plan.json" >>"$work/summary" 2>&1; then
  if grep -Eq '[0-9]{20}' "$work/summary"; then
    fail "huge figures printed digit by digit: $(grep -E '[0-9]{20}' "$work/summary" | head -2)"
  elif ! grep -Eq '^TP makespan \(busiest DP rank\) +[0-9.]+e\+[0-9]+ s$' "$work/summary" ||
    ! grep -Eq '^predicted optimizer compute +[0-9.]+e\+[0-9]+ s per step$' "$work/summary" ||
    ! grep -Eq '^  TP makespan +[0-9.]+e\+[0-9]+ s$' "$work/summary"; then
    fail "huge figures lost their unit: $(grep -E 'makespan|predicted' "$work/summary" | head -4)"
  else
    pass "huge figures in exponent form with their unit"
  fi
else
  fail "plan/inspect with a 1e-300 TFLOP/s device: $(cat "$work/summary")"
fi

# ---- import-hf: sizes bounded by what the loader accepts, checked before anything is built ---
hf() { # file layers experts hidden ffn vocab sparse_step
  cat >"$work/$1.config.json" <<EOF
{"model_type": "qwen2_moe", "hidden_size": $4, "intermediate_size": $5, "moe_intermediate_size": 32,
 "num_attention_heads": 4, "num_key_value_heads": 4, "num_experts": $3, "num_hidden_layers": $2,
 "decoder_sparse_step": $7, "vocab_size": $6}
EOF
  echo "$work/$1.config.json"
}
max_rss=$((128 << 10))
# Sixteen million alternating dense and MoE layers: one repeat block per layer, about 20 GB
# before the bound; now refused at once. 152,064 layers (found by the fuzzer) would expand to
# about 1.8 million parameters, seconds of work for a corrupt config: refused too.
expect "import-hf 16M mixed layers" 1 \
  'layers.config.json: \$\.num_hidden_layers: expected at most 16384 layers, found 16000000' \
  "$CZ" import-hf "$(hf layers 16000000 8 64 128 300 2)" -o "$work/out.json"
expect "import-hf 152064 layers" 1 \
  'deep.config.json: \$\.num_hidden_layers: expected at most 16384 layers, found 152064' \
  "$CZ" import-hf "$(hf deep 152064 8 64 128 300 2)" -o "$work/out.json"
expect "import-hf 16M experts" 1 'experts.config.json: .*\(16000000\) make .* parameters' \
  "$CZ" import-hf "$(hf experts 2 16000000 64 128 300 1)" -o "$work/out.json"
# 6,144 layers of 128 experts (found by the fuzzer): 1.6 million parameters, within the old bound
# of 2^22 and five seconds of work; above 2^18 now, refused at once.
expect "import-hf 6144 MoE layers" 1 \
  'wide.config.json: .*\(6144\) and the experts per layer \(128\) make 1609731 parameters; a canzona model holds at most 262144' \
  "$CZ" import-hf "$(hf wide 6144 128 64 128 300 1)" -o "$work/out.json"
expect "import-hf 2^50 elements exceeded" 1 \
  'elements.config.json: the sizes .* elements; a canzona model holds at most 1125899906842624' \
  "$CZ" import-hf "$(hf elements 4 8 16777216 16777216 300 2)" -o "$work/out.json"
[ -e "$work/out.json" ] && fail "import-hf: an output was written for a refused config"
max_rss=
# Within the bounds, what is written loads and plans.
expect "import-hf within the bounds" 0 "" \
  "$CZ" import-hf "$(hf fine 4 8 64 128 300 2)" -o "$work/fine.json"
expect "imported model plans" 0 "" "$CZ" plan -q -m "$work/fine.json" -c "$C"

echo "$((total - fails)) passed, $fails failed"
[ $fails -eq 0 ]
