"""The bucket-wise step of canzona.torch.Optimizer (overlap=True; docs/PYTHON.md, "Overlap"),
apart from the optimizer's math as Megatron-Core keeps bucket readiness in its bucket groups:
the gradient hooks that count each bucket's gradients and declare it ready
(cz_executor_bucket_ready) during backward, the forward pre-hooks that wait for each bucket's
parameter all-gather (cz_executor_bucket_wait) before the modules holding it run, and the
bookkeeping of one step between them. The optimizer owns one BucketOverlap and calls it from
step(), close() and wait_params().
"""
import contextlib
import ctypes

from . import _lib
from ._lib import check


class BucketOverlap:
    """The hooks and the per-step state of the bucket-wise step over one executor.

    BucketOverlap(L, ex, index, params, gviews, module, adopt_grad, first_ready=None,
                  announce=None)

    L, ex: the loaded library and the executor; index: parameter name -> the executor's index;
    params, gviews: name -> parameter, and name -> its view of the flat gradient buffer;
    module: the model's root module, or None when the parameters were given without one (no
    forward pre-hooks then: step_finish waits for every bucket itself); adopt_grad(name, p,
    view): puts a gradient torch made anew into the flat buffer (None or a message);
    first_ready(): with early updates, called when the step's first bucket is declared, before
    any micro-group can run, to push the param groups' rates (None or a message); announce():
    called once per step before its first bucket is declared (the first collective of the
    step): waits for every rank to come to it, or raises (the optimizer's Rendezvous).

    After a hook's failure, error holds its message (the first one) until end_step: step()
    agrees it with the other ranks before anything is consumed.
    """

    def __init__(self, L, ex, index, params, gviews, module, adopt_grad, first_ready=None,
                 announce=None):
        self._L, self._ex = L, ex
        self._announce = announce
        self._announced = False
        self._first_ready = first_ready
        self._adopt_grad = adopt_grad
        self._has_module = module is not None
        self._bucket_of = {n: int(L.cz_executor_param_bucket(ex, index[n])) for n in params}
        self._expected = {}
        for b in self._bucket_of.values():
            self._expected[b] = self._expected.get(b, 0) + 1
        self.held = [b for b in range(L.cz_executor_bucket_count(ex))
                     if L.cz_executor_bucket_held(ex, b)]
        self._counts = {}
        self.declared = set()
        self.pending = set()  # buckets whose all-gather is outstanding
        self._sync = True
        self.error = None
        self._hooks = []
        self._uncalled = None
        self._module_buckets = {}
        self._called = set()
        for name, p in params.items():
            hook = self._grad_hook(name, p, gviews[name])
            self._hooks.append(p.register_post_accumulate_grad_hook(lambda _p, h=hook: h()))
        if module is not None:
            self._forward_hooks(module)

    def _forward_hooks(self, module):
        """The forward pre-hooks: per module holding parameters directly, and the root module's
        for those whose module's forward never runs (e.g. a weight read as module.weight)."""
        for mname, mod in module.named_modules():
            bs = sorted({self._bucket_of[f"{mname}.{n}" if mname else n]
                         for n, _ in mod.named_parameters(recurse=False)
                         if (f"{mname}.{n}" if mname else n) in self._bucket_of}, reverse=True)
            if bs:
                self._module_buckets[id(mod)] = bs
                self._hooks.append(mod.register_forward_pre_hook(
                    lambda m, _inp: self._module_pre_hook(m)))
        if id(module) not in self._module_buckets:
            self._hooks.append(module.register_forward_pre_hook(
                lambda m, _inp: self._module_pre_hook(m)))
        self._root = id(module)

    def _grad_hook(self, name, p, view):
        b = self._bucket_of[name]

        def hook():
            if not self._sync:
                return
            if p.grad is not None:
                # A gradient torch made anew (zero_grad(set_to_none=True)) goes into the flat
                # buffer before its bucket is read.
                msg = self._adopt_grad(name, p, view)
                if msg is not None and self.error is None:
                    self.error = msg
            n = self._counts.get(b, 0) + 1
            self._counts[b] = n
            if b in self.declared:
                if self.error is None:
                    self.error = (
                        f"parameter {name!r} received a gradient after its bucket {b} was "
                        "declared ready (its reduce-scatter already started): run the "
                        "accumulation micro-batches but the last inside `with opt.no_sync():`")
                return
            if n == self._expected[b]:
                self._bucket_ready(b)

        return hook

    def announce(self):
        """Every rank at the step's first bucket (once per step), or an exception naming the
        ranks that did not come."""
        if self._announce is not None and not self._announced:
            self._announced = True
            self._announce()

    def _bucket_ready(self, b):
        self.announce()
        err = _lib.CzError()
        if self._first_ready is not None and not self.declared and self.error is None:
            # Early updates apply the rates during backward: the param groups' as they are
            # now, before the step's first micro-group runs (step() sets the same again).
            self.error = self._first_ready()
        rc = self._L.cz_executor_bucket_ready(self._ex, b, ctypes.byref(err))
        self.declared.add(b)
        if rc != _lib.CZ_OK and self.error is None:
            self.error = err.message.decode(errors="replace")

    def _module_pre_hook(self, mod):
        key = id(mod)
        if key == self._root:
            if self._uncalled is None:
                self._called = set()  # this forward records which modules run
            elif self.pending:
                for b in sorted(self._uncalled, reverse=True):
                    self._wait_bucket(b)
        self._called.add(key)
        if self.pending:
            for b in self._module_buckets.get(key, ()):
                self._wait_bucket(b)

    def _wait_bucket(self, b):
        if b not in self.pending:
            return
        self.pending.discard(b)
        err = _lib.CzError()
        check(self._L.cz_executor_bucket_wait(self._ex, b, ctypes.byref(err)), err)

    def wait_params(self):
        """Completes every parameter all-gather still outstanding (none once closed)."""
        if self._ex is None:
            return
        for b in sorted(self.pending, reverse=True):
            self._wait_bucket(b)

    @contextlib.contextmanager
    def no_sync(self):
        """The hooks do nothing inside: the backward passes accumulate without declaring."""
        old, self._sync = self._sync, False
        try:
            yield
        finally:
            self._sync = old

    def declare_rest(self):
        """The buckets no hook declared (parameters without a gradient, or a step without hooks
        firing), declared before the ranks compare their checks, so that a failure here is
        agreed with the others."""
        if self._uncalled is None and self._has_module and self._called:
            # The forward before the first step ran with nothing outstanding: the modules
            # holding parameters that it did not call are read directly (module.weight).
            self._uncalled = sorted({b for k, bs in self._module_buckets.items()
                                     if k not in self._called for b in bs}, reverse=True)
        for b in self.held:
            if b not in self.declared:
                self._bucket_ready(b)

    def step_finish(self, err):
        """step_finish; its all-gathers outstanding until the forward pre-hooks (or, without a
        module, at once). Returns the executor's code."""
        rc = self._L.cz_executor_step_finish(self._ex, ctypes.byref(err))
        if rc == _lib.CZ_OK:
            self.pending = set(self.held)
            if not self._has_module:
                self.wait_params()  # no module, no forward pre-hooks: every bucket now
        return rc

    def end_step(self):
        """Forgets the step's declarations and error: the next backward starts afresh."""
        self._counts, self.declared, self.error = {}, set(), None
        self._announced = False

    def cancel(self):
        """Every rank ends an open overlapped step with nothing more updated (collective).
        Returns what early updates had already changed (a message), or None."""
        err = _lib.CzError()
        rc = self._L.cz_executor_step_cancel(self._ex, ctypes.byref(err))
        self.end_step()
        if rc != _lib.CZ_OK:
            return err.message.decode(errors="replace")
        return None

    def close(self):
        """Completes the outstanding all-gathers and removes every hook; the executor is not
        touched again."""
        if self._ex is not None:
            self.wait_params()
        for h in self._hooks:
            h.remove()
        self._hooks = []
        self._ex = None
