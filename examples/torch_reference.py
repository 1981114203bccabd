#!/usr/bin/env python3
"""The reference for examples/torch_train.py: the same model, initial weights and data, trained
in ONE process (no tensor or data parallelism) with a plain PyTorch Muon + AdamW written from
the formulas of docs/EXECUTOR.md "Optimizers" — no canzona, no MPI.

    python3 examples/torch_reference.py --steps 50 --log-json ref.json

Takes torch_train.py's model and optimizer options (--layers, --hidden, --lr, --adamw-lr, ...;
--tp, --device and --micro-batches are ignored: the global batch is the same for every shape),
and its --schedule through the same torch.optim.lr_scheduler. Its per-step losses are
what tests/python/torch_train_check.py holds the distributed runs to.
"""
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_train  # noqa: E402

JORDAN = (3.4445, -4.7750, 2.0315)  # ns_coeffs "jordan", the executor's default


def orthogonalize(g, steps, eps, coeffs=JORDAN):
    """Newton-Schulz orthogonalization of one block: X = G/(|G|_F + eps) with the norm in
    double, transposed so rows <= cols, steps of A = X X^T, B = b A + c A A, X = a X + B X."""
    import torch

    a, b, c = coeffs
    x = g * float(1.0 / (g.double().norm().item() + eps))
    x = x.float()
    tall = x.shape[0] > x.shape[1]
    if tall:
        x = x.t()
    for _ in range(steps):
        A = x @ x.t()
        B = b * A + c * (A @ A)
        x = a * x + B @ x
    return (x.t() if tall else x).contiguous()


class MuonAdamW:
    """Muon for the "matrix" parameters (per block of a fused matrix), AdamW for the rest."""

    def __init__(self, named_params, specs, *, lr, momentum=0.95, nesterov=True,
                 weight_decay=0.01, ns_steps=5, ns_eps=1e-7, muon_scaling="rms",
                 scale_coeff=0.2, adamw_lr=3e-4, betas=(0.9, 0.95), adamw_eps=1e-8,
                 adamw_weight_decay=0.01, max_grad_norm=0.0):
        import torch

        self.params = list(named_params)
        self.specs = specs
        self.lr, self.adamw_lr = lr, adamw_lr
        self.mu, self.nesterov, self.wd = momentum, nesterov, weight_decay
        self.ns_steps, self.ns_eps = ns_steps, ns_eps
        self.scaling, self.scale_coeff = muon_scaling, scale_coeff
        self.betas, self.eps, self.adamw_wd = betas, adamw_eps, adamw_weight_decay
        self.max_grad_norm = max_grad_norm
        self.t = 0
        self.state = {}
        for name, p in self.params:
            if specs[name][3] == "matrix":
                self.state[name] = {"momentum": torch.zeros_like(p)}
            else:
                self.state[name] = {"exp_avg": torch.zeros_like(p),
                                    "exp_avg_sq": torch.zeros_like(p)}
        self.grad_norm = float("nan")

    def set_lr(self, lr, adamw_lr):
        self.lr, self.adamw_lr = lr, adamw_lr

    def scale(self, rows, cols):
        if self.scaling == "shape":
            return max(1.0, rows / cols) ** 0.5
        return self.scale_coeff * max(rows, cols) ** 0.5

    def step(self):
        import torch

        self.t += 1
        sq = sum(p.grad.double().pow(2).sum().item() for _, p in self.params)
        self.grad_norm = sq ** 0.5
        clip = None
        if self.max_grad_norm > 0 and self.grad_norm > self.max_grad_norm:
            clip = self.max_grad_norm / (self.grad_norm + 1e-6)
        with torch.no_grad():
            for name, p in self.params:
                g = p.grad if clip is None else p.grad * clip
                st = self.state[name]
                if "momentum" in st:
                    self.muon(name, p, g, st["momentum"])
                else:
                    self.adamw(p, g, st["exp_avg"], st["exp_avg_sq"])

    def muon(self, name, p, g, buf):
        import torch

        buf.mul_(self.mu).add_(g)                                  # buf = mu*buf + g
        x = g + self.mu * buf if self.nesterov else buf
        blocks = self.specs[name][2]
        dim, sizes = blocks if blocks else (0, [p.shape[0]])
        u = torch.cat([orthogonalize(blk, self.ns_steps, self.ns_eps) *
                       self.scale(blk.shape[0], blk.shape[1])
                       for blk in torch.split(x, sizes, dim=dim)], dim=dim)
        p.copy_(p * (1.0 - self.lr * self.wd) - self.lr * u)

    def adamw(self, p, g, m, v):
        b1, b2 = self.betas
        m.mul_(b1).add_((1.0 - b1) * g)
        v.mul_(b2).add_((1.0 - b2) * g * g)
        c1, c2 = 1.0 - b1 ** self.t, 1.0 - b2 ** self.t
        p.copy_(p * (1.0 - self.adamw_lr * self.adamw_wd) -
                self.adamw_lr * (m / c1) / ((v / c2).sqrt() + self.eps))


def main(argv=None):
    import torch

    cfg = torch_train.parse_args(argv)
    torch.set_num_threads(cfg.threads)
    model = torch_train.build_model(cfg, 1, 0, None)
    torch_train.load_shards(model, cfg, torch_train.init_params(cfg), 1, 0)
    specs = torch_train.param_specs(cfg)
    opt = MuonAdamW(model.named_parameters(), specs, lr=cfg.lr, weight_decay=cfg.weight_decay,
                    muon_scaling=cfg.muon_scaling, adamw_lr=cfg.adamw_lr,
                    adamw_weight_decay=cfg.weight_decay, max_grad_norm=cfg.max_grad_norm)
    # The same torch.optim.lr_scheduler as the distributed run, over two groups that carry the
    # Muon and the AdamW rate (this optimizer is not a torch one: it reads them every step).
    rates = torch.optim.SGD([{"params": [torch.zeros(1)], "lr": cfg.lr},
                             {"params": [torch.zeros(1)], "lr": cfg.adamw_lr}], lr=cfg.lr)
    sched = torch_train.scheduler(cfg, rates, 0)
    data = torch_train.tokens(cfg.seed)
    losses, norms = [], []
    t0 = time.time()
    for step in range(cfg.steps):
        opt.set_lr(rates.param_groups[0]["lr"], rates.param_groups[1]["lr"])
        x, y = torch_train.global_batch(data, step, cfg.batch, cfg.seq, cfg.seed)
        model.zero_grad(set_to_none=False)
        loss = model(x, y)
        loss.backward()
        opt.step()
        rates.step()
        sched.step()
        losses.append(loss.item())
        norms.append(opt.grad_norm)
        print(f"step {step:4d}  loss {losses[-1]:.6f}  grad_norm {norms[-1]:.4f}", flush=True)
    print(f"done: {cfg.steps} steps in {time.time() - t0:.1f} s (reference, one process)")
    if cfg.log_json:
        with open(cfg.log_json, "w") as f:
            json.dump({"dp": 1, "tp": 1, "first_step": 0, "loss": losses, "grad_norm": norms}, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
