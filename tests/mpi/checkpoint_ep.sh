#!/usr/bin/env bash
# Optimizer-state checkpoints across expert grids (issue 39), on 4 MPI ranks: the small MoE
# (test-moe: 2 layers of 8 routed experts) under four layouts,
#   ep1   PP1·DP4 with EP1 (the experts in the dense buffer, owned over DP)
#   ep2   PP1·DP4 with EP2 x expert-DP 2
#   ep4   PP1·DP4 with EP4 x expert-DP 1
#   pp    PP2, per stage TP2 and EP2 x ETP1 x expert-DP 1
# each saved once after 3 steps and loaded at each of the other three for 3 more steps: every
# resumed run must equal 6 uninterrupted steps (max|a-b|/max|b| <= 1e-5 per parameter, the
# bound of checkpoint.sh's exact cases). The four runs to the save must already agree with
# each other (the same computation under every grid: canzona-bench gives a routed expert what
# its EP group's replicas route to it, cz_bench_rank_grad), and so must their checkpoints,
# tensor for tensor. The same continuation without the state differs (the test can fail).
# Every DP replica gets the same gradients (one replica's, from files), so that the DP1 layout
# (pp) averages what the DP4 ones do.
# Env: CZ (canzona), CZ_BENCH (canzona-bench), CZ_SOURCE_DIR. Exit 77 = skipped.
set -euo pipefail
. "$(dirname "$0")/mpi_env.sh"
command -v python3 >/dev/null || { echo "python3 not found"; exit 77; }
src=${CZ_SOURCE_DIR:?}
model=$src/plans/models/test-moe.json
cluster=$src/plans/clusters/cpu-4-dp4-ep2.json
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
n1=3
n2=3
n=$((n1 + n2))
layouts=(ep1 ep2 ep4 pp)
declare -A popt=(
  [ep1]="--dp-size 4 --ep-size 1"
  [ep2]="--dp-size 4 --ep-size 2"
  [ep4]="--dp-size 4 --ep-size 4"
  [pp]="--pp-size 2 --tp-size 2 --dp-size 1 --ep-size 2 --etp-size 1"
)
bench() { # plan options...
  local t0=$SECONDS plan=$1
  shift
  timeout $((120 * ${CZ_TIME_SCALE:-1})) mpirun --oversubscribe -np 4 "$CZ_BENCH" \
    --model "$model" --plan "$tmp/$plan.json" --warmup 0 "$@" > "$tmp/last.log"
  echo "  $plan ${*:1:2}...: $((SECONDS - t0)) s" >&2
}
for l in "${layouts[@]}"; do
  # shellcheck disable=SC2086 # the options are words
  "$CZ" plan -q -m "$model" -c "$cluster" ${popt[$l]} -o "$tmp/$l.json"
done

# n steps of one replica's gradients, every DP replica linked to them.
"$CZ" plan -q -m "$model" -c "$src/plans/clusters/cpu-1.json" -o "$tmp/one.json"
timeout $((120 * ${CZ_TIME_SCALE:-1})) mpirun -np 1 "$CZ_BENCH" --model "$model" \
  --plan "$tmp/one.json" --warmup 0 --steps "$n" --dump-grads "$tmp/gen" > "$tmp/gen.log"
for s in $(seq 0 $((n - 1))); do
  mkdir -p "$tmp/gall/step$s"
  [ "$s" -ge "$n1" ] && mkdir -p "$tmp/grest/step$((s - n1))"
  for d in 0 1 2 3; do
    ln -s "$tmp/gen/step$s/dp0" "$tmp/gall/step$s/dp$d"
    [ "$s" -ge "$n1" ] && ln -s "$tmp/gen/step$s/dp0" "$tmp/grest/step$((s - n1))/dp$d"
  done
done

bench ep1 --steps "$n" --grad-dir "$tmp/gall" --dump-dir "$tmp/ref"
for a in "${layouts[@]}"; do
  bench "$a" --steps "$n1" --grad-dir "$tmp/gall" --dump-dir "$tmp/mid.$a" \
    --save-state "$tmp/$a.safetensors"
done
for a in "${layouts[@]}"; do
  for b in "${layouts[@]}"; do
    [ "$a" != "$b" ] || continue
    bench "$b" --steps "$n2" --grad-dir "$tmp/grest" --init-dir "$tmp/mid.$a" \
      --load-state "$tmp/$a.safetensors" --dump-dir "$tmp/res.$a.$b"
  done
done
bench ep4 --steps "$n2" --grad-dir "$tmp/grest" --init-dir "$tmp/mid.ep2" --dump-dir "$tmp/fresh"

python3 - "$tmp" "$n1" "${layouts[@]}" <<'PY'
import ast, glob, json, os, struct, sys
tmp, steps, layouts = sys.argv[1], sys.argv[2], sys.argv[3:]
TOL = 1e-5

def npy(path):
    data = open(path, "rb").read()
    assert data[:6] == b"\x93NUMPY", path
    hlen = struct.unpack("<H", data[8:10])[0]
    header = ast.literal_eval(data[10:10 + hlen].decode())
    assert header["descr"] == "<f4" and not header["fortran_order"], path
    body = data[10 + hlen:]
    return struct.unpack("<%df" % (len(body) // 4), body)

def worst(a_dir, b_dir):
    names = sorted(os.path.relpath(p, b_dir) for p in glob.glob(b_dir + "/**/*.npy", recursive=True))
    assert len(names) > 40, "expected every parameter in " + b_dir
    w, where = 0.0, ""
    for n in names:
        a, b = npy(os.path.join(a_dir, n)), npy(os.path.join(b_dir, n))
        assert len(a) == len(b), n
        e = max(abs(x - y) for x, y in zip(a, b)) / (max(abs(x) for x in b) or 1.0)
        if e > w:
            w, where = e, n
    return w, where

def tensors(path):
    data = open(path, "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    h = json.loads(data[8:8 + n])
    meta = h.pop("__metadata__")
    assert meta == {"format": "canzona.optim/1", "step": steps}, (path, meta)
    return {k: data[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]]
            for k, v in h.items()}

failed = []
# The runs to the save: one computation under every grid, parameters and state.
first = tensors(os.path.join(tmp, layouts[0] + ".safetensors"))
experts = [k for k in first if ".local_experts." in k and k.endswith(".momentum")]
assert len(experts) == 32, len(experts)
for l in layouts[1:]:
    w, where = worst(os.path.join(tmp, "mid." + l), os.path.join(tmp, "mid." + layouts[0]))
    t = tensors(os.path.join(tmp, l + ".safetensors"))
    differ = sorted(k for k in first if t.get(k) != first[k])
    print("%s vs %s after %s steps: parameters %.3g (%s), %d of %d state tensors differ %s"
          % (l, layouts[0], steps, w, where, len(differ), len(first), differ[:3]))
    if w > TOL or sorted(t) != sorted(first) or differ:
        failed.append("uninterrupted " + l)
for a in layouts:
    for b in layouts:
        if a == b:
            continue
        w, where = worst(os.path.join(tmp, "res.%s.%s" % (a, b)), os.path.join(tmp, "ref"))
        print("saved at %s, resumed at %s: worst relative difference %.3g (%s)" % (a, b, w, where))
        if w > TOL:
            failed.append("%s -> %s" % (a, b))
w, where = worst(os.path.join(tmp, "fresh"), os.path.join(tmp, "ref"))
print("resumed at ep4 without the state (must differ): %.3g (%s)" % (w, where))
if not w > TOL:
    failed.append("the continuation without the state matched: the comparison cannot tell")
if failed:
    sys.exit("FAIL: " + "; ".join(failed))
print("ok")
PY
