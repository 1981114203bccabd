"""canzona: the Canzona optimizer-step executor from Python (ctypes over libcanzona-exec).

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

__all__ = ["Error", "Executor", "model_description", "plan"]
__version__ = "0.1.0"
