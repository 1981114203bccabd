#!/usr/bin/env bash
# GPU tests that run more than one process or a tool (ctest label gpu). Each exits 77
# (skipped) with the reason when there is no CUDA device, no MPI or no compute-sanitizer.
# ns-dry, ns-cpu and coll need no device: the micro-benchmark's workload listing, its CPU
# timing of the general and symmetric Newton-Schulz forms, and the collective model's
# prediction (any build).
# Usage: gpu.sh mpi | nccl | memcheck | ns | ns-dry | ns-cpu | coll
# Env: CZ (canzona), CZ_BENCH (canzona-bench), CZ_GPU_EXEC (gpu_exec), CZ_SOURCE_DIR.
set -euo pipefail
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
export OMPI_MCA_rmaps_base_oversubscribe=1
case "${1:-}" in ns-dry | ns-cpu | coll) ;; *) "${CZ_GPU_EXEC:?}" probe || exit $? ;; esac
src=${CZ_SOURCE_DIR:?}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
model=$src/plans/models/test-small.json
case "${1:-}" in
mpi | nccl)
  command -v mpirun >/dev/null || { echo "SKIPPED: mpirun not found"; exit 77; }
  [ -n "${CZ_BENCH:-}" ] || { echo "SKIPPED: canzona-bench was not built (no MPI)"; exit 77; }
  ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
  if [ "$1" = nccl ] && [ "${ngpu:-0}" -lt 4 ]; then
    echo "SKIPPED: NCCL at one rank per GPU needs 4 GPUs for the 4-rank test plan; found ${ngpu:-0}"
    exit 77
  fi
  # Four ranks (DP 2 x TP 2) against the single-process CPU reference: with mpi they may share
  # one GPU (host-staged); with nccl each rank takes its own GPU (canzona-bench selects device
  # local_rank % count). bf16 bounds as the CPU bf16 tests (parameters are bf16).
  "$CZ" plan -q --model "$model" --cluster "$src/plans/clusters/cpu-4-dp2-tp2.json" \
    --dp alpha --tp rollback -o "$tmp/plan.json"
  for dtype in fp32 bf16; do
    tol=(--tolerance 1e-4 --update-tolerance 1e-4)
    [ "$dtype" = bf16 ] && tol=(--tolerance 3e-2 --update-tolerance 0.25)
    timeout 300 mpirun -np 4 "$CZ_BENCH" --plan "$tmp/plan.json" --model "$model" \
      --backend cuda --comm "$1" --dtype "$dtype" --steps 3 --verify "${tol[@]}" | tee "$tmp/out"
    grep -q "verify: OK" "$tmp/out"
  done
  # Block and cooperative tasks (k = 2): the sub-plane all-reduces (MPI_Allreduce on staged
  # memory, or ncclAllReduce, the Gram panels non-blocking) and the cuda backend's block_load_sq,
  # ns_gram_rows, ns_unpack_rows, ns_poly_rows, ns_poly_end and
  # apply_runs, against the same reference.
  "$CZ" plan -q --model "$model" --cluster "$src/plans/clusters/cpu-4-dp2-tp2.json" \
    --dp alpha --tp rollback --split-blocks --coop 2 -o "$tmp/coop.json"
  timeout 300 mpirun -np 4 "$CZ_BENCH" --plan "$tmp/coop.json" --model "$model" \
    --backend cuda --comm "$1" --steps 3 --verify --tolerance 1e-4 --update-tolerance 1e-4 |
    tee "$tmp/out"
  grep -q "verify: OK" "$tmp/out"
  ;;
memcheck)
  cs=$(command -v compute-sanitizer || true)
  [ -n "$cs" ] || cs=/usr/local/cuda/bin/compute-sanitizer
  [ -x "$cs" ] || { echo "SKIPPED: compute-sanitizer not found"; exit 77; }
  "$cs" --tool memcheck --error-exitcode 1 --leak-check full "$CZ_GPU_EXEC" compare self
  ;;
ns | ns-dry | ns-cpu)
  [ -n "${CZ_BENCH:-}" ] || { echo "SKIPPED: canzona-bench was not built (no MPI)"; exit 77; }
  "$CZ" plan -q --model "$model" --cluster "$src/plans/clusters/cpu-4-dp2-tp2.json" \
    --dp alpha --tp rollback -o "$tmp/plan.json"
  if [ "$1" = ns ]; then
    for dtype in fp32 bf16; do
      "$CZ_BENCH" ns --plan "$tmp/plan.json" --dtype "$dtype" --reps 3 | tee "$tmp/out"
      grep -q "batched / one at a time" "$tmp/out"
    done
    # The symmetric form (cublasSsyrk + the mirror kernel) forced on, and off, in fp32.
    for sym in on off; do
      "$CZ_BENCH" ns --plan "$tmp/plan.json" --sym "$sym" --reps 3 | tee "$tmp/out"
      grep -q "batched / one at a time" "$tmp/out"
    done
    exit 0
  fi
  if [ "$1" = ns-cpu ]; then
    # GPU (0, 0) has a 64-row block (general by the rule) and 256-row ones (symmetric): one
    # line per batch with the rule's pick, then the medians' ratio.
    "$CZ_BENCH" ns --plan "$tmp/plan.json" --gpu 0,0 --backend cpu --reps 1 | tee "$tmp/out"
    grep -q "64 x 256    x 1: general .*(rule: general)" "$tmp/out"
    grep -q "256 x 512    x 2: general .*(rule: symmetric)" "$tmp/out"
    grep -q "symmetric / general: .*picks symmetric for 1 of 2 batches" "$tmp/out"
    exit 0
  fi
  # The busiest GPU's batches, then every GPU's: each lists at least one batch, and the
  # busiest has the most FLOPs of all four.
  "$CZ_BENCH" ns --plan "$tmp/plan.json" --dry-run | tee "$tmp/busiest"
  grep -q "^  group " "$tmp/busiest"
  best=$(sed -n 's/.*, \([0-9.]*\) GFLOP per step.*/\1/p' "$tmp/busiest")
  for gpu in 0,0 0,1 1,0 1,1; do
    "$CZ_BENCH" ns --plan "$tmp/plan.json" --gpu "$gpu" --dry-run >"$tmp/one"
    f=$(sed -n 's/.*, \([0-9.]*\) GFLOP per step.*/\1/p' "$tmp/one")
    awk -v f="$f" -v b="$best" 'BEGIN { exit !(f <= b) }' || { echo "GPU $gpu: $f > busiest $b"; exit 1; }
  done
  # Out of range: refused with the plan's shape in the message.
  if "$CZ_BENCH" ns --plan "$tmp/plan.json" --gpu 2,0 --dry-run 2>"$tmp/err"; then exit 1; fi
  grep -q "outside the plan's dp = 2, tp = 2" "$tmp/err"
  ;;
coll)
  [ -n "${CZ_BENCH:-}" ] || { echo "SKIPPED: canzona-bench was not built (no MPI)"; exit 77; }
  cl=$src/plans/clusters/cpu-4-dp4-tp1.json
  "$CZ" plan -q --model "$model" --cluster "$cl" --dp alpha --tp rollback -o "$tmp/plan.json"
  "$CZ_BENCH" coll --plan "$tmp/plan.json" --cluster "$cl" | tee "$tmp/out"
  # The rule's time is the smaller of the two forms' for each bucket, so never above either.
  sed -n 's/.*all rooted \([0-9.]*\) ms, all padded \([0-9.]*\) ms, by the rule \([0-9.]*\) ms.*/\1 \2 \3/p' \
    "$tmp/out" >"$tmp/t"
  read -r rooted padded rule <"$tmp/t"
  awk -v a="$rooted" -v b="$padded" -v r="$rule" 'BEGIN { exit !(r <= a && r <= b && r > 0) }'
  # A cluster of another shape is refused.
  if "$CZ_BENCH" coll --plan "$tmp/plan.json" --cluster "$src/plans/clusters/cpu-4-dp2-tp2.json" \
    2>"$tmp/err"; then exit 1; fi
  grep -q "but the plan has dp 4, tp 1" "$tmp/err"
  ;;
*)
  echo "usage: gpu.sh mpi | nccl | memcheck | ns | ns-dry | coll" >&2
  exit 2
  ;;
esac
