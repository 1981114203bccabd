"""The executor's communication over torch.distributed: cz_comm_callbacks (canzona_exec.h) whose
all_reduce, broadcast and exchange run on the job's process groups (gloo on CPU; under
backend "cuda" only the control plane comes here, the data plane is NCCL).

Every callback is blocking and runs on the calling thread (the executor's step). A Python
exception inside one must not cross ctypes (it would be printed and 0 returned): it is kept,
the callback returns -1, and the executor's error carries its text through last_error.

A tensor handed to gloo is also held by gloo's worker thread, which lets go of it only after
the collective has returned here (measured: 1 ms later on an idle machine, unbounded on a
loaded one). If Python dropped it first, the worker thread frees the tensor's Python object and
takes the GIL for that; at interpreter exit that thread is killed while unwinding and the
process aborts ("terminate called without an active exception"). So each tensor stays held
here until only Python holds it, and close() and exit wait for that (TorchComm.drain); at
exit the GIL is also left free for EXIT_GRACE_S, for the job's own collectives (_drain_at_exit).
"""
import atexit
import ctypes
import time
import weakref

from . import _lib

_LIVE = weakref.WeakSet()  # every TorchComm not yet drained, for the exit hook


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
    """The callbacks over the executor's world (world_group: a group of every rank in world
    order, None: the default one; world_ranks: its world ranks, None: every rank of the job),
    and the job's DP and TP groups with their world ranks (dp_ranks, tp_ranks: this rank's DP
    and TP groups, in group-rank order). The buffers are host memory, so the groups must take
    CPU tensors (gloo). A group of this rank alone needs no process group (None): its
    collectives are this rank's own values, its exchanges copies (an FSDP2 job's TP 1)."""

    def __init__(self, dp_group, tp_group, dp_ranks, tp_ranks, world_group=None,
                 world_ranks=None):
        import torch.distributed as dist

        self.dist = dist
        if world_ranks is None:
            world_ranks = range(dist.get_world_size())
        self.groups = {_lib.COMM_WORLD: world_group, _lib.COMM_DP: dp_group,
                       _lib.COMM_TP: tp_group}
        self.ranks = {_lib.COMM_WORLD: list(world_ranks),
                      _lib.COMM_DP: list(dp_ranks), _lib.COMM_TP: list(tp_ranks)}
        self.error = None
        self._error_bytes = b""
        self._held = []  # tensors gloo's worker may still hold (module docstring)
        _LIVE.add(self)
        _USED[0] = True
        me = dist.get_rank()
        self.cb = _lib.CommCallbacks(
            version=_lib.CZ_COMM_CALLBACKS_VERSION, user=None,
            world_size=len(self.ranks[_lib.COMM_WORLD]),
            world_rank=self.ranks[_lib.COMM_WORLD].index(me), has_groups=1,
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

    def _hold(self, tensors):
        """Keeps tensors passed to a collective until gloo's worker has let go of them; drops
        those it has let go of already."""
        self._held = [t for t in self._held if _still_shared(t)]
        self._held.extend(tensors)

    def drain(self, timeout=10.0):
        """Waits (at most timeout seconds) until gloo's workers hold none of the tensors handed
        to them, then lets go of them here: the last reference to each is Python's, on this
        thread. Every collective has returned by then, so this waits for the workers' clean-up
        only, normally a millisecond."""
        deadline = time.monotonic() + timeout
        while True:
            self._held = [t for t in self._held if _still_shared(t)]
            if not self._held or time.monotonic() > deadline:
                return  # past the deadline what is still shared stays held: a leak, not a crash
            time.sleep(0.001)

    def _all_reduce(self, user, group, ptr, count, dtype, op):
        if len(self.ranks[group]) == 1:
            return  # the reduction of one rank's values is those values
        t = _host_tensor(ptr, count, dtype)
        red = self.dist.ReduceOp.MIN if op == _lib.COMM_MIN else self.dist.ReduceOp.SUM
        self.dist.all_reduce(t, op=red, group=self.groups[group])
        self._hold((t,))

    def _broadcast(self, user, group, ptr, count, dtype, root):
        if len(self.ranks[group]) == 1:
            return
        t = _host_tensor(ptr, count, dtype)
        self.dist.broadcast(t, src=self.ranks[group][root], group=self.groups[group])
        self._hold((t,))

    def _exchange(self, user, group, transfers, n):
        if len(self.ranks[group]) == 1:
            # This rank with itself: each receive takes the send of the same count.
            sends = [transfers[k] for k in range(n) if transfers[k].send]
            recvs = [transfers[k] for k in range(n) if not transfers[k].send]
            for s, r in zip(sends, recvs):
                _host_tensor(r.buf, r.count, r.dtype).copy_(_host_tensor(s.buf, s.count, s.dtype))
            return
        # Receives posted before sends: at most one of each per peer, completed together.
        works, tensors = [], []
        order = sorted(range(n), key=lambda k: transfers[k].send)
        for k in order:
            x = transfers[k]
            t = _host_tensor(x.buf, x.count, x.dtype)
            peer = self.ranks[group][x.peer]
            tensors.append(t)
            if x.send:
                works.append(self.dist.isend(t, dst=peer, group=self.groups[group]))
            else:
                works.append(self.dist.irecv(t, src=peer, group=self.groups[group]))
        for w in works:
            w.wait()
        self._hold(tensors)


def _still_shared(t):
    """Whether anything besides Python holds tensor t (gloo's worker, its work object)."""
    count = getattr(t, "_use_count", None)
    return count is not None and count() > 1


# How long the exit hook leaves the GIL free for gloo's workers (see _drain_at_exit).
EXIT_GRACE_S = 0.2
_USED = [False]  # whether this process made a TorchComm (the hook does nothing otherwise)


@atexit.register
def _drain_at_exit():
    # atexit runs before the interpreter stops other threads taking the GIL: the last point
    # where gloo's workers can still let go safely. Ours are waited for exactly. The job's own
    # collectives have the same hazard (torch's: a tensor it made and dropped right after the
    # collective returned, e.g. a last loss all-reduce just before exit) on every process group
    # still alive, which destroy_process_group() does not join: the hook then leaves the GIL
    # free for a moment so that a worker preempted before its clean-up can finish it.
    # Measured: 2 aborts in 14 runs of examples/torch_train.py --overlap under load without it.
    if not _USED[0]:
        return
    for comm in list(_LIVE):
        comm.drain()
    time.sleep(EXIT_GRACE_S)
