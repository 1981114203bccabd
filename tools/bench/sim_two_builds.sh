#!/usr/bin/env bash
# Two builds of canzona side by side on the headline simulations (Qwen3-8B and 32B on the
# H100 SXM5 clusters of 64 and 256 GPUs, calibrated): each row's local step, TP collectives,
# exposed communication and step in ms, before (OLD) and after (NEW), and NEW's micro-group
# bytes (docs/PERF.md section 18). Run from the repository's root:
#   tools/bench/sim_two_builds.sh OLD/canzona NEW/canzona
set -eu
[ $# -eq 2 ] || { echo "usage: $0 OLD_CANZONA NEW_CANZONA" >&2; exit 2; }
old=$1 new=$2
printf '| model | GPUs | row | local before | local after | tp comm before | tp comm after | exposed comm before | exposed comm after | step before | step after | micro-group bytes (most on one GPU) |\n|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n'
for m in qwen3-8b qwen3-32b; do
  for cl in h100-sxm5-64-dp8-tp8 h100-sxm5-256-dp32-tp8; do
    a=$("$old" simulate --model plans/models/$m.json --cluster plans/clusters/$cl.json --calibration plans/calibration/h200.json --json)
    b=$("$new" simulate --model plans/models/$m.json --cluster plans/clusters/$cl.json --calibration plans/calibration/h200.json --json)
    python3 - "$m" "$cl" "$a" "$b" <<'PY'
import json, sys
m, cl, a, b = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), json.loads(sys.argv[4])
g = cl.split("-")[2]
ra = {r["name"]: r for r in a["rows"]}
for r in b["rows"]:
    if r["name"] not in ("sync-compute", "async", "canzona"):
        continue
    o = ra[r["name"]]
    f = lambda x: "%.1f" % (x * 1e3)
    w = r["wire"]["tp_sync_bytes"]; w = "—" if w is None else f"{w:,}"
    print(f"| {m[6:].upper()} | {g} | {r['name']} | {f(o['local_s'])} | {f(r['local_s'])} | {f(o['tp_comm_s'])} | {f(r['tp_comm_s'])} | {f(o['exposed_comm_s'])} | {f(r['exposed_comm_s'])} | {f(o['step_s'])} | {f(r['step_s'])} | {w} |")
PY
  done
done
