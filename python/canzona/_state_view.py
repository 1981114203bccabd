"""Optimizer.state of canzona.torch.Optimizer (docs/PYTHON.md, beside state_dict()): torch's
shape, a mapping from each parameter to a dict of tensors under torch's names, full CPU copies
gathered (collectively) at the first read after each step or load.
"""
import collections.abc
import weakref

import torch

# canzona's state field names -> torch.optim.Muon's and AdamW's (opt.state)
_TORCH_FIELDS = {"momentum": "momentum_buffer", "exp_avg": "exp_avg",
                 "exp_avg_sq": "exp_avg_sq"}


class StateView(collections.abc.Mapping):
    """Optimizer.state: parameter -> {torch's field name: tensor}, gathered at the first read
    after each step (collective) and kept until the next."""

    def __init__(self, opt):
        self._opt = weakref.ref(opt)
        self._cache, self._at = None, None

    def _params(self):
        opt = self._opt()
        return {} if opt is None or not hasattr(opt, "_params") else opt._params

    def __len__(self):
        return len(self._params())

    def __iter__(self):
        return iter(list(self._params().values()))

    def __contains__(self, p):
        return any(q is p for q in self._params().values())

    def __getitem__(self, p):
        opt = self._opt()
        name = next((n for n, q in self._params().items() if q is p), None)
        if name is None:
            raise KeyError("not a parameter of this optimizer (frozen ones have no state)")
        if self._at != opt._steps_done:
            state, step = opt._gather_state("opt.state[p] (the first read after a step)")
            t = torch.tensor(float(step))
            self._cache = {n: dict({_TORCH_FIELDS.get(f, f): v for f, v in fields.items()},
                                   step=t) for n, fields in state.items()}
            self._at = opt._steps_done
        return self._cache[name]
