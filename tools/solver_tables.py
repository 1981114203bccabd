#!/usr/bin/env python3
"""Regenerates the solver tables of docs/PERF.md: the TP-aware DP strategy against alpha on every
bundled model x cluster pair, and the GLPK ILP against the greedy plan on the dense pairs.

usage: tools/solver_tables.py [--canzona build/canzona] [--time-limit 60] [--skip-ilp]
Ratios are tp_makespan / lower_bound and dp_imbalance from `canzona plan --json`.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from perf_tables import CLUSTERS, DENSE, ROOT, run_plan  # noqa: E402

MODELS = DENSE + ["qwen3-30b-a3b"]


def runnable(model, cluster):
    """Megatron-Core (and canzona plan) refuse Qwen3-30B-A3B's 4 KV heads at TP 8."""
    return not (model == "qwen3-30b-a3b" and "-tp8" in cluster)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--canzona", default=os.path.join(ROOT, "build", "canzona"))
    ap.add_argument("--time-limit", type=float, default=60.0,
                    help="ILP time limit per solve phase, seconds")
    ap.add_argument("--skip-ilp", action="store_true")
    a = ap.parse_args()

    print("#### tpaware vs alpha (default settings otherwise)\n")
    print("| model | cluster | alpha mk/LB | tpaware mk/LB | gain | alpha DP imb. | tpaware DP imb. "
          "| tpaware plan s |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    worse = better = 0
    pairs = [(m, c) for m in MODELS for c in CLUSTERS if runnable(m, c)]
    for m, c in pairs:
        if True:
            al = run_plan(a.canzona, m, c, ["--dp", "alpha"])
            ta = run_plan(a.canzona, m, c, ["--dp", "tpaware"])
            x, y = al["makespan_over_lower_bound"], ta["makespan_over_lower_bound"]
            worse += y > x * (1 + 1e-9)
            better += y < x * (1 - 1e-9)
            print(f"| {m} | {c} | {x:.4f} | {y:.4f} | {100 * (x - y) / x:.2f}% | "
                  f"{al['dp_imbalance']:.4f} | {ta['dp_imbalance']:.4f} | "
                  f"{ta['plan_seconds']:.3f} |")
    print(f"\ntpaware is better on {better} of {len(pairs)} pairs and worse on "
          f"{worse}.")
    if a.skip_ilp:
        return 1 if worse else 0

    print(f"\n#### greedy vs ILP (GLPK, {a.time_limit:g} s per phase), dense models\n")
    print("| model | cluster | greedy mk/LB | ILP mk/LB | greedy DP imb. | ILP DP imb. | status "
          "| gap DP | gap TP | solve s |")
    print("|---|---|---:|---:|---:|---:|---|---:|---:|---:|")
    for m in DENSE:
        for c in CLUSTERS:
            gr = run_plan(a.canzona, m, c, [])
            il = run_plan(a.canzona, m, c, ["--solver", "ilp", "--time-limit",
                                            f"{a.time_limit:g}"])
            ph = il.get("solver_phases", {})
            print(f"| {m} | {c} | {gr['makespan_over_lower_bound']:.4f} | "
                  f"{il['makespan_over_lower_bound']:.4f} | {gr['dp_imbalance']:.4f} | "
                  f"{il['dp_imbalance']:.4f} | {il.get('solver_status', '?')} | "
                  f"{ph.get('dp_status', '?')} {100 * ph.get('dp_gap', 0):.2f}% | "
                  f"{ph.get('tp_status', '?')} {100 * ph.get('tp_gap', 0):.2f}% | "
                  f"{il.get('solver_seconds', 0):.1f} |")
    return 1 if worse else 0


if __name__ == "__main__":
    sys.exit(main())
