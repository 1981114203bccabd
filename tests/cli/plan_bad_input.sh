#!/usr/bin/env bash
# Bad input to `canzona plan`: every case must exit non-zero (1 for bad files, 2 for bad usage),
# never crash (no signal), print a message naming the file and what is wrong, and leave an
# existing output file untouched.
set -u
: "${CZ:?CZ must point to the canzona binary}"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fails=0
total=0

model_head='{"schema": "canzona.model/1", "name": "t", "dtype": "bf16", "params": ['
good_params='{"name": "emb", "shape": [64, 32], "tp_dim": 0, "optimizer": "elementwise"},
 {"repeat": 2, "prefix": "l.{i}.", "params": [
   {"name": "qkv", "shape": [96, 32], "tp_dim": 0, "blocks": {"dim": 0, "sizes": [32, 32, 32]}},
   {"name": "proj", "shape": [32, 32], "tp_dim": 1},
   {"name": "norm", "shape": [32], "tp_dim": null}]}'
cluster() { # dp tp pp gpus [extra]
  cat <<EOF
{"schema": "canzona.cluster/1", "name": "c", "gpus": $4, "dp": $1, "tp": $2, "pp": $3,
 "gpus_per_node": 8, "device": {"name": "x", "matmul_tflops": 100, "mem_gbps": 1000,
 "memory_gib": 80}, "links": {"intra_node_gbps": 100, "inter_node_gbps": 10,
 "latency_us": 5}${5:-}}
EOF
}
echo "$model_head $good_params ]}" >"$work/good-model.json"
cluster 2 2 1 4 >"$work/good-cluster.json"

# expect NAME EXIT PATTERN MODEL CLUSTER [extra args]
expect() {
  local name=$1 want=$2 pattern=$3 model=$4 clus=$5
  shift 5
  echo "sentinel" >"$work/out.json"
  "$CZ" plan --model "$model" --cluster "$clus" -o "$work/out.json" "$@" \
    >"$work/stdout" 2>"$work/stderr"
  local got=$?
  local ok=1
  total=$((total + 1))
  if [ "$got" -ne "$want" ]; then
    echo "FAIL $name: exit $got, expected $want"; ok=0
  fi
  if ! grep -Eq -- "$pattern" "$work/stderr"; then
    echo "FAIL $name: stderr does not match /$pattern/:"; sed 's/^/    /' "$work/stderr"; ok=0
  fi
  if [ "$(cat "$work/out.json")" != "sentinel" ]; then
    echo "FAIL $name: output file was modified"; ok=0
  fi
  if ls "$work"/out.json.tmp* >/dev/null 2>&1; then
    echo "FAIL $name: temporary file left behind"; ok=0
  fi
  [ $ok -eq 1 ] && echo "ok   $name" || fails=$((fails + 1))
}

bad() { # name content -> writes $work/name.json
  printf '%s\n' "$2" >"$work/$1.json"
  echo "$work/$1.json"
}

G="$work/good-model.json"
C="$work/good-cluster.json"

expect "missing model file" 1 "no-such.json" "$work/no-such.json" "$C"
expect "malformed JSON (line/column)" 1 "bad-json.json:[0-9]+:[0-9]+" \
  "$(bad bad-json '{"schema": "canzona.model/1", "name": ')" "$C"
expect "unknown key" 1 'bad-key.json.*\$\.params\[1\]\.params\[1\].*colour' \
  "$(bad bad-key "$model_head"'{"name": "emb", "shape": [64, 32], "tp_dim": 0},
   {"repeat": 1, "prefix": "x.", "params": [{"name": "a", "shape": [4,4], "tp_dim": null},
   {"name": "b", "shape": [4,4], "tp_dim": null, "colour": "red"}]}]}')" "$C"
expect "wrong type" 1 'bad-type.json.*\$\.params\[0\]\.shape' \
  "$(bad bad-type "$model_head"'{"name": "a", "shape": "4x4", "tp_dim": null}]}')" "$C"
expect "non-positive size" 1 'bad-size.json.*\$\.params\[0\]\.shape\[1\]' \
  "$(bad bad-size "$model_head"'{"name": "a", "shape": [4, -4], "tp_dim": null}]}')" "$C"
expect "blocks that do not add up" 1 'bad-blocks.json.*\$\.params\[0\]\.blocks' \
  "$(bad bad-blocks "$model_head"'{"name": "a", "shape": [12, 4], "tp_dim": 0,
     "blocks": {"dim": 0, "sizes": [4, 4]}}]}')" "$C"
expect "duplicate parameter names" 1 'dup.json.*(duplicate|twice).*l\.0\.w' \
  "$(bad dup "$model_head"'{"repeat": 2, "prefix": "l.0.", "params": [
     {"name": "w", "shape": [4, 4], "tp_dim": null}]}]}')" "$C"
expect "unsupported schema version" 1 'canzona.model/9' \
  "$(bad version '{"schema": "canzona.model/9", "name": "t", "dtype": "bf16", "params": []}')" "$C"
expect "TP split that does not divide" 1 'odd.json.*w.*(divis|divide)' \
  "$(bad odd "$model_head"'{"name": "w", "shape": [6, 4], "tp_dim": 0}]}')" \
  "$(cluster 1 4 1 4 '' >"$work/tp4.json"; echo "$work/tp4.json")"
expect "block that does not divide" 1 'oddblock.json.*qkv.*(divis|divide)' \
  "$(bad oddblock "$model_head"'{"name": "qkv", "shape": [12, 4], "tp_dim": 0,
     "blocks": {"dim": 0, "sizes": [6, 3, 3]}}]}')" "$C"
# Per-head Muon: a TP rank must hold whole heads of every block (24 rows of K = 3 heads of 8 do
# not split 2 ways into whole heads).
expect "TP split that cuts a head" 1 'cuthead.json.*qkv.*block 1.*whole heads over tp = 2' \
  "$(bad cuthead "$model_head"'{"name": "qkv", "shape": [80, 4], "tp_dim": 0,
     "blocks": {"dim": 0, "sizes": [32, 24, 24]}, "heads": {"dim": 0, "size": 8}}]}')" "$C"
# Megatron-Core's rules from the model's "megatron" record: whole heads and query groups per TP
# rank, and a vocabulary padded for the cluster's TP.
mg_model() { # record embedding-rows
  echo '{"schema": "canzona.model/1", "name": "t", "dtype": "bf16", "megatron": {'"$1"'},
   "params": [{"name": "embedding.word_embeddings.weight", "shape": ['"$2"', 32], "tp_dim": 0},
   {"name": "w", "shape": [32, 32], "tp_dim": 0}]}'
}
cluster 1 8 1 8 '' >"$work/tp8.json"
expect "heads not divisible by TP" 1 \
  'heads.json.*num_attention_heads \(28\).*tensor-parallel size \(8\).*1, 2, 4.*tp8.json' \
  "$(bad heads "$(mg_model '"num_attention_heads": 28, "num_query_groups": 4' 64)")" "$work/tp8.json"
expect "query groups not divisible by TP" 1 'groups.json.*num_query_groups \(the KV heads, 4\)' \
  "$(bad groups "$(mg_model '"num_attention_heads": 32, "num_query_groups": 4' 64)")" "$work/tp8.json"
expect "vocabulary padded for another TP" 1 'vocab.json.*padded to 512.*TP 8.*pads it to 1024.*--tp-size 8' \
  "$(bad vocab "$(mg_model '"vocab_size": 500, "make_vocab_size_divisible_by": 128,
     "tensor_model_parallel_size": 1, "padded_vocab_size": 512' 512)")" "$work/tp8.json"
# Model states above the device's memory: refused unless --allow-oversubscribed-memory.
cluster 2 2 1 4 ', "buckets": {"size": 1000}' | sed 's/"memory_gib": 80/"memory_gib": 0.00001/' \
  >"$work/small-mem.json"
expect "model states above device memory" 1 \
  'GPU [0-9]+ .*needs .*GiB for parameters, gradients and optimizer state.*small-mem.json.*more than the device holds.*--allow-oversubscribed-memory' \
  "$G" "$work/small-mem.json"
expect "dp*tp*pp != gpus" 1 'shape.json.*gpus' "$G" \
  "$(cluster 2 2 1 8 '' >"$work/shape.json"; echo "$work/shape.json")"
expect "non-positive dp" 1 'zero.json.*\$\.dp' "$G" \
  "$(cluster 0 2 1 4 '' >"$work/zero.json"; echo "$work/zero.json")"
expect "cluster unknown key" 1 'ckey.json.*\$\.links.*jitter' "$G" \
  "$(sed 's/"latency_us": 5/"latency_us": 5, "jitter": 1/' "$C" >"$work/ckey.json"; echo "$work/ckey.json")"
expect "bad bucket size" 1 'bucket.json.*\$\.buckets\.size' "$G" \
  "$(cluster 2 2 1 4 ', "buckets": {"size": 0}' >"$work/bucket.json"; echo "$work/bucket.json")"
expect "model given as cluster" 1 'schema' "$G" "$G"
expect "unknown strategy" 2 "--dp 'fancy'" "$G" "$C" --dp fancy
expect "alpha out of range" 2 "--alpha '1.5'" "$G" "$C" --alpha 1.5
expect "tpaware time limit of 0" 2 "--tpaware-time-limit '0': expected CPU seconds" "$G" "$C" --dp tpaware \
  --tpaware-time-limit 0
expect "unknown option" 2 "see 'canzona plan --help'" "$G" "$C" --frobnicate
expect "unknown buffer layout" 2 "--layout 'zero1': expected unified .*, split .* or fsdp" "$G" "$C" \
  --layout zero1
expect "split layout with tpaware" 1 "split buffer layout .* got dp tpaware .* --layout unified" \
  "$G" "$C" --layout split --dp tpaware
expect "split layout with the ILP solver" 1 "split buffer layout .* with the ilp solver" \
  "$G" "$C" --layout split --solver ilp

# A good run writes the plan; a failed write (missing folder) leaves no file and reports it.
"$CZ" plan --model "$G" --cluster "$C" -o "$work/no-such-dir/plan.json" >/dev/null 2>"$work/stderr"
got=$?
total=$((total + 2))
if [ $got -ne 1 ] || ! grep -q "no-such-dir" "$work/stderr"; then
  echo "FAIL unwritable output: exit $got"; cat "$work/stderr"; fails=$((fails + 1))
else
  echo "ok   unwritable output"
fi
if ! "$CZ" plan --model "$G" --cluster "$C" -o "$work/plan.json" >/dev/null ||
  ! "$CZ" validate "$work/plan.json" --model "$G" --cluster "$C" >/dev/null; then
  echo "FAIL good input was refused"; fails=$((fails + 1))
else
  echo "ok   good input"
fi

# --allow-oversubscribed-memory plans anyway, with a warning; between 80% and 100% of the device
# plan warns and writes the plan.
total=$((total + 2))
if "$CZ" plan --model "$G" --cluster "$work/small-mem.json" -o "$work/over.json" \
  --allow-oversubscribed-memory >"$work/stdout" 2>"$work/stderr" &&
  grep -q "warning: .*more than the device holds (planned anyway" "$work/stderr" &&
  [ -s "$work/over.json" ]; then
  echo "ok   --allow-oversubscribed-memory"
else
  echo "FAIL --allow-oversubscribed-memory"; cat "$work/stderr"; fails=$((fails + 1))
fi
need=$("$CZ" inspect "$work/over.json" --json | sed -n 's/.*"total_gib": \([0-9.e+-]*\).*/\1/p')
gib=$(awk -v t="$need" 'BEGIN { printf "%.12g", t / 0.9 }')
cluster 2 2 1 4 ', "buckets": {"size": 1000}' | sed "s/\"memory_gib\": 80/\"memory_gib\": $gib/" \
  >"$work/tight-mem.json"
if "$CZ" plan --model "$G" --cluster "$work/tight-mem.json" -o "$work/tight.json" \
  >"$work/stdout" 2>"$work/stderr" && grep -q "warning: .* 90% of .*above 80%" "$work/stderr"; then
  echo "ok   warning at 90% of the device"
else
  echo "FAIL warning at 90% of the device (need $need GiB, device $gib)"; cat "$work/stderr"
  fails=$((fails + 1))
fi

total=$((total + 1))
if "$CZ" plan --model "$G" --cluster "$work/tight-mem.json" --json 2>"$work/stderr" |
  grep -Eq '"used_fraction": 0\.(89|9)'; then
  echo "ok   plan --json reports the busiest GPU's share of the device"
else
  echo "FAIL plan --json memory_per_gpu"; fails=$((fails + 1))
fi

echo "$((total - fails)) passed, $fails failed"
[ $fails -eq 0 ]
