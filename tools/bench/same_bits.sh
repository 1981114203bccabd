#!/usr/bin/env bash
# Whether a change left the executor's results alone: the same plans through two builds'
# canzona-bench on 4 MPI ranks (4 steps after a warm-up), every updated parameter (--dump-dir)
# and the checkpoint (--save-state) compared byte for byte, on the configurations the suite
# runs: fp32, bf16, the split layout, PP 2, experts (EP 2), clipping, the bucket-wise step and
# early updates, and bf16 with each of those that runs in bf16. The plans are written once, by
# NEW's canzona.
# Usage: tools/bench/same_bits.sh OLD_BUILD NEW_BUILD   (build folders: BUILD/canzona,
#        BUILD/executor/canzona-bench); exit 0 when every file is identical.
# Env: CZ_NEW_ARGS: options given to NEW's canzona-bench only (an option OLD lacks that asks
#        for OLD's behaviour, e.g. --grad-reduce-in-fp32 against a build from before bf16
#        went on the wire).
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: $0 OLD_BUILD NEW_BUILD" >&2; exit 2; }
old=$1 new=$2
src=$(cd "$(dirname "$0")/../.." && pwd)
for b in "$old" "$new"; do
  [ -x "$b/executor/canzona-bench" ] || { echo "$b/executor/canzona-bench: not found" >&2; exit 2; }
done
CZ=$new/canzona
[ -x "$CZ" ] || { echo "$CZ: not found" >&2; exit 2; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
export OMPI_MCA_rmaps_base_oversubscribe=1
small=$src/plans/models/test-small.json moe=$src/plans/models/test-moe.json
cl=$src/plans/clusters
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
"$CZ" plan -q -m "$small" -c "$cl/cpu-4-dp2-tp2.json" -o "$t/dp2tp2.json"
"$CZ" plan -q -m "$small" -c "$cl/cpu-4-dp4-tp1.json" --layout split -o "$t/split.json"
"$CZ" plan -q -m "$small" -c "$cl/cpu-4-dp2-tp2.json" --pp-size 2 --dp-size 2 --tp-size 1 \
  -o "$t/pp2.json"
"$CZ" plan -q -m "$moe" -c "$cl/cpu-4-dp4-ep2.json" -o "$t/ep2.json"
"$CZ" plan -q -m "$small" -c "$cl/cpu-4-dp2-tp2.json" --dp alpha --tp rollback \
  --bucket-size 100000 -o "$t/buckets.json"
cases=(
  "fp32 dp2tp2.json $small"
  "bf16 dp2tp2.json $small --dtype bf16"
  "split split.json $small"
  "pp2 pp2.json $small"
  "experts ep2.json $moe"
  "clip dp2tp2.json $small --max-grad-norm 0.05"
  "overlap buckets.json $small --overlap --max-grad-norm 0.05"
  "early buckets.json $small --overlap --early-updates"
  "bf16-split split.json $small --dtype bf16"
  "bf16-pp2 pp2.json $small --dtype bf16"
  "bf16-experts ep2.json $moe --dtype bf16"
  "bf16-clip dp2tp2.json $small --dtype bf16 --max-grad-norm 0.05"
  "bf16-overlap buckets.json $small --dtype bf16 --overlap --max-grad-norm 0.05"
  "bf16-early buckets.json $small --dtype bf16 --overlap --early-updates"
)
read -r -a new_args <<<"${CZ_NEW_ARGS:-}"
fail=0
for c in "${cases[@]}"; do
  read -r -a w <<<"$c"
  name=${w[0]} plan=${w[1]} model=${w[2]}
  for side in old new; do
    b=$old extra=()
    [ "$side" = new ] && b=$new extra=("${new_args[@]}")
    mkdir -p "$t/$name.$side"
    timeout 600 mpirun --oversubscribe -np 4 "$b/executor/canzona-bench" --plan "$t/$plan" \
      --model "$model" --steps 4 --warmup 1 --dump-dir "$t/$name.$side" \
      --save-state "$t/$name.$side/state.safetensors" "${w[@]:3}" ${extra[@]+"${extra[@]}"} \
      >"$t/$name.$side.log" 2>&1 ||
      { echo "$name: the $side build failed:"; tail -5 "$t/$name.$side.log"; fail=1; continue 2; }
  done
  n=0 bad=0
  for f in "$t/$name.old"/*; do
    n=$((n + 1))
    cmp -s "$f" "$t/$name.new/$(basename "$f")" || { echo "  differs: $(basename "$f")"; bad=1; }
  done
  [ "$(ls "$t/$name.old" | wc -l)" -eq "$(ls "$t/$name.new" | wc -l)" ] ||
    { echo "  the builds wrote different files"; bad=1; }
  echo "$name: $n files, $([ "$bad" -eq 0 ] && echo identical || echo DIFFERENT)"
  [ "$bad" -eq 0 ] || fail=1
done
exit "$fail"
