#!/usr/bin/env bash
# canzona-gpu-check: validates and times canzona's GPU path on this machine's first GPU, in one
# command, and prints every answer in one table (docs/EXECUTOR.md, "GPU path").
#
#   canzona-gpu-check [--out DIR] [--quick] [--only PART[,PART...]] [--list]
#
# Parts (each with its own time limit; a failing part does not stop the others):
#   info        the device, driver, CUDA runtime, cuBLAS, cuSOLVER and NCCL found
#   correctness every GPU correctness test: CUDA vs CPU (fp32, bf16), the job's stream order,
#               SOAP and Shampoo (cuSOLVER), the symmetric Newton-Schulz, NorMuon, each over the
#               host-staged self plane and NCCL on one rank; block and cooperative tasks and
#               host-staged MPI at 4 ranks on one GPU (canzona-bench --verify)
#   sanitizer   compute-sanitizer memcheck on the smallest case, racecheck and synccheck
#   p4          batched Newton-Schulz on every distinct matrix shape of Qwen3-8B and Qwen3-32B
#               at TP 1 and TP 8, fp32 and bf16, against cuBLAS's GEMM rate at 8192^3
#   p5          the executor's step on one GPU (Qwen3-0.6B, DP1 TP1): time beyond its
#               Newton-Schulz compute, and no device allocation after the first step
#   overlap     the step's exposed time on one GPU (Qwen3-0.6B, DP1 TP1, 20M-element buckets,
#               a 10 ms host sleep per bucket standing in for backward): the plain step, the
#               bucket-wise step (--overlap) and early updates (--overlap --early-updates)
#   versus      the optimizer step side by side with torch.optim.Muon + AdamW(fused) (Qwen3-0.6B
#               and Qwen3-1.7B shapes, bf16, one GPU): torch's, canzona.torch.Optimizer's and
#               canzona-bench's on the same plan, and the update difference after 3 steps
#               (tools/bench/versus.py; needs a python3 whose torch has CUDA, else skipped)
#   calibrate   the GPU's rates for the cost model (canzona.calibration/1)
# Every log, the JSON results (results.json) and the calibration file go to DIR (default: a new
# canzona-gpu-check.XXXXXX folder here). Without a usable GPU every GPU part is reported
# skipped, with the reason, and the check exits 0; it exits 1 when a part failed.
#
# In the package it finds its programs beside itself (bin/, libexec/canzona/, share/canzona/);
# from a build tree, set CZ, CZ_BENCH, CZ_GPU_EXEC, CZ_GPU_LINALG, CZ_PLANS and CZ_MPIRUN (and for
# versus CANZONA_EXEC_LIB; CZ_PYTHON names the Python, default python3).
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
CZ=${CZ:-$here/canzona}
CZ_BENCH=${CZ_BENCH:-$here/canzona-bench}
CZ_GPU_EXEC=${CZ_GPU_EXEC:-$root/libexec/canzona/gpu_exec}
CZ_GPU_LINALG=${CZ_GPU_LINALG:-$root/libexec/canzona/gpu_linalg}
CZ_PLANS=${CZ_PLANS:-$root/share/canzona/plans}
# versus: the script and the Python package, in the package (libexec/canzona/versus.py,
# share/canzona/python, lib/) or in the source tree (tools/bench/versus.py, python/).
if [ -z "${CZ_VERSUS:-}" ]; then
  CZ_VERSUS=$root/libexec/canzona/versus.py
  [ -f "$CZ_VERSUS" ] || CZ_VERSUS=$here/bench/versus.py
fi
CZ_PYDIR=$root/share/canzona/python
[ -d "$CZ_PYDIR" ] || CZ_PYDIR=$root/python
if [ -z "${CANZONA_EXEC_LIB:-}" ] && [ -f "$root/lib/libcanzona-exec.so" ]; then
  export CANZONA_EXEC_LIB=$root/lib/libcanzona-exec.so
fi
CZ_PYTHON=${CZ_PYTHON:-python3}
if [ -z "${CZ_MPIRUN:-}" ]; then
  CZ_MPIRUN=$here/mpirun
  [ -x "$CZ_MPIRUN" ] || CZ_MPIRUN=$(command -v mpirun || echo mpirun)
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
# In the package, the bundled Open MPI's paths, for the programs that initialize MPI on their
# own (gpu_exec, gpu_linalg: singletons) as for bin/mpirun.
if [ -f "$root/libexec/canzona/mpi-env.sh" ]; then
  export CANZONA_ROOT=$root
  # shellcheck source=/dev/null
  . "$root/libexec/canzona/mpi-env.sh"
fi
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-4}

out="" quick=0 only="" all_parts="info correctness sanitizer p4 p5 overlap versus calibrate"
while [ $# -gt 0 ]; do
  case "$1" in
  --out) out=${2:?--out needs a folder}; shift 2 ;;
  --quick) quick=1; shift ;;
  --only) only=${2:?--only needs parts}; shift 2 ;;
  --list) echo "$all_parts"; exit 0 ;;
  -h | --help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
  *) echo "canzona-gpu-check: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
for p in ${only//,/ }; do
  case " $all_parts " in *" $p "*) ;; *) echo "canzona-gpu-check: unknown part '$p' (parts: $all_parts)" >&2; exit 2 ;; esac
done
[ -n "$out" ] || out=$(mktemp -d "$PWD/canzona-gpu-check.XXXXXX")
mkdir -p "$out" || { echo "canzona-gpu-check: cannot create $out" >&2; exit 2; }
out=$(cd "$out" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

rows=() failed=0 results=()
wanted() { [ -z "$only" ] || [[ ",$only," == *",$1,"* ]]; }
# row NAME RESULT FIGURE SECONDS: one line of the table and one JSON record.
row() {
  rows+=("$(printf '%-22s %-7s %-58s %6s' "$1" "$2" "${3:0:58}" "$4")")
  local fig=${3//\\/\\\\}
  results+=("{\"test\": \"$1\", \"result\": \"$2\", \"figure\": \"${fig//\"/\\\"}\", \"seconds\": ${4:-0}}")
  [ "$2" = "FAIL" ] && failed=1
  return 0
}
# run NAME LIMIT FIGURE_REGEX CMD...: runs CMD with a time limit, logs to NAME.log, and adds a
# row: ok (exit 0), skipped (77: the reason), FAIL (anything else, or the time limit).
run() {
  local name=$1 limit=$2 pat=$3
  shift 3
  local log=$out/$name.log t0 t1 rc fig
  t0=$(date +%s%N)
  timeout --kill-after=10 "$limit" "$@" >"$log" 2>&1
  rc=$?
  t1=$(date +%s%N)
  local tenths=$(((t1 - t0) / 100000000))
  local secs="$((tenths / 10)).$((tenths % 10))"
  fig=$(grep -Eo -- "$pat" "$log" 2>/dev/null | tr '\n' ' ' | sed 's/ *$//')
  case $rc in
  0) row "$name" ok "$fig" "$secs" ;;
  77) row "$name" skipped "$(grep -m1 -o 'SKIPPED: .*' "$log" | cut -c10-)" "$secs" ;;
  124 | 137) row "$name" FAIL "time limit of ${limit} s" "$secs" ;;
  *) row "$name" FAIL "exit $rc: $(grep -v '^\s*$' "$log" | tail -1)" "$secs" ;;
  esac
}
skip_all() {
  local why=$1 p
  for p in $all_parts; do
    [ "$p" = info ] && continue
    wanted "$p" && row "$p" skipped "$why" 0
  done
}

# ---- info, and whether there is a GPU at all ----
header="canzona-gpu-check ($("$CZ" --version 2>/dev/null | head -1 || echo "canzona ?"))"
if wanted info; then
  run info 60 'device: [^(]*|NCCL: [0-9.]+' "$CZ_GPU_EXEC" info
fi
"$CZ_GPU_EXEC" probe >"$work/probe" 2>&1
probe=$?
if [ $probe -ne 0 ]; then
  why=$(grep -m1 -o 'SKIPPED: .*' "$work/probe" | cut -c10-)
  [ -n "$why" ] || why="gpu_exec probe: exit $probe: $(tail -1 "$work/probe")"
  skip_all "$why"
else
  "$CZ_GPU_EXEC" info >"$work/info" 2>&1
  header="$header: $(sed -n 's/^device: //p' "$work/info"), $(sed -n 's/^\(driver\|cuBLAS\|NCCL\)[^:]*: /\1 /p' "$work/info" | head -3 | tr '\n' ',' | sed 's/,$//; s/,/, /g')"

  # ---- correctness ----
  if wanted correctness; then
    for comm in self nccl; do
      sfx=""; [ $comm = nccl ] && sfx=.nccl1
      launch=(); [ $comm = nccl ] && launch=("$CZ_MPIRUN" -np 1)
      run "cuda_vs_cpu$sfx" 180 '(fp32|bf16)[^=]*= [0-9.e+-]+|parameters [^=]*= [0-9.e+-]+' "${launch[@]}" "$CZ_GPU_EXEC" compare $comm
      run "stream_order$sfx" 120 '= [0-9.e+-]+' "${launch[@]}" "$CZ_GPU_EXEC" order $comm
      run "soap_shampoo$sfx" 180 '(soap|shampoo)|= [0-9.e+-]+ \(' "${launch[@]}" "$CZ_GPU_LINALG" compare $comm
    done
    run ns_symmetric 180 '= [0-9.e+-]+' "$CZ_GPU_EXEC" ns-sym
    run normuon 180 '(row|col)[^=]*= [0-9.e+-]+' "$CZ_GPU_EXEC" normuon self
    # canzona.torch at one GPU against the CPU (examples/torch_train.py --device cuda), where
    # the source tree's Python check and a python3 with CUDA torch are at hand (CZ_TORCH_CHECK
    # names the check, CANZONA_EXEC_LIB the library; no torch with CUDA shows as skipped).
    tcheck=${CZ_TORCH_CHECK:-$root/tests/python/torch_train_check.py}
    if [ -f "$tcheck" ]; then
      run torch_cuda 600 'max relative loss difference [0-9.e+-]+' env \
        CZ_SOURCE_DIR="$(cd "$(dirname "$tcheck")/../.." && pwd)" python3 "$tcheck" cuda
    fi
    model=$CZ_PLANS/models/test-small.json cl=$CZ_PLANS/clusters/cpu-4-dp2-tp2.json
    if "$CZ" plan -q --model "$model" --cluster "$cl" -o "$work/small.json" &&
      "$CZ" plan -q --model "$model" --cluster "$cl" --split-blocks --coop 2 -o "$work/coop.json"; then
      for case in "fp32 small" "bf16 small" "fp32 coop"; do
        read -r dt pl <<< "$case"
        tol=(--tolerance 1e-4 --update-tolerance 1e-4)
        [ "$dt" = bf16 ] && tol=(--tolerance 3e-2 --update-tolerance 0.25)
        run "mpi4_${pl}_$dt" 300 'verify: OK|worst[^,]*' "$CZ_MPIRUN" -np 4 "$CZ_BENCH" \
          --plan "$work/$pl.json" --model "$model" --backend cuda --comm mpi --dtype "$dt" \
          --steps 3 --verify "${tol[@]}"
      done
    else
      row mpi4 FAIL "canzona plan of test-small failed" 0
    fi
  fi

  # ---- sanitizers ----
  if wanted sanitizer; then
    cs=$(command -v compute-sanitizer || true)
    [ -n "$cs" ] || cs=${CUDA_HOME:-/usr/local/cuda}/bin/compute-sanitizer
    if [ ! -x "$cs" ]; then
      row sanitizer skipped "compute-sanitizer not found (CUDA toolkit's bin/)" 0
    else
      run memcheck 420 'ERROR SUMMARY: [0-9]+ errors' "$cs" --tool memcheck --leak-check full --error-exitcode 1 "$CZ_GPU_EXEC" compare self
      run racecheck 300 'RACECHECK SUMMARY: [0-9]+ hazards' "$cs" --tool racecheck --error-exitcode 1 "$CZ_GPU_EXEC" ns-sym
      run synccheck 300 'ERROR SUMMARY: [0-9]+ errors' "$cs" --tool synccheck --error-exitcode 1 "$CZ_GPU_EXEC" ns-sym
    fi
  fi

  # ---- P4: Newton-Schulz by shape ----
  if wanted p4; then
    models="qwen3-8b qwen3-32b"; [ $quick = 1 ] && models=qwen3-8b
    for m in $models; do
      for tp in 1 8; do
        if ! "$CZ" plan -q --model "$CZ_PLANS/models/$m.json" --cluster "$CZ_PLANS/clusters/h100-8-dp8-tp1.json" \
          --dp-size 1 --tp-size $tp --allow-oversubscribed-memory -o "$work/$m-tp$tp.json"; then
          row "p4_${m}_tp$tp" FAIL "canzona plan failed" 0
          continue
        fi
        for dt in fp32 bf16; do
          run "p4_${m}_tp${tp}_$dt" 300 '[0-9.]+% of GEMM' "$CZ_BENCH" ns --plan "$work/$m-tp$tp.json" \
            --per-shape --dtype $dt --reps 3 --json "$out/p4-$m-tp$tp-$dt.json"
        done
      done
    done
    # The fp32 symmetric form's threshold (cz__ns_use_syrk: 1024 rows and more): each shape of
    # Qwen3-8B with the form forced on and off.
    if [ -f "$work/qwen3-8b-tp1.json" ]; then
      for sym in on off; do
        run "p4_sym_${sym}_qwen3-8b" 300 '[0-9.]+% of GEMM' "$CZ_BENCH" ns --plan "$work/qwen3-8b-tp1.json" \
          --per-shape --sym $sym --reps 3 --json "$out/p4-sym-$sym-qwen3-8b.json"
      done
    fi
  fi

  # ---- P5: the executor's step on one GPU ----
  if wanted p5; then
    m=$CZ_PLANS/models/qwen3-0.6b.json
    if "$CZ" plan -q --model "$m" --cluster "$CZ_PLANS/clusters/h100-8-dp8-tp1.json" \
      --dp-size 1 --tp-size 1 -o "$work/p5.json"; then
      for dt in fp32 bf16; do
        run "p5_ns_$dt" 300 'batched \(as the executor\) +[0-9.]+ ms' "$CZ_BENCH" ns --plan "$work/p5.json" \
          --gpu 0,0 --dtype $dt --reps 5
        run "p5_step_$dt" 300 'wall time [^:]*: [0-9.]+|device allocations in steps [^:]*: [0-9]+' "$CZ_MPIRUN" -np 1 \
          "$CZ_BENCH" --plan "$work/p5.json" --model "$m" --backend cuda --comm nccl --dtype $dt \
          --steps 5 --json "$out/p5-step-$dt.json"
        if grep -q "device allocations in steps [^:]*: [1-9]" "$out/p5_step_$dt.log" 2>/dev/null; then
          row "p5_noalloc_$dt" FAIL "a step after the first allocated device memory" 0
        fi
        # The executor's memory (docs/PERF.md 7.4): the prediction against the record, what is
        # beyond the model states against the optimizer state (target: at most 10%), and
        # cudaMemGetInfo's delta around create and the first bind against the record (within 5%).
        log="$out/p5_step_$dt.log"
        if grep -q "^executor memory predicted" "$log" 2>/dev/null; then
          if grep -q "equal to the recorded bytes, kind by kind" "$log"; then
            row "p5_mem_model_$dt" ok "the memory model equals the record, kind by kind" 0
          else
            row "p5_mem_model_$dt" FAIL "the memory model is not the executor's record" 0
          fi
        fi
        share=$(sed -n 's/.*beyond them [0-9]* bytes ([0-9.]* MiB), \([0-9.]*\)% of the optimizer state.*/\1/p' "$log" 2>/dev/null | head -n 1)
        if [ -n "$share" ]; then
          row "p5_mem_beyond_$dt" "$(awk -v s="$share" 'BEGIN { print (s <= 10) ? "ok" : "FAIL" }')" "beyond model states: $share% of optimizer state (<= 10%)" 0
        fi
        over=$(sed -n 's/^device memory taken.*together [-0-9]* (\([-0-9.]*\)% over the recorded.*/\1/p' "$log" 2>/dev/null)
        if [ -n "$over" ]; then
          row "p5_mem_delta_$dt" "$(awk -v s="$over" 'BEGIN { print (s <= 5 && s >= -5) ? "ok" : "FAIL" }')" "cudaMemGetInfo: $over% over the record (within 5%)" 0
        fi
        ns=$(sed -n 's/^batched (as the executor) *\([0-9.]*\) ms.*/\1/p' "$out/p5_ns_$dt.log" 2>/dev/null)
        step=$(sed -n 's/^median step wall time[^:]*: \([0-9.]*\).*/\1/p' "$out/p5_step_$dt.log" 2>/dev/null)
        if [ -n "$ns" ] && [ -n "$step" ]; then
          row "p5_beyond_ns_$dt" ok "$(awk -v s="$step" -v n="$ns" 'BEGIN { printf "step %.2f ms - Newton-Schulz %.2f ms = %.2f ms (%.0f%%)", 1e3*s, n, 1e3*s-n, 100*(1e3*s-n)/(1e3*s) }')" 0
        fi
      done
    else
      row p5 FAIL "canzona plan of qwen3-0.6b failed" 0
    fi
  fi

  # ---- overlap: the exposed step, plain, bucket-wise and with early updates (issue 29) ----
  if wanted overlap; then
    m=$CZ_PLANS/models/qwen3-0.6b.json
    if "$CZ" plan -q --model "$m" --cluster "$CZ_PLANS/clusters/h100-8-dp8-tp1.json" \
      --dp-size 1 --tp-size 1 --bucket-size 20000000 -o "$work/ovl.json"; then
      for mode in plain overlap early; do
        o=()
        [ $mode = overlap ] && o=(--overlap)
        [ $mode = early ] && o=(--overlap --early-updates)
        run "overlap_$mode" 300 'median [0-9.]+ s' \
          "$CZ_MPIRUN" -np 1 "$CZ_BENCH" --plan "$work/ovl.json" --model "$m" --backend cuda \
          --comm nccl --dtype bf16 --steps 5 --compute-ms 10 "${o[@]}" --json "$out/overlap-$mode.json"
      done
      ms() { sed -n 's/^exposed step.*: median \([0-9.]*\) s$/\1/p' "$out/overlap_$1.log" 2>/dev/null; }
      ea=$(ms plain) eb=$(ms overlap) ec=$(ms early)
      ng=$(sed -n 's/^micro-groups updated early.*summed): \([0-9]*\)$/\1/p' "$out/overlap_early.log" 2>/dev/null)
      if [ -n "$ea" ] && [ -n "$eb" ] && [ -n "$ec" ]; then
        row overlap_exposed ok "$(awk -v a="$ea" -v b="$eb" -v c="$ec" -v n="$ng" 'BEGIN { printf "exposed ms: plain %.1f ovl %.1f early %.1f (%s early)", 1e3*a, 1e3*b, 1e3*c, n }')" 0
      fi
    else
      row overlap FAIL "canzona plan of qwen3-0.6b failed" 0
    fi
  fi

  # ---- versus: the step against torch.optim.Muon + torch.optim.AdamW(fused) (issue 40) ----
  # Per model: canzona-bench on the plan (c; --same-grads: its gradients generated once, not
  # each step, which for 1.7B elements would take seconds of host time per step), then tools/bench/versus.py on the same plan, which
  # times torch's step (a) and canzona.torch.Optimizer's (b), reads (c)'s JSON and checks the
  # update difference after 3 steps; its "row: " lines become the table's rows (step: b and c
  # faster than a; update: within the bounds of versus.py's comment).
  if wanted versus; then
    models="qwen3-0.6b qwen3-1.7b"; [ $quick = 1 ] && models=qwen3-0.6b
    for m in $models; do
      mj=$CZ_PLANS/models/$m.json plan=$work/vs-$m.json bj=$out/versus-bench-$m.json
      if ! "$CZ" plan -q --model "$mj" --cluster "$CZ_PLANS/clusters/h100-8-dp8-tp1.json" \
        --dp-size 1 --tp-size 1 --allow-oversubscribed-memory -o "$plan"; then
        row "versus_${m#qwen3-}" FAIL "canzona plan of $m failed" 0
        continue
      fi
      # Time limits: canzona-bench 60 s / 90 s, versus.py 90 s / 150 s (0.6B / 1.7B): 6.5 min
      # at most, about 2.5 min expected (docs/PERF.md §7.3), so that the whole check stays
      # within 8 minutes.
      blimit=60 limit=90
      [ "$m" = qwen3-1.7b ] && blimit=90 limit=150
      t0=$(date +%s%N)
      timeout --kill-after=10 "$blimit" "$CZ_MPIRUN" -np 1 "$CZ_BENCH" --plan "$plan" --model "$mj" \
        --backend cuda --comm nccl --dtype bf16 --steps 10 --warmup 1 --same-grads --json "$bj" \
        >"$out/versus_bench_$m.log" 2>&1
      rc=$?
      bargs=()
      if [ $rc -eq 0 ] && [ -f "$bj" ]; then
        bargs=(--bench-json "$bj")
      else
        tenths=$((($(date +%s%N) - t0) / 100000000))
        why="exit $rc"; [ $rc -eq 124 ] || [ $rc -eq 137 ] && why="time limit of ${blimit} s"
        row "versus_bench_${m#qwen3-}" FAIL "canzona-bench: $why (versus_bench_$m.log)" "$((tenths / 10)).$((tenths % 10))"
      fi
      log=$out/versus_$m.log
      t0=$(date +%s%N)
      timeout --kill-after=10 "$limit" env PYTHONPATH="$CZ_PYDIR${PYTHONPATH:+:$PYTHONPATH}" \
        "$CZ_PYTHON" "$CZ_VERSUS" --device cuda --model "$mj" --plan "$plan" --steps 10 \
        --warmup 2 "${bargs[@]}" --json "$out/versus-$m.json" >"$log" 2>&1
      rc=$?
      tenths=$((($(date +%s%N) - t0) / 100000000))
      secs="$((tenths / 10)).$((tenths % 10))"
      n=0 nfail=0
      while read -r _ what result fig; do
        row "versus_${m#qwen3-}_$what" "$result" "$fig" "$secs"
        n=$((n + 1)) secs=0
        [ "$result" = FAIL ] && nfail=$((nfail + 1))
      done < <(grep '^row: ' "$log" 2>/dev/null)
      case $rc in
      0) [ $n -gt 0 ] || row "versus_${m#qwen3-}" FAIL "no result rows in versus_$m.log" "$secs" ;;
      77) row "versus_${m#qwen3-}" skipped "$(grep -m1 -o 'SKIPPED: .*' "$log" | cut -c10-)" "$secs" ;;
      124 | 137) row "versus_${m#qwen3-}" FAIL "time limit of ${limit} s" "$secs" ;;
      1) [ $nfail -gt 0 ] || row "versus_${m#qwen3-}" FAIL "exit 1: $(grep -v '^\s*$' "$log" | tail -1)" "$secs" ;;
      *) row "versus_${m#qwen3-}" FAIL "exit $rc: $(grep -v '^\s*$' "$log" | tail -1)" "$secs" ;;
      esac
    done
  fi

  # ---- calibration ----
  if wanted calibrate; then
    cq=(); [ $quick = 1 ] && cq=(--quick)
    run calibrate 300 'gemm bf16 +8192[^:]*: [^T]*TFLOP/s|launch[^:]*: [0-9.]+ us' "$CZ_BENCH" calibrate \
      "${cq[@]}" -o "$out/calibration.json"
  fi
fi

# ---- the table, and results.json ----
{
  printf '{\n  "schema": "canzona.gpu_check/1",\n  "header": "%s",\n  "results": [\n' "${header//\"/\\\"}"
  n=${#results[@]}
  for i in "${!results[@]}"; do
    sep=,; [ "$i" -eq $((n - 1)) ] && sep=""
    printf '    %s%s\n' "${results[$i]}" "$sep"
  done
  printf '  ]\n}\n'
} >"$out/results.json"
echo "$header"
printf '%-22s %-7s %-58s %6s\n' part result figure seconds
printf '%s\n' "${rows[@]}"
echo "logs, results.json and calibration.json: $out"
exit $failed
