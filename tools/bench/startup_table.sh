#!/usr/bin/env bash
# One rank's cz_executor_create for DeepSeek-V3 at TP 8 x PP 16 x EP 64 (ETP 1) at 8,192, 32,768
# and 131,072 GPUs, from the whole plan file and from its split folder (canzona plan --split):
# the last rank and the first rank of an expert-DP plane (world rank 0), CPU seconds and peak
# RSS of the process, as canzona-startup measures them over the callbacks plane in a fake
# world (docs/PERF.md section 16): CPU the median of 15 creates (3 for the whole plan), less
# the fake world's own answers; RSS the first create's peak. Prints a Markdown table.
#   tools/bench/startup_table.sh [BUILD_DIR] [WORK_DIR]   (defaults: build, a temporary folder)
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$src/build}
work=${2:-$(mktemp -d)}
cz=$build/canzona
startup=$build/executor/canzona-startup
mkdir -p "$work"
field() { python3 -c 'import json,sys; d=json.loads(sys.argv[1]); print(d[sys.argv[2]])' "$1" "$2"; }
echo "| GPUs | plan file | largest stage parts file | form | rank | create CPU s | peak RSS MB |"
echo "|---:|---:|---:|---|---|---:|---:|"
for gpus in 8192 32768 131072; do
  dp=$((gpus / 128))
  dir=$work/ds-$gpus
  rm -rf "$dir"
  "$cz" plan -q -m "$src/plans/models/deepseek-v3.json" \
    -c "$src/plans/clusters/h100-8192-pp16-ep64.json" --tp-size 8 --dp-size $dp --split "$dir"
  size=$(stat -c %s "$dir/plan.json")
  parts=$(ls -S "$dir"/stage-*.parts | head -1)
  psize=$(stat -c %s "$parts")
  for rank in 0 $((gpus - 1)); do
    who=$([ "$rank" -eq 0 ] && echo "first of an expert-DP plane (0)" || echo "last ($rank)")
    for form in whole split; do
      plan=$dir/plan.json
      [ "$form" = split ] && plan=$dir
      reps=15
      [ "$form" = whole ] && reps=3
      out=$("$startup" "$plan" --world $gpus --tp 8 --pp 16 --ep 64 --etp 1 --rank $rank \
        --repeat $reps)
      printf "| %d | %.1f MB | %.1f MB | %s | %s | %s | %s |\n" $gpus \
        "$(echo "$size / 1000000" | bc -l)" "$(echo "$psize / 1000000" | bc -l)" $form "$who" \
        "$(field "$out" create_cpu_s)" "$(field "$out" peak_rss_mb)"
    done
  done
done
