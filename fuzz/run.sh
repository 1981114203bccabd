#!/usr/bin/env bash
# Builds the libFuzzer harnesses (build-fuzz/, clang, -fsanitize=fuzzer,address,undefined) if
# needed and runs each one for a fixed time on seeds gathered from the tree's bundled inputs.
#
#   fuzz/run.sh [SECONDS_PER_HARNESS] [HARNESS...]
#
# SECONDS_PER_HARNESS defaults to 25 (what tools/test.sh runs); a longer campaign is e.g.
# `fuzz/run.sh 600`. HARNESS names (model cluster plan plan_exec import_hf npy safetensors
# calibration) pick a subset.
# Everything is written to a mktemp -d folder, never into the tree. The harnesses run side by
# side, one per core (nproc). Prints the executions per harness; exits non-zero when any harness finds a crash, a leak, undefined behaviour, a
# time-out or a broken property. The folder is then kept and the reproducer's path printed
# (docs/ROBUSTNESS.md, "Fuzzing", says how to replay it).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
secs=${1:-25}
shift || true
case "$secs" in
'' | *[!0-9]*)
  echo "usage: fuzz/run.sh [SECONDS_PER_HARNESS] [HARNESS...]" >&2
  exit 2
  ;;
esac
all=(model cluster plan plan_exec import_hf npy safetensors calibration)
harnesses=("$@")
[ ${#harnesses[@]} -gt 0 ] || harnesses=("${all[@]}")
for h in "${harnesses[@]}"; do
  case " ${all[*]} " in
  *" $h "*) ;;
  *)
    echo "fuzz/run.sh: no harness '$h' (known: ${all[*]})" >&2
    exit 2
    ;;
  esac
done

if ! command -v clang >/dev/null; then
  echo "fuzz/run.sh: clang is not installed (tools/setup.sh installs it)" >&2
  exit 1
fi
jobs=$(nproc 2>/dev/null || echo 2)
bdir=build-fuzz
if [ ! -f "$bdir/CMakeCache.txt" ]; then
  CC=clang cmake -S . -B "$bdir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCZ_FUZZ=ON \
    -DCZ_WITH_MPI=OFF -DCZ_WITH_CUDA=OFF -DCZ_WERROR=ON >/dev/null
fi
cmake --build "$bdir" -j "$jobs" >/dev/null

work=$(mktemp -d)
keep=0
cleanup() { [ "$keep" = 1 ] || rm -rf "$work"; }
trap cleanup EXIT
mkdir -p "$work/tmp" "$work/artifacts" "$work/logs"
export TMPDIR="$work/tmp" CZ_FUZZ_TREE="$root"

# ---- seeds ------------------------------------------------------------------------------------
seed() { # seed HARNESS FILE...: copy bundled inputs into the harness's working corpus, each
  # named after its path so that files of one name in two folders do not collide
  local h=$1 f
  shift
  mkdir -p "$work/corpus/$h"
  for f in "$@"; do
    cp "$f" "$work/corpus/$h/$(printf '%s' "$f" | tr '/' '_')"
  done
}
seed model tests/data/*.json tests/data/bad/model_*.json plans/models/*.json
seed cluster tests/data/cluster_tiny.json tests/data/bad/cluster_*.json plans/clusters/*.json
seed import_hf tests/data/hf/*.json plans/hf/*.json
seed calibration plans/calibration/*.json tests/data/calibration_*.json

# Plans are not bundled: plan the fixture models on the fixture clusters (the same files
# fuzz_util.c loads to validate against), with the executable strategies for plan_exec and
# every strategy for plan.
cli="$bdir/canzona"
mkdir -p "$work/corpus/plan" "$work/corpus/plan_exec"
nplans=0
plan_seed() { # plan_seed HARNESS MODEL CLUSTER [OPTIONS...]
  local h=$1 m=$2 c=$3
  shift 3
  nplans=$((nplans + 1))
  local out="$work/corpus/$h/$nplans-$(basename "$m" .json)-$(basename "$c" .json).json"
  ASAN_OPTIONS=detect_leaks=0 "$cli" plan -q -m "$m" -c "$c" -o "$out" "$@"
}
for m in tests/data/model_tiny.json plans/models/test-small.json; do
  for c in plans/clusters/cpu-4-dp1-tp4.json plans/clusters/cpu-4-dp2-tp2.json \
    plans/clusters/cpu-4-dp4-tp1.json plans/clusters/h100-8-dp8-tp1.json; do
    plan_seed plan_exec "$m" "$c"
    plan_seed plan_exec "$m" "$c" --dp anchored --tp sc
    plan_seed plan_exec "$m" "$c" --dp tpaware --tp slot --unit numel
    plan_seed plan_exec "$m" "$c" --layout split
  done
  for c in tests/data/cluster_tiny.json plans/clusters/cpu-4-dp2-tp2.json; do
    plan_seed plan "$m" "$c"
    plan_seed plan "$m" "$c" --dp even --tp sc
    plan_seed plan "$m" "$c" --dp layerwise --tp none --optimizer shampoo
    plan_seed plan "$m" "$c" --optimizer soap --unit flops --tp single
    plan_seed plan "$m" "$c" --layout split --dp anchored --tp slot
  done
  # canzona.plan/2: block tasks, and cooperative ones of width 2, 4 and of the cost model's
  # choice, under both buffer layouts; the executor runs them all (plan_exec) as well as the
  # analysis commands (plan).
  for h in plan plan_exec; do
    plan_seed "$h" "$m" plans/clusters/cpu-4-dp1-tp4.json --split-blocks --coop 2
    plan_seed "$h" "$m" plans/clusters/cpu-4-dp2-tp2.json --split-blocks --coop auto
    plan_seed "$h" "$m" plans/clusters/cpu-4-dp1-tp4.json --split-blocks --tp slot
    plan_seed "$h" "$m" plans/clusters/cpu-4-dp1-tp4.json --coop 4
    plan_seed "$h" "$m" plans/clusters/cpu-4-dp2-tp2.json --split-blocks --coop 2 --layout split
  done
done
# canzona.plan/3: expert groups (EP 2 of the small MoE, with ETP 1 on TP 2, with cooperative
# tasks, under the split layout, the baselines), for the analysis commands (plan); the executor
# refuses them by their schema (plan_exec gets one, to keep that refusal covered).
m=plans/models/test-moe.json
plan_seed plan "$m" plans/clusters/cpu-4-dp4-ep2.json
plan_seed plan "$m" plans/clusters/cpu-4-dp4-ep2.json --dp layerwise --layerwise-order megatron-aug26
plan_seed plan "$m" plans/clusters/cpu-4-dp4-ep2.json --dp even --tp sc
plan_seed plan "$m" plans/clusters/cpu-4-dp4-ep2.json --layout split --dp anchored
# Two stages with expert groups: the split plan folder of each (fuzz_plan.c) has parts per
# stage and EP rank.
plan_seed plan "$m" plans/clusters/cpu-4-dp4-ep2.json --pp-size 2
plan_seed plan "$m" plans/clusters/cpu-4-dp2-tp2.json --etp-size 1 --ep-size 2
plan_seed plan "$m" plans/clusters/cpu-4-dp2-tp2.json --ep-size 2 --coop auto
plan_seed plan_exec "$m" plans/clusters/cpu-4-dp4-ep2.json
# canzona.plan/4: fully sharded, plain and HSDP in both modes, over two stages; for the
# analysis commands and the executor's plan check.
m=plans/models/test-small.json
for h in plan plan_exec; do
  plan_seed "$h" "$m" plans/clusters/cpu-4-dp2-tp2.json --layout fsdp
  plan_seed "$h" "$m" plans/clusters/cpu-4-dp4-tp1.json --layout fsdp --replicate-size 2
  plan_seed "$h" "$m" plans/clusters/cpu-4-dp4-tp1.json --layout fsdp --replicate-size 2 \
    --hsdp-compute partitioned
done
plan_seed plan "$m" plans/clusters/cpu-4-dp2-tp2.json --layout fsdp --pp-size 2
if ! grep -lq '"schema": "canzona.plan/4"' "$work/corpus/plan"/*.json; then
  echo "fuzz/run.sh: no plan seed is fully sharded" >&2
  exit 1
fi
if ! grep -lq '"schema": "canzona.plan/3"' "$work/corpus/plan"/*.json; then
  echo "fuzz/run.sh: no plan seed has expert groups" >&2
  exit 1
fi
# The seeds must reach what they are for: each plan harness gets version 2 plans with
# cooperative tasks and split-layout plans (plan_exec's once had neither kind of version 2
# plan, so the fuzzer started far from the executor's task checks).
for h in plan plan_exec; do
  for want in '"schema": "canzona.plan/2"' '"width": [2-9]' '"layout": "split"'; do
    if ! grep -lq "$want" "$work/corpus/$h"/*.json; then
      echo "fuzz/run.sh: no $h seed holds $want" >&2
      exit 1
    fi
  done
done

# Checkpoint seeds: the safetensors harness writes its three executors' checkpoints (Muon with
# AdamW, Shampoo with every optional tensor, SOAP) after three steps, as its executors hold
# them, and exits.
mkdir -p "$work/corpus/safetensors"
CZ_FUZZ_SEED_DIR="$work/corpus/safetensors" ASAN_OPTIONS=detect_leaks=0 \
  "$bdir/fuzz/fuzz_safetensors" >"$work/logs/safetensors-seeds.log" 2>&1 ||
  { cat "$work/logs/safetensors-seeds.log"; echo "fuzz/run.sh: no checkpoint seeds" >&2; exit 1; }
for opt in muon shampoo soap; do
  [ -s "$work/corpus/safetensors/$opt.safetensors" ] ||
    { echo "fuzz/run.sh: no $opt checkpoint seed" >&2; exit 1; }
done

# .npy seeds: two prefix bytes (expected rank and shape, see fuzz_npy.c), then the file.
mkdir -p "$work/corpus/npy"
python3 - "$work/corpus/npy" <<'EOF'
import struct, sys
def npy(shape, count, version=1, descr="<f4", order="False", trailing=b""):
    dims = "(%d,)" % shape[0] if len(shape) == 1 else "(%s)" % ", ".join(map(str, shape))
    d = "{'descr': '%s', 'fortran_order': %s, 'shape': %s, }" % (descr, order, dims)
    lenbytes = 2 if version == 1 else 4
    pad = (64 - (8 + lenbytes + len(d) + 1) % 64) % 64
    h = (d + " " * pad + "\n").encode()
    head = b"\x93NUMPY" + bytes([version, 0]) + len(h).to_bytes(lenbytes, "little")
    return head + h + struct.pack("<%df" % count, *[0.5 * i for i in range(count)]) + trailing
seeds = {
    "1d": bytes([0, 0x40]) + npy((4,), 4),
    "2d": bytes([1, 0x23]) + npy((2, 3), 6),
    "2d-v2": bytes([1, 0x32]) + npy((3, 2), 6, version=2),
    "empty": bytes([0, 0x00]) + npy((0,), 0),
    "wrong-shape": bytes([1, 0x22]) + npy((2, 3), 6),
    "f8": bytes([0, 0x20]) + npy((2,), 4, descr="<f8"),
    "fortran": bytes([1, 0x22]) + npy((2, 2), 4, order="True"),
}
for name, data in seeds.items():
    open("%s/%s.bin" % (sys.argv[1], name), "wb").write(data)
EOF

# ---- runs -------------------------------------------------------------------------------------
# Each harness is one single-threaded libFuzzer process: they run side by side, one per core
# (nproc at a time), so that each still gets a core for its whole time and the campaign's wall
# time is divided by the cores. Results are reported in the harnesses' order.
echo "fuzzing ${#harnesses[@]} harness(es) for $secs s each, $jobs at a time (work folder: $work)"
fuzz_one() { # fuzz_one HARNESS: runs it, leaves its exit code in logs/HARNESS.rc
  local h=$1 rc=0
  "$bdir/fuzz/fuzz_$h" -max_total_time="$secs" -print_final_stats=1 -timeout=10 \
    -rss_limit_mb=2048 -max_len=65536 -artifact_prefix="$work/artifacts/$h-" \
    "$work/corpus/$h" >"$work/logs/$h.log" 2>&1 || rc=$?
  echo "$rc" >"$work/logs/$h.rc"
}
declare -A before
for h in "${harnesses[@]}"; do
  mkdir -p "$work/corpus/$h"
  before[$h]=$(find "$work/corpus/$h" -type f | wc -l)
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do
    wait -n || true
  done
  fuzz_one "$h" &
done
wait
failed=()
for h in "${harnesses[@]}"; do
  bin="$bdir/fuzz/fuzz_$h"
  log="$work/logs/$h.log"
  rc=$(cat "$work/logs/$h.rc" 2>/dev/null || echo 1)
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
  after=$(find "$work/corpus/$h" -type f | wc -l)
  printf '%-12s %10s executions in %s s, corpus %d -> %d inputs' "$h" "${execs:-?}" "$secs" \
    "${before[$h]}" "$after"
  if [ "$rc" -ne 0 ]; then
    printf ' FAILED (exit %d)\n' "$rc"
    failed+=("$h")
    echo "---- fuzz_$h: end of the libFuzzer log ----"
    tail -n 60 "$log"
    for a in "$work/artifacts/$h-"*; do
      [ -f "$a" ] || continue
      echo "reproducer: $a ($(wc -c <"$a") bytes); replay: $bin $a"
      echo "reproducer (base64):"
      head -c 8192 "$a" | base64
    done
    echo "----"
  else
    printf '\n'
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  keep=1
  echo "fuzz: findings in: ${failed[*]} (logs and reproducers kept in $work)" >&2
  exit 1
fi
echo "fuzz: no findings"
