"""Loads libcanzona-exec and declares the C functions the package calls (canzona_exec.h)."""
import ctypes
import ctypes.util
import os

# Error codes of canzona.h.
CZ_OK, CZ_EIO, CZ_EPARSE, CZ_EINVALID, CZ_ENOMEM = 0, -1, -2, -3, -4
CZ_EMISMATCH, CZ_EUNSUPPORTED, CZ_EINTERNAL, CZ_ETIMEOUT = -5, -6, -7, -8
DTYPE_BF16, DTYPE_FP16, DTYPE_FP32 = 0, 1, 2
CZ_EXEC_CONFIG_VERSION = 9
CZ_EXEC_LR_DEFAULT = -1.0  # cz_exec_config.lr's default: the optimizer's own
CZ_COMM_CALLBACKS_VERSION = 1
# cz_comm_dtype, cz_comm_op, cz_comm_group
COMM_FP32, COMM_BF16, COMM_FP64, COMM_INT64 = 0, 1, 2, 3
COMM_SUM, COMM_MIN = 0, 1
COMM_WORLD, COMM_DP, COMM_TP = 0, 1, 2


class Error(Exception):
    """A canzona call failed: .code is the CZ_E* code, the message says what to fix."""

    def __init__(self, code, message):
        super().__init__(message)
        self.code = code

    @property
    def code_name(self):
        """The code's name ("CZ_EINVALID", ...), cz_error_code_name's."""
        return error_code_name(self.code)


class CzError(ctypes.Structure):
    _fields_ = [("code", ctypes.c_int), ("message", ctypes.c_char * 1024)]


class CommTransfer(ctypes.Structure):
    """cz_comm_transfer."""

    _fields_ = [("buf", ctypes.c_void_p), ("count", ctypes.c_size_t), ("dtype", ctypes.c_int),
                ("peer", ctypes.c_int), ("send", ctypes.c_int)]


# The callbacks' C types (cz_comm_callbacks): ctypes turns a Python exception inside one into
# a printed traceback and a return of 0, so the wrappers (comm.py) catch everything and return
# -1 themselves.
ALL_REDUCE_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p,
                                 ctypes.c_size_t, ctypes.c_int, ctypes.c_int)
BROADCAST_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p,
                                ctypes.c_size_t, ctypes.c_int, ctypes.c_int)
EXCHANGE_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_int,
                               ctypes.POINTER(CommTransfer), ctypes.c_int)
LAST_ERROR_FN = ctypes.CFUNCTYPE(ctypes.c_char_p, ctypes.c_void_p)


class CommCallbacks(ctypes.Structure):
    """cz_comm_callbacks."""

    _fields_ = [
        ("version", ctypes.c_int),
        ("user", ctypes.c_void_p),
        ("world_size", ctypes.c_int),
        ("world_rank", ctypes.c_int),
        ("has_groups", ctypes.c_int),
        ("dp_size", ctypes.c_int),
        ("dp_rank", ctypes.c_int),
        ("tp_size", ctypes.c_int),
        ("tp_rank", ctypes.c_int),
        ("all_reduce", ALL_REDUCE_FN),
        ("broadcast", BROADCAST_FN),
        ("exchange", EXCHANGE_FN),
        ("last_error", LAST_ERROR_FN),
    ]


f, i = ctypes.c_float, ctypes.c_int


class MuonConfig(ctypes.Structure):
    """cz_muon_config (cz_exec_config.muon)."""

    _fields_ = [("version", i), ("momentum", f), ("nesterov", i), ("ns_steps", i),
                ("ns_coeffs", ctypes.c_char_p), ("ns_eps", f), ("scale_coeff", f), ("scaling", i)]


class AdamWConfig(ctypes.Structure):
    """cz_adamw_config (cz_exec_config.adamw)."""

    _fields_ = [("version", i), ("lr", f), ("beta1", f), ("beta2", f), ("eps", f),
                ("weight_decay", f)]


class SoapConfig(ctypes.Structure):
    """cz_soap_config (cz_exec_config.soap)."""

    _fields_ = [("version", i), ("beta1", f), ("beta2", f), ("shampoo_beta", f), ("eps", f),
                ("bias_correction", i)]


class ShampooConfig(ctypes.Structure):
    """cz_shampoo_config (cz_exec_config.shampoo)."""

    _fields_ = [("version", i), ("beta1", f), ("beta2", f), ("eps", f), ("momentum", f),
                ("nesterov", i), ("start_step", i), ("max_dim", i), ("bias_correction", i),
                ("grafting", i), ("graft_beta2", f), ("graft_eps", f)]


class NorMuonConfig(ctypes.Structure):
    """cz_normuon_config (cz_exec_config.normuon)."""

    _fields_ = [("version", i), ("mode", i), ("beta2", f), ("eps", f)]


class ExecConfig(ctypes.Structure):
    """cz_exec_config of version 9, field for field (checked against the C layout by the tests)."""

    _fields_ = [
        ("version", i),
        ("backend", ctypes.c_char_p),
        ("comm", ctypes.c_char_p),
        ("dp_rank", i),
        ("tp_rank", i),
        ("world_comm", ctypes.c_void_p),
        ("dp_comm", ctypes.c_void_p),
        ("tp_comm", ctypes.c_void_p),
        ("lr", f),
        ("weight_decay", f),
        ("check_finite", i),
        ("max_grad_norm", f),
        ("memory", i),
        ("dtype", i),
        ("stream", ctypes.c_void_p),
        ("nccl_timeout_s", ctypes.c_double),
        ("mpi_timeout_s", ctypes.c_double),
        ("callbacks", ctypes.POINTER(CommCallbacks)),
        ("muon", MuonConfig),
        ("adamw", AdamWConfig),
        ("soap", SoapConfig),
        ("shampoo", ShampooConfig),
        ("grad_reduce_in_fp32", i),
        ("normuon", NorMuonConfig),
    ]




class QkClipRows(ctypes.Structure):
    """cz_qk_clip_rows."""

    _fields_ = [("param", ctypes.c_char_p), ("row0", ctypes.c_int64), ("rows", ctypes.c_int64),
                ("layer", ctypes.c_int32), ("head0", ctypes.c_int32), ("heads", ctypes.c_int32),
                ("power", f)]


class QkClipSpec(ctypes.Structure):
    """cz_qk_clip_spec."""

    _fields_ = [("tau", f), ("nlayers", ctypes.c_int32), ("heads_per_layer", ctypes.c_int32),
                ("rows", ctypes.POINTER(QkClipRows)), ("nrows", ctypes.c_size_t)]


del f, i


class Wire(ctypes.Structure):
    """cz_exec_wire: the DP exchanges' dtypes and the bytes posted since create, and the
    bytes sent in micro-group exchanges over the TP and expert-TP planes."""

    _fields_ = [("grad_dtype", ctypes.c_int), ("param_dtype", ctypes.c_int),
                ("grad_bytes", ctypes.c_int64), ("param_bytes", ctypes.c_int64),
                ("tp_bytes", ctypes.c_int64), ("etp_bytes", ctypes.c_int64)]


class Timings(ctypes.Structure):
    _fields_ = [
        ("reduce_scatter", ctypes.c_double),
        ("elementwise", ctypes.c_double),
        ("matrix", ctypes.c_double),
        ("all_gather", ctypes.c_double),
        ("total", ctypes.c_double),
        ("steps", ctypes.c_int64),
    ]


def _find():
    path = os.environ.get("CANZONA_EXEC_LIB")
    if path:
        return path
    found = ctypes.util.find_library("canzona-exec")
    if not found:
        raise OSError(
            "libcanzona-exec.so not found: set CANZONA_EXEC_LIB to its path "
            "(e.g. build/executor/libcanzona-exec.so) or install it (cmake --install)"
        )
    return found


_lib = None


def lib():
    """The loaded library (loaded on first use, with RTLD_GLOBAL so that MPI's plugins see
    libmpi's symbols)."""
    global _lib
    if _lib is not None:
        return _lib
    L = ctypes.CDLL(_find(), mode=ctypes.RTLD_GLOBAL)
    vp, i, e = ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(CzError)
    sig = {
        "cz_exec_config_init": (None, [ctypes.POINTER(ExecConfig)]),
        "cz_exec_ns_coeffs_steps": (i, [ctypes.c_char_p, ctypes.POINTER(i), e]),
        "cz_error_code_name": (ctypes.c_char_p, [i]),
        "cz_executor_create": (i, [ctypes.POINTER(vp), ctypes.c_char_p,
                                   ctypes.POINTER(ExecConfig), e]),
        "cz_executor_free": (None, [vp]),
        "cz_executor_buffer_numel": (ctypes.c_size_t, [vp]),
        "cz_executor_dtype": (i, [vp]),
        "cz_executor_bind_typed": (i, [vp, vp, vp, ctypes.c_size_t, i, e]),
        "cz_executor_bind_param_typed": (i, [vp, ctypes.c_char_p, vp, vp, ctypes.c_int64,
                                             ctypes.c_int64, i, e]),
        "cz_executor_step": (i, [vp, e]),
        "cz_executor_step_async": (i, [vp, e]),
        "cz_executor_wait": (i, [vp, e]),
        "cz_executor_grad_norm": (ctypes.c_double, [vp]),
        "cz_executor_set_lr": (i, [vp, ctypes.c_float, ctypes.c_float, e]),
        "cz_executor_set_weight_decay": (i, [vp, ctypes.c_float, ctypes.c_float, e]),
        "cz_executor_timings": (None, [vp, ctypes.POINTER(Timings)]),
        "cz_executor_wire": (None, [vp, ctypes.POINTER(Wire)]),
        "cz_executor_dp_rank": (i, [vp]),
        "cz_executor_tp_rank": (i, [vp]),
        "cz_executor_pp_rank": (i, [vp]),
        "cz_executor_save_state": (i, [vp, ctypes.c_char_p, e]),
        "cz_executor_load_state": (i, [vp, ctypes.c_char_p, e]),
        "cz_executor_set_param_rates": (i, [vp, ctypes.POINTER(ctypes.c_float),
                                            ctypes.POINTER(ctypes.c_float), ctypes.c_size_t, e]),
        "cz_executor_param_count": (ctypes.c_size_t, [vp]),
        "cz_executor_param_name": (ctypes.c_char_p, [vp, ctypes.c_size_t]),
        "cz_executor_set_max_grad_norm": (i, [vp, ctypes.c_float, e]),
        "cz_executor_set_momentum": (i, [vp, ctypes.c_float, ctypes.c_float, ctypes.c_float,
                                         e]),
        "cz_executor_bucket_count": (ctypes.c_size_t, [vp]),
        "cz_executor_bucket_held": (i, [vp, ctypes.c_size_t]),
        "cz_executor_param_bucket": (ctypes.c_int64, [vp, ctypes.c_size_t]),
        "cz_executor_bucket_ready": (i, [vp, ctypes.c_size_t, e]),
        "cz_executor_step_finish": (i, [vp, e]),
        "cz_executor_bucket_wait": (i, [vp, ctypes.c_size_t, e]),
        "cz_executor_step_cancel": (i, [vp, e]),
        "cz_executor_set_early_updates": (i, [vp, i, e]),
        "cz_executor_early_groups": (i, [vp]),
        "cz_executor_set_qk_clip": (i, [vp, ctypes.POINTER(QkClipSpec), e]),
        "cz_executor_qk_logits": (i, [vp, ctypes.POINTER(ctypes.c_float), ctypes.c_size_t, e]),
        "cz_executor_qk_clipped": (ctypes.c_int64, [vp]),
    }
    for name, (res, args) in sig.items():
        f = getattr(L, name)
        f.restype, f.argtypes = res, args
    _lib = L
    return L


def error_code_name(code):
    """cz_error_code_name: "CZ_OK", "CZ_EINVALID", ...; "CZ_E?" for an unknown code."""
    return lib().cz_error_code_name(int(code)).decode()


def check(rc, err):
    if rc != CZ_OK:
        raise Error(rc, err.message.decode(errors="replace"))
