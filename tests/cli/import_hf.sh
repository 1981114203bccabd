#!/usr/bin/env bash
# canzona import-hf: the bundled Qwen3 models are exactly the importer's output for the bundled
# config.json copies; bad configs fail with a message and leave the -o target untouched.
set -u
: "${CZ:?CZ must point to the canzona binary}"
: "${CZ_SOURCE_DIR:?CZ_SOURCE_DIR must point to the source tree}"
if [ ! -x "$CZ" ]; then
    echo "skipped: $CZ was not built" >&2
    exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
check() { # description, command...
    local what=$1
    shift
    if ! "$@"; then
        echo "FAIL: $what" >&2
        fail=1
    fi
}

for m in qwen3-0.6b qwen3-1.7b qwen3-4b qwen3-8b qwen3-14b qwen3-32b qwen3-30b-a3b llama-3.1-70b; do
    cfg="$CZ_SOURCE_DIR/plans/hf/$m.config.json"
    want="$CZ_SOURCE_DIR/plans/models/$m.json"
    check "$m to stdout" bash -c '"$0" import-hf "$1" --make-vocab-size-divisible-by 1 > "$2"' "$CZ" "$cfg" "$tmp/$m.stdout"
    check "$m stdout equals the bundled file" diff -u "$want" "$tmp/$m.stdout"
    check "$m to -o" "$CZ" import-hf "$cfg" --make-vocab-size-divisible-by 1 -o "$tmp/$m.json"
    check "$m -o equals the bundled file" cmp -s "$want" "$tmp/$m.json"
done

# The bundled MoE models (DeepSeek-V3: multi-head latent attention, shared experts, leading dense
# layers; test-moe, the small MoE of the executor's tests, in fp32).
for m in qwen3-235b-a22b deepseek-v3 test-moe; do
    cfg="$CZ_SOURCE_DIR/plans/hf/$m.config.json"
    want="$CZ_SOURCE_DIR/plans/models/$m.json"
    dtype=bf16
    [ "$m" = test-moe ] && dtype=fp32
    check "$m -o equals the bundled file" \
        "$CZ" import-hf "$cfg" --make-vocab-size-divisible-by 1 --dtype $dtype -o "$tmp/$m.json"
    check "$m equals the bundled file" cmp -s "$want" "$tmp/$m.json"
done

# --ep-size: the routed experts must divide by it (Megatron-Core: num_moe_experts % ep_size).
if "$CZ" import-hf "$CZ_SOURCE_DIR/plans/hf/deepseek-v3.config.json" --ep-size 3 -o "$tmp/ep3.json" \
    2> "$tmp/ep3.err"; then
    echo "FAIL: --ep-size 3 accepted for 256 experts" >&2
    fail=1
fi
check "--ep-size 3 refusal names the key and the rule" \
    grep -q 'n_routed_experts (256) must be a multiple of the expert model-parallel size (3)' \
    "$tmp/ep3.err"
check "--ep-size 64 accepted" \
    "$CZ" import-hf "$CZ_SOURCE_DIR/plans/hf/deepseek-v3.config.json" --ep-size 64 -o "$tmp/ep64.json"

# Options: --name, --dtype, '-o -'.
"$CZ" import-hf "$CZ_SOURCE_DIR/plans/hf/qwen3-8b.config.json" --name my-model --dtype fp32 -o - \
    > "$tmp/opts.json"
check "--name is written" grep -q '"name": "my-model",' "$tmp/opts.json"
check "--dtype is written" grep -q '"dtype": "fp32",' "$tmp/opts.json"

# A bad config: non-zero exit, a message naming the key, the -o target untouched.
echo "previous content" > "$tmp/target.json"
"$CZ" import-hf "$CZ_SOURCE_DIR/tests/data/hf/missing-hidden.config.json" -o "$tmp/target.json" \
    2> "$tmp/err.txt"
rc=$?
check "missing field exits 1 (got $rc)" test "$rc" -eq 1
check "message names the key" grep -q '\$\.hidden_size' "$tmp/err.txt"
check "message has the command prefix" grep -q '^canzona import-hf: ' "$tmp/err.txt"
check "target untouched" grep -qx "previous content" "$tmp/target.json"
check "no temporary file left" test "$(ls "$tmp" | grep -c '\.tmp\.')" -eq 0

"$CZ" import-hf "$CZ_SOURCE_DIR/tests/data/hf/unknown-arch.config.json" -o "$tmp/target.json" \
    2> "$tmp/err.txt"
rc=$?
check "unknown architecture exits 1 (got $rc)" test "$rc" -eq 1
check "message names model_type and its value" grep -q 'model_type.*gemma2' "$tmp/err.txt"
check "target still untouched" grep -qx "previous content" "$tmp/target.json"

# Usage errors exit 2; --help documents every option and exits 0.
"$CZ" import-hf > /dev/null 2>&1
check "no argument exits 2" test $? -eq 2
"$CZ" import-hf "$CZ_SOURCE_DIR/plans/hf/qwen3-8b.config.json" --dtype int8 > /dev/null 2>&1
check "bad --dtype exits 2" test $? -eq 2
"$CZ" import-hf "$CZ_SOURCE_DIR/plans/hf/qwen3-8b.config.json" --bogus > /dev/null 2>&1
check "unknown option exits 2" test $? -eq 2
"$CZ" import-hf --help > "$tmp/help.txt"
check "--help exits 0" test $? -eq 0
# Megatron's vocabulary padding and TP rules.
"$CZ" import-hf "$CZ_SOURCE_DIR/plans/hf/qwen3-8b.config.json" --tp-size 8 -o "$tmp/tp8.json"
check "--tp-size 8 pads Qwen3's 151936 to 152576" \
    grep -q '"embedding.word_embeddings.weight", "shape": \[152576, 4096\]' "$tmp/tp8.json"
check "the padding is recorded" grep -q '"padded_vocab_size": 152576' "$tmp/tp8.json"
"$CZ" import-hf "$CZ_SOURCE_DIR/plans/hf/qwen3-8b.config.json" --tp-size 8 \
    --make-vocab-size-divisible-by 1 -o "$tmp/tp8-off.json"
check "divisible-by 1 keeps 151936 at TP 8" grep -q '"shape": \[151936, 4096\]' "$tmp/tp8-off.json"
"$CZ" plan --model "$tmp/tp8.json" --cluster "$CZ_SOURCE_DIR/plans/clusters/h100-256-dp32-tp8.json" \
    -o "$tmp/plan.json" > "$tmp/out.txt" 2>&1
check "a model imported for TP 8 plans at TP 8" test $? -eq 0
"$CZ" plan --model "$tmp/tp8.json" --cluster "$CZ_SOURCE_DIR/plans/clusters/h100-256-dp64-tp4.json" \
    -o "$tmp/plan.json" 2> "$tmp/err.txt" > "$tmp/out.txt"
check "... and is refused at TP 4" test $? -eq 1
check "... naming the fix" grep -q 'import-hf --tp-size 4' "$tmp/err.txt"
"$CZ" import-hf "$CZ_SOURCE_DIR/plans/hf/qwen3-30b-a3b.config.json" --tp-size 8 -o "$tmp/target.json" \
    2> "$tmp/err.txt"
check "4 KV heads at TP 8 exit 1" test $? -eq 1
check "... naming the key and the numbers" \
    grep -q 'num_key_value_heads (the KV heads, 4) must be a multiple of the tensor-parallel size (8)' \
    "$tmp/err.txt"
check "target still untouched after a TP refusal" grep -qx "previous content" "$tmp/target.json"
"$CZ" import-hf "$CZ_SOURCE_DIR/tests/data/hf/mha-32.config.json" --tp-size 32 \
    --make-vocab-size-divisible-by 1048576 > "$tmp/out.txt" 2> "$tmp/err.txt"
check "a padded vocabulary beyond the bound exits 1" test $? -eq 1
check "... naming the option" grep -q 'make-vocab-size-divisible-by' "$tmp/err.txt"
for bad in 0 x -2 1.5; do
    "$CZ" import-hf "$CZ_SOURCE_DIR/plans/hf/qwen3-8b.config.json" --tp-size "$bad" > "$tmp/out.txt" 2>&1
    check "--tp-size $bad exits 2" test $? -eq 2
    "$CZ" import-hf "$CZ_SOURCE_DIR/plans/hf/qwen3-8b.config.json" \
        --make-vocab-size-divisible-by "$bad" > "$tmp/out.txt" 2>&1
    check "--make-vocab-size-divisible-by $bad exits 2" test $? -eq 2
done

# Megatron's Muon keeps gate/up fused: --split-gate-up no drops the fc1 blocks.
"$CZ" import-hf "$CZ_SOURCE_DIR/plans/hf/qwen3-8b.config.json" --split-gate-up no -o "$tmp/fused.json"
check "--split-gate-up no: no gate/up blocks" \
    test "$(grep -c '"sizes": \[12288, 12288\]' "$tmp/fused.json")" -eq 0
check "--split-gate-up no: Q/K/V blocks kept" grep -q '"sizes": \[4096, 1024, 1024\]' "$tmp/fused.json"
"$CZ" import-hf "$CZ_SOURCE_DIR/plans/hf/qwen3-8b.config.json" --split-qkv maybe > "$tmp/out.txt" 2>&1
check "--split-qkv maybe exits 2" test $? -eq 2

# An MoE config routing each token to more experts than it has (num_experts_per_tok 16 of
# num_experts 8) is refused naming both keys, the -o target untouched; one routing to all is not.
for family in qwen3_moe mixtral deepseek_v3; do
    case $family in
    qwen3_moe) src=test-moe key=num_experts ;;
    mixtral) src=test-moe key=num_local_experts ;;
    deepseek_v3) src=deepseek-v3 key=n_routed_experts ;;
    esac
    sed -e 's/"num_experts_per_tok": *[0-9]*/"num_experts_per_tok": 16/' \
        "$CZ_SOURCE_DIR/plans/hf/$src.config.json" > "$tmp/topk.json"
    if [ $family = mixtral ]; then
        sed -i -e 's/"model_type": *"[a-z0-9_]*"/"model_type": "mixtral"/' \
            -e 's/"num_experts":/"num_local_experts":/' \
            -e 's/"moe_intermediate_size":/"intermediate_size_moe_unused":/' "$tmp/topk.json"
    fi
    [ $family = deepseek_v3 ] && sed -i -e 's/"n_routed_experts": *[0-9]*/"n_routed_experts": 8/' "$tmp/topk.json"
    echo "previous content" > "$tmp/topk.out"
    "$CZ" import-hf "$tmp/topk.json" -o "$tmp/topk.out" 2> "$tmp/topk.err"
    check "$family: num_experts_per_tok 16 of 8 experts exits 1" test $? -eq 1
    check "$family: the refusal names both keys" \
        grep -q "\$.num_experts_per_tok (16) exceeds \$.$key (8)" "$tmp/topk.err"
    check "$family: target untouched" grep -qx "previous content" "$tmp/topk.out"
done
sed -e 's/"num_experts_per_tok": *[0-9]*/"num_experts_per_tok": 8/' \
    "$CZ_SOURCE_DIR/plans/hf/test-moe.config.json" > "$tmp/topk8.json"
check "num_experts_per_tok equal to the experts accepted" "$CZ" import-hf "$tmp/topk8.json" -o "$tmp/topk8.out"

for opt in --output --name --dtype --tp-size --make-vocab-size-divisible-by --split-qkv \
    --split-gate-up --help; do
    check "--help mentions $opt" grep -q -- "$opt" "$tmp/help.txt"
done

exit $fail
