"""Plans from Python: a model description (canzona.model/1) from named parameters, and the
planner CLI run on it."""
import fnmatch
import json
import os
import shutil
import subprocess
import tempfile

from ._lib import Error, CZ_EINVALID, CZ_EIO


def _match(table, name):
    """The value of the first pattern (fnmatch, exact names included) in table matching name."""
    for pattern, value in (table or {}).items():
        if fnmatch.fnmatchcase(name, pattern):
            return True, value
    return False, None


def model_description(named_parameters, *, name="model", dtype="fp32", tp_dims=None,
                      blocks=None, optimizers=None, tp_size=1):
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
    alpha and rollback). Returns output; raises Error with the CLI's message on failure."""
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
