#!/usr/bin/env bash
# Run by tests/package/relocatable.sh inside its root file system (chroot), where only glibc,
# libgcc_s, bash, sh, coreutils, grep and sed are installed besides the package. Checks the
# loader's view of every ELF file of the package, that the dependencies exist only in the
# package, then runs the planner, canzona-bench (4 ranks under the package's mpirun; 1 rank as an
# MPI singleton), the GPU test programs' CPU-side modes and bin/canzona-gpu-check if present.
# Usage (inside): relocatable_inside.sh <package folder> <program interpreter (ld.so)>
set -euo pipefail
pkg=$1 interp=$2
cd /tmp
# The loader's view: every library of every ELF file of the package from the package, glibc or
# the compiler runtime; only NVIDIA's may be missing (the CUDA backend's plugin finds them).
glibc='^(ld-linux[-a-z0-9_.]*|libc|libm|libmvec|libpthread|libdl|librt|libresolv|libutil|libanl|libnsl|libgcc_s|libstdc\+\+)\.so'
nvidia='^lib(cuda|cudart|cublas|cublasLt|cusolver|cusolverMg|cusparse|cufft|curand|nvJitLink|nvrtc|nccl|nvidia-[a-z-]+|nvToolsExt|cupti)\.so'
shopt -s globstar nullglob
nelf=0
bad=0
for f in "$pkg"/**; do
  if [ ! -f "$f" ] || [ -L "$f" ]; then continue; fi
  IFS= read -r -n 4 magic < "$f" || true
  [ "$magic" = $'\x7fELF' ] || continue
  nelf=$((nelf + 1))
  while read -r soname arrow path _; do
    [ "$arrow" = "=>" ] || continue
    case $path in
      "$pkg"/*) ;;
      not) [[ $soname =~ $nvidia ]] || { echo "FAIL: ${f#"$pkg"/}: $soname not found"; bad=1; } ;;
      *) [[ $soname =~ $glibc ]] || { echo "FAIL: ${f#"$pkg"/}: $soname from $path, not the package"; bad=1; } ;;
    esac
  done < <("$interp" --list "$f" 2>&1 || true)
done
[ "$bad" -eq 0 ] || exit 1
echo "ok: $nelf ELF files load only the package's libraries, glibc's and libgcc_s"
# The dependencies exist only in the package.
for lib in libjansson.so.4 libopenblas.so.0 liblapacke.so.3 libgfortran.so.5 libquadmath.so.0 \
  libglpk.so.40 libmpi.so.40 libopen-pal.so.40 libpmix.so.2 libhwloc.so.15 libevent_core-2.1.so.7; do
  [ -e "$pkg/lib/$lib" ] || { echo "FAIL: the package has no lib/$lib"; exit 1; }
  for d in /usr /etc /root /tmp; do
    for f in "$d"/**/"$lib"*; do echo "FAIL: $f is outside the package"; exit 1; done
  done
done
echo "ok: jansson, OpenBLAS, LAPACKE, libgfortran, GLPK, Open MPI, PMIx, hwloc, libevent only in the package"
models=$pkg/share/canzona/plans/models
clusters=$pkg/share/canzona/plans/clusters
"$pkg/bin/canzona" plan -m "$models/test-small.json" -c "$clusters/cpu-4-dp2-tp2.json" \
  -o /tmp/small.plan.json > /tmp/plan.txt
grep -E '^(DP imbalance|TP makespan|plan written)' /tmp/plan.txt
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
timeout 300 "$pkg/bin/mpirun" -np 4 --oversubscribe "$pkg/bin/canzona-bench" \
  --plan /tmp/small.plan.json --model "$models/test-small.json" --steps 3 --verify > /tmp/bench.txt 2>&1 ||
  { cat /tmp/bench.txt; exit 1; }
grep -q '^verify: OK' /tmp/bench.txt || { cat /tmp/bench.txt; exit 1; }
echo "4 ranks, bundled mpirun: $(grep '^verify: OK' /tmp/bench.txt)"
# One rank without mpirun: MPI_Init as a singleton finds Open MPI's parts through mpi-env.sh.
"$pkg/bin/canzona" plan -q -m "$models/test-small.json" -c "$clusters/cpu-1.json" -o /tmp/one.plan.json
(
  export CANZONA_ROOT=$pkg
  # shellcheck source=/dev/null
  . "$pkg/libexec/canzona/mpi-env.sh"
  timeout 120 "$pkg/bin/canzona-bench" --plan /tmp/one.plan.json --model "$models/test-small.json" \
    --steps 2 --verify > /tmp/one.txt 2>&1
) || { cat /tmp/one.txt; exit 1; }
grep -q '^verify: OK' /tmp/one.txt || { cat /tmp/one.txt; exit 1; }
echo "1 rank, no mpirun (singleton): $(grep '^verify: OK' /tmp/one.txt)"
timeout 300 "$pkg/libexec/canzona/gpu_linalg" harness > /tmp/linalg.txt 2>&1 ||
  { cat /tmp/linalg.txt; exit 1; }
echo "gpu_linalg harness (SOAP, Shampoo; cpu against cpu): passed"
rc=0
"$pkg/libexec/canzona/gpu_exec" probe > /tmp/probe.txt 2>&1 || rc=$?
[ "$rc" -eq 0 ] || [ "$rc" -eq 77 ] || { cat /tmp/probe.txt; echo "FAIL: gpu_exec probe exited $rc"; exit 1; }
echo "gpu_exec probe (exit $rc): $(head -1 /tmp/probe.txt)"
# The test programs find the plugin through their run path (libexec/canzona -> lib), not through
# the build tree they came from: with the plugin in the package, what is missing here is an
# NVIDIA library (or the device), never the plugin itself.
if [ -e "$pkg/lib/libcanzona-cuda.so" ] && grep -q "libcanzona-cuda.so was not found" /tmp/probe.txt; then
  echo "FAIL: gpu_exec did not find the package's GPU plugin"
  exit 1
fi
# The check's versus part runs libexec/canzona/versus.py with the package's Python package.
for f in libexec/canzona/versus.py share/canzona/python/canzona/torch.py \
  share/canzona/python/canzona/testing.py; do
  [ -f "$pkg/$f" ] || { echo "FAIL: the package has no $f (canzona-gpu-check's versus part)"; exit 1; }
done
rc=0
timeout 600 "$pkg/bin/canzona-gpu-check" --out /tmp/gpu-check > /tmp/check.txt 2>&1 || rc=$?
cat /tmp/check.txt
[ "$rc" -eq 0 ] || { echo "FAIL: canzona-gpu-check exited $rc without a GPU"; exit 1; }
# Every part of the table (between its header line and the closing one) reports skipped, with
# a reason, and the results file says the same.
parts=$(sed -n '/^part /,/^logs,/p' /tmp/check.txt | sed '1d;$d')
[ -n "$parts" ] || { echo "FAIL: canzona-gpu-check printed no table"; exit 1; }
if grep -vqE '^[^ ]+ +skipped +[^ ]' <<< "$parts"; then
  echo "FAIL: without a GPU every part must be skipped, with its reason"
  exit 1
fi
grep -q '"schema": "canzona.gpu_check/1"' /tmp/gpu-check/results.json ||
  { echo "FAIL: no results.json"; exit 1; }
echo "canzona-gpu-check: passed, all $(wc -l <<< "$parts") GPU parts skipped with their reason"
