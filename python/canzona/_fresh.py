"""Which parameters of canzona.torch.Optimizer received a gradient since its last step
(docs/PYTHON.md, "Fresh gradients"): a post-accumulate-grad hook per parameter, forgotten at
each step and zero_grad(), and the refusal of a step where some rank lacks them.
"""
import torch.distributed as dist

from ._dtensor import local as _local


class FreshGrads:
    """params: name -> parameter; gviews: name -> its view of the flat gradient buffer."""

    def __init__(self, params, gviews):
        self._params, self._gviews = params, gviews
        self._got = set()
        got = self._got  # the hooks hold the set, not this object
        self._hooks = [p.register_post_accumulate_grad_hook(lambda _p, n=name: got.add(n))
                       for name, p in params.items()]

    def forget(self):
        """A step or zero_grad(): no parameter has a fresh gradient now."""
        self._got.clear()

    def missing(self):
        """(this rank's trainable parameters without a gradient since the last forget, its
        trainable parameters): a gradient came when the parameter's hook ran (backward), or
        when its .grad is a tensor made anew since the step re-attached it to the flat buffer
        (a .grad assigned by hand)."""
        live = [n for n, p in self._params.items() if p.requires_grad]
        out = []
        for name in live:
            g = self._params[name].grad
            if name in self._got or (g is not None and self._renewed(name, g)):
                continue
            out.append(name)
        return out, live

    def _renewed(self, name, g):
        """Whether gradient g of parameter name is not the one the last step read: here, a
        tensor other than the view of the flat buffer the step re-attached."""
        return _local(g).data_ptr() != self._gviews[name].data_ptr()

    def close(self):
        for h in self._hooks:
            h.remove()
        self._hooks = []


def refusal(lacking, live, moved):
    """The message of a step where some rank lacks gradients (collective: every rank's lacking
    parameters, the first three by name; moved: what early updates changed, or None)."""
    everyone = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, (lacking[:3], len(lacking), len(live)))
    done = moved or "nothing was changed"
    none = [r for r, (_, n, total) in enumerate(everyone) if n and n == total]
    if len(none) == len(everyone):
        return ("step() with no gradients on any rank since the last step (or the zero_grad() "
                f"after it): call backward() first ({done})")
    what = []
    if none:
        what.append(f"rank{'s' if len(none) > 1 else ''} {', '.join(map(str, none))} ran no "
                    "backward since the last step (or zero_grad() after it), so "
                    f"{'their' if len(none) > 1 else 'its'} gradients would count as zeros in "
                    "the average")
    part = {}  # the ranks that lack the same, together
    for r, (names, n, total) in enumerate(everyone):
        if 0 < n < total:
            part.setdefault((tuple(names), n, total), []).append(r)
    for (names, n, total), ranks in part.items():
        more = f" and {n - len(names)} more" if n > len(names) else ""
        what.append(f"rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))} "
                    f"{'have' if len(ranks) > 1 else 'has'} no gradient for "
                    f"{', '.join(map(repr, names))}{more} ({n} of {total} trainable parameters)")
    hint = ("run backward() on every rank before step(); after a backward that failed part-way, "
            "zero_grad() and run it again")
    if part:
        hint += ("; a parameter the loss does not reach: freeze it (requires_grad_(False)) or "
                 "build the optimizer with unused_parameters=True, which takes it as a zero "
                 "gradient (DDP's find_unused_parameters)")
    return f"step() without a fresh gradient: {'; '.join(what)}. {hint} ({done})"
