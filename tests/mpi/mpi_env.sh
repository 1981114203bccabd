# The environment every MPI test script runs its ranks in, sourced after `set -euo pipefail`:
# Open MPI as root and oversubscribed (more ranks than cores), one BLAS thread per rank, and
# the mpirun the scripts need (exit 77, skipped, without it).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
export OMPI_MCA_rmaps_base_oversubscribe=1
# Under the sanitizer build Open MPI, hwloc and OpenBLAS leak at exit (none of it ours; the
# executor's own frees are leak-checked by the single-process unit tests): keep ASan and UBSan
# on, leak detection off.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
command -v mpirun >/dev/null || { echo "mpirun not found"; exit 77; }
