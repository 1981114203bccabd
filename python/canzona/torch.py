"""canzona as a torch.optim.Optimizer: the whole distributed optimizer step (gradient
reduce-scatter over DP, AdamW, Muon on whole matrices through the plan's micro-groups over TP,
parameter all-gather) for a job started by torchrun, over the job's own process groups.

    import canzona.torch
    opt = canzona.torch.Optimizer(model, tp_group=tp_group, tp_dims={"*.qkv.weight": 0},
                                  lr=0.01, adamw_lr=2e-3)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, 50)
    for x, y in data:
        loss_fn(model(x), y).backward()   # no DP all-reduce: step() reduce-scatters
        opt.step(); sched.step(); opt.zero_grad()

See docs/PYTHON.md. Needs torch 2.5 or newer (CPU with gloo, or CUDA with NCCL); tested on 2.13.
"""
import contextlib
import ctypes
import datetime
import hashlib
import json
import math
import os
import tempfile
import weakref

import torch
import torch.distributed as dist

_MIN_TORCH = (2, 5)
if tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2]) < _MIN_TORCH:
    raise ImportError(f"canzona.torch needs torch {_MIN_TORCH[0]}.{_MIN_TORCH[1]} or newer "
                      f"(post-accumulate-grad hooks, torch.distributed.tensor); this is "
                      f"{torch.__version__}")

from . import _clip_guard, _dtensor, _fsdp, _lib, _ns_coeffs, _replicas, qk_clip, safetensors
from ._dtensor import local as _local
from ._lib import Error, check
from ._fresh import FreshGrads
from ._fresh import refusal as no_grad_refusal
from ._overlap import BucketOverlap
from ._rendezvous import Rendezvous, default_store
from ._state_view import StateView
from ._torch_comm import TorchComm, global_ranks
from .planning import model_description, plan_text

_DEFAULT = object()  # "argument left out": the optimizer's default, never a value
_CONSTRUCTED = [0]  # constructor calls in this process: every rank makes the same ones
_BACKWARD = "backward (overlap=True: the first bucket's reduce-scatter)"

# The hyper-parameters the executor's configuration takes from the constructor, with their
# range checks (the executor checks again; these messages name the Python argument).
_UNIT = ("momentum", "adamw_beta1", "adamw_beta2")
# Parameter-group keys of torch's optimizers that canzona takes only for all groups.
_ONE_FOR_ALL = frozenset(("momentum", "nesterov", "betas", "eps", "ns_steps", "ns_coefficients",
                          "adjust_lr_fn", "amsgrad", "maximize", "dampening"))


def _cluster(dp, tp):
    """A cluster description of the job's shape. The planner balances by its rates; these
    modest figures only steer the balance (pass cluster= for a real machine's)."""
    return {"schema": "canzona.cluster/1", "name": f"torch-dp{dp}-tp{tp}", "gpus": dp * tp,
            "dp": dp, "tp": tp, "pp": 1, "gpus_per_node": dp * tp,
            "device": {"name": "torch", "matmul_tflops": 1.0, "mem_gbps": 50.0,
                       "memory_gib": 16.0},
            "links": {"intra_node_gbps": 10.0, "inter_node_gbps": 10.0, "latency_us": 5.0}}


def _named_groups(params):
    """(groups of (name, parameter) pairs with their options, the module or None) from a module,
    an iterable of (name, parameter) pairs, or parameter groups (dicts) whose "params" are
    such pairs (or a module)."""
    module = None
    if isinstance(params, torch.nn.Module):
        module = params
        params = list(params.named_parameters())
    params = list(params)
    if not params:
        raise ValueError("Optimizer got no parameters")
    if isinstance(params[0], dict):
        groups = []
        for k, g in enumerate(params):
            g = dict(g)
            named = g.pop("params")
            if isinstance(named, torch.nn.Module):
                named = list(named.named_parameters())
            named = list(named)
            if not all(isinstance(x, tuple) and len(x) == 2 for x in named):
                raise TypeError(f"param group {k}: canzona plans by name; give "
                                "(name, parameter) pairs, e.g. model.named_parameters()")
            groups.append((named, g))
        return groups, module
    if not all(isinstance(x, tuple) and len(x) == 2 for x in params):
        raise TypeError("canzona plans by name: give the module, its named_parameters(), or "
                        "parameter groups of (name, parameter) pairs")
    return [(params, {})], module


# The modules whose matrices go to AdamW by default: the input embeddings and the output head
# (Megatron-LM's, torchtitan's and Keller Jordan's Muon practice), found by the name of the
# module holding the parameter (the name's last part but one): a name containing "embed"
# (embed, embed_tokens, tok_embeddings, word_embeddings), or one of these.
_HEAD_NAMES = frozenset(("lm_head", "output", "output_layer", "head", "wte", "wpe"))


def _default_elementwise(named, module):
    """The names of the parameters AdamW takes by default although they are matrices: those of
    an nn.Embedding or nn.EmbeddingBag module of module (a Linear tied to one shares its
    weight), and those whose holding module's name contains "embed" or is in _HEAD_NAMES."""
    embedded = set()
    if module is not None:
        for mod in module.modules():
            if isinstance(mod, (torch.nn.Embedding, torch.nn.EmbeddingBag)):
                embedded.update(id(p) for p in mod.parameters(recurse=False))
    out = []
    for name, p in named:
        holder = name.rsplit(".", 2)[-2].lower() if "." in name else ""
        if id(p) in embedded or "embed" in holder or holder in _HEAD_NAMES:
            out.append(name)
    return out


def _world_groups(dp_group, tp_group, mesh, backend, timeout):
    """(dp_group, tp_group, dp ranks, tp ranks) of this rank: the mesh's "dp"/"tp" dimensions,
    the groups given, or groups made from the world as torchrun started it (TP innermost,
    the tp group's size from tp_group or 1), of backend (None: the default group's), whose
    collectives time out after timeout (a timedelta; None: torch's default)."""
    if mesh is not None:
        names = tuple(getattr(mesh, "mesh_dim_names", None) or ())
        if dp_group is None and "dp" in names:
            dp_group = mesh.get_group("dp")
        if tp_group is None and "tp" in names:
            tp_group = mesh.get_group("tp")
    world, me = dist.get_world_size(), dist.get_rank()
    tp_ranks = global_ranks(tp_group) if tp_group is not None else None
    dp_ranks = global_ranks(dp_group) if dp_group is not None else None
    tp = len(tp_ranks) if tp_ranks else (world // len(dp_ranks) if dp_ranks else 1)
    if world % tp:
        raise Error(_lib.CZ_EMISMATCH, f"the TP group has {tp} ranks, which does not divide the "
                                       f"world's {world}")
    dp = world // tp
    # Groups the job did not give are made here; new_group is collective over the world, so
    # every rank makes every group in the same order.
    if tp_group is None:
        for d in range(dp):
            ranks = [d * tp + t for t in range(tp)]
            g = dist.new_group(ranks, backend=backend, timeout=timeout)
            if me in ranks:
                tp_group, tp_ranks = g, ranks
    if dp_group is None:
        for t in range(tp):
            ranks = [d * tp + t for d in range(dp)]
            g = dist.new_group(ranks, backend=backend, timeout=timeout)
            if me in ranks:
                dp_group, dp_ranks = g, ranks
    return dp_group, tp_group, dp_ranks, tp_ranks


def _state_checksum(state, step):
    """sha256 over the state's tensors (name, field, shape, float32 bytes) and the step, in a
    fixed order: what state_dict() records and load_state_dict() checks."""
    h = hashlib.sha256(str(int(step)).encode())
    for name in sorted(state):
        for field in sorted(state[name]):
            t = state[name][field].detach().to("cpu", torch.float32).contiguous()
            h.update(f"\0{name}.{field}{list(t.shape)}".encode())
            h.update(t.numpy().tobytes())
    return "sha256:" + h.hexdigest()


class Optimizer(torch.optim.Optimizer):
    """canzona's optimizer step as a torch.optim.Optimizer.

    Optimizer(params, *, dp_group=None, tp_group=None, mesh=None, plan=None, save_plan=None,
              tp_dims=None, blocks=None, heads=None, optimizers=None, cluster=None,
              lr=<default>, weight_decay=0.01, momentum=0.95, nesterov=True, ns_steps=None,
              ns_coefficients=None, muon_scaling="rms", normuon=None, normuon_beta2=0.95,
              normuon_eps=1e-8, adamw_lr=<default>, adamw_betas=(0.9, 0.95),
              adamw_eps=1e-8, adamw_weight_decay=<weight_decay>, max_grad_norm=0.0,
              grad_reduce_in_fp32=False, overlap=False, early_updates=False, bucket_size=None, timeout=600.0,
              unused_parameters=False, check_replicas=True, **executor_options)

    params: the module, its named_parameters(), or parameter groups (dicts) whose "params"
      are (name, parameter) pairs; each group may set "lr" and "weight_decay". Every
      parameter of the plan must be given exactly once. Frozen parameters (requires_grad=False)
      are left out and never touched; one frozen later gets rate and decay 0 while frozen.
      By default AdamW takes the 1-D parameters, those of nn.Embedding modules and those whose
      module's name has "embed" in it or is lm_head, output, output_layer, head, wte or wpe
      (the embeddings and the output head), Muon the other matrices; optimizers= overrides. Parameters hold this rank's TP shard:
      plain tensors (Megatron-style shards), or DTensors that torch's parallelize_module made
      over the mesh's "tp" dimension, whose placements give the TP dimension (Shard(0),
      Shard(1), Replicate(); anything else is refused by name, docs/PYTHON.md). A model wrapped
      with FSDP2's fully_shard (every parameter Shard(0) over a 1-D mesh, or HSDP's
      (Replicate(), Shard(0))) runs the fully sharded plan over the mesh's shard group instead:
      FSDP2 reduces the gradients and gathers the parameters, each matrix's owner gathers its
      rows, and each rank updates its own rows in place (CPU and TP 1; docs/PYTHON.md, "FSDP2").
    dp_group, tp_group, mesh: the job's DP and TP process groups, or a DeviceMesh with "dp" and
      "tp" dimensions; by default the TP group of the DTensor parameters' mesh, else the world
      as torchrun started it, TP innermost (world rank = dp_rank * tp + tp_rank), with tp = the
      tp_group's size (1 without one).
    plan: a plan file (canzona plan) to run; None: planned here, through libcanzona, from the
      parameters (save_plan: a path to write that plan to, for canzona inspect).
    tp_dims, blocks, heads, optimizers: declarations as canzona.model_description takes them
      (heads: per-head Muon, {pattern: (dim, size)}, docs/PYTHON.md); a
      parameter with Megatron's attributes (tensor_model_parallel, partition_dim) or a DTensor
      parameter needs none. With the same rates, Muon equals torch.optim.Muon with
      adjust_lr_fn="match_rms_adamw" (muon_scaling="rms") or "original" ("shape"), and AdamW
      torch.optim.AdamW (docs/PYTHON.md lists the arguments).
    lr, weight_decay: of the matrix (Muon) parameters; adamw_lr, adamw_weight_decay of the
      others. Left out: the optimizer's default (Muon: 1e-3 under "rms" scaling, 0.02 under
      "shape"; AdamW 3e-4); 0 is 0. A parameter group without "lr" takes lr when all its
      parameters are matrices, adamw_lr when none is; a group that mixes them needs its own.
    max_grad_norm: clip the global norm of the averaged gradient (0: off; clip_grad_norm_,
      whose returned 0-d tensor the next step() fills with the norm).
    grad_reduce_in_fp32: bf16 parameters only: reduce the gradients over DP in fp32 (Megatron's
      --grad-reduce-in-fp32: twice the bytes, no rounding of the sum); False (default): in
      bf16, as they are, each pairwise sum rounded to bf16 (docs/EXECUTOR.md, "On the wire").
      The parameters are all-gathered in bf16 either way.
    nccl_comms: CUDA only, the job's own (dp, tp) ncclComm_t handles (integers) for the data
      plane, borrowed (in the grid's rank order); None: the executor makes its own from a
      unique id sent over the control plane.
    overlap: the bucket-wise step (docs/PYTHON.md, "Overlap"): each bucket's gradient
      reduce-scatter starts in the backward pass as soon as its last gradient is accumulated
      (gradient hooks), step() finishes the step, and each bucket's parameter all-gather is
      waited for by a forward pre-hook of the modules holding its parameters. Accumulating
      micro-batches run inside `with opt.no_sync():` (all but the last), as with DDP. The
      results are the plain step's bit for bit.
    early_updates: with overlap, each micro-group's update runs in the backward pass, inside
      the gradient hook that declares its last bucket (docs/PYTHON.md, "Early updates"),
      instead of in step(); the same bits. It needs max_grad_norm = 0 and turns the NaN/Inf
      check off (check_finite = 0): both need every bucket before any update. The param
      groups' rates are read at the step's first bucket (set them before backward).
      opt.early_groups: the micro-groups this rank updated that way in its last step.
    bucket_size: gradient bucket size in elements of the plan made here (None: the planner's
      default, Megatron's max(4e7, 1e6 * DP); cluster's "buckets" otherwise). With overlap,
      smaller buckets start their reduce-scatter earlier in the backward pass.
    timeout: seconds every rank waits for the others at each collective call of the optimizer
      (the constructor, step(), state_dict(), load_state_dict(), an overlapped backward) and in
      the collectives of the groups it makes; past it every rank that came raises, naming the
      call and the ranks that did not come (docs/PYTHON.md, "Collective calls and timeout=").
      None: no bound but the process groups' own.
    unused_parameters: False (default): step() refuses, on every rank, a trainable parameter
      without a gradient since the last step on some rank (a backward that failed part-way, a
      parameter the loss does not reach), as DDP does; True: such a parameter counts as a zero
      gradient there (DDP's find_unused_parameters=True). A rank without any gradient (no
      backward) is refused either way.
    check_replicas: True (default): the constructor refuses parameters that differ where they
      must be equal, compared by a fingerprint per parameter (sum and sum of squares, in
      float64): a replicated (not TP-sharded) parameter across the TP ranks, every parameter
      across the DP ranks; "broadcast": DP rank 0's values are copied to the other DP ranks
      instead (as DDP does), TP replicas are still checked; False: no check (one all-gather of
      16 bytes per parameter and rank saved).
    ns_coefficients: Muon's Newton-Schulz coefficients: a name ("jordan", the default;
      "cubic"; "polar_express", a table of 5 rows), one triple (a, b, c) for every iteration,
      or a sequence of triples, one per iteration. ns_steps: the iteration count; None
      (default): a table's row count, else 5. A table with a different ns_steps is refused.
    normuon: NorMuon on the Muon matrices (docs/PYTHON.md, "NorMuon"): "row" (Dion's NorMuon:
      after Newton-Schulz, each row of every unit Muon orthogonalizes, whole matrix, block or
      head, is divided by the square root of an EMA of its mean square, normuon_beta2 in
      [0, 1), plus normuon_eps, and the unit rescaled to its norm before), "col" (the same per
      column), or None (default: plain Muon). One second-moment value per row (column) of each
      unit, in state_dict() as "normuon_v".
    executor_options: further cz_exec_config fields (canzona.Executor's, e.g. ns_eps).
    """

    def __init__(self, params, *, dp_group=None, tp_group=None, mesh=None, plan=None,
                 save_plan=None, tp_dims=None, blocks=None, heads=None, optimizers=None,
                 cluster=None, lr=_DEFAULT, weight_decay=0.01, momentum=0.95, nesterov=True,
                 ns_steps=None, ns_coefficients=None, muon_scaling="rms", normuon=None,
                 normuon_beta2=0.95, normuon_eps=1e-8, adamw_lr=_DEFAULT,
                 adamw_betas=(0.9, 0.95),
                 adamw_eps=1e-8, adamw_weight_decay=_DEFAULT, max_grad_norm=0.0,
                 grad_reduce_in_fp32=False, nccl_comms=None, overlap=False,
                 early_updates=False, bucket_size=None, timeout=600.0, unused_parameters=False,
                 check_replicas=True, **executor_options):
        if not dist.is_available() or not dist.is_initialized():
            raise Error(_lib.CZ_EINVALID,
                        "canzona.torch.Optimizer needs torch.distributed initialized "
                        "(dist.init_process_group; torchrun sets its env:// rendezvous up), also "
                        "for one process")
        if timeout is not None and not (isinstance(timeout, (int, float)) and
                                        math.isfinite(timeout) and timeout > 0):
            raise ValueError(f"timeout = {timeout!r}; expected seconds > 0, or None (no bound)")
        if check_replicas not in (True, False, "broadcast"):
            raise ValueError(f"check_replicas = {check_replicas!r}; expected True, False or "
                             "'broadcast'")
        if unused_parameters not in (True, False):
            raise ValueError(f"unused_parameters = {unused_parameters!r}; expected True or False")
        if ns_coefficients is not None:
            if "ns_coeffs" in executor_options:
                raise TypeError("ns_coefficients and ns_coeffs name the same setting; give one")
            executor_options["ns_coeffs"] = ns_coefficients
        # Checked here, before any collective: the same on every rank, and a table's length.
        ns_steps = _ns_coeffs.steps(executor_options.get("ns_coeffs", "jordan"), ns_steps)
        # Construction is collective: every rank announces it (the constructor calls' count in
        # this process, the same on every rank), so that a rank that never builds the optimizer
        # is named within timeout instead of leaving the others in a collective.
        world, me = dist.get_world_size(), dist.get_rank()
        k, _CONSTRUCTED[0] = _CONSTRUCTED[0], _CONSTRUCTED[0] + 1
        store = default_store()
        Rendezvous(store, "canzona.torch/construct", world, me, timeout, first=k).arrive(
            "construction (canzona.torch.Optimizer(...))")
        self._rdv = Rendezvous(store, f"canzona.torch/{k}", world, me, timeout)
        self._unused_ok = bool(unused_parameters)
        group_timeout = None if timeout is None else datetime.timedelta(seconds=timeout)
        if early_updates and not overlap:
            raise ValueError("early_updates=True runs inside the bucket-wise step: pass "
                             "overlap=True too")
        if early_updates and not (isinstance(max_grad_norm, (int, float)) and
                                  max_grad_norm == 0):
            raise ValueError(f"early_updates=True with max_grad_norm = {max_grad_norm!r}: "
                             "clipping needs the global norm of every bucket before any update, "
                             "early updates run before it is known; pass max_grad_norm=0 or "
                             "early_updates=False")
        if early_updates:
            # A step whose micro-groups start in backward cannot be refused afterwards.
            executor_options.setdefault("check_finite", 0)
        if grad_reduce_in_fp32 not in (True, False, 0, 1):
            raise ValueError(f"grad_reduce_in_fp32 = {grad_reduce_in_fp32!r}; expected True or "
                             "False")
        executor_options["grad_reduce_in_fp32"] = int(grad_reduce_in_fp32)
        named_groups, module = _named_groups(params)
        self._module = weakref.ref(module) if module is not None else None
        # Frozen parameters (requires_grad=False) are left out: not planned, not bound, never
        # touched (torch's optimizers skip parameters without a gradient). The groups keep
        # their places, a group of frozen parameters only being empty.
        self._frozen = {n for g, _ in named_groups for n, p in g if not p.requires_grad}
        named_groups = [([x for x in g if x[1].requires_grad], o) for g, o in named_groups]
        if not any(g for g, _ in named_groups):
            raise ValueError("every parameter given is frozen (requires_grad=False): there is "
                             "nothing to optimize")
        if not (isinstance(adamw_betas, (tuple, list)) and len(adamw_betas) == 2):
            raise ValueError(f"adamw_betas = {adamw_betas!r}; expected a pair (beta1, beta2)")
        if nesterov not in (True, False, 0, 1):
            raise ValueError(f"nesterov = {nesterov!r}; expected True or False")
        for k, (_, opts) in enumerate(named_groups):
            # torch's optimizers take these per group; canzona takes them once, for all groups:
            # a group that sets one would be silently ignored.
            per_group = sorted(set(opts) & _ONE_FOR_ALL)
            if per_group:
                raise ValueError(f"param group {k} sets {per_group[0]!r}: canzona takes "
                                 "momentum, nesterov, betas, eps and the Newton-Schulz settings "
                                 "once for all groups (the constructor's arguments); a group "
                                 "sets only lr and weight_decay")
        hp = dict(momentum=momentum, adamw_beta1=adamw_betas[0], adamw_beta2=adamw_betas[1])
        for key in _UNIT:
            v = hp[key]
            if not (isinstance(v, (int, float)) and 0.0 <= v < 1.0):
                raise ValueError(f"{key} = {v!r}; expected 0 <= {key} < 1")
        for key, v in (("weight_decay", weight_decay), ("max_grad_norm", max_grad_norm),
                       ("lr", None if lr is _DEFAULT else lr),
                       ("adamw_lr", None if adamw_lr is _DEFAULT else adamw_lr),
                       ("adamw_weight_decay",
                        None if adamw_weight_decay is _DEFAULT else adamw_weight_decay)):
            if v is not None and not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
                raise ValueError(f"{key} = {v!r}; expected a finite value >= 0")
        if not (isinstance(adamw_eps, (int, float)) and adamw_eps > 0):
            raise ValueError(f"adamw_eps = {adamw_eps!r}; expected > 0")
        if muon_scaling not in ("rms", "shape"):
            raise ValueError(f"muon_scaling {muon_scaling!r}: expected 'rms' or 'shape'")
        # Checked here too (the executor checks again), before any collective, naming the
        # Python arguments.
        if normuon not in (None, "none", "row", "col"):
            raise ValueError(f"normuon = {normuon!r}; expected 'row', 'col' or None")
        if not (isinstance(normuon_beta2, (int, float)) and 0 <= normuon_beta2 < 1):
            raise ValueError(f"normuon_beta2 = {normuon_beta2!r}; expected 0 <= normuon_beta2 < 1")
        if not (isinstance(normuon_eps, (int, float)) and math.isfinite(normuon_eps) and
                normuon_eps > 0):
            raise ValueError(f"normuon_eps = {normuon_eps!r}; expected a finite value > 0")
        executor_options.update(normuon=normuon, normuon_beta2=normuon_beta2,
                                normuon_eps=normuon_eps)
        muon_lr = (1e-3 if muon_scaling == "rms" else 0.02) if lr is _DEFAULT else float(lr)
        elem_lr = 3e-4 if adamw_lr is _DEFAULT else float(adamw_lr)
        elem_wd = weight_decay if adamw_weight_decay is _DEFAULT else adamw_weight_decay

        device = next(p for g, _ in named_groups for _, p in g).device
        # The callbacks move host memory: on CPU the data plane's groups, and always the
        # control plane's world, must be gloo's (a CUDA job's default group is NCCL's).
        host = None if dist.get_backend() == "gloo" else "gloo"
        all_named = [x for g, _ in named_groups for x in g]
        # FSDP2 (fully_shard): the fully sharded plan over the mesh's shard group (_fsdp.py).
        self._fsdp = None
        if _fsdp.detected(all_named, module):
            self._fsdp = self._fsdp_mesh(all_named, device, dict(
                dp_group=dp_group, tp_group=tp_group, mesh=mesh, nccl_comms=nccl_comms,
                overlap=overlap, bucket_size=bucket_size))
            fm = self._fsdp
            dp_group, tp_group, dp_ranks, tp_ranks = fm.dp_group, fm.tp_group, fm.dp_ranks, \
                fm.tp_ranks
            ctrl_group, world_ranks, self._xrank = fm.group, fm.ranks, fm.rank
        else:
            if tp_group is None and mesh is None:
                # DTensor parameters carry their TP mesh: its group is the job's TP group.
                tp_group = _dtensor.tp_mesh_group(all_named)
            dp_group, tp_group, dp_ranks, tp_ranks = _world_groups(
                dp_group, tp_group, mesh, host if device.type == "cpu" else None, group_timeout)
            ctrl_group = dist.new_group(backend="gloo", timeout=group_timeout) if host else None
            world_ranks, self._xrank = None, me
        dp, tp = len(dp_ranks), len(tp_ranks)
        self.dp_rank, self.tp_rank = dp_ranks.index(me), tp_ranks.index(me)
        self.dp_group, self.tp_group = dp_group, tp_group

        names = [n for g, _ in named_groups for n, _ in g]
        # Every check that can fail comes before anything is changed, and the ranks agree on
        # the outcome, so that every rank raises (none is left waiting in a collective).
        msg = self._check_local(named_groups, device, tp, dp, me, dp_ranks, tp_ranks,
                                self._fsdp is None)
        # FSDP2 with TP: each parameter's TP dimension from its placement over "tp".
        self._dt_dims = {} if self._fsdp is None else dict(self._fsdp.tp_dims)
        if msg is None and self._fsdp is None:
            msg, self._dt_dims = _dtensor.check(all_named, tp, tp_ranks, tp_dims)
        if msg is None and self._fsdp is None:
            msg = _dtensor.blocks_along_shard(all_named, blocks, self._dt_dims)
        if msg is None and nccl_comms is not None and (device.type != "cuda" or
                                                       len(nccl_comms) != 2):
            msg = ("nccl_comms takes the job's (dp, tp) ncclComm_t handles, for CUDA "
                   f"parameters only (these are on {device})")
        self._nccl = None if nccl_comms is None else [ctypes.c_void_p(int(c))
                                                       for c in nccl_comms]
        text = None
        if msg is None and plan is None:
            try:
                desc = self._describe(named_groups, tp_dims, blocks, optimizers, tp,
                                      self._dt_dims, module, heads, full=self._fsdp is not None)
                cl = dict(cluster or _cluster(dp, tp))
                if bucket_size is not None:
                    cl["buckets"] = {"size": int(bucket_size)}
                text = plan_text(desc, cl, ns_coeffs=executor_options.get("ns_coeffs"),
                                 ns_steps=ns_steps,
                                 layout="fsdp" if self._fsdp is not None else None
                                 ) if me == 0 else None
            except Exception as e:  # noqa: BLE001 - every rank must learn it, not only this one
                msg = str(e) if isinstance(e, Error) else f"{type(e).__name__}: {e}"
        self._agree(msg)
        with tempfile.TemporaryDirectory(prefix="canzona-torch-") as tmp:
            if plan is None:
                box = [text]
                dist.broadcast_object_list(box, src=0)
                plan = os.path.join(tmp, "plan.json")
                with open(plan, "w") as f:
                    f.write(box[0])
                if save_plan is not None and me == 0:
                    with open(save_plan, "w") as f:
                        f.write(box[0])
            self._agree(self._check_topology(plan, dp, tp, self._fsdp))
            self._comm = TorchComm(dp_group, tp_group, dp_ranks, tp_ranks, ctrl_group,
                                   world_ranks)
            self._ex = self._create(plan, device, dict(
                lr=muon_lr, weight_decay=float(weight_decay), momentum=float(momentum),
                nesterov=int(bool(nesterov)), ns_steps=ns_steps, adamw_lr=elem_lr,
                adamw_beta1=float(adamw_betas[0]), adamw_beta2=float(adamw_betas[1]),
                adamw_eps=float(adamw_eps), adamw_weight_decay=float(elem_wd),
                max_grad_norm=float(max_grad_norm)), muon_scaling, executor_options)
            self._read_layout(plan)
        L = self._L = _lib.lib()
        n = L.cz_executor_param_count(self._ex)
        self._names = [L.cz_executor_param_name(self._ex, i).decode() for i in range(n)]
        self._index = {name: i for i, name in enumerate(self._names)}
        msg = self._check_names(names)
        if msg is None and self._fsdp is not None:
            msg = _fsdp.check_rows(all_named, self._fsdp, self._shape, self._local_shape)
        elif msg is None:
            msg = self._check_shapes(named_groups)
        try:
            self._agree(msg)
            by_name = {n: p for g, _ in named_groups for n, p in g}
            if self._fsdp is not None:
                # FSDP2's shards are disjoint across the shard group; HSDP's replicas of each
                # shard must be equal.
                self._agree(_fsdp.check_replicas(self._names, by_name, self._fsdp,
                                                 check_replicas))
                differ = []
            else:
                differ = _replicas.check(self._names, by_name, self._tp_dim, dp, tp,
                                         check_replicas)
        except Error:
            self.close()
            raise

        # The groups torch sees: every group with its rate and decay resolved now, so that
        # schedulers find numbers (their initial_lr).
        torch_groups = []
        if len(named_groups) == 1 and not named_groups[0][1]:
            # No groups given: a Muon group and an AdamW group, each with its own rate and
            # decay (the constructor's lr/weight_decay and adamw_lr/adamw_weight_decay).
            named = named_groups[0][0]
            named_groups = [(m, o) for m, o in (
                ([x for x in named if self._kind[x[0]] == "matrix"],
                 {"lr": muon_lr, "weight_decay": weight_decay}),
                ([x for x in named if self._kind[x[0]] != "matrix"],
                 {"lr": elem_lr, "weight_decay": elem_wd})) if m]
        for k, (named, opts) in enumerate(named_groups):
            kinds = {self._kind[n] for n, _ in named}
            g = {"params": [p for _, p in named], "names": [n for n, _ in named]}
            if "lr" in opts:
                g["lr"] = opts["lr"]
            elif kinds <= {"matrix"}:  # an empty group (frozen parameters only) too
                g["lr"] = muon_lr
            elif kinds == {"elementwise"}:
                g["lr"] = elem_lr
            elif lr is not _DEFAULT:
                g["lr"] = float(lr)
            else:
                self.close()
                raise ValueError(f"param group {k} mixes matrix (Muon) and elementwise (AdamW) "
                                 "parameters: give it an lr (or split it)")
            if "weight_decay" in opts:
                g["weight_decay"] = opts["weight_decay"]
            else:
                g["weight_decay"] = weight_decay if kinds <= {"matrix"} else elem_wd
            g.update({k2: v for k2, v in opts.items() if k2 not in ("lr", "weight_decay")})
            # One momentum for all groups, but changeable between steps (OneCycleLR and
            # CyclicLR cycle "momentum", the key "momentum" in defaults makes them find).
            g["momentum"] = float(momentum)
            g["betas"] = (float(adamw_betas[0]), float(adamw_betas[1]))
            torch_groups.append(g)
        self._built = False
        super().__init__(torch_groups, dict(lr=muon_lr, weight_decay=weight_decay,
                                            momentum=float(momentum)))
        self._built = True
        self._momentum = (float(momentum), float(adamw_betas[0]), float(adamw_betas[1]))
        self._steps_done = 0  # successful steps and loads: opt.state's cache key

        if self._fsdp is not None:
            self._bind_fsdp(named_groups)
        else:
            self._bind(named_groups, device)
        with torch.no_grad():
            for name in differ:  # check_replicas="broadcast": DP rank 0's values, as DDP
                dist.broadcast(self._pviews[name], src=dp_ranks[0], group=dp_group)
        # Which parameters received a gradient since the last step (item 9 of issue 39): a
        # post-accumulate-grad hook per parameter; step() refuses a parameter without one.
        if self._fsdp is not None:
            self._fresh = _fsdp.FreshGrads(self._params)
        else:
            self._fresh = FreshGrads(self._params, self._gviews)
            # torch.nn.utils.clip_grad_norm_ would clip these .grad by this rank's unreduced
            # norm: refused on them, pointing to clip_grad_norm_ here (_clip_guard.py). FSDP2's
            # gradients are DTensors, whose norm torch computes over every shard: allowed.
            _clip_guard.guard(self._params.items())
        self._rates = None
        self._max_grad_norm = self._set_norm = float(max_grad_norm)
        self.grad_norm = None
        self._pending_norms = []  # what clip_grad_norm_ returned, filled by the next step
        self._qk_count = None  # QK-clip: layers x heads of its description (None: off)
        self._qk_pending = None  # the maxima qk_logits handed for the next step
        self._early = bool(early_updates)
        self._buckets = None
        if overlap:
            module = self._module() if self._module is not None else None
            self._buckets = BucketOverlap(
                self._L, self._ex, self._index, self._params, self._gviews, module,
                self._adopt_grad, self._push_group_rates if self._early else None,
                lambda: self._rdv.arrive(_BACKWARD))
        if self._early:
            err = _lib.CzError()
            check(self._L.cz_executor_set_early_updates(self._ex, 1, ctypes.byref(err)), err)

    @property
    def early_groups(self):
        """The micro-groups this rank updated in the backward pass of its last step (early
        updates; 0 without them)."""
        return int(self._L.cz_executor_early_groups(self._ex)) if self._ex is not None else 0

    # ---- QK-clip ----
    def set_qk_clip(self, tau, layers, heads_per_layer, runs):
        """QK-clip (MuonClip) for the following steps: after each step whose maxima were handed
        (qk_logits), every head whose largest logit exceeded tau has its query and key rows
        scaled, on the fp32 master copy and so on every replica. runs: canzona.qk_clip's
        helpers' tuples over the model's parameter names (whole, unsharded rows); None clears
        it. Every rank the same; refused with early_updates. docs/PYTHON.md, "QK-clip"."""
        if self._ex is None:
            raise Error(_lib.CZ_EINVALID, "the optimizer was closed")
        err = _lib.CzError()
        if runs is None:
            check(self._L.cz_executor_set_qk_clip(self._ex, None, ctypes.byref(err)), err)
            self._qk_count = self._qk_pending = None
            return
        spec = qk_clip._Spec(tau, layers, heads_per_layer, runs)
        check(self._L.cz_executor_set_qk_clip(self._ex, ctypes.byref(spec.spec),
                                              ctypes.byref(err)), err)
        self._qk_count, self._qk_pending = spec.count, None

    def qk_logits(self, max_logits):
        """This rank's largest pre-softmax logit of every attention head in the coming step's
        forward, layers x heads (a tensor, array or nested list, layer-major), -inf for the
        heads this rank did not compute (another TP rank's). The next step() MAX-reduces them
        over every rank and clips; a step without them clips nothing. Checked there, before
        anything changes: a wrong count, a NaN or +Inf on any rank refuses the step on every
        rank."""
        self._qk_pending = qk_clip.maxima(max_logits)

    @property
    def qk_clipped(self):
        """The (layer, head) pairs the last step found above tau: the same on every rank."""
        return int(self._L.cz_executor_qk_clipped(self._ex)) if self._ex is not None else 0

    def _qk_check(self):
        """The handed maxima's refusal on this rank (a message), before the step's agreement."""
        if self._qk_pending is None:
            return None
        arr, n = self._qk_pending
        if self._qk_count is None:
            return "qk_logits() was called, but no QK-clip is set (set_qk_clip first)"
        if n != self._qk_count:
            return (f"qk_logits(): {n} maxima; the QK-clip description has {self._qk_count} "
                    "(layers x heads, -inf for the heads this rank did not compute)")
        bad = [k for k in range(n) if math.isnan(arr[k]) or arr[k] == math.inf]
        if bad:
            return (f"qk_logits(): the maximum of entry {bad[0]} (layer-major) is "
                    f"{arr[bad[0]]}; nothing is clipped from a NaN or +Inf (the forward "
                    "overflowed?)")
        return None

    def _qk_hand(self):
        """Hands the checked maxima to the executor for this step (none: it clips nothing)."""
        pending, self._qk_pending = self._qk_pending, None
        if pending is not None:
            err = _lib.CzError()
            check(self._L.cz_executor_qk_logits(self._ex, pending[0], pending[1],
                                                ctypes.byref(err)), err)

    @property
    def wire(self):
        """The DP exchanges on the wire: their dtypes ("fp32" or "bf16") and the bytes this
        rank posted since the optimizer was made; and the bytes it sent in the fp32
        micro-group exchanges, tp_bytes and etp_bytes (cz_executor_wire; canzona.Executor.wire)."""
        w = _lib.Wire()
        self._L.cz_executor_wire(self._ex, ctypes.byref(w))
        names = {_lib.DTYPE_FP32: "fp32", _lib.DTYPE_BF16: "bf16"}
        return {"grad_dtype": names[w.grad_dtype], "param_dtype": names[w.param_dtype],
                "grad_bytes": w.grad_bytes, "param_bytes": w.param_bytes,
                "tp_bytes": w.tp_bytes, "etp_bytes": w.etp_bytes}

    # ---- construction ----
    def _fsdp_mesh(self, named, device, given):
        """The FSDP2 job's shard mesh (_fsdp.Mesh), after refusing, alike on every rank, what a
        fully sharded step cannot take (arguments, then the parameters' placements)."""
        if given["overlap"]:
            raise ValueError("overlap=True with FSDP2 (fully_shard): FSDP2 reduce-scatters the "
                             "gradients and all-gathers the parameters itself, so there are no "
                             "buckets for canzona to overlap; pass overlap=False")
        for key in ("dp_group", "tp_group", "mesh", "nccl_comms", "bucket_size"):
            if given[key] is not None:
                raise ValueError(f"{key}= with FSDP2 (fully_shard): the fully sharded step runs "
                                 "over the parameters' own mesh (its shard dimension), with no "
                                 "TP and no buckets; leave it out")
        if device.type != "cpu":
            raise Error(_lib.CZ_EUNSUPPORTED, (
                f"FSDP2 parameters on {device}: canzona's fully sharded step runs on CPU "
                "tensors over gloo in this release (its exchanges over NCCL are not yet run on "
                "a GPU, so the executor refuses them); docs/PYTHON.md, \"FSDP2\""))
        msg, fm = _fsdp.mesh_of(named)
        for g in (() if msg else (fm.dp_group, fm.tp_group)):
            if g is not None and dist.get_backend(g) != "gloo":
                msg = (f"the FSDP2 mesh's groups are {dist.get_backend(g)}'s; canzona's "
                       "fully sharded step moves CPU tensors and needs gloo's")
        self._agree(msg)
        fm.open_world()
        return fm

    @staticmethod
    def _check_local(named_groups, device, tp, dp, me, dp_ranks, tp_ranks, grid=True):
        if grid and me != dp_ranks.index(me) * tp + tp_ranks.index(me):
            return ("the DP and TP groups must lay ranks out TP innermost (world rank = dp_rank "
                    f"* tp + tp_rank, as Megatron and torchrun's mesh do); rank {me} is DP rank "
                    f"{dp_ranks.index(me)}, TP rank {tp_ranks.index(me)} of tp = {tp}")
        seen = {}
        for named, _ in named_groups:
            for name, p in named:
                if name in seen:
                    return f"parameter {name!r} is given twice"
                seen[name] = p
                if p.device != device:
                    return (f"parameter {name!r} is on {p.device}, {next(iter(seen))!r} on "
                            f"{device}: canzona's buffers live on one device")
                if p.dtype not in (torch.float32, torch.bfloat16):
                    return f"parameter {name!r} is {p.dtype}; canzona takes float32 or bfloat16"
        if device.type not in ("cpu", "cuda"):
            return (f"the parameters are on {device}; canzona runs on cpu tensors, or cuda "
                    "tensors with a build that has the cuda backend")
        return None

    def close(self):
        """Frees the executor (every rank; the parameters stay views of the flat buffers, which
        live as long as they do). With overlap, the outstanding all-gathers complete first and
        the hooks are removed."""
        buckets, self._buckets = getattr(self, "_buckets", None), None
        if buckets is not None:
            buckets.close()
        fresh = getattr(self, "_fresh", None)
        if fresh is not None:
            fresh.close()
        _clip_guard.release(getattr(self, "_params", {}).values())
        ex, self._ex = getattr(self, "_ex", None), None
        if ex is not None:
            _lib.lib().cz_executor_free(ex)
        comm = getattr(self, "_comm", None)
        if comm is not None:
            comm.drain()  # gloo's workers let go of the step's tensors before the job exits

    def __del__(self):
        self.close()

    def _agree(self, msg, note=""):
        """Every rank raises when any rank failed, with the first failing rank's message (and
        this rank's note)."""
        msgs = [None] * dist.get_world_size()
        dist.all_gather_object(msgs, msg)
        for r, m in enumerate(msgs):
            if m is not None:
                raise Error(_lib.CZ_EINVALID, (m if m == msg else f"rank {r}: {m}") + note)

    @staticmethod
    def _describe(named_groups, tp_dims, blocks, optimizers, tp, dt_dims, module, heads=None,
                  full=False):
        """The model description: the DTensor parameters' placements (dt_dims, by exact name,
        ahead of any pattern), the declarations, or Megatron's attributes on the parameters
        (tensor_model_parallel, partition_dim). Shapes are the local tensors' (full: the
        DTensors' global shapes, for FSDP2). The optimizer of each parameter: the declarations
        (optimizers), else AdamW for the embeddings and the output head (_default_elementwise)
        and the 1-D parameters, Muon for other matrices."""
        named = [(n, p if full else _local(p)) for g, _ in named_groups for n, p in g]
        dims = dict(dt_dims)
        dims.update({k: v for k, v in (tp_dims or {}).items() if k not in dims})
        for name, p in named:
            if getattr(p, "tensor_model_parallel", False) and name not in dims:
                dims[name] = int(getattr(p, "partition_dim", 0))
        dtype = "bf16" if named[0][1].dtype == torch.bfloat16 else "fp32"
        # The declarations first (the first match wins), then the embeddings and the output
        # head by default to AdamW.
        opts = dict(optimizers or {})
        for name in _default_elementwise([x for g, _ in named_groups for x in g], module):
            opts.setdefault(name, "elementwise")
        # FSDP2's DTensors carry their global shapes already (TP's included).
        return model_description(named, name="torch-model", dtype=dtype, tp_dims=dims,
                                 blocks=blocks, optimizers=opts, tp_size=1 if full else tp,
                                 heads=heads)

    def _create(self, plan, device, floats, muon_scaling, options):
        L = _lib.lib()
        cfg = _lib.ExecConfig()
        L.cz_exec_config_init(ctypes.byref(cfg))
        cuda = device.type == "cuda"
        cfg.backend = b"cuda" if cuda else b"cpu"
        cfg.comm = b"nccl" if cuda else b"callbacks"
        cfg.memory = 1 if cuda else 0
        if cuda:
            # The step runs on torch's current stream of the parameters' device: ordered after
            # the backward pass's kernels and before the next forward's, with no synchronize.
            cfg.stream = ctypes.c_void_p(torch.cuda.current_stream(device).cuda_stream)
        cfg.dp_rank, cfg.tp_rank = self.dp_rank, self.tp_rank
        cfg.callbacks = ctypes.pointer(self._comm.cb)
        if self._nccl is not None:  # pointers to the job's handles, which outlive create
            cfg.dp_comm = ctypes.addressof(self._nccl[0])
            cfg.tp_comm = ctypes.addressof(self._nccl[1])
        cfg.muon.scaling = 0 if muon_scaling == "rms" else 1
        from .executor import _FLOAT_OPTIONS, _INT_OPTIONS, _NORMUON, _field

        # Flat option names (adamw_lr) to the config's fields (cfg.adamw.lr): ctypes would take
        # an unknown attribute silently, so every name goes through _field.
        for key, v in floats.items():
            setattr(*_field(cfg, key), v)
        for key, v in options.items():
            if key in _FLOAT_OPTIONS:
                setattr(*_field(cfg, key), float(v))
            elif key in _INT_OPTIONS:
                setattr(*_field(cfg, key), int(v))
            elif key == "ns_coeffs":
                cfg.muon.ns_coeffs = _ns_coeffs.text(v).encode()
            elif key == "normuon":
                cfg.normuon.mode = _NORMUON[v]
            else:
                raise TypeError(f"unknown option {key!r}")
        err = _lib.CzError()
        ex = ctypes.c_void_p()
        rc = L.cz_executor_create(ctypes.byref(ex), os.fsencode(plan), ctypes.byref(cfg),
                                  ctypes.byref(err))
        if rc != _lib.CZ_OK and self._comm.error is not None:
            raise Error(rc, err.message.decode(errors="replace")) from self._comm.error
        check(rc, err)
        return ex

    @staticmethod
    def _check_topology(plan, dp, tp, fsdp=None):
        """A plan made for another job shape, named before the executor is asked."""
        if os.path.isdir(plan):
            # This class reads the whole plan for its layout (every parameter's shard and
            # owner), which a split folder's parts do not hold (docs/EXECUTOR.md).
            return (f"{plan} is a folder; canzona.torch.Optimizer takes a plan file (a split "
                    f"plan folder's whole plan is {os.path.join(plan, 'plan.json')})")
        try:
            with open(plan) as f:
                doc = json.load(f)
            topo = doc["topology"]
        except (OSError, ValueError, KeyError) as e:
            return f"cannot read the plan {plan}: {e}"
        layout = doc.get("settings", {}).get("layout")
        if layout == "fsdp" and fsdp is None:
            return ("plan layout fsdp is for a model FSDP2 shards (fully_shard), and this job's "
                    "parameters are not sharded so: plan it with --layout unified (or split), "
                    "or wrap the model with fully_shard")
        if fsdp is not None and layout != "fsdp":
            return (f"the job's parameters are FSDP2 shards (fully_shard), the plan's layout is "
                    f"{layout or 'unified'}: plan it with --layout fsdp for DP{dp}·TP{tp} "
                    "(plan=None plans it here)")
        if fsdp is not None and (topo.get("dp"), topo.get("tp")) != (dp, tp):
            hsdp = (f"; under HSDP each of the {fsdp.replicas} replicas runs the plan of its "
                    "shard group, so plan for the shard size without --replicate-size"
                    if fsdp.replicas > 1 else "")
            tps = f" and its TP groups {tp}" if tp > 1 else ""
            return (f"the plan is for DP{topo.get('dp')}·TP{topo.get('tp')}, but this job's "
                    f"FSDP2 shard group has {dp} ranks{tps}{hsdp}")
        if (topo.get("dp"), topo.get("tp")) != (dp, tp):
            return (f"the plan is for DP{topo.get('dp')}·TP{topo.get('tp')}, but this job's "
                    f"groups are DP{dp}·TP{tp} (the world's {dp * tp} ranks, TP groups of {tp}): "
                    "plan for this shape, or pass the groups it was made for")
        return None

    def _read_layout(self, plan):
        """Each parameter's kind, and where its local shard starts in the flat buffers (its
        bucket's offset plus its own) with its local shape, from the plan the executor runs."""
        with open(plan) as f:
            doc = json.load(f)
        self._kind = {p["name"]: p["optimizer"] for p in doc["params"]}
        self._tp_dim = {p["name"]: p.get("tp_dim") for p in doc["params"]}
        self._shape = {p["name"]: list(p["shape"]) for p in doc["params"]}
        self._local_shape = {p["name"]: list(p["local_shape"]) for p in doc["params"]}
        if self._fsdp is not None:
            self._where = None  # no buckets: each rank's rows (_fsdp.check_rows)
            return
        buckets = {b["id"]: b["offset"] for b in doc["buckets"]}
        self._where = {p["name"]: (buckets[p["bucket"]] + p["offset"], list(p["local_shape"]))
                       for p in doc["params"]}

    def _check_names(self, names):
        unknown = [n for n in names if n not in self._index]
        if unknown:
            return (f"parameter {unknown[0]!r} is not in the plan ({len(unknown)} unknown; a "
                    "plan for another model?)")
        missing = sorted(set(self._index) - set(names))
        if missing and missing[0] in self._frozen:
            return (f"the plan's parameter {missing[0]!r} is frozen (requires_grad=False): "
                    "canzona leaves frozen parameters out; plan the model without it (plan=None "
                    "plans the trainable parameters)")
        if missing:
            return (f"the plan's parameter {missing[0]!r} was not given ({len(missing)} "
                    "missing; a plan for another model?)")
        return None

    def _check_shapes(self, named_groups):
        for named, _ in named_groups:
            for name, p in named:
                shape = self._where[name][1]
                if _dtensor.local_shape(p) != shape:
                    return (f"parameter {name!r} has local shape {_dtensor.local_shape(p)}; the "
                            f"plan's local shape is {shape} (a plan for another shape or TP "
                            "size?)")
        return None

    def _bind(self, named_groups, device):
        """Flat parameter and gradient buffers in the plan's layout on the parameters' device;
        each parameter's storage and .grad become views into them (values preserved)."""
        n = self._L.cz_executor_buffer_numel(self._ex)
        dtype = next(p for g, _ in named_groups for _, p in g).dtype
        self._flat_p = torch.zeros(n, dtype=dtype, device=device)
        self._flat_g = torch.zeros(n, dtype=dtype, device=device)
        self._params, self._gviews, self._pview_ptr, self._pviews = {}, {}, {}, {}
        with torch.no_grad():
            for named, _ in named_groups:
                for name, p in named:
                    off, shape = self._where[name]
                    lt = _local(p)
                    k = lt.numel()
                    pv = self._flat_p[off:off + k].view(lt.shape)
                    pv.copy_(lt)
                    _dtensor.rebind(p, pv)
                    gv = self._flat_g[off:off + k].view(lt.shape)
                    p.grad = _dtensor.wrap_grad(p, gv)
                    self._params[name] = p
                    self._pview_ptr[name] = pv.data_ptr()
                    self._pviews[name] = pv
                    self._gviews[name] = gv
        dt = _lib.DTYPE_FP32 if dtype == torch.float32 else _lib.DTYPE_BF16
        err = _lib.CzError()
        check(self._L.cz_executor_bind_typed(self._ex, ctypes.c_void_p(self._flat_p.data_ptr()),
                                             ctypes.c_void_p(self._flat_g.data_ptr()),
                                             ctypes.c_size_t(n), dt, ctypes.byref(err)), err)

    def _bind_fsdp(self, named_groups):
        """FSDP2: each parameter's local rows bound in place, a gradient buffer per parameter
        (_fsdp.Binding)."""
        params = {n: p for named, _ in named_groups for n, p in named}
        self._binding = _fsdp.Binding(self._L, self._ex, params)
        self._params, self._gviews = params, self._binding.grads
        self._pview_ptr, self._pviews = self._binding.ptr, {}
        self._flat_p = self._flat_g = None

    # ---- the bucket-wise step (overlap=True): its hooks and state are _overlap.py's ----
    def _push_group_rates(self):
        """With early updates, at the step's first bucket: the param groups' rates into the
        executor before any micro-group runs. Returns a message instead, on a failure."""
        msg, rates = self._group_rates()
        if msg is None:
            try:
                self._push_rates(rates)
            except Error as e:
                msg = str(e)
        return msg

    def wait_params(self):
        """Completes every parameter all-gather still outstanding after an overlapped step
        (the forward pre-hooks complete each bucket's before its module runs): call it before
        reading parameters outside a forward pass (evaluation through other code, saving the
        model). A no-op without overlap."""
        if getattr(self, "_buckets", None) is None or self._ex is None:
            return
        self._buckets.wait_params()

    def no_sync(self):
        """Backward passes inside accumulate their gradients without starting any bucket's
        reduce-scatter (as DDP's no_sync): every micro-batch but the last of a step. Without
        overlap it changes nothing (the step reduces once anyway)."""
        if getattr(self, "_buckets", None) is None:
            return contextlib.nullcontext()
        return self._buckets.no_sync()

    def _cancel(self):
        """Every rank ends an open overlapped step with nothing more updated (collective).
        Returns what early updates had already changed (a message), or None."""
        return self._buckets.cancel() if self._buckets is not None else None

    # ---- steps ----
    def _local_checks(self):
        """Before a step, on this rank: a parameter the module re-assigned or whose storage
        was replaced (a message), gradients re-attached to the flat buffer (a gradient torch
        made anew, after zero_grad(set_to_none=True) or a re-assigned .grad, copied in; none at
        all: zero), the rates of the parameter groups. Returns (message or None, the rates)."""
        module = self._module() if self._module is not None else None
        if module is not None:
            now = dict(module.named_parameters())
            for name, p in self._params.items():
                if now.get(name) is not p:
                    return (f"parameter {name!r} was re-assigned after the optimizer was built "
                            "(the module holds another tensor now): build the optimizer after "
                            "the model is final", None)
        for name, p in self._params.items():
            if (_local(p).data_ptr() != self._pview_ptr[name] or
                    _local(p).shape != self._gviews[name].shape):
                return (f"parameter {name!r}'s storage was replaced after the optimizer was "
                        "built (p.data = ...): canzona's step would not reach it", None)
        msg, rates = self._group_rates()
        if msg is not None:
            return msg, None
        if self._fsdp is not None:
            for name, p in self._params.items():
                msg = self._binding.adopt(name, p)
                if msg is not None:
                    return msg, None
            return None, rates
        with torch.no_grad():
            for name, p in self._params.items():
                view = self._gviews[name]
                if p.grad is None:
                    view.zero_()
                    p.grad = _dtensor.wrap_grad(p, view)
                    continue
                msg = self._adopt_grad(name, p, view)
                if msg is not None:
                    return msg, None
        return None, rates

    @staticmethod
    def _adopt_grad(name, p, view):
        """Makes p.grad a view of the flat gradient buffer again: a gradient torch made anew
        (zero_grad(set_to_none=True), a re-assigned .grad) is copied into view. Returns a
        message instead, nothing copied, when a DTensor parameter's gradient is not laid out as
        the parameter (a Partial() gradient is not reduced over TP yet: its local tensor is no
        shard of it)."""
        g = p.grad
        if _local(g).data_ptr() == view.data_ptr():
            return None
        if _dtensor.is_dtensor(p) and (not _dtensor.is_dtensor(g) or
                                       tuple(g.placements) != tuple(p.placements) or
                                       g.shape != p.shape):
            got = tuple(g.placements) if _dtensor.is_dtensor(g) else "a plain tensor"
            return (f"the gradient of parameter {name!r} has placements {got}, the parameter "
                    f"{tuple(p.placements)}: canzona reads the gradient's local tensor as the "
                    "parameter's shard")
        with torch.no_grad():
            view.copy_(_local(g))
        p.grad = _dtensor.wrap_grad(p, view)
        return None

    def _group_momentum(self):
        """The groups' momentum coefficients (message or None, (Muon's momentum, AdamW's beta1,
        beta2)): the same in every group, each in [0, 1)."""
        first = None
        for k, g in enumerate(self.param_groups):
            b = g["betas"]
            if not (isinstance(b, (tuple, list)) and len(b) == 2):
                return f"param group {k}: betas = {b!r}; expected a pair (beta1, beta2)", None
            m = (g["momentum"], b[0], b[1])
            for key, v in zip(("momentum", "betas[0]", "betas[1]"), m):
                if not (isinstance(v, (int, float)) and 0.0 <= v < 1.0):
                    return f"param group {k}: {key} = {v!r}; expected 0 <= {key} < 1", None
            if first is None:
                first = (k, m)
            elif m != first[1]:
                return (f"param groups {first[0]} and {k} hold momentum {first[1][0]!r} and "
                        f"{m[0]!r}, betas {first[1][1:]!r} and {m[1:]!r}: canzona takes one "
                        "Muon momentum and one pair of AdamW betas for all groups (a "
                        "scheduler's max_momentum and base_momentum must be one number)", None)
        return None, tuple(float(v) for v in first[1]) if first else self._momentum

    def _group_rates(self):
        """The param groups' rates, per parameter, and their momentum coefficients: (message
        or None, (lr, wd, momentum)). A parameter frozen after construction (requires_grad=False
        now) gets rate and decay 0, so that the step leaves its values bit for bit (its
        optimizer state still decays)."""
        lr = (ctypes.c_float * len(self._names))()
        wd = (ctypes.c_float * len(self._names))()
        for k, g in enumerate(self.param_groups):
            for key in ("lr", "weight_decay"):
                v = g[key]
                if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
                    return f"param group {k}: {key} = {v!r}; expected a finite value >= 0", None
            for name in g["names"]:
                live = self._params[name].requires_grad
                lr[self._index[name]] = g["lr"] if live else 0.0
                wd[self._index[name]] = g["weight_decay"] if live else 0.0
        if not (math.isfinite(self._max_grad_norm) and self._max_grad_norm >= 0):
            return f"max_grad_norm = {self._max_grad_norm!r}; expected >= 0", None
        msg, mom = self._group_momentum()
        if msg is not None:
            return msg, None
        return None, (lr, wd, mom)

    def _push_rates(self, rates):
        """The rates, momentum coefficients and clipping threshold into the executor, when
        they changed."""
        err = _lib.CzError()
        lr, wd, mom = rates
        if mom != self._momentum:
            check(self._L.cz_executor_set_momentum(self._ex, *mom, ctypes.byref(err)), err)
            self._momentum = mom
        key = (bytes(lr), bytes(wd))
        if key != self._rates:
            check(self._L.cz_executor_set_param_rates(self._ex, lr, wd, len(self._names),
                                                       ctypes.byref(err)), err)
            self._rates = key
        if self._max_grad_norm != self._set_norm:
            check(self._L.cz_executor_set_max_grad_norm(self._ex, self._max_grad_norm,
                                                         ctypes.byref(err)), err)
            self._set_norm = self._max_grad_norm

    def _flags(self, failed, lacking, rates):
        """Whether any rank failed its checks, whether any rank lacks gradients, and whether
        the ranks' rates and clipping agree (the maximum of a hash and of its negation): one
        small all-reduce over the world per step, before anything is consumed. (The executor
        compares them again, for C callers.)"""
        h = 0
        if rates is not None:
            d = hashlib.blake2b(bytes(rates[0]) + bytes(rates[1]) + repr(rates[2]).encode() +
                                repr(self._max_grad_norm).encode(), digest_size=7)
            h = int.from_bytes(d.digest(), "little")
        dev = (self._flat_g.device if self._flat_g is not None and dist.get_backend() == "nccl"
               else torch.device("cpu"))
        t = torch.tensor([int(failed), int(lacking), h, -h], dtype=torch.int64, device=dev)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        v = t.tolist()
        return bool(v[0]), bool(v[1]), failed or v[2] == -v[3] or bool(v[0])

    def step(self, closure=None):
        """One optimizer step on every rank (collective): the gradients' reduce-scatter over
        DP, the updates, the parameters' all-gather. Refuses, on every rank and before any
        change, a step where some rank has no gradient since the last step for a trainable
        parameter (unused_parameters=True: for any), a parameter re-assigned or re-stored after
        construction, and rates out of range; the executor refuses rates that differ across
        ranks and NaN/Inf gradients. Returns the closure's loss (None without a closure)."""
        if self._ex is None:
            raise Error(_lib.CZ_EINVALID, "the optimizer was closed")
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        if self._buckets is not None:
            # The round of the step's first bucket, when no hook came to it on this rank.
            self._buckets.announce()
        self._rdv.arrive("step()")
        missing, live = self._fresh.missing()
        lacking = missing if not self._unused_ok or len(missing) == len(live) else []
        msg, rates = self._local_checks()
        if msg is None:
            msg = self._qk_check()
        if self._buckets is not None and msg is None:
            # With early updates the buckets no hook declared wait for the agreement below:
            # declaring them would update their micro-groups before it.
            if not self._early:
                self._buckets.declare_rest()
            msg = self._buckets.error
        failed, short, same = self._flags(msg is not None, bool(lacking), rates)
        moved = self._cancel() if failed or not same or short else None
        if failed or not same or short:
            self._qk_pending = None  # a refused step's maxima are not the next one's
        if failed:
            self._agree(msg, f" ({moved})" if moved else "")
        if short:
            raise Error(_lib.CZ_EINVALID, no_grad_refusal(lacking, live, moved))
        if not same:
            raise Error(_lib.CZ_EMISMATCH, "the ranks' param groups hold different learning "
                                           "rates, weight decays, momentum coefficients or "
                                           "clipping thresholds (every "
                                           "rank must set the same before the same step); "
                                           + (moved or "nothing was changed"))
        if self._early:
            self._buckets.declare_rest()
        err = _lib.CzError()
        self._push_rates(rates)
        self._qk_hand()
        if self._buckets is not None:
            try:
                rc = self._buckets.step_finish(err)
            finally:
                self._buckets.end_step()
        else:
            rc = self._L.cz_executor_step(self._ex, ctypes.byref(err))
        if rc != _lib.CZ_OK and self._comm.error is not None:
            raise Error(rc, err.message.decode(errors="replace")) from self._comm.error
        check(rc, err)
        self._fresh.forget()
        self._steps_done += 1
        self.grad_norm = torch.tensor(self._L.cz_executor_grad_norm(self._ex),
                                      dtype=torch.float64)
        pending, self._pending_norms = self._pending_norms, []
        for t in pending:
            t.fill_(self.grad_norm)
        return loss

    def zero_grad(self, set_to_none=True):
        """Both of torch's forms, with torch 2.x's default: set_to_none drops every .grad (the
        next backward makes new ones, which step() copies into the flat buffer); otherwise the
        flat gradient buffer is zeroed and every .grad is its view again. Either way no
        parameter has a gradient for the next step() until a backward gives it one."""
        if set_to_none:
            for p in self._params.values():
                p.grad = None
            self._fresh.forget()
            return
        if self._fsdp is not None:
            with torch.no_grad():
                for p in self._params.values():
                    if p.grad is not None:
                        p.grad.zero_()
            self._fresh.forget()  # after the zeroing, which FSDP's freshness must not count
            return
        self._fresh.forget()
        self._flat_g.zero_()
        for name, p in self._params.items():
            p.grad = _dtensor.wrap_grad(p, self._gviews[name])

    def clip_grad_norm_(self, max_norm):
        """Clips the global L2 norm of the averaged gradient to max_norm in the following steps
        (0: off), as torch.nn.utils.clip_grad_norm_ would on the full gradient: the norm exists
        only after the step's reduce-scatter, so the clipping happens inside step().

        Returns the total norm as torch's does, a 0-d float64 CPU tensor, but filled in by the
        next step() that runs (a refused one fills nothing): NaN until then, afterwards the global norm before clipping (the value of
        self.grad_norm after that step, equal on every rank). Read it after step(). Refused
        with early_updates (but 0, off): their updates run before the norm is known."""
        try:
            value = float(max_norm)  # a number, or a one-element tensor as torch takes
        except (TypeError, ValueError, RuntimeError):
            value = math.nan
        if not (math.isfinite(value) and value >= 0):
            raise ValueError(f"clip_grad_norm_(max_norm = {max_norm!r}): expected a finite "
                             "value >= 0 (0: no clipping)")
        if self._early and value != 0:
            raise ValueError(f"clip_grad_norm_({max_norm!r}) with early_updates=True: "
                             "clipping needs the global norm of every bucket before any update, "
                             "and early updates run in the backward pass before it is known; "
                             "build the optimizer with early_updates=False to clip")
        self._max_grad_norm = value
        norm = torch.full((), math.nan, dtype=torch.float64)
        self._pending_norms.append(norm)
        return norm

    def add_param_group(self, param_group):
        if getattr(self, "_built", True):
            raise Error(_lib.CZ_EUNSUPPORTED, "canzona's plan is fixed at construction: give "
                                              "every parameter group to the constructor")
        super().add_param_group(param_group)

    # ---- state ----
    def state_dict(self):
        """The optimizer state in torch's form, on every rank (collective): {"state": {param
        name: {"momentum" | "exp_avg" | "exp_avg_sq" ...: full, unsharded CPU tensor}},
        "param_groups": [{..., "params": [param names]}], "step": steps taken}. Keyed by name,
        not by position, so that it loads under any DP/TP shape of the same model."""
        state, step = self._gather_state("state_dict()")
        groups = []
        for g in self.param_groups:
            groups.append({k: (list(g["names"]) if k == "params" else v)
                           for k, v in g.items() if k != "names"})
        return {"state": state, "param_groups": groups, "step": step,
                "checksum": _state_checksum(state, step)}

    def _gather_state(self, phase):
        """(every parameter's state as full CPU tensors by name and field, the steps taken), on
        every rank (collective: the executor's checkpoint gathered on rank 0, broadcast)."""
        if self._ex is None:
            raise Error(_lib.CZ_EINVALID, "the optimizer was closed")
        self._rdv.arrive(phase)
        rank = dist.get_rank()
        box = [None]
        self.wait_params()
        with tempfile.TemporaryDirectory(prefix="canzona-state-") as tmp:
            # The executor gathers on its own rank 0: under HSDP each replica's first rank.
            path = os.path.join(tmp, "state.safetensors") if self._xrank == 0 else None

            def save():
                err = _lib.CzError()
                check(self._L.cz_executor_save_state(self._ex, None if path is None else
                                                     os.fsencode(path), ctypes.byref(err)), err)
                if rank == 0:
                    tensors, meta = safetensors.load(path)
                    box[0] = (tensors, int(meta["step"]))

            self._collective_call(phase, save, path, "the state gathered on rank 0")
        dist.broadcast_object_list(box, src=0)
        tensors, step = box[0]
        state = {}
        by_length = sorted(self._names, key=len, reverse=True)
        for key, arr in tensors.items():
            name = next(n for n in by_length if key.startswith(n + "."))
            state.setdefault(name, {})[key[len(name) + 1:]] = torch.from_numpy(arr.copy())
        return state, step

    @property
    def state(self):
        """The optimizer state in torch's shape: a read-only mapping from each parameter to a
        dict of tensors, torch's names ("momentum_buffer" for Muon, "exp_avg" and "exp_avg_sq"
        for AdamW, "step"), full and unsharded CPU copies. Reading a parameter's entry is
        collective the first time after each step (every rank reads; the state is gathered as
        state_dict() gathers it); len, iteration and `p in opt.state` are local."""
        return self._state_view

    @state.setter
    def state(self, value):
        if len(value):  # torch.optim.Optimizer.__init__ sets an empty one
            raise TypeError("opt.state is read-only: canzona's executor holds the state; "
                            "load_state_dict() loads one")
        self._state_view = StateView(self)

    def _collective_call(self, what, fn, path, path_is):
        """fn() on every rank (a collective C call): a failure on any rank is raised on every
        rank with the failing rank's own message (the others' only say that it failed), the
        temporary file path replaced by what it holds (path_is)."""
        try:
            fn()
            mine = None
        except Error as e:
            mine = (e.code, str(e) if path is None else str(e).replace(path, path_is))
        everyone = [None] * dist.get_world_size()
        dist.all_gather_object(everyone, mine)
        failed = [(r, m) for r, m in enumerate(everyone) if m is not None]
        if not failed:
            return
        own = [(r, m) for r, m in failed if "(see its message)" not in m[1]] or failed
        r, (code, msg) = own[0]
        raise Error(code, f"{what} failed on rank {r}: {msg}")

    def _state_shapes(self, state):
        """A message naming the first state tensor whose shape is not its parameter's (the
        momentum and the Adam moments have the parameter's full shape), or None."""
        for name in sorted(state):
            if name not in self._shape:
                return (f"the state holds parameter {name!r}, which this model does not have "
                        "(another model's checkpoint); nothing was loaded")
            for field, t in sorted(state[name].items()):
                if field in ("momentum", "exp_avg", "exp_avg_sq") and \
                        list(t.shape) != self._shape[name]:
                    return (f"the state's {field} of parameter {name!r} has shape "
                            f"{list(t.shape)}, this model's {name!r} has shape "
                            f"{self._shape[name]} (a checkpoint of another model or size); "
                            "nothing was loaded")
        return None

    def load_state_dict(self, state_dict):
        """Loads what state_dict() returned, saved under any DP/TP shape of this model
        (collective; every rank passes it, rank 0's is read): the optimizer state through the
        executor's checkpoint, and the groups' hyper-parameters."""
        if self._ex is None:
            raise Error(_lib.CZ_EINVALID, "the optimizer was closed")
        self._rdv.arrive("load_state_dict()")
        groups = state_dict["param_groups"]
        if len(groups) != len(self.param_groups) or any(
                list(a["params"]) != list(b["names"]) for a, b in zip(groups, self.param_groups)):
            msg = ("the state's parameter groups hold other parameters than this optimizer's "
                   "(another model, or groups made differently)")
        elif self._xrank == 0 and self._state_shapes(state_dict["state"]) is not None:
            msg = self._state_shapes(state_dict["state"])
        elif "checksum" in state_dict and self._xrank == 0 and (
                _state_checksum(state_dict["state"], state_dict["step"]) !=
                state_dict["checksum"]):
            # What state_dict() wrote no longer hashes to its checksum: a corrupted or edited
            # checkpoint (torch.save and DCP files carry no checksum of their own).
            msg = ("the optimizer state does not match its checksum (a corrupted or edited "
                   "checkpoint); nothing was loaded")
        else:
            msg = None
        self._agree(msg)
        self.wait_params()
        with tempfile.TemporaryDirectory(prefix="canzona-state-") as tmp:
            path = None
            if self._xrank == 0:  # the executor reads on its rank 0 (HSDP: every replica's)
                path = os.path.join(tmp, "state.safetensors")
                flat = {f"{name}.{field}": t.detach().cpu().float().numpy()
                        for name, fields in state_dict["state"].items()
                        for field, t in fields.items()}
                safetensors.save(path, flat, {"format": "canzona.optim/1",
                                              "step": str(int(state_dict["step"]))})

            def load():
                err = _lib.CzError()
                check(self._L.cz_executor_load_state(self._ex, None if path is None else
                                                     os.fsencode(path), ctypes.byref(err)), err)

            self._collective_call("load_state_dict()", load, path,
                                  "the state given to load_state_dict()")
        for g, saved in zip(self.param_groups, groups):
            g.update({k: v for k, v in saved.items() if k != "params"})
        self._steps_done += 1  # opt.state reads the loaded state
