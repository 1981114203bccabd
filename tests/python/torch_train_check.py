"""Runs examples/torch_train.py under the real torchrun (python -m torch.distributed.run
--standalone; no mpirun, no mpi4py) and holds it to what issue-level claims it makes.

  torch_train_check.py loss DPxTP [DPxTP ...] [-- EXAMPLE ARGS]
      50 steps of the example at each shape (4 ranks) against 50 steps of
      examples/torch_reference.py (one process, plain PyTorch Muon + AdamW) with the same
      arguments (e.g. --schedule cosine: both through the same torch.optim.lr_scheduler): every
      step's loss within a relative 1e-4 of the reference's, and the loss falls (the mean of the
      last five steps below 60 % of the first step's).
  torch_train_check.py reshard
      20 steps at DP2·TP2 saving a checkpoint after step 10; from it 10 steps at DP4·TP1: the
      final parameters equal the uninterrupted run's (||a - b||_F / ||a||_F <= 1e-5 for every
      tensor), and so do the losses of steps 10..19 (relative 1e-4),
      while the same continuation without the optimizer state differs by more than 1e-3.

  torch_train_check.py cuda
      the example at one GPU (--device cuda: the cuda backend, NCCL bootstrapped over the
      callbacks, the step on torch's current stream) against the same run on the CPU: every
      step's loss within a relative 1e-3 (fp32 through cuBLAS and the CPU's BLAS differ in
      summation order, which Muon's Newton-Schulz amplifies over the steps; the executor's
      own CUDA-vs-CPU bound is 1e-4 of one update). Skipped (77) without a CUDA GPU. Run by
      tools/gpu_check.sh (part correctness) when a GPU is at hand.

The checkpoint is the optimizer's state_dict() through torch.distributed.checkpoint beside the
full parameters. Env: CZ_SOURCE_DIR, CANZONA_EXEC_LIB, CANZONA_LIB, CZ_TIME_SCALE. Everything is
written to a temporary folder.
"""
import json
import os
import subprocess
import sys
import tempfile
import time

STEPS = 50
RESHARD_STEPS = 20  # saved after half of them, resumed for the other half
LOSS_RTOL = 1e-4
PARAM_RTOL = 1e-5


import numpy as np
import torch

SRC = os.environ["CZ_SOURCE_DIR"]
EXAMPLE = os.path.join(SRC, "examples", "torch_train.py")
REFERENCE = os.path.join(SRC, "examples", "torch_reference.py")
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
SCALE = int(os.environ.get("CZ_TIME_SCALE", "1") or 1)
sys.path.insert(0, os.path.join(SRC, "python"))
from canzona import safetensors  # noqa: E402

ENV = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1",
           PYTHONPATH=os.path.join(SRC, "python"), PYTHONDONTWRITEBYTECODE="1")


def run(args, what):
    t0 = time.time()
    r = subprocess.run(args, env=ENV, capture_output=True, text=True, timeout=240 * SCALE)
    if r.returncode != 0:
        print(r.stdout[-4000:], r.stderr[-4000:], sep="\n")
        sys.exit(f"FAIL: {what} exited with {r.returncode}")
    print(f"{what}: {time.time() - t0:.1f} s")
    return r.stdout


def train(tmp, dp, tp, tag, *extra):
    log = os.path.join(tmp, tag + ".json")
    run([*TORCHRUN, "--nproc-per-node", str(dp * tp), EXAMPLE,
         "--tp", str(tp), "--log-json", log, *extra],
        f"torch_train.py DP{dp}·TP{tp} {' '.join(extra)}")
    with open(log) as f:
        return json.load(f)


def check_loss(tmp, shapes, extra):
    ref_log = os.path.join(tmp, "reference.json")
    run([sys.executable, REFERENCE, "--steps", str(STEPS), "--log-json", ref_log, *extra],
        f"torch_reference.py {' '.join(extra)}")
    with open(ref_log) as f:
        ref = json.load(f)["loss"]
    failed = False
    for dp, tp in shapes:
        got = train(tmp, dp, tp, f"dp{dp}tp{tp}", "--steps", str(STEPS), *extra)["loss"]
        if len(got) != STEPS:
            sys.exit(f"FAIL: DP{dp}·TP{tp} logged {len(got)} losses, expected {STEPS}")
        rel = [abs(a - b) / abs(b) for a, b in zip(got, ref)]
        worst = max(range(STEPS), key=lambda i: rel[i])
        absd = max(abs(a - b) for a, b in zip(got, ref))
        print(f"DP{dp}·TP{tp}: max absolute loss difference {absd:.2e}; max relative "
              f"{rel[worst]:.2e} (step {worst}; "
              f"bound {LOSS_RTOL:g}); loss {got[0]:.4f} -> {got[-1]:.4f}, reference "
              f"{ref[0]:.4f} -> {ref[-1]:.4f}")
        if rel[worst] > LOSS_RTOL:
            print(f"FAIL: DP{dp}·TP{tp} step {worst}: loss {got[worst]!r}, reference "
                  f"{ref[worst]!r}")
            failed = True
        tail = sum(got[-5:]) / 5
        if not tail < 0.6 * got[0]:
            print(f"FAIL: DP{dp}·TP{tp}: the loss did not fall enough ({got[0]:.4f} -> "
                  f"mean of the last five {tail:.4f}; expected below {0.6 * got[0]:.4f})")
            failed = True
    return failed


def param_difference(a_dir, b_dir):
    """(worst relative difference, its tensor, worst elementwise max |a - b| / max |a|) over
    the parameters of two checkpoints; the relative difference of a tensor is
    ||a - b||_F / ||a||_F."""
    a, ma = safetensors.load(os.path.join(a_dir, "params.safetensors"))
    b, mb = safetensors.load(os.path.join(b_dir, "params.safetensors"))
    if sorted(a) != sorted(b) or ma["step"] != mb["step"]:
        sys.exit(f"FAIL: {a_dir} and {b_dir} hold different tensors or steps")
    frob = {n: float(np.linalg.norm(a[n] - b[n]) / np.linalg.norm(a[n])) for n in a}
    worst = max(frob, key=frob.get)
    elem = max(float(np.abs(a[n] - b[n]).max() / np.abs(a[n]).max()) for n in a)
    return frob[worst], worst, elem


def check_reshard(tmp):
    ck = os.path.join(tmp, "ckpt")
    h = RESHARD_STEPS // 2
    whole = train(tmp, 2, 2, "whole", "--steps", str(2 * h), "--save", ck, "--save-every",
                  str(h))
    resumed = train(tmp, 4, 1, "resumed", "--steps", str(h), "--load",
                    os.path.join(ck, f"step-{h}"), "--save", os.path.join(tmp, "resumed"))
    train(tmp, 4, 1, "stateless", "--steps", str(h), "--load", os.path.join(ck, f"step-{h}"),
          "--params-only", "--save", os.path.join(tmp, "stateless"))
    failed = False
    if resumed["first_step"] != h:
        print(f"FAIL: the resumed run started at step {resumed['first_step']}, expected {h}")
        failed = True
    rel, name, elem = param_difference(os.path.join(ck, f"step-{2 * h}"),
                                       os.path.join(tmp, "resumed", f"step-{2 * h}"))
    print(f"resharded DP2·TP2 -> DP4·TP1 after {h} steps, {2 * h} in all: max relative parameter "
          f"difference {rel:.2e} ({name}; bound {PARAM_RTOL:g}); elementwise "
          f"max |a - b| / max |a|: {elem:.2e}")
    if not rel <= PARAM_RTOL:
        print("FAIL: the resumed run's parameters differ from the uninterrupted run's")
        failed = True
    lrel = max(abs(a - b) / abs(b) for a, b in zip(resumed["loss"], whole["loss"][h:]))
    print(f"resumed losses (steps {h}..{2 * h - 1}) vs the uninterrupted run: max relative "
          "difference "
          f"{lrel:.2e}")
    if not lrel <= 1e-4:
        print("FAIL: the resumed run's losses differ")
        failed = True
    srel, sname, _ = param_difference(os.path.join(ck, f"step-{2 * h}"),
                                   os.path.join(tmp, "stateless", f"step-{2 * h}"))
    print(f"the same continuation without the optimizer state: {srel:.2e} ({sname})")
    if not srel > 1e-3:
        print("FAIL: dropping the optimizer state changed nothing; the check cannot tell")
        failed = True
    return failed


def check_cuda(tmp):
    if not torch.cuda.is_available():
        print("SKIPPED: no CUDA GPU for torch (torch.cuda.is_available() is False)")
        sys.exit(77)
    cpu = train(tmp, 1, 1, "cpu1", "--steps", str(STEPS))["loss"]
    gpu = train(tmp, 1, 1, "cuda1", "--steps", str(STEPS), "--device", "cuda")["loss"]
    rel = max(abs(a - b) / abs(b) for a, b in zip(gpu, cpu))
    print(f"one GPU vs the CPU, 50 steps: max relative loss difference {rel:.2e} (bound 1e-3); "
          f"loss {gpu[0]:.4f} -> {gpu[-1]:.4f}")
    return not rel <= 1e-3


def main():
    mode = sys.argv[1] if len(sys.argv) > 1 else ""
    with tempfile.TemporaryDirectory(prefix="torch-train-check-") as tmp:
        args = sys.argv[2:]
        extra = args[args.index("--") + 1:] if "--" in args else []
        args = args[:args.index("--")] if "--" in args else args
        if mode == "loss" and args:
            shapes = [tuple(int(x) for x in s.split("x")) for s in args]
            failed = check_loss(tmp, shapes, extra)
        elif mode == "reshard":
            failed = check_reshard(tmp)
        elif mode == "cuda":
            failed = check_cuda(tmp)
        else:
            sys.exit("usage: torch_train_check.py loss DPxTP... [-- ARGS] | reshard | cuda")
    print("FAIL" if failed else "ok")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
