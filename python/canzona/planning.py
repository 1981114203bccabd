"""Plans from Python: a model description (canzona.model/1) from named parameters, and a plan
of it, from the planner CLI (plan) or in this process through libcanzona (plan_text)."""
import ctypes
import ctypes.util
import fnmatch
import json
import os
import shutil
import subprocess
import tempfile

from . import _ns_coeffs
from ._lib import Error, CZ_EINVALID, CZ_EIO


def _match(table, name):
    """The value of the first pattern (fnmatch, exact names included) in table matching name."""
    for pattern, value in (table or {}).items():
        if fnmatch.fnmatchcase(name, pattern):
            return True, value
    return False, None


def model_description(named_parameters, *, name="model", dtype="fp32", tp_dims=None,
                      blocks=None, optimizers=None, tp_size=1, heads=None):
    """A canzona.model/1 description (a dict) from (name, parameter) pairs in registration
    order, as torch.nn.Module.named_parameters() yields them (anything with .shape works).

    tp_dims: {pattern: 0, 1 or None}, the dimension each parameter is split along over TP
      (0 column-parallel, 1 row-parallel, None replicated); parameters no pattern matches are
      replicated. Patterns are fnmatch patterns ("*.linear_qkv.weight"); the first match wins.
    blocks: {pattern: (dim, [sizes])} for fused matrices (QKV, gate+up), sizes of the full
      tensor along dim.
    optimizers: {pattern: "matrix" or "elementwise"}; default: 2-D matrix, 1-D elementwise.
    tp_size: when the parameters are the TP-local shards of a tensor-parallel model, the TP size,
      so the full shapes are their shapes times tp_size along tp_dim.
    heads: {pattern: (dim, size)} for per-head Muon: the matrix is heads of `size` rows (dim 0)
      or columns (dim 1), each orthogonalized on its own (with blocks, inside each block); the
      planner checks that the size divides the blocks and that TP keeps heads whole.
    """
    params = []
    for pname, p in named_parameters:
        shape = [int(s) for s in p.shape]
        if len(shape) not in (1, 2):
            raise Error(CZ_EINVALID, f"parameter {pname!r}: shape {shape}; canzona takes 1-D and "
                                     "2-D parameters (reshape convolution weights to 2-D)")
        found, tp_dim = _match(tp_dims, pname)
        tp_dim = tp_dim if found else None
        if tp_dim is not None:
            if tp_dim not in (0, 1) or tp_dim >= len(shape):
                raise Error(CZ_EINVALID, f"parameter {pname!r}: tp_dim {tp_dim} for shape {shape}")
            shape[tp_dim] *= tp_size
        found, opt = _match(optimizers, pname)
        entry = {"name": pname, "shape": shape, "tp_dim": tp_dim,
                 "optimizer": opt if found else ("matrix" if len(shape) == 2 else "elementwise")}
        found, blk = _match(blocks, pname)
        if found:
            dim, sizes = blk
            entry["blocks"] = {"dim": int(dim), "sizes": [int(s) for s in sizes]}
        found, hd = _match(heads, pname)
        if found:
            dim, size = hd
            entry["heads"] = {"dim": int(dim), "size": int(size)}
        params.append(entry)
    return {"schema": "canzona.model/1", "name": name, "dtype": dtype, "params": params}


def _cli(cli):
    path = cli or os.environ.get("CANZONA_CLI") or shutil.which("canzona")
    if not path:
        raise Error(CZ_EIO, "the canzona CLI was not found: set CANZONA_CLI or put canzona on PATH")
    return path


def plan(model, cluster, output, *, dp=None, tp=None, cli=None, extra_args=()):
    """Runs `canzona plan` and writes the plan to output. model and cluster are paths or dicts
    (written to a temporary folder first); dp and tp name the strategies (default: the CLI's,
    joint and rollback). Returns output; raises Error with the CLI's message on failure."""
    with tempfile.TemporaryDirectory(prefix="canzona-plan-") as tmp:
        paths = []
        for what, obj in (("model", model), ("cluster", cluster)):
            if isinstance(obj, dict):
                path = os.path.join(tmp, what + ".json")
                with open(path, "w") as f:
                    json.dump(obj, f)
                paths.append(path)
            else:
                paths.append(os.fspath(obj))
        cmd = [_cli(cli), "plan", "-q", "-m", paths[0], "-c", paths[1], "-o", os.fspath(output)]
        if dp:
            cmd += ["--dp", dp]
        if tp:
            cmd += ["--tp", tp]
        cmd += list(extra_args)
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            raise Error(CZ_EINVALID, (r.stderr or r.stdout).strip())
    return output


# ---- planning in this process, through libcanzona (no CLI) ----

class _Settings(ctypes.Structure):
    """cz_settings (canzona.h), field for field (version CZ_SETTINGS_VERSION 1)."""

    _fields_ = [
        ("version", ctypes.c_int), ("optimizer", ctypes.c_int), ("unit", ctypes.c_int),
        ("dp", ctypes.c_int), ("alpha", ctypes.c_double), ("alpha_numel_loads", ctypes.c_int),
        ("layerwise_order", ctypes.c_int), ("tp", ctypes.c_int), ("capacity", ctypes.c_double),
        ("solver", ctypes.c_int), ("time_limit_s", ctypes.c_double),
        ("seed", ctypes.c_uint64), ("ns_steps", ctypes.c_int),
        ("max_precond_dim", ctypes.c_int), ("precondition_frequency", ctypes.c_int),
        ("tpaware_time_limit_s", ctypes.c_double), ("progress", ctypes.c_void_p),
        ("progress_payload", ctypes.c_void_p), ("layout", ctypes.c_int),
        ("split_blocks", ctypes.c_int), ("coop", ctypes.c_int), ("ns_coeffs", ctypes.c_char_p),
        ("replicate", ctypes.c_int), ("hsdp", ctypes.c_int),
    ]


_planner = None


def _planner_lib():
    """libcanzona (the planner library): CANZONA_LIB, else beside libcanzona-exec (a build tree
    or an installed prefix), else the linker's search path."""
    global _planner
    if _planner is not None:
        return _planner
    from ._lib import _find

    path = os.environ.get("CANZONA_LIB")
    if not path:
        try:
            exec_dir = os.path.dirname(os.path.abspath(_find()))
        except OSError:
            exec_dir = ""
        for cand in (os.path.join(exec_dir, "libcanzona.so"),
                     os.path.join(os.path.dirname(exec_dir), "libcanzona.so")):
            if exec_dir and os.path.exists(cand):
                path = cand
                break
    if not path:
        path = ctypes.util.find_library("canzona")
    if not path:
        raise Error(CZ_EIO, "libcanzona.so (the planner library) was not found: set CANZONA_LIB "
                            "to its path (e.g. build/libcanzona.so) or install it")
    from ._lib import CzError

    L = ctypes.CDLL(path)
    vp, i, e = ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(CzError)
    for name, res, args in (
            ("cz_settings_init", None, [ctypes.POINTER(_Settings)]),
            ("cz_model_parse", i, [ctypes.POINTER(vp), ctypes.c_char_p, ctypes.c_char_p, e]),
            ("cz_cluster_parse", i, [ctypes.POINTER(vp), ctypes.c_char_p, ctypes.c_char_p, e]),
            ("cz_plan_build", i, [ctypes.POINTER(vp), vp, vp, ctypes.POINTER(_Settings), e]),
            ("cz_plan_write", i, [vp, ctypes.c_char_p, e]),
            ("cz_model_free", None, [vp]), ("cz_cluster_free", None, [vp]),
            ("cz_plan_free", None, [vp]),
            ("cz_dp_strategy_parse", i, [ctypes.c_char_p, ctypes.POINTER(ctypes.c_int)]),
            ("cz_tp_strategy_parse", i, [ctypes.c_char_p, ctypes.POINTER(ctypes.c_int)]),
            ("cz_layout_parse", i, [ctypes.c_char_p, ctypes.POINTER(ctypes.c_int)])):
        f = getattr(L, name)
        f.restype, f.argtypes = res, args
    _planner = L
    return L


def plan_text(model, cluster, *, dp=None, tp=None, ns_coeffs=None, ns_steps=None, layout=None):
    """The plan (its JSON text) of model on cluster (dicts, as model_description and the
    cluster format give them), built in this process by libcanzona with the planner's default
    settings; dp and tp name the strategies (default joint and rollback); ns_coeffs and ns_steps
    are Muon's Newton-Schulz coefficients and iterations, as canzona.Executor takes them (a
    table's row count when ns_steps is None), which the cost model prices; layout is the
    CLI's --layout ("unified", the default, "split" or "fsdp": fully sharded, FSDP2's rows).
    Raises Error with the planner's message."""
    from ._lib import CzError, check

    L = _planner_lib()
    err = CzError()
    m, c, p = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p()
    s = _Settings()
    L.cz_settings_init(ctypes.byref(s))
    # Muon's cost is per Newton-Schulz iteration: a coefficient table prices its rows.
    coeffs = None if ns_coeffs is None else _ns_coeffs.text(ns_coeffs).encode()
    s.ns_coeffs = coeffs
    if ns_coeffs is not None or ns_steps is not None:
        s.ns_steps = _ns_coeffs.steps(ns_coeffs or "jordan", ns_steps)
    # Each name through the planner's own parser (the CLI's), so the enums' values stay the C
    # library's.
    for field, what, name, parse, known in (
            ("dp", "dp strategy", dp, L.cz_dp_strategy_parse, ""),
            ("tp", "tp strategy", tp, L.cz_tp_strategy_parse, ""),
            ("layout", "layout", layout, L.cz_layout_parse, " (known: unified, split, fsdp)")):
        if name is not None:
            v = ctypes.c_int()
            if parse(name.encode(), ctypes.byref(v)) != 0:
                raise Error(CZ_EINVALID, f"unknown {what} {name!r}{known}")
            setattr(s, field, v.value)
    try:
        check(L.cz_model_parse(ctypes.byref(m), json.dumps(model).encode(), b"<model>",
                               ctypes.byref(err)), err)
        check(L.cz_cluster_parse(ctypes.byref(c), json.dumps(cluster).encode(), b"<cluster>",
                                 ctypes.byref(err)), err)
        check(L.cz_plan_build(ctypes.byref(p), m, c, ctypes.byref(s), ctypes.byref(err)), err)
        with tempfile.TemporaryDirectory(prefix="canzona-plan-") as tmp:
            path = os.path.join(tmp, "plan.json")
            check(L.cz_plan_write(p, os.fsencode(path), ctypes.byref(err)), err)
            with open(path) as f:
                return f.read()
    finally:
        L.cz_plan_free(p)
        L.cz_cluster_free(c)
        L.cz_model_free(m)
