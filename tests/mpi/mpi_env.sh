# The environment every MPI test script runs its ranks in, sourced after `set -euo pipefail`:
# Open MPI as root and oversubscribed (more ranks than cores), one BLAS thread per rank, the
# mpirun the scripts need (exit 77, skipped, without it), and the two ways bench.sh, experts.sh
# and split.sh run it (mpi, mpi_fails; at the end).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
export OMPI_MCA_rmaps_base_oversubscribe=1
# Under the sanitizer build Open MPI, hwloc and OpenBLAS leak at exit (none of it ours; the
# executor's own frees are leak-checked by the single-process unit tests): keep ASan and UBSan
# on, leak detection off.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
command -v mpirun >/dev/null || { echo "mpirun not found"; exit 77; }
# mpi ARGS...: mpirun oversubscribed, within 60 s x CZ_TIME_SCALE (CMake sets it to 4 for the
# sanitizer build). mpi_fails ARGS...: the same, expecting every rank to fail cleanly (a non-zero
# exit that is not the time limit's 124); the output is printed and kept in $tmp/out (the
# sourcing script's scratch folder) for the caller's checks.
mpi() { timeout $((60 * ${CZ_TIME_SCALE:-1})) mpirun --oversubscribe "$@"; }
mpi_fails() {
  local rc=0
  mpi "$@" >"$tmp/out" 2>&1 || rc=$?
  cat "$tmp/out"
  [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || { echo "expected failure without timeout, rc=$rc"; exit 1; }
}
