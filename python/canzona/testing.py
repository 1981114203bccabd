"""Helpers for comparing canzona with torch's own optimizers (the project's tests and
tools/bench/torch_step_bench.py use them; so can a user checking a port).

    with canzona.testing.torch_muon_fp32():
        torch.optim.Muon(...).step()      # its Newton-Schulz in float32, canzona's precision

torch.optim.Muon runs Newton-Schulz in bfloat16 (about 1 % off the float32 result per update);
canzona runs it in float32, so only with this swap do the two agree to float32 rounding.
"""
import contextlib


@contextlib.contextmanager
def torch_muon_fp32():
    """Within the block, torch.optim.Muon's Newton-Schulz iteration (the module function
    torch.optim._muon._zeropower_via_newtonschulz, torch 2.9 and newer) runs the same steps in
    float32: X = G / max(||G||_F, eps), transposed so that rows <= cols, then
    X = a X + (b A + c A A) X with A = X X^T."""
    import torch.optim._muon as m

    shipped = m._zeropower_via_newtonschulz

    def fp32(grad, ns_coefficients, ns_steps, eps, *_, **__):
        # (*_, **__: the use_addmm flag some torch versions pass; the products are the same)
        a, b, c = ns_coefficients
        x = grad.float()
        tall = x.size(-2) > x.size(-1)
        if tall:
            x = x.T
        x = x / x.norm().clamp(min=eps)
        for _ in range(ns_steps):
            A = x @ x.T
            x = a * x + (b * A + c * A @ A) @ x
        return x.T if tall else x

    m._zeropower_via_newtonschulz = fp32
    try:
        yield
    finally:
        m._zeropower_via_newtonschulz = shipped


def train_torch(model, mats, rest, batches, *, muon, adamw, fp32=True):
    """One process, torch's optimizers: torch.optim.Muon(mats, **muon) and
    torch.optim.AdamW(rest, **adamw), one step per (inputs, targets) in batches with
    loss = model(inputs, targets). Returns (losses, {name: final parameter})."""
    import torch

    m = torch.optim.Muon(mats, **muon)
    a = torch.optim.AdamW(rest, **adamw)
    losses = []
    with torch_muon_fp32() if fp32 else contextlib.nullcontext():
        for x, y in batches:
            loss = model(x, y)
            loss.backward()
            m.step()
            a.step()
            m.zero_grad()
            a.zero_grad()
            losses.append(loss.item())
    return losses, {n: p.detach().clone() for n, p in model.named_parameters()}
