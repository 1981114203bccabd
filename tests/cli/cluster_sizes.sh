#!/usr/bin/env bash
# Sizes from the command line (--dp-size, --tp-size, --pp-size, --nodes, --gpus-per-node)
# override the cluster file in plan, simulate, compare and validate; --tp and --dp stay strategy
# names, and a number given to them says which option takes a size.
set -u
: "${CZ:?CZ must point to the canzona binary}"
src=${CZ_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fails=0
total=0
M="$src/plans/models/qwen3-1.7b.json"
C="$src/plans/clusters/h100-256-dp32-tp8.json"
# expect NAME STATUS PATTERN COMMAND...: exit status and a pattern in stdout+stderr.
expect() {
  local name=$1 want=$2 pattern=$3
  shift 3
  "$@" >"$work/out" 2>&1
  local got=$?
  total=$((total + 1))
  if [ "$got" -ne "$want" ] || ! grep -Eq -- "$pattern" "$work/out"; then
    echo "FAIL $name: exit $got (expected $want), pattern /$pattern/:"; sed 's/^/    /' "$work/out"
    fails=$((fails + 1))
  else
    echo "ok   $name"
  fi
}

expect "--tp-size derives DP from the GPUs" 0 '256 GPUs = DP 64 x TP 4 x PP 1' \
  "$CZ" plan -m "$M" -c "$C" --tp-size 4 -o "$work/tp4.json"
expect "--nodes, --tp-size and --pp-size" 0 '32 GPUs = DP 2 x TP 8 x PP 2, 8 per node' \
  "$CZ" plan -m "$M" -c "$C" --nodes 4 --tp-size 8 --pp-size 2
expect "--dp-size and --gpus-per-node" 0 '32 GPUs = DP 16 x TP 2 x PP 1, 4 per node' \
  "$CZ" plan -m "$M" -c "$C" --dp-size 16 --tp-size 2 --gpus-per-node 4
expect "a TP size that does not divide the GPUs" 1 \
  'h100-256-dp32-tp8.json: TP size 3 x PP size 1 = 3 does not divide the 256 GPUs' \
  "$CZ" plan -m "$M" -c "$C" --tp-size 3
expect "DP x TP x PP against nodes x GPUs per node" 1 \
  'DP size 16 x TP size 8 x PP size 1 = 128 GPUs, but 4 nodes x 8 GPUs per node = 32' \
  "$CZ" plan -m "$M" -c "$C" --dp-size 16 --nodes 4
expect "a number for --tp names --tp-size" 2 "--tp '8': expected .*for the TP size use --tp-size" \
  "$CZ" plan -m "$M" -c "$C" --tp 8
expect "a number for --dp names --dp-size" 2 "--dp '32': expected .*for the DP size use --dp-size" \
  "$CZ" simulate -m "$M" -c "$C" --dp 32
expect "a strategy name for --tp-size" 2 "--tp-size 'rollback': expected an integer" \
  "$CZ" plan -m "$M" -c "$C" --tp-size rollback
expect "Megatron's head rule applies to the overridden TP" 1 'num_query_groups \(the KV heads, 4\)' \
  "$CZ" plan -m "$src/plans/models/qwen3-30b-a3b.json" -c "$C" --tp-size 8 --nodes 8
expect "validate with the same sizes" 0 'plan OK' \
  "$CZ" validate "$work/tp4.json" -m "$M" -c "$C" --tp-size 4
expect "validate against the file's sizes" 1 'sha256|topology|tp' \
  "$CZ" validate "$work/tp4.json" -m "$M" -c "$C"
expect "simulate with sizes" 0 'canzona +alpha\+rollback' \
  "$CZ" simulate -m "$M" -c "$C" --tp-size 4
expect "compare with sizes" 0 'alpha' \
  "$CZ" compare -m "$M" -c "$C" --tp-size 4 --dp-size 8 --repeats 1
expect "--bucket-size paper" 0 'buckets .*size 400000000 elements' \
  "$CZ" plan -m "$M" -c "$C" --bucket-size paper
expect "--bucket-size megatron at DP 64" 0 'buckets .*size 64000000 elements' \
  "$CZ" plan -m "$M" -c "$C" --bucket-size megatron --tp-size 4
expect "--bucket-size in elements" 0 'buckets .*size 1000000 elements' \
  "$CZ" plan -m "$M" -c "$C" --bucket-size 1000000
expect "a bad --bucket-size" 2 "--bucket-size 'huge': expected a number of elements, paper" \
  "$CZ" plan -m "$M" -c "$C" --bucket-size huge
expect "plan --help lists the size options" 0 '--dp-size N.*' "$CZ" plan --help
for opt in --tp-size --pp-size --nodes --gpus-per-node --bucket-size; do
  expect "plan --help lists $opt" 0 "$opt" "$CZ" plan --help
done

echo "$((total - fails)) passed, $fails failed"
[ $fails -eq 0 ]
