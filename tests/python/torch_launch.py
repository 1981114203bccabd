#!/usr/bin/env python3
"""A small stand-in for torchrun: starts N processes of a script on this machine with the env://
rendezvous torchrun sets up (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK,
LOCAL_WORLD_SIZE), through torch.multiprocessing, and exits non-zero when any of them fails.

    torch_launch.py --nproc-per-node 4 SCRIPT [ARGS...]

Why: Debian's torchrun for torch 1.13 on Python 3.11 crashes at start-up (Std.from_str in its
argument parsing), before any user code runs, so CI starts the same rendezvous this way; a
script that runs under it runs unchanged under real torchrun (torch 2.x).
"""
import os
import runpy
import socket
import sys


def _worker(local_rank, world, port, script, args):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(local_rank),
                      WORLD_SIZE=str(world), LOCAL_RANK=str(local_rank),
                      LOCAL_WORLD_SIZE=str(world), GROUP_RANK="0")
    sys.argv = [script] + list(args)
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as e:
        if e.code not in (None, 0):
            raise RuntimeError(f"rank {local_rank} exited with {e.code}") from None


def main(argv):
    n = 1
    while argv and argv[0].startswith("--"):
        opt = argv.pop(0)
        if opt.startswith("--nproc-per-node=") or opt.startswith("--nproc_per_node="):
            n = int(opt.split("=", 1)[1])
        elif opt in ("--nproc-per-node", "--nproc_per_node"):
            n = int(argv.pop(0))
        else:
            sys.exit(f"torch_launch.py: unknown option {opt}")
    if not argv:
        sys.exit("usage: torch_launch.py --nproc-per-node N SCRIPT [ARGS...]")
    import torch.multiprocessing as mp

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    try:
        mp.spawn(_worker, args=(n, port, argv[0], argv[1:]), nprocs=n, join=True)
    except Exception as e:  # noqa: BLE001 - one line instead of every rank's traceback
        print(f"torch_launch.py: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
