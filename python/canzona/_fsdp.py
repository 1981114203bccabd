"""FSDP2 (torch's fully_shard) parameters as canzona.torch.Optimizer takes them (docs/PYTHON.md,
"FSDP2"): every parameter a DTensor Shard(0) over the mesh's shard dimension, torch.chunk's rows
per rank, and under HSDP Replicate() over an outer replicate dimension.

FSDP2 reduce-scatters the gradients and all-gathers the parameters itself, so the optimizer
runs the executor's fully sharded plan (canzona plan --layout fsdp) over the shard group: each
rank binds its own rows of every parameter in place (the DTensor's local tensor, which is a view
of the storage FSDP2 all-gathers from, stable across iterations), and hands its gradient rows
to the step by a copy into a buffer bound once (FSDP2 makes a new gradient tensor at every
reduce-scatter). Under HSDP each replica runs its own executor over its shard group on the same
averaged gradients: the same updates, computed redundantly (docs/PYTHON.md says why).
"""
import ctypes
import math

import torch
import torch.distributed as dist

from . import _fresh, _lib
from ._dtensor import is_dtensor
from ._lib import check

try:  # torch >= 2.6 exports it here; fully_shard's module class tells a job FSDP2 wrapped
    from torch.distributed.fsdp import FSDPModule
except ImportError:  # pragma: no cover - older torch: detected by placements alone
    FSDPModule = None

try:
    from torch.distributed.tensor import Replicate, Shard
except ImportError:  # pragma: no cover - canzona.torch refuses torch without it at import
    Replicate = Shard = None


def rows(n, shards, r):
    """FSDP2's rows of dim 0 on shard rank r (torch.chunk: ceil(n / shards) per rank, the last
    ranks fewer or none): the plan's cz__fsdp_rows."""
    c = -(-n // shards)
    return max(0, min(n, (r + 1) * c) - min(n, r * c))


def _sharded_over_dp(p):
    """Whether p is a DTensor sharded over some mesh dimension that is not named "tp"."""
    if not is_dtensor(p):
        return False
    names = p.device_mesh.mesh_dim_names or ()
    return any(isinstance(pl, Shard) and (i >= len(names) or names[i] != "tp")
               for i, pl in enumerate(p.placements))


def detected(named, module):
    """Whether the job shards its parameters with FSDP2: the module given (or one of its
    submodules) is an FSDPModule; without a module (parameters given by name), a parameter is a
    DTensor sharded over a mesh dimension other than "tp". A module that fully_shard did not
    wrap is not FSDP2's even if a parameter is sharded over "dp" (_dtensor.check refuses it)."""
    if module is not None:
        return FSDPModule is not None and any(isinstance(m, FSDPModule)
                                              for m in module.modules())
    return any(_sharded_over_dp(p) for _, p in named)


class Mesh:
    """The job's FSDP2 mesh as the executor runs it: the shard group (the executor's world and
    DP plane), its ranks, this rank's place in it, and under HSDP the replicate group."""

    def __init__(self, mesh, shard_dim, replicate_dim):
        me = dist.get_rank()
        self.mesh = mesh
        self.group = mesh.get_group(shard_dim)
        self.ranks = list(dist.get_process_group_ranks(self.group))
        self.rank = self.ranks.index(me)
        self.size = len(self.ranks)
        self.replicate_group = None if replicate_dim is None else mesh.get_group(replicate_dim)
        self.replicas = (1 if replicate_dim is None else
                         dist.get_world_size(self.replicate_group))
        self.replica = (0 if replicate_dim is None else
                        dist.get_rank(self.replicate_group))


def _where(name, p):
    return (f"parameter {name!r} (a DTensor on mesh {tuple(p.device_mesh.mesh.shape)} "
            f"{p.device_mesh.mesh_dim_names}, placements {tuple(p.placements)})")


def mesh_of(named):
    """(message or None, Mesh): every parameter must be a DTensor of fully_shard on one mesh,
    Shard(0) over its shard dimension (the only one of a 1-D mesh, the inner one of HSDP's 2-D
    mesh) and Replicate() over HSDP's outer one. Messages name the parameter and the rule."""
    first = None
    for name, p in named:
        if not is_dtensor(p):
            return (f"parameter {name!r} is a plain tensor in a model FSDP2 shards: canzona's "
                    "fully sharded step takes every parameter sharded by fully_shard (wrap the "
                    "root module too, so that no parameter is left out)"), None
        mesh, pl = p.device_mesh, tuple(p.placements)
        names = tuple(mesh.mesh_dim_names or ())
        if "tp" in names or sum(isinstance(x, Shard) for x in pl) > 1:
            return (f"{_where(name, p)}: FSDP2 with tensor parallelism (a 2-D mesh of FSDP "
                    "and TP) is not run by canzona's fully sharded step yet (its plans and "
                    "executor take TP 1); train it with FSDP2 alone, or with TP and canzona's "
                    "ZeRO-1 optimizer (no fully_shard)"), None
        if mesh.ndim not in (1, 2):
            return (f"{_where(name, p)}: a mesh of {mesh.ndim} dimensions; canzona takes FSDP2's "
                    "1-D mesh or HSDP's 2-D (replicate, shard) mesh"), None
        shard_dim = mesh.ndim - 1
        for i, x in enumerate(pl):
            if i == shard_dim:
                if type(x) is not Shard or x.dim != 0:
                    return (f"{_where(name, p)}: FSDP2 shards it as {x} over mesh dimension "
                            f"{i}; canzona's fully sharded plans take FSDP2's default Shard(0) "
                            "(torch.chunk's rows; no shard_placement_fn)"), None
            elif not isinstance(x, Replicate):
                return (f"{_where(name, p)}: {x} over HSDP's replicate dimension {i}; "
                        "expected Replicate()"), None
        if p.ndim not in (1, 2):
            return (f"{_where(name, p)}: shape {list(p.shape)}; canzona takes 1-D and 2-D "
                    "parameters"), None
        lt = p._local_tensor
        if not lt.is_contiguous():
            return (f"{_where(name, p)}: its local rows are not contiguous; canzona updates "
                    "them in place, row-major"), None
        if first is None:
            first = (name, mesh)
        elif mesh != first[1]:
            return (f"{_where(name, p)} is on another mesh than {first[0]!r}: canzona takes "
                    "every parameter of the model on one FSDP2 mesh"), None
    if first is None:
        return "no parameter to optimize", None
    mesh = first[1]
    m = Mesh(mesh, mesh.ndim - 1, 0 if mesh.ndim == 2 else None)
    if dist.get_rank() == 0 and m.rank != 0:
        return ("world rank 0 is not the first rank of its FSDP2 shard group; canzona "
                "gathers the optimizer state there (build the mesh with init_device_mesh)"), None
    return None, m


def check_rows(named, mesh, shapes):
    """A message naming the first parameter whose local rows are not FSDP2's torch.chunk rows of
    the plan's shape on this shard rank (a plan for another DP size or model), or None."""
    for name, p in named:
        shape = shapes[name]
        want = [rows(shape[0], mesh.size, mesh.rank)] + list(shape[1:])
        got = list(p._local_tensor.shape)
        if list(p.shape) != list(shape) or got != want:
            return (f"parameter {name!r}: this rank (shard rank {mesh.rank} of {mesh.size}) "
                    f"holds rows of shape {got} of a {list(p.shape)} tensor; the plan's "
                    f"fully sharded layout gives it {want} of {list(shape)} (torch.chunk's "
                    f"ceil({shape[0]} / {mesh.size}) rows per rank): a plan for another DP "
                    "size or model?")
    return None


def check_replicas(names, params, mesh, mode):
    """HSDP: each rank's rows of every parameter must equal those of the same shard rank in the
    other replicas (fingerprints: float64 sum and sum of squares, bit for bit, all-gathered over
    the replicate group); "broadcast": copied from replica 0 instead. Returns the first
    difference's message, or None: the caller agrees it over the world, since a difference in one
    shard group's rows is seen by that group only. FSDP2's shards are disjoint: nothing to
    compare at 1-D."""
    if not mode or mesh.replicas == 1:
        return None
    fp = torch.zeros(len(names), 2, dtype=torch.float64)
    with torch.no_grad():
        for i, name in enumerate(names):
            t = params[name]._local_tensor.detach().to("cpu", torch.float64)
            fp[i, 0], fp[i, 1] = t.sum(), (t * t).sum()
    every = [torch.empty_like(fp) for _ in range(mesh.replicas)]
    dist.all_gather(every, fp, group=mesh.replicate_group)
    bits = torch.stack(every).view(torch.int64)
    for i, name in enumerate(names):
        d = next((d for d in range(1, mesh.replicas) if not torch.equal(bits[d, i], bits[0, i])),
                 None)
        if d is None:
            continue
        if mode == "broadcast":
            with torch.no_grad():
                src = dist.get_global_rank(mesh.replicate_group, 0)
                dist.broadcast(params[name]._local_tensor, src=src, group=mesh.replicate_group)
            continue
        return (f"parameter {name!r} differs across the HSDP replicas at construction: "
                f"replicas 0 and {d} of shard rank {mesh.rank} hold different rows, and replicas "
                "must start equal. Seed every rank alike, or pass check_replicas='broadcast' to "
                "copy replica 0's values, or check_replicas=False to skip the check")
    return None


class Binding:
    """Each parameter's local rows bound in place to the executor, and a gradient buffer per
    parameter bound once, into which step() copies the gradient FSDP2 left (adopt)."""

    def __init__(self, L, ex, params):
        self._L, self._ex = L, ex
        self.params = params
        self.ptr, self.grads = {}, {}
        # An empty shard (a matrix with fewer rows than ranks) has no storage (data_ptr 0):
        # the executor reads nothing there, but takes a pointer.
        self._dummy = {}
        err = _lib.CzError()
        for name, p in params.items():
            lt = p._local_tensor
            g = torch.zeros_like(lt)
            self.ptr[name], self.grads[name] = lt.data_ptr(), g
            r = lt.shape[0]
            cols = math.prod(lt.shape[1:]) if lt.ndim > 1 else 1
            if lt.numel() == 0:
                self._dummy[name] = (torch.zeros(1, dtype=lt.dtype), torch.zeros(1, dtype=lt.dtype))
                pp, gp = (t.data_ptr() for t in self._dummy[name])
            else:
                pp, gp = lt.data_ptr(), g.data_ptr()
            dt = _lib.DTYPE_FP32 if lt.dtype == torch.float32 else _lib.DTYPE_BF16
            check(L.cz_executor_bind_param_typed(ex, name.encode(), ctypes.c_void_p(pp),
                                                 ctypes.c_void_p(gp), r, cols, dt,
                                                 ctypes.byref(err)), err)

    def adopt(self, name, p):
        """Copies p's gradient rows into the bound buffer (none: zeros). Returns a message
        instead, nothing copied, when the gradient is not laid out as the parameter."""
        g, buf = p.grad, self.grads[name]
        with torch.no_grad():
            if g is None:
                buf.zero_()
                return None
            if not is_dtensor(g) or tuple(g.placements) != tuple(p.placements) or \
                    g.shape != p.shape or g._local_tensor.shape != buf.shape:
                got = tuple(g.placements) if is_dtensor(g) else "a plain tensor"
                return (f"the gradient of parameter {name!r} has placements {got} and shape "
                        f"{list(g.shape)}, the parameter {tuple(p.placements)} and "
                        f"{list(p.shape)}: canzona reads the gradient's local rows as the "
                        "parameter's (FSDP2 leaves them so)")
            buf.copy_(g._local_tensor)
        return None


class FreshGrads(_fresh.FreshGrads):
    """Which parameters received a gradient since the last step (_fresh.FreshGrads, whose hooks
    FSDP2 runs after its reduce-scatter): a gradient is also fresh when it is another tensor
    than, or was changed since, the one the last step (or zero_grad) left (a .grad assigned by
    hand). FSDP2's gradients are its own tensors, never views of a buffer of canzona's."""

    def __init__(self, params):
        super().__init__(params, None)
        self._seen = {}

    @staticmethod
    def _key(g):
        t = g._local_tensor if is_dtensor(g) else g
        return (id(t), t._version)

    def forget(self):
        super().forget()
        self._seen = {n: self._key(p.grad) for n, p in self._params.items()
                      if p.grad is not None}

    def _renewed(self, name, g):
        return self._seen.get(name) != self._key(g)
