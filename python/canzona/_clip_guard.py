"""torch.nn.utils.clip_grad_norm_ refused on the parameters of a canzona.torch.Optimizer.

Until step() reduce-scatters them, the .grad of those parameters hold this rank's own,
unreduced gradients (views of the optimizer's flat buffer), so torch's function would compute
this rank's local norm and scale by it: a clip that differs between ranks and from the global
one (6.5 % off it in the measurement of docs/PYTHON.md's mistakes table), with no error. The
optimizer clips by the global norm of the averaged gradient inside step() instead
(opt.clip_grad_norm_, max_grad_norm=). install() wraps torch's function, once per process, so
that a call naming any such parameter raises; every other call goes through unchanged.
"""
import functools
import weakref

from . import _lib
from ._lib import Error

_GUARDED = {}  # id(parameter) -> weakref of it, for the parameters of open optimizers


def _message(name):
    return (f"torch.nn.utils.clip_grad_norm_ on {name}, a parameter of canzona.torch.Optimizer: "
            "its .grad holds this rank's unreduced gradient until step() reduce-scatters it, so "
            "torch's norm would be this rank's alone and the clip would differ between ranks; "
            "call opt.clip_grad_norm_(max_norm) instead (or max_grad_norm= at construction), "
            "which clips by the global norm of the averaged gradient inside step()")


def _hit(params):
    for p in params:
        ref = _GUARDED.get(id(p))
        if ref is not None and ref[0]() is p:
            return ref[1]
    return None


def _wrap(fn):
    @functools.wraps(fn)
    def clip_grad_norm_(parameters, *args, **kwargs):
        import torch

        params = [parameters] if isinstance(parameters, torch.Tensor) else list(parameters)
        name = _hit(params)
        if name is not None:
            raise Error(_lib.CZ_EINVALID, _message(name))
        return fn(params, *args, **kwargs)

    clip_grad_norm_._canzona_guard = True
    return clip_grad_norm_


def install():
    """Wraps torch.nn.utils.clip_grad_norm_ (where torch's modules name it) once."""
    import torch.nn.utils as utils
    import torch.nn.utils.clip_grad as clip_grad

    for mod in (utils, clip_grad):
        fn = getattr(mod, "clip_grad_norm_", None)
        if fn is not None and not getattr(fn, "_canzona_guard", False):
            setattr(mod, "clip_grad_norm_", _wrap(fn))


def guard(named_params):
    """Refuses torch's clipping on these (name, parameter) pairs from now on."""
    install()
    for name, p in named_params:
        _GUARDED[id(p)] = (weakref.ref(p), name)


def release(params):
    """Ends guard() for these parameters (the optimizer was closed)."""
    for p in params:
        ref = _GUARDED.get(id(p))
        if ref is not None and ref[0]() is p:
            del _GUARDED[id(p)]
