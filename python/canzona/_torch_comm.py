"""The executor's communication over torch.distributed: cz_comm_callbacks (canzona_exec.h) whose
all_reduce, broadcast and exchange run on the job's process groups (gloo on CPU; under
backend "cuda" only the control plane comes here, the data plane is NCCL).

Every callback is blocking and runs on the calling thread (the executor's step). A Python
exception inside one must not cross ctypes (it would be printed and 0 returned): it is kept,
the callback returns -1, and the executor's error carries its text through last_error.
"""
import ctypes

from . import _lib


def global_ranks(group):
    """The world ranks of a process group, in group-rank order."""
    import torch.distributed as dist

    if group is None or group is dist.group.WORLD:
        return list(range(dist.get_world_size()))
    return list(dist.get_process_group_ranks(group))


def _dtypes():
    import torch

    return {_lib.COMM_FP32: torch.float32, _lib.COMM_BF16: torch.bfloat16,
            _lib.COMM_FP64: torch.float64, _lib.COMM_INT64: torch.int64}


_ESIZE = {_lib.COMM_FP32: 4, _lib.COMM_BF16: 2, _lib.COMM_FP64: 8, _lib.COMM_INT64: 8}


def _host_tensor(ptr, count, dtype):
    """A CPU tensor over count elements of host memory at ptr (no copy: the executor's
    buffer)."""
    import torch

    raw = (ctypes.c_char * (count * _ESIZE[dtype])).from_address(ptr)
    return torch.frombuffer(raw, dtype=_dtypes()[dtype], count=count)


class TorchComm:
    """The callbacks over the world (world_group: a group of every rank in world order, None:
    the default one), and the job's DP and TP groups with their world ranks (dp_ranks,
    tp_ranks: this rank's DP and TP groups, in group-rank order). The buffers are host memory,
    so the groups must take CPU tensors (gloo)."""

    def __init__(self, dp_group, tp_group, dp_ranks, tp_ranks, world_group=None):
        import torch.distributed as dist

        self.dist = dist
        self.groups = {_lib.COMM_WORLD: world_group, _lib.COMM_DP: dp_group,
                       _lib.COMM_TP: tp_group}
        self.ranks = {_lib.COMM_WORLD: list(range(dist.get_world_size())),
                      _lib.COMM_DP: list(dp_ranks), _lib.COMM_TP: list(tp_ranks)}
        self.error = None
        self._error_bytes = b""
        me = dist.get_rank()
        self.cb = _lib.CommCallbacks(
            version=_lib.CZ_COMM_CALLBACKS_VERSION, user=None,
            world_size=dist.get_world_size(), world_rank=me, has_groups=1,
            dp_size=len(dp_ranks), dp_rank=list(dp_ranks).index(me),
            tp_size=len(tp_ranks), tp_rank=list(tp_ranks).index(me),
            all_reduce=_lib.ALL_REDUCE_FN(self._guard(self._all_reduce)),
            broadcast=_lib.BROADCAST_FN(self._guard(self._broadcast)),
            exchange=_lib.EXCHANGE_FN(self._guard(self._exchange)),
            last_error=_lib.LAST_ERROR_FN(self._last_error))

    def _guard(self, fn):
        def call(*args):
            try:
                fn(*args)
                return 0
            except BaseException as e:  # noqa: BLE001 - must not cross into C
                self.error = e
                self._error_bytes = f"{type(e).__name__}: {e}".encode(errors="replace")
                return -1
        return call

    def _last_error(self, user):
        return self._error_bytes

    def _all_reduce(self, user, group, ptr, count, dtype, op):
        t = _host_tensor(ptr, count, dtype)
        red = self.dist.ReduceOp.MIN if op == _lib.COMM_MIN else self.dist.ReduceOp.SUM
        self.dist.all_reduce(t, op=red, group=self.groups[group])

    def _broadcast(self, user, group, ptr, count, dtype, root):
        t = _host_tensor(ptr, count, dtype)
        self.dist.broadcast(t, src=self.ranks[group][root], group=self.groups[group])

    def _exchange(self, user, group, transfers, n):
        # Receives posted before sends: at most one of each per peer, completed together.
        works = []
        order = sorted(range(n), key=lambda k: transfers[k].send)
        for k in order:
            x = transfers[k]
            t = _host_tensor(x.buf, x.count, x.dtype)
            peer = self.ranks[group][x.peer]
            if x.send:
                works.append(self.dist.isend(t, dst=peer, group=self.groups[group]))
            else:
                works.append(self.dist.irecv(t, src=peer, group=self.groups[group]))
        for w in works:
            w.wait()
