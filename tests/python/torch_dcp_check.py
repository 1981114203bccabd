"""Checkpoints the torch way (issue 36, item 4): canzona.torch.Optimizer's state_dict() and the
model's state_dict() saved together with torch.distributed.checkpoint (DCP) at DP2·TP2 (DTensor
tensor parallelism), loaded at DP4·TP1 (Megatron-style plain shards) and at DP1, after which
training continues equal to the uninterrupted run; a checkpoint of another model and a
corrupted one are refused on every rank with the optimizer and the parameters unchanged.

    torch_dcp_check.py                   the driver: runs the phases below under torchrun, those
                                         of one world size in one launch (PHASE + PHASE ...)
    torch_dcp_check.py save DIR          (4 ranks) DP2·TP2: 5 steps, DCP checkpoint DIR/ckpt,
                                         5 more steps; DIR/whole.pt: the final full parameters;
                                         DIR/other: a checkpoint of a 3-layer model
    torch_dcp_check.py load DIR DP TP    DPxTP: DIR/ckpt, 5 steps; DIR/resumed-DPxTP.pt
                                         (also --params-only: the model without the state)
    torch_dcp_check.py refuse DIR        (4 ranks) another model's checkpoint, corrupted and
                                         truncated files: refused, nothing changed

Bound: every final parameter within ||a - b||_F / ||b||_F <= 1e-5 of the uninterrupted run (the
shapes add and average in other orders, which Newton-Schulz amplifies: tests/python/
torch_muon_check.py measures 2.5e-6 after 20 steps), and the continuation without the optimizer
state farther than 1e-3, so the check can tell. Writes only into its own temporary folder.
Env: CZ_SOURCE_DIR, CANZONA_EXEC_LIB, CANZONA_LIB.
"""
import os
import shutil
import subprocess
import sys
import tempfile

import torch
import torch.distributed as dist

from canzona._dtensor import local

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_muon_check as tm  # noqa: E402  (the model, its data and canzona's arguments)

TOL, CONTROL = 1e-5, 1e-3
FIRST, MORE = 5, 5


def mesh_of(dp, tp):
    from torch.distributed.device_mesh import init_device_mesh

    return init_device_mesh("cpu", (dp, tp), mesh_dim_names=("dp", "tp"))


def save_checkpoint(path, model, opt):
    import torch.distributed.checkpoint as dcp

    dcp.save({"model": model.state_dict(), "optim": opt.state_dict()}, checkpoint_id=path)


def load_checkpoint(path, model, opt, params_only=False):
    """The torch way: state dicts of this run as templates, filled by dcp.load (which reshards
    the DTensor parameters into this run's layout), then handed to load_state_dict."""
    import torch.distributed.checkpoint as dcp

    state = {"model": model.state_dict()}
    if not params_only:
        state["optim"] = opt.state_dict()
    dcp.load(state, checkpoint_id=path)
    if not params_only:
        opt.load_state_dict(state["optim"])


def shared_dir():
    box = [tempfile.mkdtemp(prefix="cz-dcp-") if dist.get_rank() == 0 else None]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def phase_save(d):
    mesh = mesh_of(2, 2)
    model = tm.build("dtensor", tm.full_init(), 2, 2, mesh)
    opt = tm.optimizer(model, "dtensor", mesh)
    tm.run_steps(model, opt, mesh.get_group("dp"), range(FIRST))
    save_checkpoint(os.path.join(d, "ckpt"), model, opt)
    tm.run_steps(model, opt, mesh.get_group("dp"), range(FIRST, FIRST + MORE))
    full = tm.full_params(model, "dtensor", 2, mesh)
    opt.close()
    # Another model: three layers instead of two.
    other = tm.build("dtensor", tm.full_init(layers=3), 2, 2, mesh, layers=3)
    oopt = tm.optimizer(other, "dtensor", mesh)
    tm.run_steps(other, oopt, mesh.get_group("dp"), range(2))
    save_checkpoint(os.path.join(d, "other"), other, oopt)
    oopt.close()
    if dist.get_rank() == 0:
        torch.save(full, os.path.join(d, "whole.pt"))


def phase_load(d, dp, tp, params_only):
    mesh = mesh_of(dp, tp)
    kind = "dtensor" if tp > 1 else "plain"
    model = tm.build(kind, tm.full_init(), dp, tp, mesh)
    opt = tm.optimizer(model, kind, mesh)
    load_checkpoint(os.path.join(d, "ckpt"), model, opt, params_only)
    tm.run_steps(model, opt, mesh.get_group("dp"), range(FIRST, FIRST + MORE))
    full = tm.full_params(model, kind, tp, mesh)
    opt.close()
    if dist.get_rank() == 0:
        tag = f"{dp}x{tp}" + ("-params-only" if params_only else "")
        torch.save(full, os.path.join(d, f"resumed-{tag}.pt"))


def phase_refuse(d):
    """Each bad checkpoint raises on every rank; the optimizer's state (its checksum) and the
    parameters are what they were."""
    mesh = mesh_of(2, 2)
    model = tm.build("dtensor", tm.full_init(), 2, 2, mesh)
    opt = tm.optimizer(model, "dtensor", mesh)
    tm.run_steps(model, opt, mesh.get_group("dp"), range(2))
    rank = dist.get_rank()
    bad = {"other": os.path.join(d, "other")}
    if rank == 0:
        for what in ("corrupted", "truncated"):
            dst = os.path.join(d, what)
            shutil.copytree(os.path.join(d, "ckpt"), dst)
            data = sorted(f for f in os.listdir(dst) if f.endswith(".distcp"))
            big = max(data, key=lambda f: os.path.getsize(os.path.join(dst, f)))
            path = os.path.join(dst, big)
            size = os.path.getsize(path)
            with open(path, "r+b") as f:
                if what == "truncated":
                    f.truncate(size // 2)
                else:  # flip bytes inside the tensor data, not the pickled header
                    f.seek(size // 2)
                    chunk = bytearray(f.read(64))
                    f.seek(size // 2)
                    f.write(bytes(b ^ 0x5A for b in chunk))
    for what in ("corrupted", "truncated"):
        bad[what] = os.path.join(d, what)
    dist.barrier()
    from torch.distributed.checkpoint.api import CheckpointException  # a BaseException

    failed = []
    for what, path in bad.items():
        before = opt.state_dict()["checksum"]
        params = {n: local(p).detach().clone() for n, p in model.named_parameters()}
        try:
            # The optimizer's state is refused before the model's is touched: load it first.
            import torch.distributed.checkpoint as dcp

            state = {"optim": opt.state_dict()}
            dcp.load(state, checkpoint_id=path)
            opt.load_state_dict(state["optim"])
            failed.append(f"{what}: loaded")
        except (Exception, CheckpointException) as e:  # noqa: BLE001 - printed, state checked
            if rank == 0:
                print(f"refused ({what}) on every rank: {type(e).__name__}: "
                      f"{str(e).splitlines()[0][:300]}", flush=True)
        if opt.state_dict()["checksum"] != before:
            failed.append(f"{what}: the optimizer state changed")
        for n, p in model.named_parameters():
            if not torch.equal(local(p).detach(), params[n]):
                failed.append(f"{what}: {n} changed")
    opt.close()
    for f in failed:
        print(f"rank {rank}: FAIL: {f}", flush=True)
    return failed


def worker(argv):
    """Runs the phases argv names, separated by "+", one after the other in one process group
    (each phase makes its own mesh and optimizer): one torchrun for the phases of a world size."""
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    failed = []
    phases = [[]]
    for a in argv:
        if a == "+":
            phases.append([])
        else:
            phases[-1].append(a)
    for ph in phases:
        if ph[0] == "save":
            phase_save(ph[1])
        elif ph[0] == "load":
            phase_load(ph[1], int(ph[2]), int(ph[3]), "--params-only" in ph)
        elif ph[0] == "refuse":
            failed += phase_refuse(ph[1])
    dist.destroy_process_group()
    return 1 if failed else 0


def torchrun(n, *args):
    scale = int(os.environ.get("CZ_TIME_SCALE", "1") or 1)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           "--nproc-per-node", str(n), os.path.abspath(__file__), *args]
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240 * scale)
    out = "\n".join(line for line in (r.stdout + r.stderr).splitlines()
                    if line.startswith(("refused", "rank")))
    if out:
        print(out)
    if r.returncode != 0:
        print(r.stdout[-3000:], r.stderr[-3000:], sep="\n")
        sys.exit(f"FAIL: {' '.join(args)} at {n} ranks exited with {r.returncode}")


def driver():
    failed = False
    with tempfile.TemporaryDirectory(prefix="cz-dcp-check-") as d:
        # One torchrun per world size (a launch of four ranks is most of a phase's time).
        torchrun(4, "save", d, "+", "load", d, "4", "1", "+", "load", d, "4", "1",
                 "--params-only", "+", "refuse", d)
        torchrun(1, "load", d, "1", "1")
        whole = torch.load(os.path.join(d, "whole.pt"))
        for tag in ("4x1", "1x1", "4x1-params-only"):
            got = torch.load(os.path.join(d, f"resumed-{tag}.pt"))
            rel = {n: float((got[n] - whole[n]).norm() / whole[n].norm()) for n in whole}
            worst = max(rel, key=rel.get)
            print(f"DP2·TP2 (DTensor) -> {tag}: {FIRST} + {MORE} steps against {FIRST + MORE} "
                  f"uninterrupted: max relative parameter difference {rel[worst]:.2e} ({worst})")
            if tag.endswith("params-only"):
                if not rel[worst] > CONTROL:
                    print(f"FAIL: without the optimizer state the run is not farther than "
                          f"{CONTROL:g}: the check cannot tell")
                    failed = True
            elif not rel[worst] <= TOL:
                print(f"FAIL: {tag} resumed differs by more than {TOL:g}")
                failed = True
    print("FAIL" if failed else "ok")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(worker(sys.argv[1:]) if len(sys.argv) > 1 else driver())
