"""tools/bench/versus.py on the CPU (issue 40, item 3): the script canzona-gpu-check's versus part
runs on a GPU, here on plans/models/test-small.json with bf16 parameters, as the GPU part runs
Qwen3 (a plan made by the canzona CLI at DP1·TP1, canzona-bench's JSON on it for (c)), 3 timed
steps: it must exit 0 and its update differences after 3 steps must be within the script's
bounds (canzona against torch.optim.Muon as shipped, bf16 Newton-Schulz, and against its fp32
Newton-Schulz). Then the negative control: canzona's Muon rate 1.5 times torch's (--lr-scale
1.5, fp32, the plan made in the process) must fail, exit 1, with both differences past their
bounds. On the CPU the step times are only reported (the speed targets are the GPU's).

Env: CZ_SOURCE_DIR, CANZONA_EXEC_LIB, CANZONA_LIB, CANZONA_CLI, CZ_BENCH.
"""
import json
import os
import subprocess
import sys
import tempfile

SRC = os.environ["CZ_SOURCE_DIR"]
VERSUS = os.path.join(SRC, "tools", "bench", "versus.py")
ENV = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1",
           OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")


def run(args, what, expect):
    r = subprocess.run(args, env=ENV, capture_output=True, text=True, timeout=120)
    print(f"--- {what}: exit {r.returncode}\n{r.stdout[-3000:]}{r.stderr[-3000:]}", flush=True)
    if r.returncode != expect:
        sys.exit(f"FAIL: {what} exited with {r.returncode}, expected {expect}")
    return r.stdout


def main():
    failed = []
    with tempfile.TemporaryDirectory(prefix="versus-check-") as tmp:
        with open(os.path.join(SRC, "plans", "models", "test-small.json")) as f:
            desc = json.load(f)
        desc["dtype"] = "bf16"
        model = os.path.join(tmp, "test-small-bf16.json")
        with open(model, "w") as f:
            json.dump(desc, f)
        plan, bench, out = (os.path.join(tmp, n) for n in ("plan.json", "bench.json", "vs.json"))
        run([os.environ["CANZONA_CLI"], "plan", "-q", "--model", model, "--cluster",
             os.path.join(SRC, "plans", "clusters", "cpu-1.json"), "--dp-size", "1",
             "--tp-size", "1", "-o", plan], "canzona plan", 0)
        run([os.environ["CZ_BENCH"], "--plan", plan, "--model", model, "--dtype", "bf16",
             "--steps", "3", "--warmup", "1", "--same-grads", "--json", bench],
            "canzona-bench --same-grads (as canzona-gpu-check runs it)", 0)
        refused = subprocess.run([os.environ["CZ_BENCH"], "--plan", plan, "--model", model,
                                  "--same-grads", "--verify"], env=ENV, capture_output=True,
                                 text=True, timeout=60)
        if refused.returncode != 2 or "--same-grads does not go with --verify" not in (
                refused.stdout + refused.stderr):
            failed.append(f"canzona-bench --same-grads --verify: exit {refused.returncode}, "
                          f"{(refused.stdout + refused.stderr)[-300:]}")
        text = run([sys.executable, VERSUS, "--device", "cpu", "--model", model, "--plan", plan,
                    "--steps", "3", "--warmup", "1", "--bench-json", bench, "--json", out],
                   "versus.py (bf16, the CLI's plan)", 0)
        with open(out) as f:
            res = json.load(f)
        if res["dtype"] != "bfloat16":
            failed.append(f"timed in {res['dtype']}, not bf16")
        for k in ("torch", "canzona_torch", "canzona_bench"):
            if not res["step_s"].get(k, 0) > 0:
                failed.append(f"no step time for {k}")
        for k in ("vs_torch_muon", "vs_torch_muon_fp32_ns", "adamw"):
            u = res["update"][k]
            if not u["worst"] <= u["bound"]:
                failed.append(f"{k}: {u['worst']:.3e} > {u['bound']:.3g}")
        # torch's own bf16 effect is what the bf16 bound covers: it must show (else the
        # comparison against the shipped Muon could not tell bf16 from fp32).
        if not res["update"]["torch_own_bf16_vs_fp32_ns"]["worst"] > 10 * res["update"][
                "vs_torch_muon_fp32_ns"]["bound"]:
            failed.append("torch's bf16 and fp32 Newton-Schulz are indistinguishable")
        if "row: step info" not in text or "row: update ok" not in text:
            failed.append("the rows for canzona-gpu-check are missing")
        bad = os.path.join(tmp, "bad.json")
        run([sys.executable, VERSUS, "--device", "cpu", "--model",
             os.path.join(SRC, "plans", "models", "test-small.json"), "--steps", "1",
             "--warmup", "0", "--lr-scale", "1.5", "--json", bad],
            "versus.py --lr-scale 1.5 (fp32, planned in the process): must fail", 1)
        with open(bad) as f:
            res = json.load(f)
        for k in ("vs_torch_muon", "vs_torch_muon_fp32_ns"):
            u = res["update"][k]
            if not u["worst"] > u["bound"]:
                failed.append(f"--lr-scale 1.5: {k} {u['worst']:.3e} within {u['bound']:.3g}")
        if res["pass"]:
            failed.append("--lr-scale 1.5 passed")
    for m in failed:
        print(f"FAIL: {m}")
    print("FAIL" if failed else "ok")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
