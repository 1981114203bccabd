"""Executor: one per process, bound to the job's flat parameter and gradient buffers."""
import ctypes
import os
import tempfile

from . import _lib
from ._lib import Error, check
from . import _ns_coeffs, qk_clip, safetensors

_SCALINGS = {"rms": 0, "shape": 1}
_NORMUON = {None: 0, "none": 0, "row": 1, "col": 2}  # cz_normuon_mode
_DTYPES = {"fp32": _lib.DTYPE_FP32, "bf16": _lib.DTYPE_BF16}
_FLOAT_OPTIONS = ("lr", "momentum", "weight_decay", "ns_eps", "scale_coeff", "adamw_lr",
                  "adamw_beta1", "adamw_beta2", "adamw_eps", "adamw_weight_decay",
                  "max_grad_norm", "shampoo_beta1", "shampoo_beta2", "shampoo_eps",
                  "shampoo_momentum", "shampoo_graft_beta2", "shampoo_graft_eps", "soap_beta1",
                  "soap_beta2", "soap_shampoo_beta", "soap_eps", "normuon_beta2", "normuon_eps")
_INT_OPTIONS = ("ns_steps", "nesterov", "check_finite", "shampoo_nesterov", "shampoo_start_step",
                "shampoo_max_dim", "shampoo_bias_correction", "soap_bias_correction",
                "grad_reduce_in_fp32")
_GRAFTINGS = {"none": 0, "adagrad": 1, "rmsprop": 2, "adam": 3}  # cz_shampoo_grafting
# The options keep their flat names (as version 6's fields and torch's keywords); since config
# version 7 Muon's, AdamW's, SOAP's and Shampoo's live in the config's struct of each.
_MUON_FIELDS = {"momentum", "nesterov", "ns_steps", "ns_coeffs", "ns_eps", "scale_coeff"}


def _field(cfg, key):
    """(struct, field) of cz_exec_config that option key sets: muon_scaling is cfg.muon.scaling,
    adamw_lr cfg.adamw.lr, soap_shampoo_beta cfg.soap.shampoo_beta, lr cfg.lr."""
    part, name = cfg, key
    if key in _MUON_FIELDS:
        part = cfg.muon
    elif key == "muon_scaling":
        part, name = cfg.muon, "scaling"
    elif key == "normuon":
        part, name = cfg.normuon, "mode"
    else:
        for sub in ("adamw", "soap", "shampoo", "normuon"):
            if key.startswith(sub + "_"):
                part, name = getattr(cfg, sub), key[len(sub) + 1:]
    # ctypes takes an attribute that is no field without a word: refuse it here.
    if name not in dict(part._fields_) or isinstance(getattr(part, name), ctypes.Structure):
        raise TypeError(f"unknown executor option {key!r}")
    return part, name


def _buffer(x, what):
    """(data pointer, element count, cz_dtype) of a NumPy array or a torch tensor, after
    checking that the executor may write it in place."""
    if type(x).__module__.split(".")[0] == "torch":
        import torch

        if x.device.type != "cpu":
            raise ValueError(f"{what}: a tensor on {x.device}; this build's backend (cpu) takes "
                             "host tensors")
        if not x.is_contiguous():
            raise ValueError(f"{what}: not contiguous; pass a flat contiguous buffer")
        dtypes = {torch.float32: _lib.DTYPE_FP32, torch.bfloat16: _lib.DTYPE_BF16}
        if x.dtype not in dtypes:
            raise TypeError(f"{what}: dtype {x.dtype}; expected torch.float32 or torch.bfloat16")
        return x.data_ptr(), x.numel(), dtypes[x.dtype]
    try:
        import numpy as np
    except ImportError:  # pragma: no cover - numpy is how non-torch buffers come
        np = None
    if np is not None and isinstance(x, np.ndarray):
        if not x.flags.c_contiguous:
            raise ValueError(f"{what}: not C-contiguous; pass a flat contiguous buffer")
        if not x.flags.writeable:
            raise ValueError(f"{what}: read-only array; the executor writes it in place")
        if x.dtype != np.float32:
            raise TypeError(f"{what}: dtype {x.dtype}; expected float32 (NumPy has no bfloat16: "
                            "pass bf16 buffers as torch tensors)")
        return x.ctypes.data, x.size, _lib.DTYPE_FP32
    raise TypeError(f"{what}: expected a NumPy array or a torch tensor, got {type(x).__name__}")


class Executor:
    """Runs a plan's optimizer step on this process's share of the model.

    Executor(plan, params=None, grads=None, *, comm=None, world_comm=None, dtype=None,
             backend="cpu", **options)

    plan: path of a plan file (`canzona plan`), or of a split plan folder (`canzona plan
    --split DIR`), of which each rank reads only its own part (docs/EXECUTOR.md, "A split plan
    folder": no checkpoints or bucket-wise step from a folder). params, grads: the flat local buffers
    (cz_executor_buffer_numel elements each, see numel), bound now when given, else with
    bind(). comm: "mpi", "self" or None (MPI when MPI is initialized, as mpi4py does on
    import). world_comm: an mpi4py communicator to run over (default MPI_COMM_WORLD).
    dtype: "fp32" or "bf16" (default: the plan's). options: the fields of cz_exec_config by
    their flat names (cfg.muon.momentum is momentum, cfg.adamw.lr adamw_lr, cfg.soap.beta1
    soap_beta1; lr, momentum, nesterov, weight_decay, ns_steps, ns_coeffs (a name, one triple
    (a, b, c), or a sequence of triples, one per iteration: ns_steps then defaults to the
    table's length), ns_eps, scale_coeff, muon_scaling ("rms" or "shape"), adamw_lr, adamw_beta1, adamw_beta2, adamw_eps,
    adamw_weight_decay, max_grad_norm, check_finite, grad_reduce_in_fp32 (1: a bf16 job's
    gradients reduce-scattered in fp32, Megatron's --grad-reduce-in-fp32; default 0, in bf16:
    docs/EXECUTOR.md, "On the wire"); for Shampoo and SOAP plans the
    shampoo_* and soap_* fields, shampoo_grafting by name: "none", "adagrad", "rmsprop" or
    "adam"; for Muon plans normuon: "row" (Dion's NorMuon, one second moment per row of each
    unit Muon orthogonalizes), "col" (per column) or None (default, plain Muon), with
    normuon_beta2 (default 0.95, in [0, 1)) and normuon_eps (default 1e-8); docs/PYTHON.md,
    "NorMuon"). Collective under MPI.
    """

    def __init__(self, plan, params=None, grads=None, *, comm=None, world_comm=None, dtype=None,
                 backend="cpu", **options):
        L = _lib.lib()
        self._ex = None
        cfg = _lib.ExecConfig()
        L.cz_exec_config_init(ctypes.byref(cfg))
        self._keep = []  # objects the config points into, alive until create returns
        cfg.backend = backend.encode()
        if comm is not None:
            cfg.comm = comm.encode()
        if world_comm is not None:
            from mpi4py import MPI

            handle = ctypes.c_void_p(MPI._addressof(world_comm))
            cfg.world_comm = handle
            self._keep.append(world_comm)
        if dtype is not None:
            if dtype not in _DTYPES:
                raise ValueError(f"dtype {dtype!r}: expected one of {sorted(_DTYPES)}")
            cfg.dtype = _DTYPES[dtype]
        if "ns_coeffs" in options and "ns_steps" not in options:
            options["ns_steps"] = _ns_coeffs.steps(options["ns_coeffs"], None)
        for key, value in options.items():
            part, name = _field(cfg, key)
            if key in _FLOAT_OPTIONS:
                setattr(part, name, float(value))
            elif key in _INT_OPTIONS:
                setattr(part, name, int(value))
            elif key == "ns_coeffs":
                part.ns_coeffs = _ns_coeffs.text(value).encode()
            elif key == "muon_scaling":
                if value not in _SCALINGS:
                    raise ValueError(f"muon_scaling {value!r}: expected 'rms' or 'shape'")
                part.scaling = _SCALINGS[value]
            elif key == "normuon":
                if value not in _NORMUON:
                    raise ValueError(f"normuon {value!r}: expected 'row', 'col' or None")
                part.mode = _NORMUON[value]
            elif key == "shampoo_grafting":
                if value not in _GRAFTINGS:
                    raise ValueError(f"shampoo_grafting {value!r}: expected one of "
                                     f"{sorted(_GRAFTINGS)}")
                part.grafting = _GRAFTINGS[value]
            else:
                raise TypeError(f"unknown executor option {key!r}")
        err = _lib.CzError()
        ex = ctypes.c_void_p()
        rc = L.cz_executor_create(ctypes.byref(ex), os.fsencode(plan), ctypes.byref(cfg),
                                  ctypes.byref(err))
        check(rc, err)
        self._ex = ex
        self._L = L
        self._bound = None
        if params is not None or grads is not None:
            self.bind(params, grads)

    # ---- life cycle ----
    def close(self):
        """Frees the executor (every rank should call it)."""
        if self._ex is not None:
            self._L.cz_executor_free(self._ex)
            self._ex = None
            self._bound = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        self.close()

    def _handle(self):
        if self._ex is None:
            raise Error(_lib.CZ_EINVALID, "the executor was closed")
        return self._ex

    def _call(self, name, *args):
        err = _lib.CzError()
        check(getattr(self._L, name)(self._handle(), *args, ctypes.byref(err)), err)

    # ---- buffers ----
    @property
    def numel(self):
        """Elements of the flat local buffer the plan expects."""
        return self._L.cz_executor_buffer_numel(self._handle())

    @property
    def dtype(self):
        code = self._L.cz_executor_dtype(self._handle())
        return {v: k for k, v in _DTYPES.items()}.get(code, str(code))

    def bind(self, params, grads):
        """Binds the flat local parameter and gradient buffers (same dtype, numel elements,
        contiguous, writable). They stay the caller's and must stay alive while bound; the
        executor keeps a reference."""
        if params is None or grads is None:
            raise ValueError("bind: both params and grads are needed")
        p_ptr, p_n, p_dt = _buffer(params, "params")
        g_ptr, g_n, g_dt = _buffer(grads, "grads")
        if p_dt != g_dt:
            raise TypeError("params and grads have different dtypes")
        if p_n != self.numel or g_n != self.numel:
            raise ValueError(f"buffers of {p_n} and {g_n} elements; the plan's local buffer "
                             f"has {self.numel}")
        self._call("cz_executor_bind_typed", ctypes.c_void_p(p_ptr), ctypes.c_void_p(g_ptr),
                   ctypes.c_size_t(p_n), p_dt)
        self._bound = (params, grads)

    # ---- steps ----
    def step(self):
        """One optimizer step (collective): reduce-scatter, AdamW, Muon, all-gather."""
        self._call("cz_executor_step")

    def step_async(self):
        """Starts a step; wait() finishes it. The buffers must not be touched in between."""
        self._call("cz_executor_step_async")

    def wait(self):
        self._call("cz_executor_wait")

    def grad_norm(self):
        """Global L2 norm of the last step's averaged gradient, before clipping (NaN before the
        first step)."""
        return self._L.cz_executor_grad_norm(self._handle())

    def set_lr(self, muon_lr, adamw_lr):
        """Learning rates for the following steps (every rank the same)."""
        self._call("cz_executor_set_lr", ctypes.c_float(muon_lr), ctypes.c_float(adamw_lr))

    def set_weight_decay(self, muon_wd, adamw_wd):
        self._call("cz_executor_set_weight_decay", ctypes.c_float(muon_wd),
                   ctypes.c_float(adamw_wd))

    # ---- QK-clip ----
    def set_qk_clip(self, tau, layers, heads_per_layer, runs):
        """Sets QK-clip for the following steps (runs: canzona.qk_clip's helpers' tuples; every
        rank the same), or clears it (runs None). docs/EXECUTOR.md, "QK-clip"."""
        if runs is None:
            self._call("cz_executor_set_qk_clip", None)
            return
        spec = qk_clip._Spec(tau, layers, heads_per_layer, runs)
        self._call("cz_executor_set_qk_clip", ctypes.byref(spec.spec))

    def qk_logits(self, max_logits):
        """This rank's per-head maxima of the coming step's forward, layers x heads (a nested
        sequence, NumPy array or tensor), -inf for the heads it did not compute."""
        arr, n = qk_clip.maxima(max_logits)
        self._call("cz_executor_qk_logits", arr, ctypes.c_size_t(n))

    @property
    def qk_clipped(self):
        """(layer, head) pairs the last step found above tau (the same on every rank)."""
        return self._L.cz_executor_qk_clipped(self._handle())

    def timings(self):
        """Seconds of each phase of the last step, and the steps run so far."""
        t = _lib.Timings()
        self._L.cz_executor_timings(self._handle(), ctypes.byref(t))
        return {name: getattr(t, name) for name, _ in t._fields_}

    def wire(self):
        """The DP exchanges on the wire: their dtypes ("fp32" or "bf16") and the bytes this
        rank posted since create; and the bytes it sent in the fp32 micro-group exchanges
        over its TP and expert-TP planes, tp_bytes and etp_bytes (cz_executor_wire)."""
        w = _lib.Wire()
        self._L.cz_executor_wire(self._handle(), ctypes.byref(w))
        names = {v: k for k, v in _DTYPES.items()}
        return {"grad_dtype": names[w.grad_dtype], "param_dtype": names[w.param_dtype],
                "grad_bytes": w.grad_bytes, "param_bytes": w.param_bytes,
                "tp_bytes": w.tp_bytes, "etp_bytes": w.etp_bytes}

    @property
    def dp_rank(self):
        return self._L.cz_executor_dp_rank(self._handle())

    @property
    def tp_rank(self):
        return self._L.cz_executor_tp_rank(self._handle())

    @property
    def pp_rank(self):
        """This rank's pipeline stage: it binds and steps that stage's buffer only."""
        return self._L.cz_executor_pp_rank(self._handle())

    # ---- optimizer state ----
    def save_state(self, path):
        """Saves the optimizer state to a safetensors file (collective; rank 0 writes path)."""
        self._call("cz_executor_save_state", None if path is None else os.fsencode(path))

    def load_state(self, path):
        """Loads a checkpoint saved under any plan of the model (collective; rank 0 reads)."""
        self._call("cz_executor_load_state", None if path is None else os.fsencode(path))

    def state_dict(self, rank=None):
        """The optimizer state as {"step": int, "state": {tensor name: NumPy array}}: full,
        unsharded tensors named "<param>.momentum", "<param>.exp_avg", "<param>.exp_avg_sq".
        Collective; rank 0 gets the dict, the other ranks None. rank: this process's world
        rank (default: from mpi4py when MPI is initialized, else 0)."""
        if _world_rank(rank) != 0:
            self.save_state(None)
            return None
        with tempfile.TemporaryDirectory(prefix="canzona-state-") as tmp:
            path = os.path.join(tmp, "state.safetensors")
            self.save_state(path)
            tensors, meta = safetensors.load(path)
        return {"step": int(meta["step"]), "state": tensors}

    def load_state_dict(self, state, rank=None):
        """Loads what state_dict() returned (only rank 0's argument is read; the others may
        pass None). Collective."""
        if _world_rank(rank) != 0:
            self.load_state(None)
            return
        with tempfile.TemporaryDirectory(prefix="canzona-state-") as tmp:
            path = os.path.join(tmp, "state.safetensors")
            safetensors.save(path, state["state"],
                             {"format": "canzona.optim/1", "step": str(int(state["step"]))})
            self.load_state(path)


def _world_rank(rank):
    if rank is not None:
        return rank
    try:
        from mpi4py import MPI
    except ImportError:
        return 0
    return MPI.COMM_WORLD.Get_rank() if MPI.Is_initialized() else 0
