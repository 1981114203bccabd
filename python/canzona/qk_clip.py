"""QK-clip (MuonClip) descriptions: which rows of which parameters are which attention heads'
queries and keys, for canzona.Executor.set_qk_clip and canzona.torch.Optimizer.set_qk_clip
(docs/EXECUTOR.md, "QK-clip"; docs/PYTHON.md). Each helper returns runs of rows, tuples
(param, row0, rows, layer, head0, heads, power) of the whole (unsharded) parameters: rows
[row0, row0 + rows) of param are scaled by (tau / S) ** power when S, the largest of the
layer's query-head maxima head0 .. head0 + heads - 1, exceeds tau. The powers are alpha = 1/2 on
the query side and 1 - alpha on the key side, as Kimi K2 and Megatron-LM use.
"""
import ctypes

from . import _lib


def attention(q, k, layer, heads, head_dim, kv_heads=None, q_row0=0, k_row0=0, alpha=0.5):
    """Standard (kv_heads None or heads) or grouped-query attention with separate query and key
    projections (Hugging Face's q_proj and k_proj, [heads * head_dim, hidden] and
    [kv_heads * head_dim, hidden]), their rows from q_row0 and k_row0 (a fused projection:
    where its query and key blocks start). Multi-head: each head by its own maximum; grouped:
    each group's query heads and key head by the group's largest (Megatron-LM's rule)."""
    kv = heads if kv_heads is None else kv_heads
    if kv < 1 or heads % kv:
        raise ValueError(f"qk_clip.attention: {heads} heads in {kv} key/value heads; the key "
                         "heads must divide the query heads")
    per = heads // kv
    runs = []
    for g in range(kv):
        runs.append((q, q_row0 + g * per * head_dim, per * head_dim, layer, g * per, per, alpha))
        runs.append((k, k_row0 + g * head_dim, head_dim, layer, g * per, per, 1.0 - alpha))
    return runs


def megatron_qkv(qkv, layer, heads, groups, head_dim, alpha=0.5):
    """Megatron-Core's fused linear_qkv ([(heads + 2 * groups) * head_dim, hidden]) as it is
    stored, rows interleaved per query group: [the group's heads/groups query heads, its key,
    its value], head_dim rows each; the group's largest maximum decides both sides. That is the
    plan's layout when the model declares no blocks for it. With the [Q, K, V] blocks that
    import-hf declares (--split-qkv yes) the plan's whole matrix is [all Q; all K; all V]: use
    attention(qkv, qkv, layer, heads, head_dim, groups, k_row0=heads * head_dim) then."""
    if groups < 1 or heads % groups:
        raise ValueError(f"qk_clip.megatron_qkv: {heads} heads in {groups} query groups; the "
                         "groups must divide the heads")
    per = heads // groups
    stride = (per + 2) * head_dim
    runs = []
    for g in range(groups):
        runs.append((qkv, g * stride, per * head_dim, layer, g * per, per, alpha))
        runs.append((qkv, g * stride + per * head_dim, head_dim, layer, g * per, per,
                     1.0 - alpha))
    return runs


def mla(q, kv_up, layer, heads, qk_nope, qk_rope, v_head_dim, alpha=0.5):
    """Multi-head latent attention (DeepSeek-V3, Kimi K2): the query projection q
    (linear_q_proj or linear_q_up_proj, [heads * (qk_nope + qk_rope), ...], per head its
    non-rotary then rotary rows) and linear_kv_up_proj kv_up ([heads * (qk_nope + v_head_dim),
    ...], per head its key then value rows). Per head: the non-rotary query rows by alpha, the
    rotary ones by 1 (the rotary key is shared by every head, so no head's factor may scale
    it), the key rows of kv_up by 1 - alpha; values untouched (Kimi K2's rule)."""
    runs = []
    for h in range(heads):
        qs, ks = h * (qk_nope + qk_rope), h * (qk_nope + v_head_dim)
        runs.append((q, qs, qk_nope, layer, h, 1, alpha))
        runs.append((q, qs + qk_nope, qk_rope, layer, h, 1, 1.0))
        runs.append((kv_up, ks, qk_nope, layer, h, 1, 1.0 - alpha))
    return runs


class _Spec:
    """A cz_qk_clip_spec and the memory it points to (alive as long as this object)."""

    def __init__(self, tau, layers, heads_per_layer, runs):
        runs = list(runs)
        self.names = [str(r[0]).encode() for r in runs]
        self.rows = (_lib.QkClipRows * max(1, len(runs)))()
        for i, (r, name) in enumerate(zip(runs, self.names)):
            if len(r) != 7:
                raise ValueError(f"qk_clip run {i}: {r!r}; expected (param, row0, rows, layer, "
                                 "head0, heads, power)")
            _, row0, rows, layer, head0, heads, power = r
            self.rows[i] = _lib.QkClipRows(name, int(row0), int(rows), int(layer), int(head0),
                                           int(heads), float(power))
        self.spec = _lib.QkClipSpec(float(tau), int(layers), int(heads_per_layer),
                                    ctypes.cast(self.rows, ctypes.POINTER(_lib.QkClipRows)),
                                    len(runs))
        self.count = int(layers) * int(heads_per_layer)


def maxima(values):
    """(float32 ctypes array, count) of the maxima in a nested sequence, a NumPy array or a
    tensor (any shape, layer-major)."""
    if type(values).__module__.split(".")[0] == "torch":
        values = values.detach().to("cpu").float().reshape(-1).tolist()
    else:
        try:
            values = [float(v) for v in getattr(values, "ravel", lambda: values)()]
        except TypeError:
            values = [float(v) for row in values for v in row]
    arr = (ctypes.c_float * max(1, len(values)))(*values)
    return arr, len(values)
