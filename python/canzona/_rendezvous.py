"""Announcement rounds of canzona.torch.Optimizer (docs/PYTHON.md, "Collective calls and
timeout="): before each of its collective phases (the constructor, step(), state_dict(),
load_state_dict(), an overlapped backward's first bucket), every rank announces the phase under
the phase's sequence number in the job's store (the c10d store torchrun's rendezvous made) and
waits, at most timeout seconds, until every rank has announced the same phase. A rank that never
comes, or comes to another phase, is then named on every rank that came, with canzona's phase,
instead of a collective that waits for gloo's timeout (30 minutes by default) and names neither.

Per round and rank: one set, one add and one wait on the store (a few round trips to its
server), and the keys of two rounds before are deleted.
"""
import datetime

from . import _lib
from ._lib import Error


def default_store():
    """The store of the default process group (torchrun's env:// rendezvous store)."""
    import torch.distributed as dist

    return dist.distributed_c10d._get_default_store()


class Rendezvous:
    """Rounds under prefix over store for world ranks, this one rank; timeout in seconds (None:
    no rounds, the collectives wait as long as the process groups let them)."""

    def __init__(self, store, prefix, world, rank, timeout, first=0):
        self._store, self._prefix = store, prefix
        self._world, self._rank, self.timeout = world, rank, timeout
        self._seq = first  # the next round's sequence number
        self._phases = {}  # sequence number -> phase, for the clean-up two rounds on

    def arrive(self, phase):
        """Announces phase and waits for every rank's announcement of it: when they do not
        come within the timeout, raises canzona.Error naming the ranks that did not come
        (CZ_ETIMEOUT) or that called another phase (CZ_EMISMATCH)."""
        if self.timeout is None or self._world == 1:
            return
        seq, self._seq = self._seq, self._seq + 1
        base = f"{self._prefix}/{seq}"
        st = self._store
        count = f"{base}/{phase}/n"
        st.set(f"{base}/rank{self._rank}", phase)
        came = st.add(count, 1)
        if came > _GAVE_UP:
            raise Error(_lib.CZ_ETIMEOUT, (
                f"canzona.torch.Optimizer {phase}: this rank came after the others had stopped "
                f"waiting for it (timeout = {self.timeout:g} s; they raised an error naming "
                "it): the optimizer's calls are out of step across the ranks, end the job"))
        if came == self._world:
            st.set(f"{base}/{phase}/all", "1")
        try:
            st.wait([f"{base}/{phase}/all"], datetime.timedelta(seconds=self.timeout))
        except RuntimeError as e:  # torch's DistStoreError: the wait timed out
            st.add(count, _GAVE_UP)  # a rank coming later fails at once (above)
            code, msg = self._missing(base, phase)
            raise Error(code, msg) from e
        self._phases[seq] = phase
        old = self._phases.pop(seq - 2, None)
        if old is not None:
            # Every rank has left round seq - 2 (each came to seq - 1 after it).
            st.delete_key(f"{self._prefix}/{seq - 2}/rank{self._rank}")
            if self._rank == 0:
                st.delete_key(f"{self._prefix}/{seq - 2}/{old}/n")
                st.delete_key(f"{self._prefix}/{seq - 2}/{old}/all")

    def _missing(self, base, phase):
        st, absent, elsewhere = self._store, [], {}
        for r in range(self._world):
            key = f"{base}/rank{r}"
            if not st.check([key]):
                absent.append(r)
                continue
            other = st.get(key).decode(errors="replace")
            if other != phase:
                elsewhere.setdefault(other, []).append(r)
        what = []
        if absent:
            what.append(f"rank{'s' if len(absent) > 1 else ''} {_ranks(absent)} did not call it")
        for other, ranks in sorted(elsewhere.items()):
            what.append(f"rank{'s' if len(ranks) > 1 else ''} {_ranks(ranks)} called {other} "
                        "instead")
        if not what:  # every rank came, but later than the timeout allowed for
            what.append("not every rank came in time")
        code = _lib.CZ_EMISMATCH if elsewhere else _lib.CZ_ETIMEOUT
        return code, (
            f"canzona.torch.Optimizer {phase}: {'; '.join(what)} (rank {self._rank} waited "
            f"timeout = {self.timeout:g} s). It is collective: every rank makes the same calls of "
            "the optimizer (the constructor, step(), state_dict(), load_state_dict()) in the same "
            "order, e.g. state_dict() on every rank and the saving on rank 0 only; a rank that is "
            "only slower (evaluation, saving) needs a larger timeout=. Nothing was changed by this "
            "call; the optimizer's calls are out of step across the ranks now, end the job")


_GAVE_UP = 1 << 40  # added to a round's count by a rank that stopped waiting


def _ranks(ranks):
    return ", ".join(str(r) for r in ranks)
