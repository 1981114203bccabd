"""Newton-Schulz coefficients as the Python side takes them (ns_coefficients / ns_coeffs): a
set's name ("jordan", "cubic", "polar_express"), one triple (a, b, c) repeated every iteration,
or a sequence of triples, one per iteration, which then fixes the iteration count
(docs/PYTHON.md, "Newton-Schulz coefficients")."""

import ctypes
import math
import numbers

from . import _lib


def _triple(row, where):
    if (isinstance(row, (str, bytes)) or not hasattr(row, "__len__") or len(row) != 3 or
            not all(isinstance(v, numbers.Real) and math.isfinite(v) for v in row)):
        raise ValueError(f"ns_coefficients{where}: {row!r}; expected (a, b, c), three finite "
                         f"numbers")
    return ",".join(repr(float(v)) for v in row)


def text(value):
    """The configuration's text form: a name as it is, triples as rows "a,b,c" separated by
    ";" (each float's repr, so the C side reads exactly these numbers)."""
    if isinstance(value, str):
        return value
    if hasattr(value, "__len__") and len(value) == 3 and all(
            isinstance(v, numbers.Real) for v in value):
        return _triple(value, "")
    if not hasattr(value, "__len__") or len(value) == 0:
        raise ValueError(f"ns_coefficients = {value!r}; expected a name, (a, b, c) or a "
                         f"sequence of (a, b, c), one per iteration")
    return ";".join(_triple(row, f"[{i}]") for i, row in enumerate(value))


def steps(coeffs, ns_steps):
    """ns_steps when given (not None); else the table's row count, else 5 (the default). The
    executor refuses a table with a different ns_steps."""
    if ns_steps is not None:
        return int(ns_steps)
    n, err = ctypes.c_int(0), _lib.CzError()
    _lib.check(_lib.lib().cz_exec_ns_coeffs_steps(text(coeffs).encode(), ctypes.byref(n),
                                                  ctypes.byref(err)), err)
    return n.value if n.value > 0 else 5
