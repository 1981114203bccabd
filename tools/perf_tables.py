#!/usr/bin/env python3
"""Regenerates the planner balance tables of docs/PERF.md.

For every bundled dense model x cluster pair it runs `canzona plan --json` for every DP x TP
strategy combination that makes sense and prints one Markdown table per pair: DP imbalance
(max/mean cost per DP rank) and TP makespan / lower bound. It also checks that alpha with
cost-unit loads is no worse than alpha with element-count loads on every pair, and times the
planner (whole process, median of several runs).

usage: tools/perf_tables.py [--canzona build/canzona] [--unit time] [--speed-runs 7]
                            [--speed-only]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DENSE = ["qwen3-0.6b", "qwen3-1.7b", "qwen3-4b", "qwen3-8b", "qwen3-14b", "qwen3-32b"]
CLUSTERS = ["h100-8-dp8-tp1", "h100-64-dp8-tp8", "h100-256-dp32-tp8", "h100-256-dp64-tp4"]
TP_ALL = ["sc", "none", "single", "slot", "rollback"]


def combos():
    """(label, extra args) for every DP x TP combination that makes sense."""
    out = [("even + sc", ["--dp", "even", "--tp", "sc"]),
           ("layerwise + sc", ["--dp", "layerwise", "--tp", "sc"])]
    for dp_label, dp_args in [("anchored", ["--dp", "anchored"]),
                              ("alpha(numel)", ["--dp", "alpha", "--alpha-loads", "numel"]),
                              ("alpha(cost)", ["--dp", "alpha", "--alpha-loads", "cost"])]:
        for tp in TP_ALL:
            out.append((f"{dp_label} + {tp}", dp_args + ["--tp", tp]))
    return out


# The tables measure balance on every pair, also where the model states do not fit the device
# (Qwen3-14B and larger on 8 GPUs at TP 1), which plan would otherwise refuse.
MEMORY = ["--allow-oversubscribed-memory"]


def run_plan(canzona, model, cluster, args):
    cmd = [canzona, "plan", "--model", f"plans/models/{model}.json",
           "--cluster", f"plans/clusters/{cluster}.json", "--json"] + MEMORY + args
    res = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if res.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{res.stderr}")
    return json.loads(res.stdout)


def time_plan(canzona, model, cluster, runs):
    # The plan is written as a user would write it: to a regular file (temporary file, fsync,
    # rename), in a temporary folder removed afterwards.
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [canzona, "plan", "--model", f"plans/models/{model}.json",
               "--cluster", f"plans/clusters/{cluster}.json",
               "-o", os.path.join(tmp, "plan.json"), "--quiet"] + MEMORY
        times = []
        for _ in range(runs):
            t0 = time.perf_counter()
            subprocess.run(cmd, cwd=ROOT, check=True)
            times.append(time.perf_counter() - t0)
    return statistics.median(times), min(times), max(times)


def print_speed(canzona, runs):
    print("\n#### Planning speed (whole process incl. JSON I/O, default settings)\n")
    print("| model | cluster | median s | min s | max s | runs |")
    print("|---|---|---:|---:|---:|---:|")
    # Qwen3-30B-A3B's 4 KV heads rule out TP 8 (Megatron-Core's query-group rule).
    for model, cluster in [("qwen3-32b", "h100-256-dp32-tp8"),
                           ("qwen3-30b-a3b", "h100-256-dp64-tp4")]:
        med, lo, hi = time_plan(canzona, model, cluster, runs)
        print(f"| {model} | {cluster} | {med:.3f} | {lo:.3f} | {hi:.3f} | {runs} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--canzona", default=os.path.join(ROOT, "build", "canzona"))
    ap.add_argument("--unit", default="time")
    ap.add_argument("--speed-runs", type=int, default=7)
    ap.add_argument("--models", nargs="*", default=DENSE)
    ap.add_argument("--clusters", nargs="*", default=CLUSTERS)
    ap.add_argument("--speed-only", action="store_true",
                    help="print only the planning-speed table")
    a = ap.parse_args()
    if a.speed_only:
        print_speed(a.canzona, a.speed_runs)
        return 0

    worse, better, mk_worse = [], [], []
    for model in a.models:
        for cluster in a.clusters:
            print(f"\n#### {model} on {cluster} (unit {a.unit})\n")
            print("| DP + TP strategy | DP imbalance | makespan / lower bound |")
            print("|---|---:|---:|")
            seen = {}
            for label, args in combos():
                s = run_plan(a.canzona, model, cluster, args + ["--unit", a.unit])
                note = " (fell back to anchored)" if s["settings"]["dp_fell_back"] else ""
                if s["settings"].get("dp_numel_cuts"):
                    note = " (kept the element-load cuts)"
                print(f"| {label}{note} | {s['dp_imbalance']:.4f} | "
                      f"{s['makespan_over_lower_bound']:.4f} |")
                seen[label] = s
            for tp in TP_ALL:
                c = seen[f"alpha(cost) + {tp}"]
                n = seen[f"alpha(numel) + {tp}"]
                ci, ni = c["dp_imbalance"], n["dp_imbalance"]
                cm, nm = c["makespan_over_lower_bound"], n["makespan_over_lower_bound"]
                if ci > ni * (1 + 1e-9):
                    worse.append(f"{model}/{cluster}/{tp}: DP imbalance cost {ci:.4f} > "
                                 f"numel {ni:.4f}")
                if cm > nm * (1 + 1e-9):
                    mk_worse.append(f"{model} on {cluster}, tp {tp}: DP imbalance {ni:.4f} -> "
                                    f"{ci:.4f}, makespan/LB {nm:.4f} -> {cm:.4f}")
                elif ci < ni * (1 - 1e-9) or cm < nm * (1 - 1e-9):
                    better.append(f"{model} on {cluster}, tp {tp}: DP imbalance {ni:.4f} -> "
                                  f"{ci:.4f}, makespan/LB {nm:.4f} -> {cm:.4f}")
    print("\n#### alpha(cost) vs alpha(numel)\n")
    if worse:
        print("alpha with cost loads is WORSE than element loads on:")
        for w in worse:
            print(f"- {w}")
    else:
        print("alpha with cost-unit loads has a DP imbalance no worse than element-count loads on "
              "every pair and TP strategy above. Better (and no worse in makespan) on:\n")
        for b in better:
            print(f"- {b}")
        print("\nBetter DP balance but a longer TP makespan (sum balance does not see TP "
              "granularity) on:\n")
        for b in mk_worse:
            print(f"- {b}")

    print_speed(a.canzona, a.speed_runs)
    return 1 if worse else 0


if __name__ == "__main__":
    sys.exit(main())
