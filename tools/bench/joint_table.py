#!/usr/bin/env python3
"""The default plan against the lower bound (docs/PERF.md, section 15; issue 43).

For every model and every cluster shape (TP 1, 4 and 8 on 64, 256, 512 and 1,024 H100 GPUs;
MoE models with EP 8 and ETP 1, the bundled MoE clusters' choice) it plans three times with
`canzona plan --json` and prints one Markdown row per case:

  default   the default settings;
  alpha     --dp alpha (the paper's alpha-balanced cut, cost loads) with greedy rollback;
  megatron  Megatron-LM's layer-sharded Muon in the planner's cost unit: its current
            layer-wise DP rule (--dp layerwise --layerwise-order megatron-aug26) and one
            micro-group per DP rank placed longest-processing-time first over the TP ranks
            (--capacity 1e30: greedy rollback never closes the group, so each task goes to the
            least-loaded TP rank, largest first), which is _assign_ns_homes' rule;

each as its busiest GPU (tp.makespan) over the default plan's lower bound (the bound depends
only on the tasks, which the three share; layer-sharded updates the elementwise parameters under
ZeRO-1, cut between DP ranks, so its busiest GPU can lie below a bound that keeps them whole),
and the default plan's planning time: the planner's own (plan_seconds) and the CPU seconds of the
whole CLI run (user + system, parsing included; the planner's time is wall clock, so on a loaded
machine the CPU column is the steadier one). Where the default's busiest GPU is above
layer-sharded's, "split" is the default with --layout split, which, like Megatron-LM, updates
the elementwise parameters under ZeRO-1 (the same tasks as layer-sharded). Where a dense default is above 1.05 of the
bound, "floor" is a stronger lower bound on every plan of the same tasks: the least busiest GPU
at which Martello and Toth's L2 bound lets the tasks fit on the GPUs as bins (floor_of).

The cluster files are written into a temporary folder; models are the bundled ones plus the
imports of the Hugging Face configs named below (imported into the same folder).
With --steps it prints instead the simulated optimizer step (canzona simulate's model,
docs/SIMULATOR.md) of the default plan against --dp alpha's on every bundled Qwen3 model and
the four bundled H100 clusters of docs/PERF.md section 1: the optimizer's part (update and its TP traffic), the gradient
reduce-scatter and the step, and their ratio.
usage: nice -n 10 python3 tools/bench/joint_table.py [--canzona build/canzona] [--only SUBSTRING]
       [--steps]
"""
import argparse
import json
import math
import os
import resource
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GPUS = (64, 256, 512, 1024)
TPS = (1, 4, 8)
# Bundled models (plans/models/), and Hugging Face configs imported here (tests/data/hf/).
BUNDLED = ["qwen3-0.6b", "qwen3-1.7b", "qwen3-4b", "qwen3-8b", "qwen3-14b", "qwen3-32b",
           "llama-3.1-70b", "kimi-k2-like-12l-dense", "qwen3-30b-a3b", "qwen3-235b-a22b",
           "deepseek-v3", "kimi-k2-like-12l-experts-ep8"]
IMPORTED = ["llama-3.1-8b", "mixtral-8x7b"]
DEVICE = {"name": "H100-SXM5-80GB", "matmul_tflops": 600.0, "mem_gbps": 2800.0,
          "memory_gib": 80.0}
LINKS = {"intra_node_gbps": 360.0, "inter_node_gbps": 45.0, "latency_us": 5.0}


def cluster(folder, gpus, tp, moe):
    name = "h100-%d-tp%d%s" % (gpus, tp, "-ep8" if moe else "")
    c = {"schema": "canzona.cluster/1", "name": name, "gpus": gpus, "dp": gpus // tp, "tp": tp,
         "pp": 1, "gpus_per_node": 8, "device": DEVICE, "links": LINKS}
    if moe:
        c["ep"], c["etp"] = 8, 1
    path = os.path.join(folder, name + ".json")
    with open(path, "w") as f:
        json.dump(c, f, indent=1)
    return path


def run(canzona, model, clus, extra, out=None):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    p = subprocess.run([canzona, "plan", "-m", model, "-c", clus, "--json",
                        "--allow-oversubscribed-memory"] + (["-o", out] if out else []) + extra,
                       capture_output=True, text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if p.returncode != 0:
        return None, cpu, p.stderr.strip().splitlines()[-1] if p.stderr.strip() else "failed"
    return json.loads(p.stdout), cpu, None


def bins_needed(items, T):
    """Martello and Toth's L2 lower bound on the bins of capacity T that items need (items
    sorted in decreasing order); len(items) + 1 when one does not fit at all."""
    if items and items[0] > T:
        return len(items) + 1
    best = 0
    for x in sorted(set(c for c in items if c <= T / 2)) + [0.0]:
        j1 = sum(1 for c in items if c > T - x)
        j2 = [c for c in items if T / 2 < c <= T - x]
        j3 = sum(c for c in items if x <= c <= T / 2)
        spare = len(j2) * T - sum(j2)
        n = j1 + len(j2) + max(0, math.ceil((j3 - spare) / T - 1e-9))
        best = max(best, n)
    return best


def floor_of(plan_path, lb, top):
    """The least T >= lb at which the plan's tasks (each matrix whole, each elementwise
    parameter's TP shares) could fit on its GPUs by the L2 bound: a lower bound on the busiest GPU
    of every plan with these tasks, stronger than the printed one where tasks cannot pair (every
    GPU's makespan is at least the sum of its tasks). Dense plans with one stage only."""
    with open(plan_path) as f:
        p = json.load(f)
    tp, gpus = p["topology"]["tp"], p["topology"]["dp"] * p["topology"]["tp"]
    items = []
    for q in p["params"]:
        if q["optimizer"] == "matrix":
            items.append(q["cost"])
        else:
            items.extend([q["cost"] / tp] * tp)
    items.sort(reverse=True)
    lo, hi = lb, top
    if bins_needed(items, lo) <= gpus:
        return lo
    while hi - lo > 1e-5 * hi:
        mid = 0.5 * (lo + hi)
        if bins_needed(items, mid) <= gpus:
            hi = mid
        else:
            lo = mid
    return hi


def is_moe(path):
    with open(path) as f:
        return "local_experts" in f.read()


STEP_MODELS = ["qwen3-0.6b", "qwen3-1.7b", "qwen3-4b", "qwen3-8b", "qwen3-14b", "qwen3-32b"]
STEP_CLUSTERS = ["h100-8-dp8-tp1", "h100-64-dp8-tp8", "h100-256-dp32-tp8", "h100-256-dp64-tp4"]


def simulated(canzona, model, clus, dp):
    p = subprocess.run([canzona, "simulate", "-m", model, "-c", clus, "--dp", dp, "--tp",
                        "rollback", "--json"], capture_output=True, text=True, check=True)
    return json.loads(p.stdout)["rows"][0]


def steps(canzona):
    print("| model | cluster | optimizer ms joint / alpha | grad ms joint / alpha | "
          "step ms joint / alpha | step joint / alpha |")
    print("|---|---|---|---|---|---|")
    ratios = []
    for m in STEP_MODELS:
        for c in STEP_CLUSTERS:
            mp = os.path.join(ROOT, "plans", "models", m + ".json")
            cp = os.path.join(ROOT, "plans", "clusters", c + ".json")
            j, al = simulated(canzona, mp, cp, "joint"), simulated(canzona, mp, cp, "alpha")
            r = j["step_s"] / al["step_s"]
            ratios.append(r)
            print("| %s | %s | %.3f / %.3f | %.3f / %.3f | %.3f / %.3f | %.3f |" %
                  (m, c, 1e3 * j["optimizer_s"], 1e3 * al["optimizer_s"], 1e3 * j["grad_sync_s"],
                   1e3 * al["grad_sync_s"], 1e3 * j["step_s"], 1e3 * al["step_s"], r))
    g = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
    print()
    print("%d pairs; step shorter with joint in %d, longer in %d, geometric mean %.4f" %
          (len(ratios), sum(1 for r in ratios if r < 1 - 1e-6),
           sum(1 for r in ratios if r > 1 + 1e-6), g))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--canzona", default=os.path.join(ROOT, "build", "canzona"))
    ap.add_argument("--only", default="")
    ap.add_argument("--steps", action="store_true")
    a = ap.parse_args()
    if a.steps:
        steps(a.canzona)
        return
    tmp = tempfile.mkdtemp(prefix="cz-joint-")
    models = [(m, os.path.join(ROOT, "plans", "models", m + ".json")) for m in BUNDLED]
    for m in IMPORTED:
        out = os.path.join(tmp, m + ".json")
        subprocess.run([a.canzona, "import-hf", os.path.join(ROOT, "tests", "data", "hf",
                                                             m + ".config.json"),
                        "--make-vocab-size-divisible-by", "1", "-o", out], check=True)
        models.append((m + " (import-hf)", out))
    print("| model | GPUs | TP | default / LB | floor / LB | alpha / LB | layer-sharded / LB | "
          "split / LB | plan s | CLI CPU s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    stats = []
    for name, path in models:
        if a.only and a.only not in name:
            continue
        moe = is_moe(path)
        for gpus in GPUS:
            for tp in TPS:
                clus = cluster(tmp, gpus, tp, moe)
                out = os.path.join(tmp, "plan.json")
                d, cpu, why = run(a.canzona, path, clus, [], out if not moe else None)
                if d is None:
                    print("| %s | %d | %d | refused: %s | | | | | | | |" % (name, gpus, tp, why[:90]))
                    continue
                lb = d["lower_bound"]
                al, _, _ = run(a.canzona, path, clus, ["--dp", "alpha"])
                mg, _, _ = run(a.canzona, path, clus, ["--dp", "layerwise", "--layerwise-order",
                                                      "megatron-aug26", "--capacity", "1e30"])
                r = d["tp_makespan"] / lb
                ra = al["tp_makespan"] / lb if al else float("nan")
                rm = mg["tp_makespan"] / lb if mg else float("nan")
                sp, rs = "-", None
                if r > rm * (1 + 1e-9):
                    sd, _, _ = run(a.canzona, path, clus, ["--layout", "split"])
                    rs = sd["tp_makespan"] / lb if sd else None
                    sp = "%.3f" % rs if sd else "refused"
                fl = "-"
                if not moe and r > 1.05:
                    fl = "%.3f" % (floor_of(out, lb, d["tp_makespan"]) / lb)
                stats.append((r, ra, rm, name, gpus, tp, d["plan_seconds"], fl, rs, cpu))
                print("| %s | %d | %d | %.3f | %s | %.3f | %.3f | %s | %.3f | %.2f |" %
                      (name, gpus, tp, r, fl, ra, rm, sp, d["plan_seconds"], cpu))
                sys.stdout.flush()
    if stats:
        n = len(stats)
        ok = sum(1 for s in stats if s[0] <= 1.05)
        beat = sum(1 for s in stats if s[0] <= s[2] * (1 + 1e-9))
        worst = sorted(stats, reverse=True)[:5]
        print()
        floor_ok = sum(1 for s in stats if s[0] > 1.05 and s[7] != "-" and
                       s[0] <= 1.05 * float(s[7]))
        split_ok = sum(1 for s in stats if s[8] is not None and s[8] <= s[2] * (1 + 1e-9))
        print("%d cases; default <= 1.05 x LB in %d, and within 1.05 of the floor in %d more; "
              "default <= layer-sharded in %d, and --layout split <= layer-sharded in %d of the "
              "other %d; alpha <= 1.05 in %d; layer-sharded <= 1.05 in %d; slowest plan %.3f s "
              "(planner), %.2f s CPU (CLI)" %
              (n, ok, floor_ok, beat, split_ok, n - beat, sum(1 for s in stats if s[1] <= 1.05),
               sum(1 for s in stats if s[2] <= 1.05), max(s[6] for s in stats),
               max(s[9] for s in stats)))
        print("worst defaults: " + "; ".join("%s %d GPUs TP %d: %.3f" % (s[3], s[4], s[5], s[0])
                                            for s in worst))


if __name__ == "__main__":
    main()
