#!/usr/bin/env bash
# Issue 38: the first rank of an expert-DP plane (world rank 0) and the last rank of DeepSeek-V3
# at 32,768 GPUs (TP 8 x PP 16 x EP 64, expert-DP 32) create their executors from the plan's
# split folder in bounded memory: one process each, over the callbacks plane in a fake world
# (canzona-startup). The whole plan is 27 MB and took 214 MB to create from; a rank's part is
# a few tens of kB. Bound: the process's peak RSS grows by at most 32 MiB during create (its
# part, parsed, and the executor's tables) and stays under 64 MiB in all. Under the sanitizers
# the RSS is not compared: AddressSanitizer writes the shadow of every allocation, an eighth of
# its size, and the executor reserves its state for its buffers (594 M elements at rank 0;
# untouched, hence not resident otherwise): 130 to 160 MB of shadow here. The part's size (its
# parameters) is checked in both.
# Env: CZ (canzona), CZ_STARTUP (canzona-startup), CZ_SOURCE_DIR.
set -euo pipefail
src=${CZ_SOURCE_DIR:?}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$CZ" plan -q -m "$src/plans/models/deepseek-v3.json" \
  -c "$src/plans/clusters/h100-8192-pp16-ep64.json" --tp-size 8 --dp-size 256 --split "$tmp/dir"
sanitized=0
ldd "$CZ_STARTUP" 2>/dev/null | grep -q libasan && sanitized=1
for rank in 0 32767; do
  out=$("$CZ_STARTUP" "$tmp/dir" --world 32768 --tp 8 --pp 16 --ep 64 --etp 1 --rank $rank)
  echo "$out"
  python3 - "$out" "$sanitized" <<'PY'
import json, sys
d, sanitized = json.loads(sys.argv[1]), sys.argv[2] == "1"
grow = d["peak_rss_mb"] - d["rss_before_mb"]
assert d["rc"] == 0, d
if not sanitized:
    assert grow <= 32, f"rank {d['rank']}: peak RSS grew by {grow:.1f} MiB during create (bound 32)"
    assert d["peak_rss_mb"] <= 64, f"rank {d['rank']}: peak RSS {d['peak_rss_mb']} MiB (bound 64)"
# Its part only: its stage's dense parameters and its EP rank's experts, of 30,428.
assert 0 < d["params"] < 200, d
PY
done
echo "bounded: OK"
