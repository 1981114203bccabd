#!/usr/bin/env bash
# Multi-rank executor tests: plans test-small with `canzona plan` and runs canzona-bench on 4
# MPI ranks. Usage: bench.sh verify CLUSTER DP TP [fp32|bf16] [unified|split] | mismatch | options | nan | dump |
# owncomms | replicas | grads | knobs | coeffs (Newton-Schulz coefficient tables) | stall | shampoo CLUSTER TP MAX_DIM [START MOMENTUM NESTEROV] |
# soap CLUSTER TP [SHAMPOO_BETA] | heads CLUSTER [TP_STRATEGY] (per-head Muon, muon_heads_ref) |
# normuon CLUSTER row|col [TP_STRATEGY] (NorMuon, normuon_ref) |
# soap-sides CLUSTER TP | nolapacke
# | average (exec_average.c, $CZ_AVERAGE, on 2 and 4 ranks)
# | qk-clip (exec_qk_clip.c, $CZ_QK_CLIP: DP2*TP2 fp32 and bf16, DP4*TP1, DP1*TP2)
# | tasks CLUSTER DP TP BLOCKS WIDTH [PLAN OPTION...] (block and cooperative tasks)
# | pp PP DP TP [fp32|bf16] (pipeline-parallel plans on PP*DP*TP = 4 ranks)
# | experts (the small MoE at EP 1 against the reference; expert groups: experts.sh)
# | overlap CLUSTER (the bucket-wise step against the plain one, bit for bit, with and without
# |   early updates; its errors)
# | early-orders (early updates with ranks declaring their buckets in different orders, at
# |   DP4*TP1 and DP2*TP2; a stalled step's clean end)
# | fsdp [fp32|bf16] (the fully sharded step at DP4*TP1 and DP2*TP2 against the reference;
#   its refusals)
# | fsdp-soap (SOAP under the fully sharded step, soap_ref)
# Env: CZ (canzona), CZ_BENCH (canzona-bench), CZ_SOURCE_DIR. Exit 77 = skipped.
set -euo pipefail
. "$(dirname "$0")/mpi_env.sh"
src=${CZ_SOURCE_DIR:?}
model=$src/plans/models/test-small.json
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# Time limits scale with CZ_TIME_SCALE (CMake sets it to 4 for the sanitizer build).
scale=${CZ_TIME_SCALE:-1}
# mpi and mpi_fails: mpi_env.sh.
plan() { # cluster dp tp out [layout]: write a plan and check every invariant of it
  "$CZ" plan -q --model "$model" --cluster "$src/plans/clusters/$1.json" --dp "$2" --tp "$3" \
    --layout "${5:-unified}" -o "$4" &&
    "$CZ" validate "$4" --model "$model" --cluster "$src/plans/clusters/$1.json" >/dev/null
}

case "$1" in
average)
  mpi -np 2 "${CZ_AVERAGE:?}"
  mpi -np 4 "$CZ_AVERAGE"
  ;;
qk-clip)
  mpi -np 4 "${CZ_QK_CLIP:?}" 2 fp32
  mpi -np 4 "$CZ_QK_CLIP" 2 bf16
  mpi -np 4 "$CZ_QK_CLIP" 1 fp32
  mpi -np 2 "$CZ_QK_CLIP" 2 fp32
  # canzona-bench --qk-clip against its reference, which clips the whole tensors with the MAX
  # of every DP rank's generated maxima: DP2*TP2 (the declared [Q, K, V] blocks split by TP),
  # also overlapped and in bf16 (the tolerances of `verify bf16`), and DP4*TP1.
  for cluster in cpu-4-dp2-tp2 cpu-4-dp4-tp1; do
    plan "$cluster" alpha rollback "$tmp/plan.json"
    for extra in "" "--overlap" "--dtype bf16 --tolerance 3e-2 --update-tolerance 0.25"; do
      [ "$cluster" = cpu-4-dp4-tp1 ] && [ -n "$extra" ] && continue
      # shellcheck disable=SC2086
      mpi -np 4 "$CZ_BENCH" --plan "$tmp/plan.json" --model "$model" --steps 3 --verify \
        --qk-clip 100 --qk-heads 4:2 $extra | tee "$tmp/out"
      grep -q "verify: OK" "$tmp/out"
      grep -Eq "qk-clip: [1-9][0-9]* \(layer, head\) pairs above tau = 100 in the 4 steps" "$tmp/out"
    done
  done
  # The options' refusals, on every rank.
  mpi_fails -np 4 "$CZ_BENCH" --plan "$tmp/plan.json" --model "$model" --qk-clip 100
  grep -q -- "--qk-clip TAU (> 0) and --qk-heads H:G go together" "$tmp/out"
  mpi_fails -np 4 "$CZ_BENCH" --plan "$tmp/plan.json" --model "$model" --qk-clip 100 \
    --qk-heads 3:2
  grep -q -- "--qk-heads '3:2': expected H:G" "$tmp/out"
  mpi_fails -np 4 "$CZ_BENCH" --plan "$tmp/plan.json" --model "$model" --qk-clip 100 \
    --qk-heads 5:1
  grep -q "not a multiple of heads + 2 x groups = 7" "$tmp/out"
  ;;
wire-planes)
  # The MPI plane's bf16 reduce-scatter and all-gather against fp32 within the bound their
  # rounding implies (wire_mpi.c derives it).
  mpi -np 2 "${CZ_WIRE:?}"
  mpi -np 4 "$CZ_WIRE"
  ;;
wire)
  # The simulator's DP and micro-group bytes are the executor's counted bytes, for an fp32 model,
  # a bf16 one and a bf16 one with the fp32 reduction, on MODEL ($2) over CLUSTER ($3, default
  # cpu-4-dp2-tp2): canzona simulate --json's "wire" against canzona-bench's "DP wire per step"
  # and "TP wire per step" (the most one rank posted or sent, one step). $4: the choices, comma
  # separated (default all three); the rest: plan options (cooperative tasks, expert-TP, sc).
  command -v python3 >/dev/null || { echo "python3 not found"; exit 77; }
  m=$src/plans/models/$2.json cl=$src/plans/clusters/${3:-cpu-4-dp2-tp2}.json
  IFS=, read -r -a choices <<<"${4:-fp32,bf16,bf16 --grad-reduce-in-fp32}"
  popt=("${@:5}")
  for c in "${choices[@]}"; do
    read -r -a w <<<"$c"
    dt=${w[0]} opt=("${w[@]:1}")
    python3 - "$m" "$dt" "$tmp/m.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
d["dtype"] = sys.argv[2]
json.dump(d, open(sys.argv[3], "w"))
PY
    "$CZ" plan -q --model "$tmp/m.json" --cluster "$cl" ${popt[@]+"${popt[@]}"} -o "$tmp/p.json"
    "$CZ" simulate --plan "$tmp/p.json" -c "$cl" --json ${popt[@]+"${popt[@]}"} \
      ${opt[@]+"${opt[@]}"} >"$tmp/s.json"
    mpi -np 4 "$CZ_BENCH" --plan "$tmp/p.json" --model "$tmp/m.json" --steps 1 --warmup 0 \
      ${opt[@]+"${opt[@]}"} | tee "$tmp/out"
    python3 - "$tmp/s.json" "$tmp/out" "$c" <<'PY'
import json, re, sys
w = json.load(open(sys.argv[1]))["rows"][0]["wire"]
m = re.search(r"DP wire per step \(most on one rank\): gradients (\S+) (\d+) bytes, "
              r"parameters (\S+) (\d+) bytes", open(sys.argv[2]).read())
assert m, "canzona-bench printed no wire line"
t = re.search(r"TP wire per step \(most on one rank\): micro-groups fp32 (\d+) bytes, expert "
              r"micro-groups fp32 (\d+) bytes", open(sys.argv[2]).read())
assert t, "canzona-bench printed no TP wire line"
# A plan without experts has no expert-TP program: the simulator says null, the executor 0.
got = (m[1], int(m[2]), m[3], int(m[4]), int(t[1]), int(t[2]))
want = (w["grad_dtype"], w["grad_sync_bytes"], w["param_dtype"], w["param_sync_bytes"],
        w["tp_sync_bytes"], w["etp_sync_bytes"] or 0)
assert got == want, f"{sys.argv[3]}: executor {got}, simulator {want}"
# Both exchanges moved something, so equality is not two zeros.
assert want[1] > 0 and want[4] > 0, want
print(f"{sys.argv[3]}: executor = simulator: gradients {got[0]} {got[1]} bytes, "
      f"parameters {got[2]} {got[3]} bytes, micro-groups fp32 {got[4]} bytes, expert "
      f"micro-groups fp32 {got[5]} bytes")
PY
  done
  ;;
verify)
  plan "$2" "$3" "$4" "$tmp/plan.json" "${6:-unified}"
  if [ "${6:-unified}" = split ]; then
    command -v python3 >/dev/null || { echo "python3 not found"; exit 77; }
    # The split layout must cut an elementwise parameter between DP ranks here, or the test
    # would not reach the executor's pieces.
    python3 - "$tmp/plan.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
cut = [q["name"] for q in p["params"] if q["dp_owner"] == -1 and
       len({r for r, (s, e) in enumerate(p["buckets"][q["bucket"]]["ranges"])
            if s < q["offset"] + q["numel"] and e > q["offset"]}) > 1]
assert cut, "no elementwise parameter is cut between DP ranks"
print("split layout: cut between DP ranks:", ", ".join(cut))
PY
  fi
  # bf16 parameters and gradients against the fp32 reference: the parameters are bf16 (an
  # element's rounding is up to 2^-8 of it; an AdamW element whose tiny averaged gradient
  # changes sign under rounding moves a whole step the other way), and the update, measured
  # on them, carries the rounding of the initial and the final values. Measured at the default
  # rates: parameters <= 1.8e-2, updates <= 0.136 (docs/EXECUTOR.md); bounded at 3e-2 and
  # 0.25. With 10x the rates the updates outgrow the rounding: updates <= 0.0137 (Muon) and
  # 0.0564 (AdamW), parameters <= 0.15; bounded at 0.1 and 0.3.
  extra=()
  [ "${5:-fp32}" = bf16 ] && extra=(--dtype bf16 --tolerance 3e-2 --update-tolerance 0.25)
  mpi -np 4 "$CZ_BENCH" --plan "$tmp/plan.json" --model "$model" --steps 3 --verify \
    --json "$tmp/t.json" "${extra[@]}" | tee "$tmp/out"
  grep -q "verify: OK" "$tmp/out"
  grep -q '"median_s"' "$tmp/t.json"
  grep -q "executor allocations in steps 2..4 (most on one rank): 0$" "$tmp/out"
  # What went on the wire: the job's dtype both ways (bf16 gradients by default).
  wire=fp32
  [ "${5:-fp32}" = bf16 ] && wire=bf16
  grep -q "gradients $wire [0-9]* bytes, parameters $wire [0-9]* bytes$" "$tmp/out"
  # The fp32 reduction and the 10x rates change the arithmetic, not the plan's paths: they run
  # on the default strategy's plans (alpha + rollback, unified and split), which every grid has,
  # and not again on each other strategy's (CI's time).
  if [ "${5:-fp32}" = bf16 ] && [ "$3 $4" = "alpha rollback" ]; then
    # And with the fp32 reduction (Megatron's --grad-reduce-in-fp32), within the same bounds.
    mpi -np 4 "$CZ_BENCH" --plan "$tmp/plan.json" --model "$model" --steps 3 --verify \
      "${extra[@]}" --grad-reduce-in-fp32 | tee "$tmp/out"
    grep -q "verify: OK" "$tmp/out"
    grep -q "gradients fp32 [0-9]* bytes, parameters bf16 [0-9]* bytes$" "$tmp/out"

    # And at 10x the rates: the same code as above with other numbers, so not again under the
    # sanitizers (CZ_SANITIZED, CI's time).
    [ "${CZ_SANITIZED:-0}" = 1 ] && exit 0
    mpi -np 4 "$CZ_BENCH" --plan "$tmp/plan.json" --model "$model" --steps 3 --verify \
      --dtype bf16 --lr 0.01 --adamw-lr 3e-3 --tolerance 0.3 --update-tolerance 0.1 |
      tee "$tmp/out"
    grep -q "verify: OK" "$tmp/out"
  fi
  ;;
pp)
  # A pipeline-parallel plan: each rank binds and steps its stage's buffer only; the bench
  # gathers every stage's parameters on rank 0 and compares them with the single-process
  # reference on whole tensors (which knows nothing of stages).
  sizes=(--pp-size "$2" --dp-size "$3" --tp-size "$4")
  cl=$src/plans/clusters/cpu-4-dp2-tp2.json
  "$CZ" plan -q --model "$model" --cluster "$cl" "${sizes[@]}" -o "$tmp/plan.json"
  "$CZ" validate "$tmp/plan.json" --model "$model" --cluster "$cl" "${sizes[@]}" >/dev/null
  command -v python3 >/dev/null || { echo "python3 not found"; exit 77; }
  python3 - "$tmp/plan.json" "$2" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
pp = int(sys.argv[2])
stages = sorted({q["stage"] for q in p["params"]})
print("plan: pp %d, parameters in stages %s" % (p["topology"]["pp"], stages))
assert p["topology"]["pp"] == pp and stages == list(range(pp)), "expected every stage used"
PY
  extra=()
  [ "${5:-fp32}" = bf16 ] && extra=(--dtype bf16 --tolerance 3e-2 --update-tolerance 0.25)
  mpi -np 4 "$CZ_BENCH" --plan "$tmp/plan.json" --model "$model" --steps 3 --verify \
    "${extra[@]}" | tee "$tmp/out"
  grep -q "verify: OK" "$tmp/out"
  grep -q "pp=$2" "$tmp/out"
  grep -q "executor allocations in steps 2..4 (most on one rank): 0$" "$tmp/out"
  # A world of the wrong size is refused on every rank, naming dp*tp*pp.
  mpi_fails -np 2 "$CZ_BENCH" --plan "$tmp/plan.json" --model "$model" --steps 1
  [ "$(grep -c 'the plan needs dp\*tp\*pp' "$tmp/out")" -eq 2 ]
  ;;
experts)
  # The small MoE (test-moe: 2 layers of 8 experts). Planned at EP 1 its experts are dense
  # matrices owned over DP: the distributed step equals the single-process one. (With expert
  # groups: tests/mpi/experts.sh.)
  moe=$src/plans/models/test-moe.json
  cl=$src/plans/clusters/cpu-4-dp4-ep2.json
  "$CZ" plan -q --model "$moe" --cluster "$cl" --ep-size 1 -o "$tmp/ep1.json"
  ! grep -q '"expert_schedule"' "$tmp/ep1.json"
  mpi -np 4 "$CZ_BENCH" --plan "$tmp/ep1.json" --model "$moe" --steps 3 --verify | tee "$tmp/out"
  grep -q "verify: OK" "$tmp/out"
  ;;
tasks)
  # Block and cooperative tasks (canzona plan --split-blocks, --coop K) against the
  # single-process Muon on whole matrices (canzona-bench --verify: the reference
  # orthogonalises each whole matrix's blocks in one process, sharing none of the block,
  # region or cooperative code). BLOCKS: the least number of block tasks the plan must have;
  # WIDTH: the cooperative width its tasks must use (1: none), so that the test cannot pass on
  # a plan that fell back to whole hosted matrices.
  "$CZ" plan -q --model "$model" --cluster "$src/plans/clusters/$2.json" --dp "$3" --tp "$4" \
    "${@:7}" -o "$tmp/plan.json"
  "$CZ" validate "$tmp/plan.json" --model "$model" --cluster "$src/plans/clusters/$2.json" >/dev/null
  command -v python3 >/dev/null || { echo "python3 not found"; exit 77; }
  python3 - "$tmp/plan.json" "$5" "$6" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
blocks, width = int(sys.argv[2]), int(sys.argv[3])
# A hosted whole matrix is written as its parameter id, a block or cooperative task as an object.
tasks = [t if isinstance(t, dict) else {"param": t}
         for s in p["tp_schedule"] for g in s["groups"] for slot in g["slots"] for t in slot]
nb = len({(t["param"], t["block"]) for t in tasks if t.get("block", -1) >= 0})
widths = sorted({t.get("width", 1) for t in tasks})
print("plan %s: %d block tasks, widths %s" % (p["schema"], nb, widths))
assert nb >= blocks, "expected at least %d block tasks" % blocks
assert width == 1 and widths == [1] or width in widths, "expected width %d" % width
# A cooperative member applies the polynomial as A (A X_j) when its slice of the long side is
# narrower than the short side a, else in the standard form (executor/src/optim/ns_coop.h): every
# cooperative plan here must exercise both.
forms = set()
for t in tasks:
    k = t.get("width", 1)
    if k == 1:
        continue
    q = p["params"][t["param"]]
    rows, cols = q["shape"][0], q["shape"][1] if len(q["shape"]) > 1 else 1
    if t.get("block", -1) >= 0:
        size = q["blocks"]["sizes"][t["block"]]
        rows, cols = (size, cols) if q["blocks"]["dim"] == 0 else (rows, size)
    a, long = min(rows, cols), max(rows, cols)
    forms |= {"A(AX)" if long // k + (j < long % k) < a else "standard" for j in range(k)}
if width > 1:
    print("cooperative forms:", ", ".join(sorted(forms)))
    assert forms == {"A(AX)", "standard"}, "expected both polynomial forms, got %s" % forms
    print("Gram panels:", sorted({t.get("panels", 1) for t in tasks if t.get("width", 1) > 1}))
PY
  mpi -np 4 "$CZ_BENCH" --plan "$tmp/plan.json" --model "$model" --steps 3 --verify | tee "$tmp/out"
  grep -q "verify: OK" "$tmp/out"
  grep -q "executor allocations in steps 2..4 (most on one rank): 0$" "$tmp/out"
  if [ "$6" -gt 1 ]; then
    # The same plan with every cooperative task at the most Gram panels the format allows
    # without an empty one (min(8, (a + 1) / 2)), whatever the cost model chose for these
    # small CPU matrices: several panels' all-reduces in flight at once on every sub-plane.
    # Only the executor reads it (its recorded costs no longer match that count, which validate
    # would report).
    python3 "$src/tests/mpi/plan_edit.py" "$tmp/plan.json" "$tmp/panels.json" <<'PY'
n = 0
for s in p["tp_schedule"]:
    for g in s["groups"]:
        for slot in g["slots"]:
            for t in slot:
                if isinstance(t, dict) and t.get("width", 1) > 1:
                    q = p["params"][t["param"]]
                    rows, cols = q["shape"][0], q["shape"][1]
                    if t.get("block", -1) >= 0:
                        size = q["blocks"]["sizes"][t["block"]]
                        rows, cols = (size, cols) if q["blocks"]["dim"] == 0 else (rows, size)
                    t["panels"] = min(8, (min(rows, cols) + 1) // 2)
                    n += 1
print("cooperative task entries set to the most panels:", n)
PY
    mpi -np 4 "$CZ_BENCH" --plan "$tmp/panels.json" --model "$model" --steps 3 --verify |
      tee "$tmp/out"
    grep -q "verify: OK" "$tmp/out"
  fi
  ;;
mismatch)
  # Rank 3 gets a plan for another cluster: every rank must fail, none may hang.
  plan cpu-4-dp2-tp2 alpha rollback "$tmp/a.json"
  plan cpu-4-dp4-tp1 alpha rollback "$tmp/b.json"
  mpi_fails -np 3 "$CZ_BENCH" --plan "$tmp/a.json" --model "$model" --steps 1 : \
    -np 1 "$CZ_BENCH" --plan "$tmp/b.json" --model "$model" --steps 1
  n=$(grep -c "canzona-bench: rank [0-3]: .*different plans\|canzona-bench: rank [0-3]: .*rank .* failed" "$tmp/out" || true)
  [ "$n" -eq 4 ] || { echo "expected 4 ranks to report the mismatch, got $n"; exit 1; }
  # A plan run with another model is refused on every rank.
  mpi_fails -np 4 "$CZ_BENCH" --plan "$tmp/a.json" --model "$src/plans/models/test-mid.json" \
    --steps 1
  n=$(grep -c "canzona-bench: rank [0-3]: loading the plan and model: plan" "$tmp/out" || true)
  [ "$n" -eq 4 ] || { echo "expected 4 ranks to report the model mismatch, got $n"; exit 1; }
  # Plans edited after they were written, their content hash recomputed: consistent in
  # themselves, so the executor runs them, and --verify reads the same plan. Only the model
  # shows them wrong; every rank refuses them, naming what differs.
  command -v python3 >/dev/null || { echo "python3 not found"; exit 77; }
  edited() { # name expected-message python-edit
    python3 "$src/tests/mpi/plan_edit.py" "$tmp/a.json" "$tmp/$1.json" <<<"$3"
    mpi_fails -np 4 "$CZ_BENCH" --plan "$tmp/$1.json" --model "$model" --steps 1 --verify
    n=$(grep -c "canzona-bench: rank [0-3]: loading the plan and model: .*$2" "$tmp/out" || true)
    [ "$n" -eq 4 ] || { echo "$1: expected 4 ranks to report '$2', got $n"; exit 1; }
  }
  edited reordered "blocks: 'decoder.layers.0.self_attention.linear_qkv.weight' has blocks dim 0 \[128, 128, 256\] in the plan but dim 0 \[256, 128, 128\]" \
    'p["params"][2]["blocks"]["sizes"] = [128, 128, 256]'
  edited dropped "blocks: 'decoder.layers.0.mlp.linear_fc1.weight' has blocks none in the plan" \
    'del p["params"][7]["blocks"]'
  edited tp_dim "tp_dim: 'decoder.layers.0.self_attention.linear_proj.weight' has tp_dim 0 in the plan but 1" \
    'q = p["params"][5]; q["tp_dim"] = 0; q["local_shape"] = [128, 256]'
  # A version 1 plan relabelled canzona.plan/2 (its hash recomputed), which canzona validate
  # refuses by its plan.schema rule: the executor refuses it on every rank, naming the file,
  # the JSON path and the schema expected.
  grep -q '"schema": "canzona.plan/1"' "$tmp/a.json" || { echo "a.json is not version 1"; exit 1; }
  python3 "$src/tests/mpi/plan_edit.py" "$tmp/a.json" "$tmp/relabel.json" <<<'p["schema"] = "canzona.plan/2"'
  mpi_fails -np 4 "$CZ_BENCH" --plan "$tmp/relabel.json" --model "$model" --steps 1
  n=$(grep -c "canzona-bench: rank [0-3]: .*relabel.json: \$.schema: the plan says \"canzona.plan/2\" .*expected \"canzona.plan/1\"" "$tmp/out" || true)
  [ "$n" -eq 4 ] || { echo "relabelled plan: expected 4 ranks to refuse it naming \$.schema, got $n"; cat "$tmp/out"; exit 1; }
  # A handed-in DP communicator of the wrong size is refused on every rank.
  mpi_fails -np 4 "$CZ_BENCH" --plan "$tmp/a.json" --model "$model" --steps 1 --bad-dp-comm
  n=$(grep -c "rank [0-3]: the DP communicator has 4 ranks .* the plan needs dp = 2" "$tmp/out" || true)
  [ "$n" -eq 4 ] || { echo "expected 4 ranks to report the DP communicator size, got $n"; exit 1; }
  ;;
options)
  # Option errors and disagreements on one rank only: every rank stops with its own message
  # (mpi_fails fails the test on a hang, through the timeout).
  plan cpu-4-dp2-tp2 alpha rollback "$tmp/a.json"
  run=("$CZ_BENCH" --plan "$tmp/a.json" --model "$model")
  expect_all() { # pattern-for-rank-3 pattern-for-ranks-0-2
    grep -q "canzona-bench: rank 3: $1" "$tmp/out" || { echo "rank 3 did not report: $1"; exit 1; }
    n=$(grep -c "canzona-bench: rank [0-2]: $2" "$tmp/out" || true)
    [ "$n" -eq 3 ] || { echo "expected ranks 0-2 to report '$2', got $n"; exit 1; }
  }
  mpi_fails -np 3 "${run[@]}" --steps 1 : -np 1 "${run[@]}" --steps 1 --bogus
  expect_all "unknown option or missing value: --bogus" "stopping, another rank's options are invalid"
  mpi_fails -np 3 "${run[@]}" --steps 1 : -np 1 "${run[@]}" --steps x
  expect_all "bad number 'x' for --steps" "stopping, another rank's options are invalid"
  mpi_fails -np 3 "${run[@]}" --steps 1 : -np 1 "${run[@]}" --steps 2
  expect_all "the ranks were given different options.*steps=2" \
    "the ranks were given different options.*steps=1"
  mpi_fails -np 3 "${run[@]}" --steps 1 : -np 1 "${run[@]}" --steps 1 --verify
  expect_all "the ranks were given different options.*verify=1" "the ranks were given different options.*verify=0"
  mpi_fails -np 3 "${run[@]}" --steps 1 : -np 1 "${run[@]}" --steps 1 --dtype bf16 --momentum 0.9
  expect_all "the ranks were given different options.*dtype=0.*momentum=0.9000" \
    "the ranks were given different options.*dtype=-1.*momentum=0.9499"
  mpi_fails -np 3 "${run[@]}" --steps 1 : -np 1 "${run[@]}" --steps 1 --scaling bogus
  expect_all "--scaling 'bogus': expected rms or shape" "stopping, another rank's options are invalid"
  mpi_fails -np 3 "${run[@]}" --steps 1 : -np 1 "${run[@]}" --steps 1 --help
  expect_all "the ranks were given different options.*help=1" "the ranks were given different options.*help=0"
  # The data plane, the backend and the Shampoo/SOAP options are agreed too (a rank on NCCL
  # among ranks on MPI would wait forever; no device is needed to reach this check).
  mpi_fails -np 3 "${run[@]}" --steps 1 : -np 1 "${run[@]}" --steps 1 --backend cuda --comm nccl
  expect_all "the ranks were given different options.*backend=cuda comm=nccl" \
    "the ranks were given different options.*backend=cpu comm=mpi"
  mpi_fails -np 3 "${run[@]}" --steps 1 : -np 1 "${run[@]}" --steps 1 --soap-eps 1e-6
  expect_all "the ranks were given different options.*soap=[^ ]*,9.99999[0-9]*e-07[ )]" \
    "the ranks were given different options.*soap=[^ ]*,[0-9.e+-]*[ )]"
  # So is the bucket-wise step: a rank declaring buckets among ranks stepping whole would wait.
  mpi_fails -np 3 "${run[@]}" --steps 1 : -np 1 "${run[@]}" --steps 1 --overlap
  expect_all "the ranks were given different options.*overlap=1" \
    "the ranks were given different options.*overlap=0"
  # Paths only rank 0 uses must agree too: a rank given another one was silently ignored.
  mpi_fails -np 3 "${run[@]}" --steps 1 --save-state "$tmp/s0" : -np 1 "${run[@]}" --steps 1 \
    --save-state "$tmp/s3"
  expect_all "the ranks were given different options.*save-state=$tmp/s3" \
    "the ranks were given different options.*save-state=$tmp/s0"
  mpi_fails -np 3 "${run[@]}" --steps 1 --load-state "$tmp/l0" : -np 1 "${run[@]}" --steps 1 \
    --load-state "$tmp/l3"
  expect_all "the ranks were given different options.*load-state=$tmp/l3" \
    "the ranks were given different options.*load-state=$tmp/l0"
  mpi_fails -np 3 "${run[@]}" --steps 1 --json "$tmp/j0" : -np 1 "${run[@]}" --steps 1
  expect_all "the ranks were given different options.*json=-" \
    "the ranks were given different options.*json=$tmp/j0"
  # An output that is an input would replace it: refused on every rank, the input intact.
  cp "$model" "$tmp/m.json"
  cp "$tmp/a.json" "$tmp/a.copy"
  mpi_fails -np 4 "$CZ_BENCH" --plan "$tmp/a.json" --model "$tmp/m.json" --steps 1 \
    --save-state "$tmp/a.json"
  n=$(grep -c "canzona-bench: rank [0-3]: $tmp/a.json: the output is the same file as the --plan file" "$tmp/out" || true)
  [ "$n" -eq 4 ] || { echo "expected 4 ranks to refuse --save-state PLAN, got $n"; exit 1; }
  cmp "$tmp/a.json" "$tmp/a.copy"
  ln -s m.json "$tmp/m.link"
  mpi_fails -np 4 "$CZ_BENCH" --plan "$tmp/a.json" --model "$tmp/m.json" --steps 1 \
    --json "$tmp/m.link"
  n=$(grep -c "canzona-bench: rank [0-3]: $tmp/m.link: the output is the same file as the --model file" "$tmp/out" || true)
  [ "$n" -eq 4 ] || { echo "expected 4 ranks to refuse --json MODEL, got $n"; exit 1; }
  cmp "$tmp/m.json" "$model"
  ;;
stall)
  # A rank stopped mid-run (SIGSTOP) must not hang the others: with CZ_MPI_TIMEOUT_S=T every
  # live rank reports, within T plus the diagnosis grace (T/2), the phase it waited in and the
  # stopped rank, and the job ends non-zero (canzona-bench calls MPI_Abort once all printed).
  plan cpu-4-dp2-tp2 alpha rollback "$tmp/a.json"
  bound=4
  grace=2
  # This run's ranks carry a tag in their environment, so that only they are looked at.
  tag="cz-stall-$$-$RANDOM"
  CZ_MPI_TIMEOUT_S=$bound CZ_STALL_TAG=$tag timeout $((120 * scale)) mpirun --oversubscribe \
    -x CZ_MPI_TIMEOUT_S -x CZ_STALL_TAG -np 4 "$CZ_BENCH" --plan "$tmp/a.json" --model "$model" \
    --steps 10000000 --warmup 0 >"$tmp/out" 2>&1 &
  job=$!
  rank_pid() { # the pid of this run's rank $1
    local f
    for f in /proc/[0-9]*/environ; do
      if tr '\0' '\n' <"$f" 2>/dev/null | grep -qx "CZ_STALL_TAG=$tag" &&
        tr '\0' '\n' <"$f" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$1" &&
        grep -q canzona-bench "${f%/environ}/cmdline" 2>/dev/null; then
        basename "${f%/environ}"
        return 0
      fi
    done
    return 1
  }
  victim=
  for _ in $(seq 1 $((100 * scale))); do
    victim=$(rank_pid 2) && [ -n "$(rank_pid 0)" ] && break
    sleep 0.2
  done
  [ -n "$victim" ] || { kill "$job" 2>/dev/null; cat "$tmp/out"; echo "rank 2 never started"; exit 1; }
  # Well into the steps (creating the executor takes well under a second here).
  sleep $((3 * scale))
  kill -STOP "$victim"
  t0=$(date +%s.%N)
  rc=0
  wait "$job" || rc=$?
  t1=$(date +%s.%N)
  kill -KILL "$victim" 2>/dev/null || true
  cat "$tmp/out"
  elapsed=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
  echo "stall: mpirun ended $elapsed s after rank 2 was stopped (limit $bound s, grace $grace s), exit $rc"
  [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || { echo "expected a non-zero exit before the outer timeout, got $rc"; exit 1; }
  # Inside the bound: the limit, the grace, and room for mpirun to end the job on a loaded
  # machine (scaled like every limit here).
  awk -v e="$elapsed" -v lim=$((bound + grace + 10 * scale)) 'BEGIN { exit !(e <= lim) }' ||
    { echo "the live ranks took $elapsed s, more than $bound + $grace s and the slack"; exit 1; }
  # Each live rank: its step and phase, the operation, and rank 2 as the one it waited for
  # (directly, or through the ranks of its operation, which wait for rank 2 themselves).
  for r in 0 1 3; do
    line=$(grep "^canzona-bench: rank $r: " "$tmp/out" | head -n 1)
    [[ "$line" =~ (no\ MPI\ progress\ for|stopped\ waiting\ after)\ [0-9.]+\ s\ in\ step\ [0-9]+\ \( ]] &&
      [[ "$line" =~ waiting\ for\ rank\ 2[\ ,].*did\ not\ answer ]] ||
      { echo "rank $r did not report, mid-step, that it waited for rank 2: $line"; exit 1; }
  done
  # The stopped rank reports nothing (mpirun may still wake and terminate it: it says so).
  if grep "^canzona-bench: rank 2:" "$tmp/out" | grep -vq "terminated (SIGTERM)"; then
    echo "the stopped rank reported a stall"
    exit 1
  fi
  # A rank that dies instead (SIGKILL): mpirun ends the job at once and names it; the others,
  # terminated by mpirun, say in which step they were.
  CZ_STALL_TAG=$tag timeout $((120 * scale)) mpirun --oversubscribe -x CZ_STALL_TAG -np 4 \
    "$CZ_BENCH" --plan "$tmp/a.json" --model "$model" --steps 10000000 --warmup 0 \
    >"$tmp/out" 2>&1 &
  job=$!
  victim=
  for _ in $(seq 1 $((100 * scale))); do
    victim=$(rank_pid 2) && [ -n "$(rank_pid 0)" ] && break
    sleep 0.2
  done
  [ -n "$victim" ] || { kill "$job" 2>/dev/null; cat "$tmp/out"; echo "rank 2 never started"; exit 1; }
  sleep $((3 * scale))
  kill -KILL "$victim"
  rc=0
  wait "$job" || rc=$?
  cat "$tmp/out"
  [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || { echo "expected a non-zero exit before the outer timeout, got $rc"; exit 1; }
  for r in 0 1 3; do
    grep -q "^canzona-bench: rank $r: terminated (SIGTERM) in step [0-9]" "$tmp/out" ||
      { echo "rank $r did not say that it was terminated, and in which step"; exit 1; }
  done
  ;;
replicas)
  # --verify also checks the DP replicas against each other: a corrupted replica is caught.
  plan cpu-4-dp2-tp2 alpha rollback "$tmp/a.json"
  mpi_fails -np 4 "$CZ_BENCH" --plan "$tmp/a.json" --model "$model" --steps 1 --verify \
    --corrupt-replica
  grep -q "DP replicas of TP rank [01] of stage 0 hold different parameters" "$tmp/out" ||
    { echo "expected the replica mismatch to be reported"; exit 1; }
  ;;
owncomms)
  # DP and TP communicators split by the job and handed in give the same result.
  plan cpu-4-dp2-tp2 alpha rollback "$tmp/a.json"
  mpi -np 4 "$CZ_BENCH" --plan "$tmp/a.json" --model "$model" --steps 2 --own-comms --verify \
    | tee "$tmp/out"
  grep -q "verify: OK" "$tmp/out"
  ;;
overlap)
  # The bucket-wise step (--overlap: buckets declared in backward order, waited for in forward
  # order) gives the plain step's parameters bit for bit: with clipping active, one bucket
  # declared last, bf16. Small buckets, so that the plan has several.
  c=$2
  "$CZ" plan -q --model "$model" --cluster "$src/plans/clusters/$c.json" --dp alpha \
    --tp rollback --bucket-size 100000 -o "$tmp/p.json"
  nb=$(python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["buckets"]))' "$tmp/p.json")
  [ "$nb" -ge 4 ] || { echo "expected several buckets, got $nb"; exit 1; }
  run() { # out-dir options...
    local d=$1
    shift
    mpi -np 4 "$CZ_BENCH" --plan "$tmp/p.json" --model "$model" --steps 3 --warmup 1 \
      --max-grad-norm 0.05 --dump-dir "$tmp/$d" "$@" | tee "$tmp/$d.out"
  }
  same() { # dir-a dir-b
    local n=0 f
    for f in "$tmp/$1"/*.npy; do
      cmp "$f" "$tmp/$2/$(basename "$f")" || { echo "differs: $1 $2 $(basename "$f")"; exit 1; }
      n=$((n + 1))
    done
    [ "$n" -eq 20 ] || { echo "expected 20 parameters, compared $n"; exit 1; }
  }
  run plain --verify
  grep -q "verify: OK" "$tmp/plain.out"
  # Clipping is active: the gradient norm is above --max-grad-norm.
  python3 - "$tmp/plain.out" <<'PY'
import re, sys
norms = [float(m) for m in re.findall(r"gradient norm of step \S+\s+executor (\S+)", open(sys.argv[1]).read())]
assert norms and min(norms) > 0.05, norms
PY
  run ovl --overlap --verify
  grep -q "verify: OK" "$tmp/ovl.out"
  same plain ovl
  run delayed --overlap --delay-bucket 1
  same plain delayed
  run plain16 --dtype bf16
  run ovl16 --overlap --delay-bucket $((nb - 1)) --dtype bf16
  same plain16 ovl16
  # Pipeline stages: each rank declares its stage's buckets only (DP2·PP2 on any cluster).
  "$CZ" plan -q --model "$model" --cluster "$src/plans/clusters/$c.json" --pp-size 2 \
    --dp-size 2 --tp-size 1 --bucket-size 50000 -o "$tmp/pp.json"
  for m in plain ovl; do
    o=()
    [ $m = ovl ] && o=(--overlap --delay-bucket 0)
    mpi -np 4 "$CZ_BENCH" --plan "$tmp/pp.json" --model "$model" --steps 2 --warmup 0 \
      --max-grad-norm 0.05 --dump-dir "$tmp/pp-$m" "${o[@]}" >/dev/null
  done
  same pp-plain pp-ovl
  # Early updates (no clipping, no NaN check): the micro-groups run inside bucket_ready, the
  # plain step's bits still; with one bucket declared last in bf16. With clipping: refused on
  # every rank.
  run eplain --max-grad-norm 0
  run early --max-grad-norm 0 --overlap --early-updates --verify
  grep -q "verify: OK" "$tmp/early.out"
  n=$(sed -n 's/^micro-groups updated early in the last step .*summed): //p' "$tmp/early.out")
  [ "${n:-0}" -gt 0 ] || { echo "expected micro-groups updated early, got '${n:-}'"; exit 1; }
  same eplain early
  run eplain16 --max-grad-norm 0 --dtype bf16
  run early16 --max-grad-norm 0 --overlap --early-updates --delay-bucket 1 --dtype bf16
  same eplain16 early16
  # The split layout: the elementwise parameters in a buffer of their own, evenly sliced
  # (each bucket's AdamW pieces found by their range).
  "$CZ" plan -q --model "$model" --cluster "$src/plans/clusters/$c.json" --layout split \
    --bucket-size 100000 -o "$tmp/split.json"
  for m in plain early; do
    o=()
    [ $m = early ] && o=(--overlap --early-updates)
    mpi -np 4 "$CZ_BENCH" --plan "$tmp/split.json" --model "$model" --steps 2 --warmup 0 \
      --dump-dir "$tmp/split-$m" "${o[@]}" >/dev/null
  done
  same split-plain split-early
  mpi_fails -np 4 "$CZ_BENCH" --plan "$tmp/p.json" --model "$model" --steps 1 --warmup 0 \
    --overlap --early-updates --max-grad-norm 0.05
  [ "$(grep -c "set_early_updates: clipping is on (max_grad_norm = 0.05" "$tmp/out")" -eq 4 ] ||
    { echo "expected early updates with clipping refused on every rank"; exit 1; }
  # A bucket declared twice is refused on the rank that did it (every rank here).
  mpi_fails -np 4 "$CZ_BENCH" --plan "$tmp/p.json" --model "$model" --steps 1 --warmup 0 \
    --overlap --repeat-bucket 2
  [ "$(grep -c "bucket 2 was already declared ready in step 1" "$tmp/out")" -eq 4 ] ||
    { echo "expected the second declaration refused on every rank"; exit 1; }
  # A bucket never declared on one rank: every rank fails at step_finish, naming it, no hang.
  mpi_fails -np 4 "$CZ_BENCH" --plan "$tmp/p.json" --model "$model" --steps 1 --warmup 0 \
    --overlap --skip-bucket 3
  [ "$(grep -c "bucket 3 was not declared ready .* on rank 3" "$tmp/out")" -eq 4 ] ||
    { echo "expected the missing bucket reported on every rank"; exit 1; }
  ;;
early-orders)
  # Early updates whatever order the ranks declare their buckets in (issue 39): every rank
  # reversed, one rank reversed, one rank rotated, with no TP group (DP4*TP1) and with one
  # (DP2*TP2; rank 1 then declares in another order than its TP peer, rank 0): the plain
  # step's parameters bit for bit. A rank that posted several buckets at once (it declared a
  # higher one first) once posted the all-gathers due among them after them all, where the
  # other ranks had posted reduce-scatters: Open MPI matched them, MPI_ERR_TRUNCATE.
  for c in cpu-4-dp4-tp1 cpu-4-dp2-tp2; do
    "$CZ" plan -q --model "$model" --cluster "$src/plans/clusters/$c.json" --dp alpha --tp slot \
      --capacity 0.001 --bucket-size 100000 -o "$tmp/$c.json"
    nb=$(python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["buckets"]))' "$tmp/$c.json")
    [ "$nb" -ge 4 ] || { echo "$c: expected several buckets, got $nb"; exit 1; }
    mpi -np 4 "$CZ_BENCH" --plan "$tmp/$c.json" --model "$model" --steps 2 --warmup 0 \
      --dump-dir "$tmp/$c-plain" >/dev/null
    for o in "reverse" "reverse --order-rank 1" "rotate --order-rank 1"; do
      d=$tmp/$c-${o// /_}
      # shellcheck disable=SC2086 # the order and its rank are two options
      mpi -np 4 "$CZ_BENCH" --plan "$tmp/$c.json" --model "$model" --steps 2 --warmup 0 \
        --overlap --early-updates --bucket-order $o --dump-dir "$d" >"$d.out" 2>&1 ||
        { cat "$d.out"; echo "$c, --bucket-order $o: failed"; exit 1; }
      n=$(sed -n 's/^micro-groups updated early in the last step .*summed): //p' "$d.out")
      [ "${n:-0}" -gt 0 ] || { echo "$c, $o: expected micro-groups updated early, got '${n:-}'"; exit 1; }
      k=0
      for f in "$tmp/$c-plain"/*.npy; do
        cmp "$f" "$d/$(basename "$f")" || { echo "$c, --bucket-order $o: $(basename "$f") differs"; exit 1; }
        k=$((k + 1))
      done
      [ "$k" -eq 20 ] || { echo "expected 20 parameters, compared $k"; exit 1; }
      echo "$c, --bucket-order $o: the plain step's bits ($n micro-groups early)"
    done
  done
  # Rank 0 declares nothing in step 2: every rank reports the stall, then ends itself (the step
  # cancelled, the executor freed, MPI_Finalize) without a crash. The cancel once posted the
  # missing reduce-scatters, which completed inside MPI_Finalize into the freed ranges (the
  # sanitizer build reported a heap-use-after-free there; here bucket 0 is DP rank 0's alone).
  rc=0
  CZ_MPI_TIMEOUT_S=2 timeout $((60 * scale)) mpirun --oversubscribe \
    --mca orte_abort_on_non_zero_status 0 -x CZ_MPI_TIMEOUT_S -np 4 "$CZ_BENCH" \
    --plan "$tmp/cpu-4-dp2-tp2.json" --model "$model" --steps 3 --warmup 0 --overlap \
    --early-updates --declare-nothing 2 --end-after-stall >"$tmp/out" 2>&1 || rc=$?
  cat "$tmp/out"
  [ "$rc" -ne 124 ] || { echo "the stalled run did not end"; exit 1; }
  for r in 0 1 2 3; do
    grep -Eq "^canzona-bench: rank $r: (no MPI progress for|stopped waiting after) [0-9.]+ s in step 2 " "$tmp/out" ||
      { echo "rank $r did not report the stall in step 2"; exit 1; }
    grep -q "^canzona-bench: rank $r: ended after the stall: executor freed, MPI finalized" "$tmp/out" ||
      { echo "rank $r did not end cleanly after the stall"; exit 1; }
  done
  ! grep -Eq "AddressSanitizer|Segmentation|signal [0-9]" "$tmp/out" ||
    { echo "a rank crashed after the stall"; exit 1; }
  ;;
nan)
  # A NaN in one replica's gradient (fp32 or bf16): every rank returns an error naming the
  # parameter.
  plan cpu-4-dp2-tp2 alpha rollback "$tmp/a.json"
  for dtype in fp32 bf16; do
    mpi_fails -np 4 "$CZ_BENCH" --plan "$tmp/a.json" --model "$model" --steps 2 --dtype "$dtype" \
      --inject-nan decoder.layers.1.mlp.linear_fc2.weight
    n=$(grep -c "gradient of 'decoder.layers.1.mlp.linear_fc2.weight' holds NaN" "$tmp/out" || true)
    [ "$n" -eq 4 ] || { echo "$dtype: expected 4 ranks to name the parameter, got $n"; exit 1; }
  done
  # The same for an elementwise parameter cut between the DP ranks of a split-layout plan.
  plan cpu-4-dp2-tp2 alpha rollback "$tmp/s.json" split
  p=decoder.layers.1.self_attention.linear_qkv.layer_norm_weight
  mpi_fails -np 4 "$CZ_BENCH" --plan "$tmp/s.json" --model "$model" --steps 2 --inject-nan "$p"
  n=$(grep -c "gradient of '$p' holds NaN or Inf (found in the evenly sliced" "$tmp/out" || true)
  [ "$n" -eq 4 ] || { echo "split: expected 4 ranks to name the parameter, got $n"; exit 1; }
  ;;
dump)
  # Dumped parameters read back with --init-dir continue the same run exactly.
  plan cpu-4-dp2-tp2 alpha rollback "$tmp/a.json"
  mpi -np 4 "$CZ_BENCH" --plan "$tmp/a.json" --model "$model" --steps 1 --warmup 0 \
    --dump-dir "$tmp/d1" >/dev/null
  [ "$(ls "$tmp/d1" | wc -l)" -eq 20 ] || { echo "expected 20 .npy files"; exit 1; }
  mpi -np 4 "$CZ_BENCH" --plan "$tmp/a.json" --model "$model" --steps 2 --warmup 0 \
    --init-dir "$tmp/d1" --dump-dir "$tmp/d2" --verify | tee "$tmp/out"
  grep -q "verify: OK" "$tmp/out"
  ! cmp -s "$tmp/d1/extra.weight.npy" "$tmp/d2/extra.weight.npy"
  ;;
grads)
  # Gradients read from .npy files holding the generated values reproduce the generated run bit
  # for bit (and --dump-dir creates missing parents).
  plan cpu-4-dp2-tp2 alpha rollback "$tmp/a.json"
  mpi -np 4 "$CZ_BENCH" --plan "$tmp/a.json" --model "$model" --steps 2 --warmup 1 \
    --dump-grads "$tmp/g" --dump-dir "$tmp/x/y/d1" >/dev/null
  [ -f "$tmp/g/step2/dp1/decoder.layers.0.self_attention.linear_qkv.weight.npy" ] ||
    { echo "expected the gradient files of step 2, replica 1"; ls -R "$tmp/g" | head; exit 1; }
  mpi -np 4 "$CZ_BENCH" --plan "$tmp/a.json" --model "$model" --steps 2 --warmup 1 \
    --grad-dir "$tmp/g" --dump-dir "$tmp/d2" --verify | tee "$tmp/out"
  grep -q "verify: OK" "$tmp/out"
  n=0
  for f in "$tmp"/x/y/d1/*.npy; do
    cmp "$f" "$tmp/d2/$(basename "$f")" || { echo "differs: $(basename "$f")"; exit 1; }
    n=$((n + 1))
  done
  [ "$n" -eq 20 ] || { echo "expected 20 parameters, compared $n"; exit 1; }
  # A missing file is reported on every rank, naming it.
  rm "$tmp/g/step1/dp0/extra.weight.npy"
  mpi_fails -np 4 "$CZ_BENCH" --plan "$tmp/a.json" --model "$model" --steps 2 --warmup 1 \
    --grad-dir "$tmp/g"
  grep -q "step1/dp0/extra.weight.npy" "$tmp/out" || { echo "expected the missing file named"; exit 1; }
  ;;
shampoo)
  # Shampoo (plan --optimizer shampoo, refresh every 5 steps: refreshes at steps 5 and 10 of
  # 12) against shampoo_ref, a double-precision single-process Shampoo written from the
  # published algorithm. Generated gradients are dense uniform noise: the factors are full
  # rank at every refresh (5 steps x the short side >= the long side for every block and
  # tile), so their eigenbases and inverse roots are unique.
  # Optional START MOMENTUM NESTEROV: a start step off the refresh multiples (Distributed
  # Shampoo refreshes at the start step, then at multiples of the frequency after it), and
  # momentum, into which Distributed Shampoo adds the decoupled weight decay (0.01) before it.
  : "${CZ_SHAMPOO_REF:?}"
  "$CZ" plan -q --model "$model" --cluster "$src/plans/clusters/$2.json" --dp alpha --tp "$3" \
    --optimizer shampoo --precondition-frequency 5 -o "$tmp/s.json"
  opt=()
  ref=()
  if [ $# -ge 7 ]; then
    opt=(--shampoo-start-step "$5" --shampoo-momentum "$6" --shampoo-nesterov "$7")
    ref=("$5" "$6" "$7")
  fi
  mpi -np 4 "$CZ_BENCH" --plan "$tmp/s.json" --model "$model" --steps 12 --warmup 0 --seed 3 \
    --shampoo-max-dim "$4" --dump-dir "$tmp/d" "${opt[@]}" | tee "$tmp/out"
  grep -q "executor allocations in steps 2..12 (most on one rank): 0$" "$tmp/out"
  "$CZ_SHAMPOO_REF" "$tmp/s.json" "$tmp/d" 12 3 1e-4 "$4" "${ref[@]}"
  ;;
heads)
  # Per-head Muon (issue 42): test-heads declares heads on the fused QKV (inside its Q, K and V
  # blocks, whole heads on each TP rank) and on the output projection's columns. 4 steps of
  # canzona-bench against muon_heads_ref, a double-precision single-process Muon written from
  # the papers' definitions: every matrix's update within 1e-5 (fp32), and whole-block Muon
  # far from the per-head result (else the check could not tell them apart). The
  # hyper-parameters are given on both sides. Under --tp rollback the per-head matrices' tasks
  # are TP-local (no gather); under sc every TP rank gathers and computes them whole.
  : "${CZ_MUON_HEADS_REF:?}"
  hm=$src/plans/models/test-heads.json
  "$CZ" plan -q --model "$hm" --cluster "$src/plans/clusters/$2.json" --tp "${3:-rollback}" \
    -o "$tmp/h.json"
  "$CZ" validate "$tmp/h.json" --model "$hm" --cluster "$src/plans/clusters/$2.json" >/dev/null
  # Under TP every per-head matrix's tasks are TP-local (width = TP: each rank its own heads).
  python3 - "$tmp/h.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
heads = {q["id"] for q in p["params"] if "heads" in q}
tasks = [t for s in p["tp_schedule"] for g in s["groups"] for sl in g["slots"] for t in sl
         if isinstance(t, dict) and t["param"] in heads]
assert heads, "no per-head matrix"
if p["topology"]["tp"] > 1 and p["settings"]["tp_strategy"] == "rollback":
    assert tasks and all(t.get("width") == p["topology"]["tp"] and "panels" not in t for t in tasks), tasks
print("per-head matrices:", len(heads), "TP-local task entries:", len(tasks))
PY
  mpi -np 4 "$CZ_BENCH" --plan "$tmp/h.json" --model "$hm" --steps 4 --warmup 0 --seed 5 \
    --lr 0.02 --momentum 0.9 --nesterov --weight-decay 0.01 --ns-eps 1e-7 --ns-steps 5 \
    --ns-coeffs jordan --scaling rms --scale-coeff 0.2 --dump-dir "$tmp/d" | tee "$tmp/out"
  grep -q "executor allocations in steps 2..4 (most on one rank): 0$" "$tmp/out"
  "$CZ_MUON_HEADS_REF" "$tmp/h.json" "$tmp/d" 4 5 1e-5 0.02 0.9 0.01 1e-7 0.2
  ;;
normuon)
  # NorMuon (issue 42, item 3): 10 steps of canzona-bench --normuon MODE on test-heads (per-head
  # units along rows and along columns, row blocks, tall and wide units, so both a unit stored
  # transposed for Newton-Schulz and the second moment as a matrix of one column per unit)
  # against normuon_ref, a double-precision single-process NorMuon written from Dion's
  # definition: every matrix's update within 1e-5 (fp32), and plain Muon far from it. Under
  # --tp rollback the per-head tasks are TP-local; under sc every TP rank computes every unit.
  : "${CZ_NORMUON_REF:?}"
  hm=$src/plans/models/test-heads.json
  "$CZ" plan -q --model "$hm" --cluster "$src/plans/clusters/$2.json" --tp "${4:-rollback}" \
    -o "$tmp/n.json"
  "$CZ" validate "$tmp/n.json" --model "$hm" --cluster "$src/plans/clusters/$2.json" >/dev/null
  mpi -np 4 "$CZ_BENCH" --plan "$tmp/n.json" --model "$hm" --steps 10 --warmup 0 --seed 7 \
    --lr 0.02 --momentum 0.9 --nesterov --weight-decay 0.01 --ns-eps 1e-7 --ns-steps 5 \
    --ns-coeffs jordan --scaling rms --scale-coeff 0.2 --normuon "$3" --normuon-beta2 0.9 \
    --normuon-eps 1e-8 --dump-dir "$tmp/d" | tee "$tmp/out"
  grep -q "executor allocations in steps 2..10 (most on one rank): 0$" "$tmp/out"
  "$CZ_NORMUON_REF" "$tmp/n.json" "$tmp/d" 10 7 1e-5 0.02 0.9 0.01 1e-7 0.2 "$3" 0.9 1e-8
  # The refusals below do not depend on the grid or the TP strategy: they run in the case the
  # sanitizer build runs too (rows at DP2*TP2 under rollback), and the cooperative one, which
  # names the mode, at DP2*TP2 for both modes.
  [ "${4:-rollback}" = rollback ] && [ "$2" = cpu-4-dp2-tp2 ] || exit 0
  if [ "$3" = row ]; then
  # Refused before any step, with the setting and what it expects: beta2 outside [0, 1), an
  # unknown mode, NorMuon with --verify (whose reference is plain Muon).
  for b in 1 -0.5; do
    mpi_fails -np 4 "$CZ_BENCH" --plan "$tmp/n.json" --model "$hm" --steps 1 --normuon "$3" \
      --normuon-beta2 "$b"
    grep -q "normuon.beta2 = $b; expected a value in \[0, 1)" "$tmp/out"
  done
  mpi_fails -np 4 "$CZ_BENCH" --plan "$tmp/n.json" --model "$hm" --steps 1 --normuon rows
  grep -q -- "--normuon 'rows': expected none, row or col" "$tmp/out"
  mpi_fails -np 4 "$CZ_BENCH" --plan "$tmp/n.json" --model "$hm" --steps 1 --normuon "$3" \
    --verify
  grep -q -- "--normuon and --verify do not go together" "$tmp/out"
  # NorMuon is a Muon variant: with a SOAP plan it is refused, not ignored.
  "$CZ" plan -q --model "$hm" --cluster "$src/plans/clusters/$2.json" --optimizer soap \
    -o "$tmp/soap.json"
  mpi_fails -np 4 "$CZ_BENCH" --plan "$tmp/soap.json" --model "$hm" --steps 1 --normuon "$3"
  grep -q "NorMuon is a Muon variant, and this plan's matrix optimizer is soap" "$tmp/out"
  fi
  # A cooperative task (a matrix's Newton-Schulz split over TP ranks) would need its lines'
  # sums across the members: refused, naming the matrix and the plan option. (DP4*TP1 has no
  # TP ranks to split over.)
  "$CZ" plan -q --model "$hm" --cluster "$src/plans/clusters/$2.json" --split-blocks \
    --coop 2 -o "$tmp/coop.json"
  mpi_fails -np 4 "$CZ_BENCH" --plan "$tmp/coop.json" --model "$hm" --steps 1 --normuon "$3"
  grep -q "NorMuon (normuon.mode = $3): '.*' has a cooperative task over 2 TP ranks" "$tmp/out"
  grep -q -- "plan with --coop off" "$tmp/out"
  ;;
soap)
  # SOAP (plan --optimizer soap, refresh every 5 updates: 12 calls = initialisation + 11
  # updates, refreshes after updates 5 and 10) against soap_ref, a double-precision
  # single-process SOAP written from the published algorithm. Full rank and well separated:
  # with --max-precond-dim 100 the rotated side is extra.weight's 64-row side, whose Gram sums
  # 256-column gradients: positive definite from the first gradient on, eigenvalues far enough
  # apart that fp32 and double give the same eigenbasis (up to column signs, which SOAP's
  # update does not see). Longer sides stay unrotated (their one-gradient Grams would be
  # rank-deficient, their eigenbases not unique). With 200 the 128-row qkv blocks would be
  # rotated too: their 128 x 128 Grams have close eigenvalue pairs that fp32 resolves only
  # to ~1e-3, and Adam's first step in the eigenbasis is sign(G') elementwise, so one entry
  # of G' near zero changing sign moves a whole row of the update (measured up to 1.2e-2):
  # an fp32-vs-double property of SOAP, not of the executor.
  # With a fourth argument, the Gram factors' EMA (--soap-shampoo-beta) differs from Adam's
  # beta2 (0.95), which every other SOAP test leaves them equal to: a factor decayed with the
  # wrong one would pass those.
  : "${CZ_SOAP_REF:?}"
  "$CZ" plan -q --model "$model" --cluster "$src/plans/clusters/$2.json" --dp alpha --tp "$3" \
    --optimizer soap --precondition-frequency 5 --max-precond-dim 100 -o "$tmp/s.json"
  sb=()
  [ -n "${4:-}" ] && sb=(--soap-shampoo-beta "$4")
  mpi -np 4 "$CZ_BENCH" --plan "$tmp/s.json" --model "$model" --steps 12 --warmup 0 --seed 3 \
    --dump-dir "$tmp/d" "${sb[@]}" | tee "$tmp/out"
  grep -q "executor allocations in steps 2..12 (most on one rank): 0$" "$tmp/out"
  "$CZ_SOAP_REF" "$tmp/s.json" "$tmp/d" 12 3 1e-4 1e-8 ${4:+"$4"}
  ;;
soap-sides)
  # SOAP's two rotation cases at once, against soap_ref as above (tests/data/model_soap.json,
  # max_precond_dim 100): 'square.weight' (16 x 16) has both sides rotated, 'wide.weight'
  # (8 x 128) only its rows, 'mlp.weight' (TP-sharded, 128 x 256) neither. Both sides of a
  # matrix are full rank from its first gradient only when it is square; 16 keeps the Gram's
  # eigenvalues far enough apart for fp32 and double to agree (sides of 64 and more would not:
  # see the soap case), and an 8-row wide side is better separated than a 16-row one (measured
  # 1.4e-6 against 5.6e-5 at DP1*TP4).
  : "${CZ_SOAP_REF:?}"
  m=$src/tests/data/model_soap.json
  "$CZ" plan -q --model "$m" --cluster "$src/plans/clusters/$2.json" --dp alpha --tp "$3" \
    --optimizer soap --precondition-frequency 5 --max-precond-dim 100 -o "$tmp/s.json"
  mpi -np 4 "$CZ_BENCH" --plan "$tmp/s.json" --model "$m" --steps 12 --warmup 0 --seed 3 \
    --dump-dir "$tmp/d" | tee "$tmp/out"
  grep -q "executor allocations in steps 2..12 (most on one rank): 0$" "$tmp/out"
  "$CZ_SOAP_REF" "$tmp/s.json" "$tmp/d" 12 3 1e-4 1e-8 | tee "$tmp/ref"
  grep -q "square.weight .*(rotated: rows+cols)" "$tmp/ref" &&
    grep -q "wide.weight .*(rotated: rows)" "$tmp/ref" &&
    grep -q "mlp.weight .*(rotated: none)" "$tmp/ref" ||
    { echo "expected square rotated on both sides, wide on its rows, mlp on neither"; exit 1; }
  ;;
nolapacke)
  # A build without LAPACKE refuses SOAP and Shampoo plans on every rank, naming the fix.
  for opt in shampoo soap; do
    "$CZ" plan -q --model "$model" --cluster "$src/plans/clusters/cpu-4-dp2-tp2.json" \
      --optimizer "$opt" -o "$tmp/$opt.json"
    mpi_fails -np 4 "$CZ_BENCH" --plan "$tmp/$opt.json" --model "$model" --steps 1
    [ "$(grep -c "plan optimizer '$opt' needs .* has no 'syevd' (this build has no LAPACKE: install liblapacke-dev" "$tmp/out")" -eq 4 ] ||
      { echo "expected the refusal on all 4 ranks"; exit 1; }
  done
  ;;
knobs)
  # Every optimizer option changes the run, and the distributed run still matches the
  # single-process reference (gradient norms included): the shape scaling with its default
  # learning rate, plain momentum, other NS steps and AdamW settings, and active clipping.
  plan cpu-4-dp2-tp2 alpha rollback "$tmp/a.json"
  mpi -np 4 "$CZ_BENCH" --plan "$tmp/a.json" --model "$model" --steps 2 --verify \
    --dump-dir "$tmp/d0" >/dev/null
  mpi -np 4 "$CZ_BENCH" --plan "$tmp/a.json" --model "$model" --steps 2 --verify \
    --scaling shape --no-nesterov --momentum 0.9 --ns-steps 6 --ns-eps 1e-6 --adamw-beta1 0.8 \
    --adamw-beta2 0.99 --adamw-eps 1e-6 --adamw-weight-decay 0.1 --max-grad-norm 1 \
    --dump-dir "$tmp/d1" | tee "$tmp/out"
  grep -q "verify: OK" "$tmp/out"
  grep -q "gradient norm of step 2 .* rel.err" "$tmp/out"
  ! cmp -s "$tmp/d0/extra.weight.npy" "$tmp/d1/extra.weight.npy"
  ! cmp -s "$tmp/d0/embedding.word_embeddings.weight.npy" \
    "$tmp/d1/embedding.word_embeddings.weight.npy"
  ;;
coeffs)
  # Newton-Schulz coefficient tables on 4 ranks against the single-process run: Polar
  # Express's 5 rows over hosted, block and cooperative tasks (width 2, so each iteration's row
  # also ends the members' Gram all-reduces), and a table of 3 rows of our own whose
  # iteration count the CLI and canzona-bench both take from it; a different --ns-steps is
  # refused on every rank with the executor's message.
  "$CZ" plan -q --model "$model" --cluster "$src/plans/clusters/cpu-4-dp2-tp2.json" \
    --split-blocks --coop 2 --ns-coeffs polar_express -o "$tmp/pe.json"
  "$CZ" validate "$tmp/pe.json" --model "$model" \
    --cluster "$src/plans/clusters/cpu-4-dp2-tp2.json" >/dev/null
  grep -q '"ns_coeffs": "polar_express"' "$tmp/pe.json"
  grep -q '"width": 2' "$tmp/pe.json"
  mpi -np 4 "$CZ_BENCH" --plan "$tmp/pe.json" --model "$model" --steps 3 --verify \
    --ns-coeffs polar_express --dump-dir "$tmp/pe" | tee "$tmp/out"
  grep -q "verify: OK" "$tmp/out"
  mpi -np 4 "$CZ_BENCH" --plan "$tmp/pe.json" --model "$model" --steps 3 --dump-dir "$tmp/j" \
    >/dev/null
  [ -s "$tmp/pe/extra.weight.npy" ] && [ -s "$tmp/j/extra.weight.npy" ]
  ! cmp -s "$tmp/pe/extra.weight.npy" "$tmp/j/extra.weight.npy"
  three="3,-3.2,1.2; 2,-1.5,0.5; 1.875,-1.25,0.375"
  "$CZ" plan -q --model "$model" --cluster "$src/plans/clusters/cpu-4-dp4-tp1.json" \
    --ns-coeffs "$three" -o "$tmp/t3.json"
  grep -q '"ns_steps": 3' "$tmp/t3.json"
  mpi -np 4 "$CZ_BENCH" --plan "$tmp/t3.json" --model "$model" --steps 2 --verify \
    --ns-coeffs "$three" | tee "$tmp/out"
  grep -q "verify: OK" "$tmp/out"
  mpi_fails -np 4 "$CZ_BENCH" --plan "$tmp/t3.json" --model "$model" --steps 1 \
    --ns-coeffs "$three" --ns-steps 5
  [ "$(grep -c "has 3 rows, one per iteration; set ns_steps to 3" "$tmp/out")" -eq 4 ] ||
    { echo "expected the refusal on all 4 ranks"; exit 1; }
  ;;
fsdp)
  # The fully sharded step (--layout fsdp, DP4*TP1) against the one-process reference: each
  # rank hands in its FSDP2 rows of the averaged gradients and parameters (canzona-bench cuts
  # them as torch.chunk does), the owners' all-to-alls bring every matrix whole to its owner and
  # its update's rows back. On test-small plus three parameters FSDP2 cuts unevenly: odd.weight
  # 7 rows (2, 2, 2, 1), tiny.weight 2 (1, 1, 0, 0: two ranks hold none) and odd.bias 5
  # (2, 2, 1, 0). $2: fp32 or bf16 (with verify bf16's tolerances).
  command -v python3 >/dev/null || { echo "python3 not found"; exit 77; }
  python3 - "$model" "$tmp/odd.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
m["name"] = "test-small-odd"
m["params"] += [
    {"name": "odd.weight", "shape": [7, 24], "tp_dim": None, "optimizer": "matrix"},
    {"name": "tiny.weight", "shape": [2, 16], "tp_dim": None, "optimizer": "matrix"},
    {"name": "odd.bias", "shape": [5], "tp_dim": None, "optimizer": "elementwise"},
]
json.dump(m, open(sys.argv[2], "w"))
PY
  # The same at DP2*TP2 (2-D shards: each GPU holds FSDP2's rows of its TP shard, the owners
  # are the 4 GPUs of the shard group; odd.weight and tiny.weight are TP-replicated, so only
  # TP rank 0 of each DP rank sends their rows and every GPU gets its update back).
  odd=$tmp/odd.json
  extra=() wire=fp32
  [ "${2:-fp32}" = bf16 ] && extra=(--dtype bf16 --tolerance 3e-2 --update-tolerance 0.25) wire=bf16
  for grid in dp4-tp1 dp2-tp2; do
    cl=$src/plans/clusters/cpu-4-$grid.json
    "$CZ" plan -q --model "$odd" --cluster "$cl" --layout fsdp -o "$tmp/f-$grid.json"
    "$CZ" validate "$tmp/f-$grid.json" --model "$odd" --cluster "$cl" >/dev/null
    mpi -np 4 "$CZ_BENCH" --plan "$tmp/f-$grid.json" --model "$odd" --steps 3 --verify \
      "${extra[@]}" | tee "$tmp/out"
    grep -q "verify: OK" "$tmp/out"
    grep -q "executor allocations in steps 2..4 (most on one rank): 0$" "$tmp/out"
    # No reduce-scatter and no all-gather (the job's FSDP2 does both): what moved is the
    # owners' all-to-alls.
    grep -q "gradients $wire 0 bytes, parameters $wire 0 bytes$" "$tmp/out"
    grep -Eq "micro-groups fp32 [1-9][0-9]* bytes" "$tmp/out"
  done
  [ "${2:-fp32}" = bf16 ] && exit 0
  cp "$tmp/f-dp4-tp1.json" "$tmp/f.json"
  # Clipped by the global norm (about 378 here, summed over the shards, each row once).
  mpi -np 4 "$CZ_BENCH" --plan "$tmp/f.json" --model "$odd" --steps 2 --verify \
    --max-grad-norm 100 | tee "$tmp/out"
  grep -q "verify: OK" "$tmp/out"
  # The NaN/Inf check over the shards (rank 0's rows of odd.weight, owned elsewhere): every
  # rank refuses the step before any update.
  mpi_fails -np 4 "$CZ_BENCH" --plan "$tmp/f.json" --model "$odd" --steps 1 \
    --inject-nan odd.weight
  [ "$(grep -c "the gradient of 'odd.weight' holds NaN or Inf (in some DP rank's FSDP2 shard" \
    "$tmp/out")" -eq 4 ] || { echo "expected the refusal on all 4 ranks"; exit 1; }
  # A gradient shard whose size contradicts the plan (one row too many for rank 2's share of
  # odd.weight, bound through the C API): refused there naming the parameter, and the first
  # step refused on every rank, none left in an exchange.
  mpi -np 4 "${CZ_FSDP_BIND:?}" "$tmp/f.json" 2 odd.weight | tee "$tmp/out"
  grep -q "rank 2: refused: bind_param('odd.weight'): shard shape \[3, 24\]" "$tmp/out"
  [ "$(grep -c "step refused" "$tmp/out")" -eq 4 ] ||
    { echo "expected the step refused on all 4 ranks"; exit 1; }
  # At DP2*TP2 the shard FSDP2 leaves rank 3 (DP rank 1, TP rank 1) of the TP-replicated
  # odd.weight is rows [4, 7); one row more is refused the same way.
  mpi -np 4 "$CZ_FSDP_BIND" "$tmp/f-dp2-tp2.json" 3 odd.weight | tee "$tmp/out"
  grep -q "rank 3: refused: bind_param('odd.weight'): shard shape \[4, 24\]" "$tmp/out"
  [ "$(grep -c "step refused" "$tmp/out")" -eq 4 ] ||
    { echo "expected the step refused on all 4 ranks"; exit 1; }
  # What the fully sharded step does not run, refused on every rank: the bucket-wise step (no
  # buckets).
  mpi_fails -np 4 "$CZ_BENCH" --plan "$tmp/f.json" --model "$odd" --steps 1 --overlap
  [ "$(grep -c "the plan's layout is fsdp, which has no buckets" "$tmp/out")" -eq 4 ] ||
    { echo "expected the refusal on all 4 ranks"; exit 1; }
  ;;
fsdp-soap)
  # SOAP under the fully sharded step at DP4*TP1 against soap_ref (as `soap`: 12 calls,
  # refresh every 5 updates, extra.weight's 64-row side rotated): each block's state lives on
  # its matrix's owner.
  : "${CZ_SOAP_REF:?}"
  cl=$src/plans/clusters/cpu-4-dp4-tp1.json
  "$CZ" plan -q --model "$model" --cluster "$cl" --layout fsdp --optimizer soap \
    --precondition-frequency 5 --max-precond-dim 100 -o "$tmp/s.json"
  "$CZ" validate "$tmp/s.json" --model "$model" --cluster "$cl" >/dev/null
  mpi -np 4 "$CZ_BENCH" --plan "$tmp/s.json" --model "$model" --steps 12 --warmup 0 --seed 3 \
    --dump-dir "$tmp/d" | tee "$tmp/out"
  grep -q "executor allocations in steps 2..12 (most on one rank): 0$" "$tmp/out"
  grep -q "gradients fp32 0 bytes, parameters fp32 0 bytes$" "$tmp/out"
  "$CZ_SOAP_REF" "$tmp/s.json" "$tmp/d" 12 3 1e-4 1e-8
  ;;
*)
  echo "usage: bench.sh verify CLUSTER DP TP [fp32|bf16] | mismatch | options | nan | dump |" \
    "owncomms | replicas | grads | knobs | stall | shampoo ... | soap ... | tasks ..."
  exit 2 ;;
esac
