"""canzona with Megatron-Core's own layers (megatron-core from PyPI, pinned in
tools/python-requirements.txt), on gloo, 4 ranks as DP2·TP2 from Megatron's parallel_state
(issue 36, item 5). Started by torchrun.

1. A model of Megatron-Core's tensor-parallel layers (VocabParallelEmbedding, ColumnParallelLinear,
   RowParallelLinear; use_cpu_initialization) trained 10 steps with canzona.torch.Optimizer,
   which reads their attributes (tensor_model_parallel, partition_dim) instead of declarations,
   against the same model in one process (plain torch layers, the full weights) under
   torch.optim.Muon with a float32 Newton-Schulz + AdamW: every step's loss and every final
   parameter within 1e-4 (relative; tests/python/torch_muon_check.py says why).
2. Megatron-Core's GPTModel at TP2 (local layer spec, fused QKV): canzona plans it from its
   attributes, every TP dimension equal to the parameter's partition_dim, the fused
   linear_qkv taken whole (one matrix, Megatron's rows in Megatron's order). Its forward pass
   does not run on a CPU: the test checks that it still stops where docs/PYTHON.md says
   (DotProductAttention asks torch.cuda for its buffer's device), so that a release that runs
   it is noticed.

Env: CANZONA_EXEC_LIB, CANZONA_LIB, PYTHONPATH with python/, CZ_SOURCE_DIR.
"""
import json
import os
import sys
import tempfile
import warnings

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

from canzona.testing import train_torch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_muon_check as tm  # noqa: E402  (fp32 Newton-Schulz, the rates, the comparison)

warnings.filterwarnings("ignore", message=".*Transformer Engine.*")
V, H, FFN, T, B, LAYERS, STEPS = 64, 64, 128, 8, 8, 2, 10
TOL = 1e-4
OPTIMIZERS = {"embed.weight": "elementwise", "out.weight": "elementwise"}


def megatron_config():
    from megatron.core.transformer.transformer_config import TransformerConfig

    return TransformerConfig(num_layers=LAYERS, hidden_size=H, num_attention_heads=4,
                             use_cpu_initialization=True, params_dtype=torch.float32,
                             attention_dropout=0.0, hidden_dropout=0.0)


class MegatronNet(nn.Module):
    """Megatron-Core's TP layers: a vocab-parallel embedding, column- then row-parallel MLPs,
    a column-parallel output layer whose logits are gathered by examples/torch_train.py's
    autograd all-gather (Megatron's gather_output=True allocates on torch.cuda.current_device())."""

    def __init__(self, cfg):
        from megatron.core.tensor_parallel.layers import (ColumnParallelLinear,
                                                          RowParallelLinear,
                                                          VocabParallelEmbedding)

        super().__init__()
        init = nn.init.normal_
        self.embed = VocabParallelEmbedding(V, H, init_method=init, config=cfg)
        self.norms = nn.ModuleList(nn.LayerNorm(H) for _ in range(LAYERS))
        self.fc1 = nn.ModuleList(ColumnParallelLinear(H, FFN, config=cfg, init_method=init,
                                                      bias=False, gather_output=False)
                                 for _ in range(LAYERS))
        self.fc2 = nn.ModuleList(RowParallelLinear(FFN, H, config=cfg, init_method=init,
                                                   bias=False, input_is_parallel=True,
                                                   skip_bias_add=False)
                                 for _ in range(LAYERS))
        self.out = ColumnParallelLinear(H, V, config=cfg, init_method=init, bias=False,
                                        gather_output=False)
        from megatron.core import parallel_state as ps

        self._gather = tm.tp_functions(ps.get_tensor_model_parallel_group(),
                                       ps.get_tensor_model_parallel_world_size())[2]

    def forward(self, idx, targets):
        x = self.embed(idx)
        for norm, fc1, fc2 in zip(self.norms, self.fc1, self.fc2):
            x = x + fc2(F.gelu(fc1(norm(x))[0]))[0]
        logits = self._gather(self.out(x)[0])
        return F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1))


class PlainNet(nn.Module):
    """The same model in one process, torch's layers, the full weights (same names)."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(V, H)
        self.norms = nn.ModuleList(nn.LayerNorm(H) for _ in range(LAYERS))
        self.fc1 = nn.ModuleList(nn.Linear(H, FFN, bias=False) for _ in range(LAYERS))
        self.fc2 = nn.ModuleList(nn.Linear(FFN, H, bias=False) for _ in range(LAYERS))
        self.out = nn.Linear(H, V, bias=False)

    def forward(self, idx, targets):
        x = self.embed(idx)
        for norm, fc1, fc2 in zip(self.norms, self.fc1, self.fc2):
            x = x + fc2(F.gelu(fc1(norm(x))))
        return F.cross_entropy(self.out(x).reshape(-1, V), targets.reshape(-1))


def full_weights():
    g = torch.Generator().manual_seed(7)
    ref = PlainNet()
    with torch.no_grad():
        for p in ref.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.5 / p.shape[-1] ** 0.5
                    if p.ndim == 2 else 1.0 + 0.1 * torch.randn(p.shape, generator=g))
    return {n: p.detach().clone() for n, p in ref.named_parameters()}


def batch(step):
    g = torch.Generator().manual_seed(5 + step)
    x = torch.randint(0, V, (B, T), generator=g)
    return x, (x * 3 + 2) % V


def reference(full):
    model = PlainNet()
    with torch.no_grad():
        for n, p in model.named_parameters():
            p.copy_(full[n])
    mats = [p for n, p in model.named_parameters() if p.ndim == 2 and n not in OPTIMIZERS]
    rest = [p for n, p in model.named_parameters() if not (p.ndim == 2 and n not in OPTIMIZERS)]
    return train_torch(model, mats, rest, (batch(step) for step in range(STEPS)),
                       muon=dict(lr=tm.LR, weight_decay=tm.WD, adjust_lr_fn="match_rms_adamw"),
                       adamw=dict(lr=tm.ADAMW_LR, betas=(0.9, 0.95), eps=1e-8,
                                  weight_decay=tm.WD))


def optimizer(model, **kw):
    import canzona.torch as ct
    from megatron.core import parallel_state as ps

    return ct.Optimizer(model, tp_group=ps.get_tensor_model_parallel_group(),
                        dp_group=ps.get_data_parallel_group(), lr=tm.LR, weight_decay=tm.WD,
                        muon_scaling="rms", adamw_lr=tm.ADAMW_LR, adamw_betas=(0.9, 0.95),
                        adamw_eps=1e-8, adamw_weight_decay=tm.WD, optimizers=OPTIMIZERS, **kw)


def check_layers(failed):
    from megatron.core import parallel_state as ps

    tp, tr = ps.get_tensor_model_parallel_world_size(), ps.get_tensor_model_parallel_rank()
    dp = ps.get_data_parallel_world_size()
    full = full_weights()
    model = MegatronNet(megatron_config())
    with torch.no_grad():
        for n, p in model.named_parameters():
            if getattr(p, "tensor_model_parallel", False):
                p.copy_(torch.chunk(full[n], tp, dim=p.partition_dim)[tr])
            else:
                p.copy_(full[n])
    opt = optimizer(model)
    losses = tm.run_steps(model, opt, ps.get_data_parallel_group(), range(STEPS), batch)
    got = {}
    for n, p in model.named_parameters():
        if getattr(p, "tensor_model_parallel", False):
            parts = [torch.empty_like(p) for _ in range(tp)]
            dist.all_gather(parts, p.detach().contiguous(),
                            group=ps.get_tensor_model_parallel_group())
            got[n] = torch.cat(parts, dim=p.partition_dim)
        else:
            got[n] = p.detach().clone()
    opt.close()
    ref_losses, ref = reference(full)
    loss_rel, par_rel, worst = tm.compare(losses, got, (ref_losses, ref))
    if dist.get_rank() == 0:
        print(f"Megatron-Core layers, DP{dp}·TP{tp}, {STEPS} steps, attributes only: loss "
              f"{loss_rel:.2e}, parameters {par_rel:.2e} ({worst}) from one process "
              f"(bound {TOL:g}); loss {losses[0]:.4f} -> {losses[-1]:.4f}", flush=True)
    if not (loss_rel <= TOL and par_rel <= TOL):
        failed.append(f"Megatron-Core layers: {loss_rel:.2e} / {par_rel:.2e} > {TOL:g}")
    if not losses[-1] < 0.8 * losses[0]:
        failed.append("Megatron-Core layers: the loss did not fall")


def check_gpt(failed):
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.models.gpt.gpt_model import GPTModel

    torch.manual_seed(11)
    model = GPTModel(config=megatron_config(), transformer_layer_spec=get_gpt_layer_local_spec(),
                     vocab_size=V, max_sequence_length=T)
    box = [tempfile.mkdtemp(prefix="cz-megatron-") if dist.get_rank() == 0 else None]
    dist.broadcast_object_list(box, src=0)
    path = os.path.join(box[0], "gpt.plan.json")
    opt = optimizer(model, save_plan=path)
    opt.close()
    dist.barrier()
    with open(path) as f:
        plan = {p["name"]: p for p in json.load(f)["params"]}
    dist.barrier()
    if dist.get_rank() == 0:
        os.remove(path)
        os.rmdir(box[0])
    for n, p in model.named_parameters():
        want = p.partition_dim if getattr(p, "tensor_model_parallel", False) else None
        if plan[n]["tp_dim"] != want:
            failed.append(f"GPTModel {n}: the plan's tp_dim {plan[n]['tp_dim']}, Megatron's "
                          f"partition_dim {want}")
    qkv = [n for n in plan if n.endswith("linear_qkv.weight")]
    if not qkv or plan[qkv[0]]["optimizer"] != "matrix":
        failed.append(f"GPTModel: no fused linear_qkv matrix in the plan ({qkv})")
    if dist.get_rank() == 0:
        print(f"GPTModel TP2: {len(plan)} parameters planned from Megatron's attributes; "
              f"{qkv[0] if qkv else '?'} local {plan[qkv[0]]['local_shape'] if qkv else '?'}, "
              "one matrix", flush=True)
    ids = torch.randint(0, V, (2, T))
    pos = torch.arange(T).unsqueeze(0).expand(2, T)
    mask = torch.tril(torch.ones(1, 1, T, T)) < 0.5
    try:
        model(ids, pos, mask, labels=ids)
        failed.append("GPTModel's forward now runs on the CPU: train it in this test and update "
                      "docs/PYTHON.md")
    except (AssertionError, RuntimeError) as e:
        if "CUDA" not in str(e):
            failed.append(f"GPTModel's forward stops elsewhere than documented: {e}")
        elif dist.get_rank() == 0:
            print(f"GPTModel forward on the CPU stops as documented: {type(e).__name__}: {e}",
                  flush=True)


def main():
    from megatron.core import parallel_state as ps

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    ps.initialize_model_parallel(tensor_model_parallel_size=2)
    failed = []
    check_layers(failed)
    check_gpt(failed)
    for f in failed:
        print(f"rank {dist.get_rank()}: FAIL: {f}", flush=True)
    if dist.get_rank() == 0:
        print("FAIL" if failed else "ok", flush=True)
    ps.destroy_model_parallel()
    dist.destroy_process_group()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
