#!/usr/bin/env bash
# The GPU backends live in the plugin alone (executor/src/compute/gpu_plugin.h): nothing a job links —
# libcanzona-exec.so, a program linked with the static library (the consumer), canzona-bench —
# needs an NVIDIA library, so one CUDA runtime is in a process whatever the job links; and the
# plugin carries that runtime statically, links cuBLAS and cuSOLVER, loads NCCL at run time, and
# exports its entry alone.
# Usage: gpu_links.sh <libcanzona-exec.so> <consumer> <canzona-bench> [<libcanzona-cuda.so>]
set -euo pipefail
nvidia='lib(cuda|cudart|cublas|cublasLt|cusolver|cusparse|nvJitLink|nccl)\.so'
needed() { readelf -d "$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'; }
for f in "$1" "$2" "$3"; do
  if needed "$f" | grep -Eq "$nvidia"; then
    echo "FAIL: $(basename "$f") needs an NVIDIA library: $(needed "$f" | grep -E "$nvidia" | tr '\n' ' ')"
    exit 1
  fi
done
echo "ok: libcanzona-exec, the consumer and canzona-bench need no NVIDIA library"
if [ $# -lt 4 ]; then
  echo "no GPU plugin in this build (configured without a CUDA toolkit): nothing more to check"
  exit 0
fi
plugin=$4
deps=$(needed "$plugin")
if grep -Eq 'lib(cudart|nccl)\.so' <<< "$deps"; then
  echo "FAIL: the plugin needs $(grep -E 'lib(cudart|nccl)\.so' <<< "$deps" | tr '\n' ' ')(the runtime is static, NCCL is loaded at run time)"
  exit 1
fi
for lib in libcublas.so libcusolver.so; do
  grep -q "^$lib" <<< "$deps" || { echo "FAIL: the plugin does not link $lib"; exit 1; }
done
exports=$(nm -D --defined-only "$plugin" | awk '$2 ~ /^[TDBR]$/ { print $3 }')
if [ "$exports" != "cz_gpu_plugin_entry" ]; then
  echo "FAIL: the plugin exports more than its entry: $(tr '\n' ' ' <<< "$exports")"
  exit 1
fi
echo "ok: the plugin links $(grep -E "$nvidia" <<< "$deps" | tr '\n' ' ')and exports cz_gpu_plugin_entry only"
