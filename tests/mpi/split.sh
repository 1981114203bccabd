#!/usr/bin/env bash
# Split plan folders (issue 38): the executor created from `canzona plan --split DIR`, each rank
# reading its own part, against the single-process step; and folders that do not hold one
# plan's parts, refused on every rank (those that can tell name the file, the others the rank
# that failed), none left waiting. Usage:
#   split.sh verify MODEL CLUSTER [PLAN OPTION...]
#   split.sh refuse
# Env: CZ (canzona), CZ_BENCH (canzona-bench), CZ_SOURCE_DIR. Exit 77 = skipped.
set -euo pipefail
. "$(dirname "$0")/mpi_env.sh"
src=${CZ_SOURCE_DIR:?}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# mpi and mpi_fails: mpi_env.sh.
count() { grep -c -- "$1" "$tmp/out" || true; }

case "$1" in
verify)
  model=$src/plans/models/$2.json
  cluster=$src/plans/clusters/$3.json
  "$CZ" plan -q -m "$model" -c "$cluster" "${@:4}" --split "$tmp/dir"
  for f in header.json plan.json stage-0.parts stage-0.index; do
    [ -s "$tmp/dir/$f" ] || { echo "--split wrote no $f"; ls -l "$tmp/dir"; exit 1; }
  done
  mpi -np 4 "$CZ_BENCH" --plan "$tmp/dir/plan.json" --create-from "$tmp/dir" --model "$model" \
    --steps 3 --verify | tee "$tmp/out"
  grep -q "verify: OK" "$tmp/out"
  # The bucket-wise step from the folder, whose buckets carry the whole plan's all-gather order
  # ("gather_key"): the plain step of the plan file bit for bit, with and without early
  # updates (no clipping, which early updates refuse).
  run() { # out-dir options...
    local d=$1
    shift
    mpi -np 4 "$CZ_BENCH" --plan "$tmp/dir/plan.json" --model "$model" --steps 3 --warmup 1 \
      --max-grad-norm 0 --dump-dir "$tmp/$d" "$@" >"$tmp/$d.out"
  }
  run plain
  run ovl --create-from "$tmp/dir" --overlap
  run early --create-from "$tmp/dir" --overlap --early-updates
  n=$(sed -n 's/^micro-groups updated early in the last step .*summed): //p' "$tmp/early.out")
  [ "${n:-0}" -gt 0 ] || { cat "$tmp/early.out"; echo "expected micro-groups updated early, got '${n:-}'"; exit 1; }
  for d in ovl early; do
    k=0
    for f in "$tmp/plain"/*.npy; do
      cmp "$f" "$tmp/$d/$(basename "$f")" || { echo "differs: plain $d $(basename "$f")"; exit 1; }
      k=$((k + 1))
    done
    [ "$k" -gt 0 ] || { echo "no parameters dumped"; exit 1; }
    echo "bucket-wise step from the folder ($d): $k parameters equal to the plan file's plain step"
  done
  ;;
refuse)
  # PP 2 x DP 2 with expert groups (EP 2): ranks 0-1 are stage 0, ranks 2-3 stage 1.
  model=$src/plans/models/test-moe.json
  cluster=$src/plans/clusters/cpu-4-dp4-ep2.json
  "$CZ" plan -q -m "$model" -c "$cluster" --pp-size 2 --split "$tmp/a"
  "$CZ" plan -q -m "$model" -c "$cluster" --pp-size 2 --dp anchored --split "$tmp/b"
  run() { mpi_fails -np 4 "$CZ_BENCH" --plan "$tmp/a/plan.json" --create-from "$tmp/c" \
    --model "$model" --steps 1; }
  # 1. stage 1's parts from another plan: its ranks see another plan hash than the header's.
  rm -rf "$tmp/c" && cp -r "$tmp/a" "$tmp/c"
  cp "$tmp/b/stage-1.parts" "$tmp/b/stage-1.index" "$tmp/c/"
  run
  [ "$(count 'stage-1.parts (part [0-9]*): \$.plan_sha256: is .* the folder mixes files of two plans')" -eq 2 ]
  [ "$(count 'rank [0-3]: rank 2 failed the plan checks')" -eq 2 ]
  # 2. a missing index: stage 1's ranks cannot open it, and say whose part they read.
  rm -rf "$tmp/c" && cp -r "$tmp/a" "$tmp/c"
  rm "$tmp/c/stage-1.index"
  run
  [ "$(count 'stage-1.index: cannot open: No such file or directory (reading the part of world rank [23]: stage 1')" -eq 2 ]
  [ "$(count 'rank 2 failed the plan checks')" -eq 2 ]
  # 3. a part edited after it was written (a DP range's end moved): its own hash catches it.
  rm -rf "$tmp/c" && cp -r "$tmp/a" "$tmp/c"
  python3 - "$tmp/c/stage-0.parts" <<'PY'
import re, sys
t = open(sys.argv[1]).read().split("\n")
t[0] = re.sub(r'"ranges":\[\[0,(\d+)\]', lambda m: '"ranges":[[0,%d]' % (int(m.group(1)) + 64), t[0], count=1)
open(sys.argv[1], "w").write("\n".join(t))
PY
  run
  [ "$(count 'stage-0.parts (part 0): \$.content_sha256: content hash mismatch')" -ge 1 ]
  [ "$(count 'failed the plan checks')" -ge 2 ]
  # 4. a truncated index: the record is missing.
  rm -rf "$tmp/c" && cp -r "$tmp/a" "$tmp/c"
  truncate -s 40 "$tmp/c/stage-0.index"
  run
  [ "$(count 'stage-0.index: record [0-9]* (bytes .*) is missing')" -eq 2 ]
  echo "refusals: OK"
  ;;
*)
  echo "usage: split.sh verify MODEL CLUSTER [OPTION...] | refuse"
  exit 2
  ;;
esac
