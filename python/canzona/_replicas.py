"""What must be equal across the ranks of canzona.torch.Optimizer at construction
(docs/PYTHON.md, "Replicas"): a parameter replicated over TP on every TP rank, and every
parameter across the DP ranks, compared by a fingerprint per parameter (the float64 sum and sum
of squares of its local tensor, bit for bit) after one all-gather over the world.
"""
import torch
import torch.distributed as dist

from . import _lib
from ._dtensor import local as _local
from ._lib import Error


def check(names, params, tp_dim, dp, tp, mode):
    """names: the plan's parameters in order; params: name -> parameter; tp_dim: name -> its
    TP dimension (None: replicated). Raises the same message on every rank (each sees every
    fingerprint) for the first parameter that differs; with mode "broadcast" returns instead
    the names that differ across DP only (for the caller to copy from DP rank 0); with mode
    False checks nothing (and returns [])."""
    if not mode or dp * tp == 1:
        return []
    dev = (next(iter(params.values())).device if dist.get_backend() == "nccl"
           else torch.device("cpu"))
    fp = torch.zeros(len(names), 2, dtype=torch.float64, device=dev)
    with torch.no_grad():
        for i, name in enumerate(names):
            t = _local(params[name]).detach().to(torch.float64)
            fp[i, 0], fp[i, 1] = t.sum(), (t * t).sum()
    everyone = [torch.empty_like(fp) for _ in range(dp * tp)]
    dist.all_gather(everyone, fp)
    # World rank d * tp + t: DP rank d, TP rank t.
    bits = torch.stack(everyone).view(torch.int64).cpu().view(dp, tp, -1, 2)
    for i, name in enumerate(names):
        if tp_dim[name] is not None:
            continue
        for d in range(dp):
            for t in range(1, tp):
                if not torch.equal(bits[d, t, i], bits[d, 0, i]):
                    raise Error(_lib.CZ_EMISMATCH, (
                        f"parameter {name!r} is replicated over TP (no tp_dims entry, Megatron "
                        "attribute or Shard placement says otherwise) but differs across the TP "
                        f"ranks of DP rank {d}: world ranks {d * tp} and {d * tp + t} hold "
                        "different values. A TP-sharded parameter needs its tp_dims entry (e.g. "
                        f"tp_dims={{{name!r}: 0}}); a replicated one must start equal on every "
                        "TP rank (seed every rank alike); check_replicas=False skips this check"))
    differ = []
    for i, name in enumerate(names):
        for t in range(tp):
            d = next((d for d in range(1, dp)
                      if not torch.equal(bits[d, t, i], bits[0, t, i])), None)
            if d is None:
                continue
            if mode == "broadcast":
                differ.append(name)
                break
            raise Error(_lib.CZ_EMISMATCH, (
                f"parameter {name!r} differs across the DP ranks at construction: world ranks "
                f"{t} and {d * tp + t} (DP ranks 0 and {d}, TP rank {t}) hold different values, "
                "and DP replicas must start equal. Seed every rank alike, or pass "
                "check_replicas='broadcast' to copy DP rank 0's values to the others (as DDP "
                "does), or check_replicas=False to skip the check; if the model is TP-sharded, "
                "give its TP group (tp_group= or mesh=): without one its shards look like DP "
                "replicas that differ"))
    return differ
