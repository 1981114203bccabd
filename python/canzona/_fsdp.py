"""FSDP2 (torch's fully_shard) parameters as canzona.torch.Optimizer takes them (docs/PYTHON.md,
"FSDP2"): every parameter a DTensor Shard(0) over the mesh's shard dimension, torch.chunk's rows
per rank, and under HSDP Replicate() over an outer replicate dimension. With tensor parallelism
(fully_shard over the "dp" dimension of a 2-D ("dp", "tp") mesh whose "tp" dimension
parallelize_module used) a TP parameter is a DTensor of the 2-D mesh, Shard(0) (or FSDP2's
_StridedShard(0) over a TP shard of dim 0) over "dp" and Shard(0), Shard(1) or Replicate()
over "tp": its local tensor is torch.chunk's rows of its TP shard; a parameter TP left alone is
a DTensor of the "dp" sub-mesh, the same rows on every TP rank.

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

try:  # how FSDP2 shards dim 0 of a tensor that TP already shards along dim 0
    from torch.distributed.tensor.placement_types import _StridedShard
except ImportError:  # pragma: no cover - a torch without it gives Shard(0) there
    _StridedShard = None


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
    """The job's FSDP2 mesh as the executor runs it: the shard group (the executor's world: the
    FSDP2 shard group, and with TP every GPU of the 2-D mesh, dp_rank * tp + tp_rank), its
    ranks, this rank's place in it, the DP and TP groups inside it, each parameter's TP
    dimension (tp_dims: 0, 1, or None for TP-replicated), and under HSDP the replicate group."""

    def __init__(self, mesh, shard_dim, replicate_dim, tp_dim=None, tp_dims=None):
        me = dist.get_rank()
        self.mesh = mesh
        self.tp_dims = dict(tp_dims or {})
        self.dp_group = mesh.get_group(shard_dim)
        self.dp_ranks = list(dist.get_process_group_ranks(self.dp_group))
        if tp_dim is None:
            self.group, self.ranks = self.dp_group, self.dp_ranks
            self.tp_group, self.tp_ranks = None, [me]
        else:
            # Every GPU of the mesh in its row-major order, (dp, tp): the executor's world,
            # whose GPU k = dp_rank * tp + tp_rank owns what the plan gives slot k. Its group
            # comes with open_world, once every rank agreed to go on.
            order = mesh.mesh if tp_dim == 1 else mesh.mesh.t()
            self.ranks = [int(r) for r in order.flatten().tolist()]
            self.group = None
            self.tp_group = mesh.get_group(tp_dim)
            self.tp_ranks = list(dist.get_process_group_ranks(self.tp_group))
        self.rank = self.ranks.index(me)
        self.size = len(self.ranks)
        self.dp, self.tp = len(self.dp_ranks), len(self.tp_ranks)
        self.dp_rank, self.tp_rank = self.dp_ranks.index(me), self.tp_ranks.index(me)
        self.replicate_group = None if replicate_dim is None else mesh.get_group(replicate_dim)
        self.replicas = (1 if replicate_dim is None else
                         dist.get_world_size(self.replicate_group))
        self.replica = (0 if replicate_dim is None else
                        dist.get_rank(self.replicate_group))

    def open_world(self):
        """The executor's world group with TP (every rank of the mesh, which is the job's world:
        _mesh_2d checked), made by new_group, which is collective over the world: called by
        every rank after they agreed on the mesh."""
        if self.group is None:
            self.group = dist.new_group(self.ranks, backend="gloo")


def _where(name, p):
    return (f"parameter {name!r} (a DTensor on mesh {tuple(p.device_mesh.mesh.shape)} "
            f"{p.device_mesh.mesh_dim_names}, placements {tuple(p.placements)})")


def _fsdp_rows(x):
    """Whether x is FSDP2's default placement over its shard dimension: Shard(0), or the
    _StridedShard(0) it uses when TP shards dim 0 too (rows of the TP shard either way)."""
    if type(x) is Shard:
        return x.dim == 0
    return _StridedShard is not None and isinstance(x, _StridedShard) and x.dim == 0


def _check_param(name, p):
    """What every FSDP2 parameter must be, whatever its mesh: 1-D or 2-D, contiguous rows."""
    if p.ndim not in (1, 2):
        return (f"{_where(name, p)}: shape {list(p.shape)}; canzona takes 1-D and 2-D "
                "parameters")
    if not p._local_tensor.is_contiguous():
        return (f"{_where(name, p)}: its local rows are not contiguous; canzona updates them "
                "in place, row-major")
    return None


def _mesh_1d(named):
    """(message, Mesh) of FSDP2 without TP: a 1-D mesh, or HSDP's 2-D (replicate, shard)."""
    first = None
    for name, p in named:
        mesh, pl = p.device_mesh, tuple(p.placements)
        if sum(isinstance(x, Shard) for x in pl) > 1:
            return (f"{_where(name, p)}: sharded over two mesh dimensions, and none is named "
                    "\"tp\"; with tensor parallelism name the mesh's TP dimension \"tp\" "
                    "(fully_shard over the other)"), None
        if mesh.ndim not in (1, 2):
            return (f"{_where(name, p)}: a mesh of {mesh.ndim} dimensions; canzona takes FSDP2's "
                    "1-D mesh, HSDP's 2-D (replicate, shard) mesh or a 2-D (dp, tp) mesh"), None
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
        msg = _check_param(name, p)
        if msg:
            return msg, None
        if first is None:
            first = (name, mesh)
        elif mesh != first[1]:
            return (f"{_where(name, p)} is on another mesh than {first[0]!r}: canzona takes "
                    "every parameter of the model on one FSDP2 mesh"), None
    mesh = first[1]
    return None, Mesh(mesh, mesh.ndim - 1, 0 if mesh.ndim == 2 else None)


def _mesh_2d(named, first):
    """(message, Mesh) of FSDP2 with TP: first (name, mesh) names the 2-D (dp, tp) mesh of a TP
    parameter; every parameter is on it (FSDP2 rows over dp, a TP placement over tp) or on its
    dp sub-mesh (a parameter TP left alone)."""
    mesh = first[1]
    names = tuple(mesh.mesh_dim_names)
    if mesh.ndim != 2:
        return (f"parameter {first[0]!r} is on a mesh of {mesh.ndim} dimensions {names}: "
                "canzona runs FSDP2 with TP over a 2-D (dp, tp) mesh; HSDP with TP (a "
                "replicate dimension as well) is not run by its fully sharded step yet"), None
    ti = names.index("tp")
    si = 1 - ti
    world = dist.get_world_size()
    if sorted(int(r) for r in mesh.mesh.flatten().tolist()) != list(range(world)):
        return (f"the (dp, tp) mesh of parameter {first[0]!r} holds {mesh.mesh.numel()} of the "
                f"job's {world} ranks; canzona's fully sharded step with TP takes a mesh of "
                "every rank (one pipeline stage)"), None
    sub, tp = mesh[names[si]], mesh.mesh.shape[ti]
    dims = {}
    for name, p in named:
        pl = tuple(p.placements)
        if p.device_mesh == sub:
            if not _fsdp_rows(pl[0]):
                return (f"{_where(name, p)}: FSDP2 shards it as {pl[0]}; canzona's fully "
                        "sharded plans take FSDP2's default Shard(0) (no "
                        "shard_placement_fn)"), None
            dims[name] = None
        elif p.device_mesh == mesh:
            if not _fsdp_rows(pl[si]):
                return (f"{_where(name, p)}: FSDP2 shards it as {pl[si]} over {names[si]!r}; "
                        "canzona's fully sharded plans take FSDP2's default rows (Shard(0)); "
                        "no shard_placement_fn"), None
            y = pl[ti]
            if type(y) is Shard and y.dim % p.ndim in (0, 1):
                d = y.dim % p.ndim
                if p.shape[d] % tp:
                    return (f"{_where(name, p)}: uneven TP shards ({p.shape[d]} along "
                            f"dimension {d} over {tp} TP ranks); canzona takes shards of "
                            "equal size"), None
                dims[name] = d
            elif isinstance(y, Replicate):
                dims[name] = None
            else:
                return (f"{_where(name, p)}: placement {y} over \"tp\"; canzona takes "
                        "Shard(0), Shard(1) or Replicate() there"), None
        else:
            return (f"{_where(name, p)} is on neither the (dp, tp) mesh of {first[0]!r} nor its "
                    f"{names[si]!r} sub-mesh: canzona takes every parameter of the model on "
                    "one FSDP2 mesh"), None
        msg = _check_param(name, p)
        if msg:
            return msg, None
    return None, Mesh(mesh, si, None, ti, dims)


def mesh_of(named):
    """(message or None, Mesh): every parameter must be a DTensor of fully_shard on one mesh,
    Shard(0) over its shard dimension (the only one of a 1-D mesh, the inner one of HSDP's 2-D
    mesh) and Replicate() over HSDP's outer one; with TP, on a 2-D (dp, tp) mesh or its dp
    sub-mesh (_mesh_2d). Messages name the parameter and the rule."""
    first = None
    for name, p in named:
        if not is_dtensor(p):
            return (f"parameter {name!r} is a plain tensor in a model FSDP2 shards: canzona's "
                    "fully sharded step takes every parameter sharded by fully_shard (wrap the "
                    "root module too, so that no parameter is left out)"), None
        if first is None and "tp" in tuple(p.device_mesh.mesh_dim_names or ()):
            first = (name, p.device_mesh)
    if not named:
        return "no parameter to optimize", None
    msg, m = _mesh_2d(named, first) if first is not None else _mesh_1d(named)
    if msg is None and dist.get_rank() == 0 and m.rank != 0:
        return ("world rank 0 is not the first rank of its FSDP2 shard group; canzona "
                "gathers the optimizer state there (build the mesh with init_device_mesh)"), None
    return msg, m


def check_rows(named, mesh, shapes, local_shapes):
    """A message naming the first parameter whose local rows are not FSDP2's torch.chunk rows of
    the plan's TP shard (local_shapes; the whole shape at TP 1) on this DP rank (a plan for
    another DP or TP size, or model), or None."""
    for name, p in named:
        shape, local = shapes[name], local_shapes[name]
        want = [rows(local[0], mesh.dp, mesh.dp_rank)] + list(local[1:])
        got = list(p._local_tensor.shape)
        if list(p.shape) != list(shape) or got != want:
            tp = (f" of its TP shard {list(local)} (TP rank {mesh.tp_rank} of {mesh.tp})"
                  if mesh.tp > 1 else "")
            return (f"parameter {name!r}: this rank (DP rank {mesh.dp_rank} of {mesh.dp}) "
                    f"holds rows of shape {got} of a {list(p.shape)} tensor; the plan's "
                    f"fully sharded layout gives it {want}{tp} of {list(shape)} (torch.chunk's "
                    f"ceil({local[0]} / {mesh.dp}) rows per rank): a plan for another DP or TP "
                    "size or model?")
    return None


def check_replicas(names, params, mesh, mode):
    """Rows that must start equal: under HSDP each rank's rows of every parameter and those of
    the same shard rank in the other replicas; with TP a TP-replicated parameter's rows on the
    TP ranks of a DP rank (fingerprints: float64 sum and sum of squares, bit for bit,
    all-gathered over the replicate or TP group); "broadcast": copied from the group's first
    rank instead. Returns the first difference's message, or None: the caller agrees it over
    the world, since a difference in one group's rows is seen by that group only. FSDP2's
    shards are disjoint: nothing else to compare."""
    if not mode:
        return None
    checks = []
    if mesh.replicas > 1:
        checks.append((mesh.replicate_group, mesh.replicas, list(names),
                       lambda name, d: (f"parameter {name!r} differs across the HSDP replicas "
                                        f"at construction: replicas 0 and {d} of shard rank "
                                        f"{mesh.rank} hold different rows")))
    if mesh.tp > 1:
        checks.append((mesh.tp_group, mesh.tp,
                       [n for n in names if mesh.tp_dims.get(n) is None],
                       lambda name, d: (f"parameter {name!r}, which TP replicates, differs "
                                        f"across the TP ranks at construction: TP ranks 0 and "
                                        f"{d} of DP rank {mesh.dp_rank} hold different rows")))
    for group, size, which, what in checks:
        msg = _compare_rows(which, params, group, size, mode, what)
        if msg:
            return msg
    return None


def _compare_rows(names, params, group, size, mode, what):
    fp = torch.zeros(max(len(names), 1), 2, dtype=torch.float64)
    with torch.no_grad():
        for i, name in enumerate(names):
            t = params[name]._local_tensor.detach().to("cpu", torch.float64)
            fp[i, 0], fp[i, 1] = t.sum(), (t * t).sum()
    every = [torch.empty_like(fp) for _ in range(size)]
    dist.all_gather(every, fp, group=group)
    bits = torch.stack(every).view(torch.int64)
    for i, name in enumerate(names):
        d = next((d for d in range(1, size) if not torch.equal(bits[d, i], bits[0, i])), None)
        if d is None:
            continue
        if mode == "broadcast":
            with torch.no_grad():
                src = dist.get_global_rank(group, 0)
                dist.broadcast(params[name]._local_tensor, src=src, group=group)
            continue
        return (what(name, d) + ", and they must start equal. Seed every rank alike, or pass "
                "check_replicas='broadcast' to copy the first one's values, or "
                "check_replicas=False to skip the check")
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
