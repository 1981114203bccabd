#!/usr/bin/env bash
# Embedding: a project that pulls canzona in with add_subdirectory builds the shared executor
# (canzona::exec), and its program gives the same result as the same program linked with the
# static library of this build.
# Usage: embed.sh <canzona CLI> <reference consumer> <source dir>
set -euo pipefail
cz=$1 reference=$2 src=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

cat > "$tmp/cluster.json" <<'JSON'
{"schema": "canzona.cluster/1", "name": "one", "gpus": 1, "dp": 1, "tp": 1, "pp": 1,
 "gpus_per_node": 1,
 "device": {"name": "cpu", "matmul_tflops": 1, "mem_gbps": 10, "memory_gib": 16},
 "links": {"intra_node_gbps": 10, "inter_node_gbps": 10, "latency_us": 0},
 "buckets": {"size": 1000}}
JSON
"$cz" plan -m "$src/tests/data/model_tiny.json" -c "$tmp/cluster.json" -o "$tmp/plan.json" > "$tmp/plan.log"

cmake -S "$src/tests/package/consumer" -B "$tmp/build" -DCZ_CONSUME=subdirectory -DCZ_SOURCE="$src" \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo > "$tmp/configure.log" 2>&1 || { cat "$tmp/configure.log"; exit 1; }
cmake --build "$tmp/build" --target consumer -j2 > "$tmp/build.log" 2>&1 || { cat "$tmp/build.log"; exit 1; }
# The consumer must run from the shared library, not a static copy.
readelf -d "$tmp/build/consumer" > "$tmp/dynamic.txt"
if ! grep -q 'NEEDED.*libcanzona-exec\.so' "$tmp/dynamic.txt"; then
  echo "FAIL: the embedded consumer is not linked with libcanzona-exec.so"; exit 1
fi
"$tmp/build/consumer" "$tmp/plan.json" > "$tmp/embedded.txt"
"$reference" "$tmp/plan.json" > "$tmp/reference.txt"
if ! cmp -s "$tmp/embedded.txt" "$tmp/reference.txt"; then
  echo "FAIL: the embedded consumer and the in-tree one differ:"
  cat "$tmp/embedded.txt" "$tmp/reference.txt"; exit 1
fi
echo "ok: add_subdirectory consumer: $(cat "$tmp/embedded.txt")"
