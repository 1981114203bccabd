#!/usr/bin/env bash
# Builds canzona and canzona-bench (the README runs both) and runs the main job on the bundled
# example: Qwen3-32B on 256 GPUs (DP32 x TP8) -> plan file -> printed summary. Extra arguments
# go to `canzona plan`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j "$(nproc 2>/dev/null || echo 2)" --target canzona_cli canzona_bench
mkdir -p out
./build/canzona plan --model plans/models/qwen3-32b.json \
    --cluster plans/clusters/h100-256-dp32-tp8.json -o out/qwen3-32b-256.plan.json "$@"
