"""The Python package on 4 MPI ranks (mpi4py) at DP2·TP2: the executor runs over the
communicator mpi4py hands in, ranks land on the grid as world rank = dp_rank * tp + tp_rank,
the gradient norm is the same everywhere, and state_dict() / load_state_dict() resume a run
bit for bit on every rank. Env: CANZONA_EXEC_LIB, CANZONA_CLI, CZ_SOURCE_DIR."""
import os
import sys
import tempfile

import numpy as np
from mpi4py import MPI

import canzona

comm = MPI.COMM_WORLD
rank = comm.Get_rank()
src = os.environ["CZ_SOURCE_DIR"]
failures = []


def expect(cond, what):
    if not cond:
        failures.append(what)


with tempfile.TemporaryDirectory(prefix="canzona-mpi-") as tmp:
    # Every rank plans for itself (deterministic): no shared folder needed.
    plan = canzona.plan(os.path.join(src, "plans", "models", "test-small.json"),
                        os.path.join(src, "plans", "clusters", "cpu-4-dp2-tp2.json"),
                        os.path.join(tmp, "plan.json"))

    def run():
        ex = canzona.Executor(plan, comm="mpi", world_comm=comm, dtype="fp32")
        i = np.arange(ex.numel)
        P = (((i * 7 + ex.tp_rank) % 13) - 6).astype(np.float32) * np.float32(0.05)
        G = np.zeros(ex.numel, np.float32)
        ex.bind(P, G)
        return ex, P, G

    def grads(ex, G, step):
        i = np.arange(G.size)
        G[:] = (((i * 3 + step + 5 * ex.dp_rank) % 11) - 5).astype(np.float32) * np.float32(0.01)

    a, Pa, Ga = run()
    expect((a.dp_rank, a.tp_rank) == (rank // 2, rank % 2), "grid place of rank %d" % rank)
    for s in range(2):
        grads(a, Ga, s)
        a.step()
    norms = comm.allgather(a.grad_norm())
    expect(len(set(norms)) == 1 and norms[0] > 0, "gradient norms differ: %s" % norms)
    sd = a.state_dict()
    if rank == 0:
        expect(sd["step"] == 2, "state_dict step %s" % sd["step"])
        expect(any(k.endswith(".momentum") for k in sd["state"]), "no momentum in state_dict")
    else:
        expect(sd is None, "state_dict on rank %d is not None" % rank)

    b, Pb, Gb = run()
    Pb[:] = Pa
    b.load_state_dict(sd)
    for s in range(2, 4):
        grads(a, Ga, s)
        grads(b, Gb, s)
        a.step()
        b.step()
    expect(np.array_equal(Pa, Pb), "resumed parameters differ on rank %d" % rank)
    a.close()
    b.close()

bad = comm.allgather(failures)
if rank == 0:
    for r, f in enumerate(bad):
        for what in f:
            print("FAIL rank %d: %s" % (r, what))
    if not any(bad):
        print("ok: 4 ranks at DP2·TP2 through mpi4py; state_dict round trip resumes exactly")
sys.exit(1 if any(bad) else 0)
