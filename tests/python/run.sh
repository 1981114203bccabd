#!/usr/bin/env bash
# Runs a Python test of the canzona package with the Python of the tests (CZ_PYTHON: the
# environment tools/setup.sh makes, which CMake passes). A missing interpreter or module is a
# failure, never a skip: that environment has them all.
#   run.sh [mpirun -np N | torchrun N] SCRIPT [ARGS]
# torchrun N: the real launcher, `python -m torch.distributed.run --standalone` (its own c10d
# rendezvous on a free local port), N processes.
# Env: as the script needs (CANZONA_EXEC_LIB, CANZONA_CLI, CZ_SOURCE_DIR, ...).
set -euo pipefail
py=${CZ_PYTHON:-}
mods=${CZ_PY_MODULES:-numpy}
if [ -z "$py" ] || [ ! -x "$py" ]; then
  echo "FAIL: no Python for the tests (CZ_PYTHON='$py'); run tools/setup.sh, then cmake again"
  exit 1
fi
if ! "$py" -c "import ${mods// /,}" 2>/dev/null; then
  echo "FAIL: $py cannot import $mods; run tools/setup.sh (tools/python-requirements.txt)"
  exit 1
fi
export PYTHONPATH="${CZ_SOURCE_DIR:?}/python${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONDONTWRITEBYTECODE=1
scale=${CZ_TIME_SCALE:-1}
if [ "$1" = mpirun ]; then
  "$py" -c "import mpi4py" 2>/dev/null || { echo "FAIL: $py has no mpi4py; run tools/setup.sh"; exit 1; }
  command -v mpirun >/dev/null || { echo "FAIL: mpirun not found (Debian: openmpi-bin)"; exit 1; }
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
  export OMPI_MCA_rmaps_base_oversubscribe=1
  n=$3
  shift 3
  exec timeout $((120 * scale)) mpirun --oversubscribe -np "$n" "$py" "$@"
fi
if [ "$1" = torchrun ]; then
  export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
  n=$2
  shift 2
  exec timeout $((240 * scale)) "$py" -m torch.distributed.run --standalone \
    --nproc-per-node "$n" "$@"
fi
exec "$py" "$@"
