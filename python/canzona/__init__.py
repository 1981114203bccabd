"""canzona: the Canzona optimizer-step executor from Python (ctypes over libcanzona-exec).

In a PyTorch job (torchrun), canzona.torch.Optimizer is the whole of it:

    import canzona.torch
    opt = canzona.torch.Optimizer(model, tp_group=tp_group, lr=0.01, adamw_lr=2e-3)

Below it, the executor over flat buffers (any framework; MPI or one process):

    import canzona
    canzona.plan(canzona.model_description(model.named_parameters(), tp_dims={...}),
                 "cluster.json", "plan.json")
    ex = canzona.Executor("plan.json", params, grads)   # flat local buffers
    ... backward pass fills grads ...
    ex.step()

See docs/PYTHON.md.
"""
from ._lib import Error
from .executor import Executor
from .planning import model_description, plan

__all__ = ["Error", "Executor", "library_version", "model_description", "plan"]
# The project's version (project(VERSION) in the top CMakeLists.txt, which the C libraries and the
# CLI report through canzona_version.h); pyproject.toml reads it from here, and
# tests/package/version.sh fails when the two differ. library_version() asks the loaded library.
__version__ = "0.1.0"


def library_version():
    """The version libcanzona-exec reports (cz_version()): the library this package loads."""
    from ._lib import lib
    import ctypes

    f = lib().cz_version
    f.restype, f.argtypes = ctypes.c_char_p, [ctypes.c_void_p] * 3
    return f(None, None, None).decode()
