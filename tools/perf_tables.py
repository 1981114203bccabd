#!/usr/bin/env python3
"""Regenerates the planner balance tables of docs/PERF.md.

For every bundled dense model x cluster pair it runs `canzona plan --json` for every DP x TP
strategy combination that makes sense and prints one Markdown table per pair: DP imbalance
(max/mean cost per DP rank) and TP makespan / lower bound. It also checks that alpha with
cost-unit loads is no worse than alpha with element-count loads on every pair, and times the
planner (whole process, median of several runs).

usage: tools/perf_tables.py [--canzona build/canzona] [--unit time] [--speed-runs 7]
                            [--speed-only [--write docs/PERF.md]]

With --speed-only --write FILE, section 2 of FILE ("## 2. Planning speed" up to the next "## "
heading) is replaced by the whole generated section -- text, table and targets -- so that the
numbers and the words around them cannot drift apart.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
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
    """Median, min and max seconds of the whole process, and the plan's parameter and matrix
    counts."""
    # The plan is written as a user would write it: to a regular file (temporary file, fsync,
    # rename), in a temporary folder removed afterwards.
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "plan.json")
        cmd = [canzona, "plan", "--model", f"plans/models/{model}.json",
               "--cluster", f"plans/clusters/{cluster}.json", "-o", out, "--quiet"] + MEMORY
        times = []
        for _ in range(runs):
            t0 = time.perf_counter()
            subprocess.run(cmd, cwd=ROOT, check=True)
            times.append(time.perf_counter() - t0)
        with open(out) as f:
            params = json.load(f)["params"]
    nmat = sum(p["optimizer"] == "matrix" for p in params)
    return statistics.median(times), min(times), max(times), len(params), nmat


# (model, cluster, target seconds). Qwen3-30B-A3B's 4 KV heads rule out TP 8 (Megatron-Core's
# query-group rule), so it is timed on DP64 x TP4.
SPEED_CASES = [("qwen3-32b", "h100-256-dp32-tp8", 0.2), ("qwen3-30b-a3b", "h100-256-dp64-tp4", 1.0)]


def speed_section(canzona, runs):
    """Section 2 of docs/PERF.md, whole: the method, the table and the targets."""
    cpus, load = os.cpu_count() or 1, os.getloadavg()[0]
    rows, targets = [], []
    for model, cluster, target in SPEED_CASES:
        med, lo, hi, nparams, nmat = time_plan(canzona, model, cluster, runs)
        rows.append(f"| {model} | {cluster} | {med:.3f} | {lo:.3f} | {hi:.3f} | {runs} |")
        gpus = json.load(open(os.path.join(ROOT, "plans", "clusters", cluster + ".json")))["gpus"]
        targets.append(f"{model} ({nparams:,} parameters, {nmat:,} of them matrices) on {gpus} "
                       f"GPUs under {target:g} s: {'met' if med < target else 'MISSED'} "
                       f"({med:.3f} s)")
    busy = (f" while other jobs ran (load average {load:.1f} on {cpus} CPUs at the start, so the "
            "spread is wide)" if load > cpus / 2 else
            f" (load average {load:.1f} on {cpus} CPUs at the start)")
    method = ("Whole process (`canzona plan ... -o PLAN.json --quiet` with PLAN.json in a temporary "
              "folder: JSON parsing and validation, planning, plan writing as a user writes a plan "
              "-- temporary file, content hash, fsync and rename -- included), default settings, "
              f"median of {runs} runs, written with `python3 tools/perf_tables.py --speed-only "
              "--write docs/PERF.md` (the same timing code as the full run)" + busy + ":")
    tail = ("Targets: " + "; ".join(targets) + ". Qwen3-30B-A3B is timed on DP64·TP4 because "
            "its 4 KV heads do not divide by TP 8, which Megatron-Core refuses.")
    return "\n".join(["## 2. Planning speed", "", textwrap.fill(method, 98, break_on_hyphens=False), "",
                      "| model | cluster | median s | min s | max s | runs |",
                      "|---|---|---:|---:|---:|---:|", *rows, "", textwrap.fill(tail, 98, break_on_hyphens=False), ""])


def replace_section(path, number, text):
    """Replaces section `number` of a Markdown file (from its "## N." heading to the next "## "
    heading) by text, atomically."""
    with open(path) as f:
        lines = f.read().split("\n")
    start = next((i for i, l in enumerate(lines) if l.startswith(f"## {number}. ")), None)
    if start is None:
        sys.exit(f"{path}: no section '## {number}. ...'")
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")),
               len(lines))
    new = "\n".join(lines[:start] + text.rstrip("\n").split("\n") + [""] + lines[end:])
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(path)))
    with os.fdopen(fd, "w") as f:
        f.write(new)
    os.replace(tmp, path)


def print_speed(canzona, runs):
    print()
    print(speed_section(canzona, runs))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--canzona", default=os.path.join(ROOT, "build", "canzona"))
    ap.add_argument("--unit", default="time")
    ap.add_argument("--speed-runs", type=int, default=7)
    ap.add_argument("--models", nargs="*", default=DENSE)
    ap.add_argument("--clusters", nargs="*", default=CLUSTERS)
    ap.add_argument("--speed-only", action="store_true",
                    help="print only the planning-speed section")
    ap.add_argument("--write", metavar="FILE",
                    help="with --speed-only: replace section 2 of FILE (docs/PERF.md) instead "
                         "of printing it")
    a = ap.parse_args()
    if a.write and not a.speed_only:
        sys.exit("--write needs --speed-only")
    if a.speed_only:
        if a.write:
            replace_section(a.write, 2, speed_section(a.canzona, a.speed_runs))
        else:
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
