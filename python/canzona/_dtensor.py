"""DTensor parameters (torch.distributed.tensor) as canzona.torch.Optimizer takes them: tensor
parallelism expressed by torch's own parallelize_module plans (ColwiseParallel, RowwiseParallel,
...) over the "tp" dimension of a DeviceMesh, as torchtitan builds its models.

What canzona runs is the local tensor: its TP dimension comes from the placement (Shard(d) over
the TP mesh dimension: tp_dim d; Replicate(): replicated), its storage becomes a view of the flat
parameter buffer, and its gradient is the DTensor gradient's local tensor. Placements canzona
cannot run are refused by name (the caller agrees the message across ranks)."""
from .planning import _match

try:  # torch >= 2.5; canzona.torch refuses older versions at import
    from torch.distributed.tensor import DTensor, Replicate, Shard
except ImportError:  # pragma: no cover - only an unsupported torch gets here
    DTensor = Replicate = Shard = None


def is_dtensor(t):
    return DTensor is not None and isinstance(t, DTensor)


def local(t):
    """The local tensor of a DTensor (a parameter or a gradient), else t itself."""
    return t._local_tensor if is_dtensor(t) else t


def local_shape(p):
    return list(local(p).shape)


def rebind(p, view):
    """Makes view (a slice of the flat buffer, the local tensor's values already copied in) the
    storage p reads and writes. For a DTensor parameter that is its local tensor: assigning
    .data would copy it, not share it. (_local_tensor is what DTensor's dispatch unwraps and what
    FSDP2 itself replaces.)"""
    if is_dtensor(p):
        p._local_tensor = view
    else:
        p.data = view


def wrap_grad(p, view):
    """A gradient for p whose local tensor is view: a DTensor with p's mesh and placements for a
    DTensor parameter (so that backward accumulates into view in place), view itself otherwise."""
    if not is_dtensor(p):
        return view
    return DTensor.from_local(view, p.device_mesh, p.placements, run_check=False,
                              shape=p.shape, stride=p.stride())


def _mesh_text(mesh):
    names = mesh.mesh_dim_names or tuple(f"dim{i}" for i in range(mesh.ndim))
    return "(" + ", ".join(f"{n}={s}" for n, s in zip(names, mesh.mesh.shape)) + ")"


def _tp_index(mesh, tp_ranks):
    """Which dimension of mesh is the job's TP dimension: the one named "tp", else the one whose
    process group holds exactly this rank's TP ranks; None when none is."""
    import torch.distributed as dist

    names = tuple(mesh.mesh_dim_names or ())
    if "tp" in names:
        return names.index("tp")
    for i in range(mesh.ndim):
        if sorted(dist.get_process_group_ranks(mesh.get_group(i))) == sorted(tp_ranks):
            return i
    return None


def tp_mesh_group(named):
    """The TP process group the DTensor parameters' mesh gives (its "tp" dimension, or its only
    dimension), or None without DTensor parameters; for a job that passes neither tp_group nor
    mesh. A mesh that names no TP dimension gives None: the checks below refuse it by name."""
    for _, p in named:
        if is_dtensor(p):
            mesh = p.device_mesh
            names = tuple(mesh.mesh_dim_names or ())
            if "tp" in names:
                return mesh.get_group("tp")
            if mesh.ndim == 1:
                return mesh.get_group()
            return None
    return None


def check(named, tp, tp_ranks, tp_dims):
    """(message or None, {name: tp_dim}) for the DTensor parameters among named: each must sit
    on one mesh shared by all of them, whose TP dimension is this job's TP group, placed
    Shard(d) (evenly: the size along d divisible by the TP size) or Replicate() over it and
    Replicate() over every other dimension. tp_dims, the caller's declarations, may not
    contradict a placement."""
    dims = {}
    first = None
    for name, p in named:
        if not is_dtensor(p):
            continue
        mesh, placements = p.device_mesh, tuple(p.placements)
        where = f"parameter {name!r} (a DTensor on mesh {_mesh_text(mesh)}, placements {placements})"
        ti = _tp_index(mesh, tp_ranks)
        if ti is None:
            return (f"{where}: no dimension of its mesh is the job's TP group (ranks "
                    f"{sorted(tp_ranks)}); name it \"tp\""), dims
        if mesh.mesh.shape[ti] != tp:
            return (f"{where}: its TP dimension has {mesh.mesh.shape[ti]} ranks, the job's TP "
                    f"group {tp}"), dims
        tp_dim = None
        for i, pl in enumerate(placements):
            if i != ti:
                if isinstance(pl, Shard):
                    return (f"{where} is sharded over mesh dimension "
                            f"{(mesh.mesh_dim_names or ('?',) * mesh.ndim)[i]!r} outside "
                            "FSDP2: canzona runs fully sharded parameters of a model wrapped "
                            "with fully_shard (docs/PYTHON.md, \"FSDP2\"), and otherwise "
                            "shards over DP itself (ZeRO-1): give it the TP-parallel model "
                            "without a DP shard"), dims
                if not isinstance(pl, Replicate):
                    return (f"{where}: placement {pl} over mesh dimension {i}; canzona takes "
                            "Replicate() there"), dims
                continue
            if type(pl) is Shard:
                d = pl.dim % p.ndim
                if d > 1:
                    return f"{where}: sharded along dimension {d}; canzona takes 0 or 1", dims
                if p.shape[d] % tp:
                    return (f"{where}: uneven shards ({p.shape[d]} along dimension {d} over "
                            f"{tp} TP ranks); canzona takes shards of equal size"), dims
                tp_dim = d
            elif not isinstance(pl, Replicate):
                return (f"{where}: placement {pl} over the TP dimension; canzona takes Shard(0), "
                        "Shard(1) or Replicate() (a Partial() parameter is not yet reduced)"), dims
        # After the placements: a sharded-over-DP parameter is named as that, not as "another mesh".
        if first is None:
            first = (name, mesh)
        elif mesh != first[1]:
            return (f"{where} is on another mesh than {first[0]!r} ({_mesh_text(first[1])}): "
                    "canzona takes every DTensor parameter on one mesh"), dims
        found, d = _match(tp_dims, name)
        if found and d != tp_dim:
            return (f"{where}: tp_dims says {d}, which contradicts its placement (leave "
                    "DTensor parameters out of tp_dims)"), dims
        dims[name] = tp_dim
    return None, dims


def blocks_along_shard(named, blocks, dims):
    """A message when blocks declares a fused DTensor parameter's blocks along its TP shard
    dimension: torch's Shard(d) cuts the fused tensor in contiguous pieces, not block by block
    as Megatron lays a fused QKV out, so a TP rank's piece is not made of whole blocks' slices."""
    for name, p in named:
        if not is_dtensor(p) or dims.get(name) is None:
            continue
        found, blk = _match(blocks, name)
        if found and int(blk[0]) == dims[name]:
            return (f"parameter {name!r}: blocks along dimension {blk[0]}, which its placement "
                    f"Shard({blk[0]}) cuts contiguously, not block by block; declare the blocks "
                    "as separate parameters (as torchtitan's wq, wk, wv) or shard along the "
                    "other dimension")
    return None

