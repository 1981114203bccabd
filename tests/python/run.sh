#!/usr/bin/env bash
# Runs a Python test of the canzona package with a python3 that has the modules it needs (the
# first on PATH that imports them all: CZ_PY_MODULES, default numpy); exit 77 (skipped) when
# none has. Usage: run.sh [mpirun -np N | torch_launch N] SCRIPT [ARGS]
# Env: as the script needs (CANZONA_EXEC_LIB, CANZONA_CLI, CZ_SOURCE_DIR, ...).
set -euo pipefail
mods=${CZ_PY_MODULES:-numpy}
py=""
for cand in $(type -ap python3); do
  if "$cand" -c "import ${mods// /,}" 2>/dev/null; then py=$cand; break; fi
done
[ -n "$py" ] || { echo "no python3 that imports $mods (Debian: python3-numpy, python3-torch, python3-mpi4py)"; exit 77; }
export PYTHONPATH="${CZ_SOURCE_DIR:?}/python${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONDONTWRITEBYTECODE=1
if [ "$1" = mpirun ]; then
  "$py" -c "import mpi4py" 2>/dev/null || { echo "mpi4py missing (install python3-mpi4py)"; exit 77; }
  command -v mpirun >/dev/null || { echo "mpirun not found"; exit 77; }
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
  export OMPI_MCA_rmaps_base_oversubscribe=1
  n=$3
  shift 3
  exec timeout $((120 * ${CZ_TIME_SCALE:-1})) mpirun --oversubscribe -np "$n" "$py" "$@"
fi
if [ "$1" = torch_launch ]; then
  # As torchrun would start it (tests/python/torch_launch.py), within a time limit.
  export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
  n=$2
  shift 2
  exec timeout $((240 * ${CZ_TIME_SCALE:-1})) "$py" "$CZ_SOURCE_DIR/tests/python/torch_launch.py" \
    --nproc-per-node "$n" "$@"
fi
exec "$py" "$@"
