#!/usr/bin/env bash
# Optimizer-state checkpoints on 4 MPI ranks, resharded. Usage:
# checkpoint.sh [muon|shampoo|soap|split|tasks|tasks-back|heads|pp|pp-back|normuon-row|normuon-col|
#                fsdp|fsdp-soap]
#  muon (default): 10 steps of test-small at DP2·TP2, save the state, load it at DP4·TP1 and
#    run 10 more steps; the final parameters must equal an uninterrupted 20-step run.
#  shampoo: 7 steps at DP2·TP2 (refresh every 5 steps, sides above 128 tiled, momentum and
#    Adam grafting: every kind of Shampoo buffer), load at DP1·TP4, 9 more steps across the
#    refreshes at steps 10 and 15.
#  soap: 8 calls at DP2·TP2 (refresh every 5 updates, sides above 100 unrotated), load at
#    DP4·TP1, 8 more calls across the refreshes after updates 10 and 15.
#  split: as muon with split-layout plans (elementwise parameters cut between the DP ranks'
#    even slices, so their AdamW moments are saved and loaded in pieces).
#  tasks: 10 steps under a plan of whole matrices at DP2·TP2, load under a plan of block and
#    cooperative tasks (--split-blocks --coop 4) at DP1·TP4 (each rank keeps the momentum of
#    its blocks' slices), 10 more steps.
#  tasks-back: 10 steps under --split-blocks --coop 2 at DP2·TP2 (the momentum saved part by
#    part), load under whole matrices at DP4·TP1, 10 more steps.
#  heads: 10 steps of the per-head test-heads at DP2·TP2 (TP-local tasks: each rank keeps the
#    momentum of its own heads), load at DP4·TP1 (whole matrices), 10 more steps.
#  pp: 10 steps at PP2·DP2·TP1 (each stage's ranks keep their stage's state only; the save
#    gathers both stages'), load at PP1·DP4·TP1, 10 more steps.
#  pp-back: 10 steps at PP1·DP2·TP2, load at PP2·DP1·TP2 (each stage takes its own
#    parameters' tensors from the file), 10 more steps.
#  normuon-row: NorMuon by rows on test-heads, 10 steps at DP2·TP2 (TP-local per-head tasks:
#    each rank keeps its own heads' second moments, and the output projection's is a matrix of
#    one column per head), load at DP4·TP1 (whole matrices), 10 more steps.
#  normuon-col: NorMuon by columns, 10 steps at DP2·TP2, load at DP4·TP1 under --split-blocks
#    (block tasks, the heads inside them), 10 more steps.
#  fsdp: 10 steps of the fully sharded step at DP2·TP2 (2-D shards: each GPU its FSDP2 rows of
#    its TP shard, each matrix's momentum on its owner GPU), load at DP2·TP1 (2 ranks), 10 more
#    steps; the same file also under a ZeRO-1 plan at DP2·TP2.
#  fsdp-soap: SOAP under the fully sharded step, DP4·TP1 -> DP2·TP1, and ZeRO-1.
#  Both normuon modes: a Muon checkpoint is refused under NorMuon (no second moment), and a negative second
#    moment is refused as damage.
#  fsdp: 10 steps of a fully sharded plan at DP4·TP1 (AdamW moments saved from every rank's
#    FSDP2 rows, each momentum from its owner), load under a fully sharded plan at DP2·TP1 (on
#    2 ranks: other rows, other owners), 10 more steps; and the same file loaded under the
#    ZeRO-1 plan at DP2·TP2 (one format for every layout), 10 more steps.
#  fsdp-soap: the same with SOAP as soap's (8 calls, refresh every 5 updates): each block's
#    state saved from and loaded into its owner.
#  (Across expert grids: checkpoint_ep.sh.)
# Equal means max|a-b|/max|b| <= 1e-5 per parameter. The gradients are the same on every DP
# replica (so their average does not depend on the DP size) and come from files, so both runs
# see the same gradients. Also: the same continuation without the loaded state differs (the
# test can fail); for muon, a failed save leaves the previous checkpoint whole and a damaged or
# foreign checkpoint is refused on every rank; for shampoo and soap, a Muon checkpoint is
# refused on every rank.
# Env: CZ (canzona), CZ_BENCH (canzona-bench), CZ_SOURCE_DIR. Exit 77 = skipped.
set -euo pipefail
. "$(dirname "$0")/mpi_env.sh"
command -v python3 >/dev/null || { echo "python3 not found"; exit 77; }
src=${CZ_SOURCE_DIR:?}
model=$src/plans/models/test-small.json
first=cpu-4-dp2-tp2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
layout=${1:-unified}
# np: the ranks of a run (4; the second plan's np2 for its runs).
mpi() { timeout $((120 * ${CZ_TIME_SCALE:-1})) mpirun --oversubscribe -np "${np:-4}" "$@"; }
mpi_fails() { # every rank must fail cleanly (non-zero, not the timeout's 124)
  local rc=0
  mpi "$@" >"$tmp/out" 2>&1 || rc=$?
  cat "$tmp/out"
  [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || { echo "expected failure without timeout, rc=$rc"; exit 1; }
}
bench() { # prints how long each run took, to keep the test's time in view
  local t0=$SECONDS
  mpi "$CZ_BENCH" --model "$model" --warmup 0 "$@"
  echo "run took $((SECONDS - t0)) s" >&2
}

mode=${1:-muon}
# Plan options (popt2: of the resumed plan, when they differ), resumed cluster, steps before
# and after the save, bench options.
popt2=() np2=4
case "$mode" in
muon) popt=(); second=cpu-4-dp4-tp1; n1=10; n2=10; bopt=() ;;
tasks) popt=(); popt2=(--split-blocks --coop 4); second=cpu-4-dp1-tp4; n1=10; n2=10; bopt=() ;;
heads) model=$src/plans/models/test-heads.json; popt=(); second=cpu-4-dp4-tp1; n1=10; n2=10
  bopt=() ;;
tasks-back) popt=(--split-blocks --coop 2); popt2=(--coop off); second=cpu-4-dp4-tp1; n1=10; n2=10
  bopt=() ;;
shampoo)
  popt=(--optimizer shampoo --precondition-frequency 5); second=cpu-4-dp1-tp4; n1=7; n2=9
  bopt=(--shampoo-max-dim 128 --shampoo-momentum 0.5 --shampoo-grafting adam) ;;
soap)
  popt=(--optimizer soap --precondition-frequency 5 --max-precond-dim 100)
  second=cpu-4-dp4-tp1; n1=8; n2=8; bopt=() ;;
split) popt=(--layout split); second=cpu-4-dp4-tp1; n1=10; n2=10; bopt=() ;;
pp) popt=(--pp-size 2 --dp-size 2 --tp-size 1); popt2=(--dp-size 4); second=cpu-4-dp4-tp1
  n1=10; n2=10; bopt=() ;;
pp-back) popt=(); popt2=(--pp-size 2 --dp-size 1 --tp-size 2); second=cpu-4-dp2-tp2; n1=10
  n2=10; bopt=() ;;
normuon-row) model=$src/plans/models/test-heads.json; popt=(); second=cpu-4-dp4-tp1; n1=10
  n2=10; bopt=(--normuon row --normuon-beta2 0.9) ;;
normuon-col) model=$src/plans/models/test-heads.json; popt=(); popt2=(--split-blocks)
  second=cpu-4-dp4-tp1; n1=10; n2=10; bopt=(--normuon col --normuon-beta2 0.9) ;;
fsdp) first=cpu-4-dp2-tp2; popt=(--layout fsdp); popt2=(--layout fsdp --dp-size 2); np2=2
  second=cpu-4-dp4-tp1; n1=10; n2=10; bopt=() ;;
fsdp-soap)
  first=cpu-4-dp4-tp1; popt=(--layout fsdp --optimizer soap --precondition-frequency 5
    --max-precond-dim 100); popt2=("${popt[@]}" --dp-size 2); np2=2
  second=cpu-4-dp4-tp1; n1=8; n2=8; bopt=() ;;
*) echo "usage: checkpoint.sh [muon|shampoo|soap|split|tasks|tasks-back|heads|pp|pp-back|normuon-row|normuon-col|fsdp|fsdp-soap]"; exit 2 ;;
esac
[ ${#popt2[@]} -gt 0 ] || popt2=("${popt[@]}")
n=$((n1 + n2))
"$CZ" plan -q -m "$model" -c "$src/plans/clusters/$first.json" "${popt[@]}" -o "$tmp/a.json"
"$CZ" plan -q -m "$model" -c "$src/plans/clusters/$second.json" "${popt2[@]}" -o "$tmp/b.json"

if [ "$mode" = tasks ] || [ "$mode" = tasks-back ]; then
  # One side of the round trip has block and cooperative tasks, the other none.
  for f in a b; do
    python3 - "$tmp/$f.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
split = [t for s in p["tp_schedule"] for g in s["groups"] for slot in g["slots"] for t in slot
         if isinstance(t, dict)]
print("%s: %s, %d block or cooperative task entries" % (sys.argv[1].rsplit("/", 1)[1],
                                                        p["schema"], len(split)))
PY
  done
  grep -q '"canzona.plan/2"' "$tmp/$([ "$mode" = tasks ] && echo b || echo a).json"
  ! grep -q '"canzona.plan/2"' "$tmp/$([ "$mode" = tasks ] && echo a || echo b).json"
fi

# n steps of gradients, generated by a one-rank run (one replica to write); every DP replica
# of the runs below gets that replica's (directory links).
cat > "$tmp/one.json" <<'JSON'
{"schema": "canzona.cluster/1", "name": "one", "gpus": 1, "dp": 1, "tp": 1, "pp": 1,
 "gpus_per_node": 1,
 "device": {"name": "cpu", "matmul_tflops": 1, "mem_gbps": 10, "memory_gib": 16},
 "links": {"intra_node_gbps": 10, "inter_node_gbps": 10, "latency_us": 0},
 "buckets": {"size": 1000}}
JSON
"$CZ" plan -q -m "$model" -c "$tmp/one.json" -o "$tmp/one.plan.json"
timeout $((120 * ${CZ_TIME_SCALE:-1})) mpirun -np 1 "$CZ_BENCH" --model "$model" --plan "$tmp/one.plan.json" --warmup 0 \
  --steps "$n" --dump-grads "$tmp/gen" > "$tmp/gen.log"
for s in $(seq 0 $((n - 1))); do
  mkdir -p "$tmp/gall/step$s"
  [ "$s" -ge "$n1" ] && mkdir -p "$tmp/grest/step$((s - n1))"
  for d in 0 1 2 3; do
    ln -s "$tmp/gen/step$s/dp0" "$tmp/gall/step$s/dp$d"
    [ "$s" -ge "$n1" ] && ln -s "$tmp/gen/step$s/dp0" "$tmp/grest/step$((s - n1))/dp$d"
  done
done

bench --plan "$tmp/a.json" --steps "$n" --grad-dir "$tmp/gall" --dump-dir "$tmp/ref" "${bopt[@]}" \
  > "$tmp/ref.log"
bench --plan "$tmp/a.json" --steps "$n1" --grad-dir "$tmp/gall" --dump-dir "$tmp/mid" \
  --save-state "$tmp/state.safetensors" "${bopt[@]}" > "$tmp/first.log"
np=$np2 bench --plan "$tmp/b.json" --steps "$n2" --grad-dir "$tmp/grest" --init-dir "$tmp/mid" \
  --load-state "$tmp/state.safetensors" --dump-dir "$tmp/resumed" "${bopt[@]}" > "$tmp/second.log"
np=$np2 bench --plan "$tmp/b.json" --steps "$n2" --grad-dir "$tmp/grest" --init-dir "$tmp/mid" \
  --dump-dir "$tmp/fresh" "${bopt[@]}" > "$tmp/fresh.log"

# compare.py A B TOL: max over parameters of max|a-b|/max|b|, and whether it is within TOL.
cat > "$tmp/compare.py" <<'PY'
import ast, glob, os, struct, sys
def load(path):
    with open(path, "rb") as f:
        data = f.read()
    assert data[:6] == b"\x93NUMPY", path
    hlen = struct.unpack("<H", data[8:10])[0]
    header = ast.literal_eval(data[10:10 + hlen].decode())
    assert header["descr"] == "<f4" and not header["fortran_order"], path
    body = data[10 + hlen:]
    return struct.unpack("<%df" % (len(body) // 4), body)
a_dir, b_dir, tol = sys.argv[1], sys.argv[2], float(sys.argv[3])
names = sorted(os.path.relpath(p, b_dir) for p in glob.glob(b_dir + "/**/*.npy", recursive=True))
assert names, "no parameters in " + b_dir
worst, where = 0.0, ""
for n in names:
    a, b = load(os.path.join(a_dir, n)), load(os.path.join(b_dir, n))
    assert len(a) == len(b), n
    scale = max(abs(x) for x in b) or 1.0
    err = max(abs(x - y) for x, y in zip(a, b)) / scale
    if err > worst:
        worst, where = err, n
print("%d parameters, worst relative difference %.3g (%s)" % (len(names), worst, where))
sys.exit(0 if worst <= tol else 1)
PY
echo "$mode: resumed at $second ${popt2[*]} after $n1 steps at $first ${popt[*]} vs $n uninterrupted steps:"
python3 "$tmp/compare.py" "$tmp/resumed" "$tmp/ref" 1e-5
if [ "$mode" = fsdp ] || [ "$mode" = fsdp-soap ]; then
  echo "$mode: the same checkpoint resumed under the ZeRO-1 plan at DP2·TP2:"
  zopt=()
  [ "$mode" = fsdp-soap ] && zopt=(--optimizer soap --precondition-frequency 5 --max-precond-dim 100)
  "$CZ" plan -q -m "$model" -c "$src/plans/clusters/cpu-4-dp2-tp2.json" "${zopt[@]}" -o "$tmp/z.json"
  bench --plan "$tmp/z.json" --steps "$n2" --grad-dir "$tmp/grest" --init-dir "$tmp/mid" \
    --load-state "$tmp/state.safetensors" --dump-dir "$tmp/zero1" > "$tmp/zero1.log"
  python3 "$tmp/compare.py" "$tmp/zero1" "$tmp/ref" 1e-5
fi
echo "the same continuation without the saved state (must differ):"
if python3 "$tmp/compare.py" "$tmp/fresh" "$tmp/ref" 1e-5; then
  echo "FAIL: resuming without the optimizer state matched: the comparison cannot tell"; exit 1
fi

# The file is safetensors with the step count in its metadata and the mode's tensors.
python3 - "$tmp/state.safetensors" "$mode" "$n1" <<'PY'
import json, struct, sys
data = open(sys.argv[1], "rb").read()
mode, steps = sys.argv[2], sys.argv[3]
n = struct.unpack("<Q", data[:8])[0]
h = json.loads(data[8:8 + n])
meta = h.pop("__metadata__")
assert meta == {"format": "canzona.optim/1", "step": steps}, meta
assert all(t["dtype"] == "F32" for t in h.values())
assert max(t["data_offsets"][1] for t in h.values()) == len(data) - 8 - n
kinds = sorted({k.rsplit(".", 1)[1] for k in h})
want = {
    "muon": ["exp_avg", "exp_avg_sq", "momentum"],
    "split": ["exp_avg", "exp_avg_sq", "momentum"],
    "tasks": ["exp_avg", "exp_avg_sq", "momentum"],
    "tasks-back": ["exp_avg", "exp_avg_sq", "momentum"],
    "heads": ["exp_avg", "exp_avg_sq", "momentum"],
    "pp": ["exp_avg", "exp_avg_sq", "momentum"],
    "pp-back": ["exp_avg", "exp_avg_sq", "momentum"],
    "fsdp": ["exp_avg", "exp_avg_sq", "momentum"],
    "fsdp-soap": ["GG_left", "Q_left", "exp_avg", "exp_avg_sq"],
    "normuon-row": ["exp_avg", "exp_avg_sq", "momentum", "normuon_v"],
    "normuon-col": ["exp_avg", "exp_avg_sq", "momentum", "normuon_v"],
    "shampoo": ["exp_avg", "exp_avg_sq", "factor_left", "factor_right", "filtered_grad",
                "grafting", "inv_root_left", "inv_root_right", "momentum"],
    "soap": ["GG_left", "Q_left", "exp_avg", "exp_avg_sq"],
}[mode]
assert kinds == want, kinds
if mode == "shampoo":
    # fc1 (1024 x 256, blocks of 512 rows) at max_dim 128: 4 x 2 tiles per block, named by
    # their origin in the full matrix; every tile's left factor is 128 x 128.
    t = h["decoder.layers.0.mlp.linear_fc1.weight.shampoo.896_128.factor_left"]
    assert t["shape"] == [128, 128], t
if mode == "soap":
    # Only extra.weight's 64-row side is at most 100: its factor and basis, 64 x 64.
    t = h["extra.weight.soap.0_0.Q_left"]
    assert t["shape"] == [64, 64], t
if mode.startswith("normuon"):
    # One second moment per line of each unit: the QKV's 8 heads of 32 rows, the output
    # projection's 4 heads of 32 columns, fc1's 2 row blocks, fc2 whole.
    want = {"row": {"self_attention.linear_qkv": [256, 1], "self_attention.linear_proj": [128, 4],
                    "mlp.linear_fc1": [512, 1], "mlp.linear_fc2": [128, 1]},
            "col": {"self_attention.linear_qkv": [8, 128], "self_attention.linear_proj": [1, 128],
                    "mlp.linear_fc1": [2, 128], "mlp.linear_fc2": [1, 256]}}[mode[8:]]
    for k, shape in want.items():
        t = h["decoder.layers.1.%s.weight.normuon_v" % k]
        assert t["shape"] == shape, (k, t)
        # Saved, not left at its start: every line of every unit has had 10 updates of its EMA.
        o0, o1 = t["data_offsets"]
        v = struct.unpack("<%df" % ((o1 - o0) // 4), data[8 + n + o0:8 + n + o1])
        assert min(v) > 0, (k, min(v))
print("checkpoint: %d tensors, step %s" % (len(h), steps))
PY

# The refusals below do not depend on the layout or the tasks: checked with plain plans only.
if [ "$mode" = split ] || [ "$mode" = tasks ] || [ "$mode" = tasks-back ] || [ "$mode" = pp ] ||
  [ "$mode" = pp-back ] || [ "$mode" = heads ] || [ "$mode" = fsdp ] || [ "$mode" = fsdp-soap ]; then
  echo "ok"
  exit 0
fi
if [ "$mode" = normuon-row ] || [ "$mode" = normuon-col ]; then
  # A plain Muon checkpoint has no second moment: refused on every rank, naming it.
  bench --plan "$tmp/a.json" --steps 1 --save-state "$tmp/muon.safetensors" > "$tmp/muon.log"
  mpi_fails "$CZ_BENCH" --model "$model" --plan "$tmp/b.json" --steps 1 "${bopt[@]}" \
    --load-state "$tmp/muon.safetensors"
  [ "$(grep -c 'loading the optimizer state' "$tmp/out")" -eq 4 ]
  grep -q "muon.safetensors: no tensor '.*\.normuon_v'" "$tmp/out"
  # A negative second moment cannot come from the EMA of squares: refused as damage.
  python3 - "$tmp/state.safetensors" "$tmp/neg.safetensors" <<'PY'
import json, struct, sys
data = bytearray(open(sys.argv[1], "rb").read())
n = struct.unpack("<Q", data[:8])[0]
h = json.loads(data[8:8 + n])
t = h["decoder.layers.0.mlp.linear_fc2.weight.normuon_v"]
at = 8 + n + t["data_offsets"][0]
data[at:at + 4] = struct.pack("<f", -1.0)
open(sys.argv[2], "wb").write(bytes(data))
PY
  mpi_fails "$CZ_BENCH" --model "$model" --plan "$tmp/b.json" --steps 1 "${bopt[@]}" \
    --load-state "$tmp/neg.safetensors"
  grep -q "neg.safetensors: 'decoder.layers.0.mlp.linear_fc2.weight.normuon_v' holds a negative value" "$tmp/out"
  echo "ok"
  exit 0
fi
if [ "$mode" != muon ]; then
  # A Muon checkpoint of the same model is refused on every rank, naming a missing tensor.
  "$CZ" plan -q -m "$model" -c "$src/plans/clusters/cpu-4-dp2-tp2.json" -o "$tmp/muon.json"
  bench --plan "$tmp/muon.json" --steps 1 --save-state "$tmp/muon.safetensors" > "$tmp/muon.log"
  mpi_fails "$CZ_BENCH" --model "$model" --plan "$tmp/b.json" --steps 1 "${bopt[@]}" \
    --load-state "$tmp/muon.safetensors"
  [ "$(grep -c 'loading the optimizer state' "$tmp/out")" -eq 4 ]
  grep -q "muon.safetensors: no tensor '.*\.$mode\.0_0\." "$tmp/out"
  echo "ok"
  exit 0
fi

# A save that is refused (the old checkpoint is read-only) fails on every rank and leaves the
# previous file whole. (That the write itself is a temporary file renamed into place is the
# planner's atomic writer, tested with the CLI's outputs.)
cp "$tmp/state.safetensors" "$tmp/before"
chmod a-w "$tmp/state.safetensors"
mpi_fails "$CZ_BENCH" --model "$model" --plan "$tmp/b.json" --steps 1 --warmup 0 \
  --save-state "$tmp/state.safetensors"
[ "$(grep -c 'saving the optimizer state' "$tmp/out")" -eq 4 ]
grep -q "state.safetensors" "$tmp/out"
cmp "$tmp/before" "$tmp/state.safetensors"
chmod u+w "$tmp/state.safetensors"

# A truncated checkpoint and one of another model are refused on every rank.
head -c 1000 "$tmp/state.safetensors" > "$tmp/short.safetensors"
mpi_fails "$CZ_BENCH" --model "$model" --plan "$tmp/b.json" --steps 1 --load-state "$tmp/short.safetensors"
grep -q "short.safetensors: header of .* does not fit\|short.safetensors: '.*': data_offsets" "$tmp/out"
[ "$(grep -c 'loading the optimizer state' "$tmp/out")" -eq 4 ]
python3 - "$tmp/state.safetensors" "$tmp/renamed.safetensors" <<'PY'
import sys
data = open(sys.argv[1], "rb").read()
open(sys.argv[2], "wb").write(data.replace(b".momentum", b".momentun", 1))
PY
mpi_fails "$CZ_BENCH" --model "$model" --plan "$tmp/b.json" --steps 1 --load-state "$tmp/renamed.safetensors"
grep -q "renamed.safetensors: no tensor '.*\.momentum'" "$tmp/out"
echo "ok"
