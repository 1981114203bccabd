#!/usr/bin/env python3
"""Regenerates the tables of docs/PERF.md, "Block and cooperative tasks".

For every bundled Qwen3 model on every bundled H100 cluster that can run it, and for
Llama-3.1-70B on DP64 x TP8 (plans/clusters/h100-512-dp64-tp8.json), it plans twice with
`canzona plan --json`: before (whole matrices, the default) and after (the flags given by
--after, `--coop auto` unless told otherwise), simulates each plan with
`canzona simulate --plan ... --json`, and prints one Markdown row per plan: the busiest DP
rank's TP makespan, the average load (total / GPUs), the split lower bound, the makespan over
each, and the simulated update and optimizer step. It then times the planner on Qwen3-32B at
256 GPUs before and after (whole process, median of --speed-runs runs each).

usage: tools/split_table.py [--canzona build/canzona] [--after "--coop auto"] [--speed-runs 7]
                            [--clusters C1,C2,...] [--calibration FILE]

--clusters replaces the H100 clusters (and drops the Llama row unless its cluster is named);
--calibration plans and simulates under that calibration's device model (docs/SIMULATOR.md,
"The device model") and adds a column: the cooperative tasks of the plan (task slots of
width > 1 over all DP ranks), to show whether --coop auto still chooses them.

Everything it writes goes to a temporary folder that it removes.
"""
import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = ["qwen3-0.6b", "qwen3-1.7b", "qwen3-4b", "qwen3-8b", "qwen3-14b", "qwen3-32b",
          "qwen3-30b-a3b"]
CLUSTERS = ["h100-8-dp8-tp1", "h100-64-dp8-tp8", "h100-64-dp4-tp8-pp2", "h100-256-dp32-tp8",
            "h100-256-dp64-tp4"]
EXTRA = [("llama-3.1-70b", "h100-512-dp64-tp8")]


def run(cmd):
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)


def plan(cz, model, cluster, flags, out, device=()):
    """The plan's --json summary, or None when the pair cannot be planned (e.g. a TP size the
    model's KV heads do not allow)."""
    r = run([cz, "plan", "--model", f"plans/models/{model}.json",
             "--cluster", f"plans/clusters/{cluster}.json", "-o", out, "--json"] + flags +
            list(device))
    if r.returncode != 0:
        return None
    return json.loads(r.stdout)


def coop_tasks(path):
    """Cooperative tasks of a plan file: each counted once per DP rank's group it is in."""
    p = json.load(open(path))
    n = 0
    for rank in p["tp_schedule"]:
        for g in rank["groups"]:
            seen = set()
            for slot in g["slots"]:
                for t in slot:
                    if isinstance(t, dict) and t.get("width", 1) > 1:
                        seen.add((t["param"], t.get("block", -1)))
            n += len(seen)
    return n


def simulate(cz, cluster, path, device=()):
    r = run([cz, "simulate", "--plan", path, "--cluster", f"plans/clusters/{cluster}.json",
             "--json"] + list(device))
    if r.returncode != 0:
        sys.exit(f"canzona simulate failed on {path}: {r.stderr.strip()}")
    row = json.loads(r.stdout)["rows"][0]
    return row["local_s"], row["optimizer_s"]


def ms(x):
    return f"{x * 1e3:.2f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--canzona", default=os.path.join(ROOT, "build", "canzona"))
    ap.add_argument("--after", default="--coop auto")
    ap.add_argument("--speed-runs", type=int, default=7)
    ap.add_argument("--clusters")
    ap.add_argument("--calibration")
    a = ap.parse_args()
    cz = os.path.abspath(a.canzona)
    after = shlex.split(a.after)
    clusters = a.clusters.split(",") if a.clusters else CLUSTERS
    pairs = [(m, c) for c in clusters for m in MODELS] + [e for e in EXTRA if e[1] in clusters
                                                          or not a.clusters]
    device = ["--calibration", a.calibration] if a.calibration else []
    print("| model | cluster | flags | makespan | average load | lower bound | "
          "makespan / average | makespan / lower bound | simulated update | "
          "simulated optimizer step |" + (" cooperative tasks |" if device else ""))
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|" + ("---:|" if device else ""))
    with tempfile.TemporaryDirectory() as tmp:
        for model, cluster in pairs:
            for label, flags in (("(none)", []), (a.after, after)):
                path = os.path.join(tmp, "plan.json")
                j = plan(cz, model, cluster, flags, path, device)
                if j is None:
                    continue
                upd, opt = simulate(cz, cluster, path, device)
                print(f"| {model} | {cluster} | `{label}` | {ms(j['tp_makespan'])} ms | "
                      f"{ms(j['average_load'])} ms | {ms(j['split_lower_bound'])} ms | "
                      f"{j['makespan_over_average_load']:.3f} | "
                      f"{j['makespan_over_split_lower_bound']:.3f} | {ms(upd)} ms | "
                      f"{ms(opt)} ms |" + (f" {coop_tasks(path)} |" if device else ""))
        load = os.getloadavg()[0]
        medians = {}
        for label, flags in (("(none)", []), (a.after, after)):
            times = []
            for _ in range(a.speed_runs):
                t0 = time.perf_counter()
                r = run([cz, "plan", "-q", "--model", "plans/models/qwen3-32b.json", "--cluster",
                         "plans/clusters/%s.json" % (clusters[-1] if a.clusters else
                                                     "h100-256-dp32-tp8"), "-o",
                         os.path.join(tmp, "speed.json")] + flags + device)
                if r.returncode != 0:
                    sys.exit(f"canzona plan failed: {r.stderr.strip()}")
                times.append(time.perf_counter() - t0)
            medians[label] = statistics.median(times)
    print()
    print(f"Planning time, Qwen3-32B on "
          f"{clusters[-1] if a.clusters else 'h100-256-dp32-tp8'}, whole process, median of "
          f"{a.speed_runs} runs (load average {load:.1f} at the start): "
          + ", ".join(f"`{k}` {v * 1e3:.0f} ms" for k, v in medians.items()))


if __name__ == "__main__":
    main()
