#!/usr/bin/env bash
# Installs what canzona needs to build and test; safe to run repeatedly.
#
#  * Debian's packages for the C side (compilers, jansson, GLPK, Check, Open MPI, OpenBLAS,
#    LAPACKE, clang and libFuzzer) and Debian's python3 with venv.
#  * One Python environment for every Python test and example: .venv at the repository's root
#    (CZ_VENV overrides the path), made from Debian's python3 and holding exactly
#    tools/python-requirements.txt (torch 2.13 CPU, NumPy, mpi4py over Debian's Open MPI,
#    Megatron-Core). It is made anew when the requirements change; CMake finds it there
#    (CZ_PYTHON).
#  * When nvcc is on the machine: NVIDIA's cuBLAS, cuSOLVER and NCCL (their PyPI wheels, every
#    version exact: tools/cuda-requirements.txt) in .nvidia/ at the repository's root
#    (CZ_NVIDIA_DIR overrides the path), for a CUDA toolkit that has the compiler and the
#    runtime only: CMake takes the libraries from there (cmake/nvidia_wheels.cmake), so that
#    the GPU plugin compiles and links, warnings as errors, on a machine without a GPU.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
pkgs=(build-essential cmake pkg-config libjansson-dev libglpk-dev check libsubunit-dev
      libopenmpi-dev openmpi-bin libopenblas-dev liblapacke-dev libxml2-utils python3
      python3-venv patchelf clang libclang-rt-dev)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
if [ ${#missing[@]} -gt 0 ]; then
  $SUDO apt-get update
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends "${missing[@]}"
fi

venv=${CZ_VENV:-$root/.venv}
req=$root/tools/python-requirements.txt
stamp=$venv/.canzona-requirements
if ! { [ -x "$venv/bin/python" ] && cmp -s "$req" "$stamp" &&
        "$venv/bin/python" -c "import torch, numpy, mpi4py, megatron.core" 2>/dev/null; }; then
  echo "== Python environment $venv (tools/python-requirements.txt) =="
  rm -rf "$venv"
  /usr/bin/python3 -m venv "$venv"
  # Exact versions only, and no resolver outside the file: a bare torch would be a CUDA build.
  # (This project's machines list local package folders that pip reports as missing: not
  # errors.)
  if ! "$venv/bin/python" -m pip install --quiet --no-deps --require-virtualenv -r "$req" 2>&1 |
       { grep -v "is ignored: it is neither a file nor a directory" || true; }; then
    echo "setup.sh: pip install -r $req into $venv failed" >&2
    exit 1
  fi
  "$venv/bin/python" -m pip check
  "$venv/bin/python" -W ignore -c "import torch, numpy, mpi4py, megatron.core as m; print('torch', \
  torch.__version__, 'numpy', numpy.__version__, 'mpi4py', mpi4py.__version__, 'megatron-core', \
  m.__version__)"
  cp "$req" "$stamp"
fi

# NVIDIA's libraries for the GPU plugin's build, when there is a CUDA compiler to build it.
nvidia=${CZ_NVIDIA_DIR:-$root/.nvidia}
cuda_req=$root/tools/cuda-requirements.txt
if { command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ]; } &&
   ! cmp -s "$cuda_req" "$nvidia/.canzona-requirements"; then
  echo "== NVIDIA's CUDA libraries for the GPU plugin's build: $nvidia =="
  rm -rf "$nvidia"
  # The environment's pip (Debian's python3 may have none), into a folder of their own.
  if ! "$venv/bin/python" -m pip install --quiet --no-deps --target "$nvidia" -r "$cuda_req" \
       2>&1 | { grep -v "is ignored: it is neither a file nor a directory" || true; }; then
    echo "setup.sh: pip install -r $cuda_req into $nvidia failed" >&2
    exit 1
  fi
  cp "$cuda_req" "$nvidia/.canzona-requirements"
fi

