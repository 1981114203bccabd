"""canzona.torch.Optimizer's refusals and torch conventions, on every rank of a DP2·TP2 job started
started by torchrun (tests/python/run.sh torchrun 4 torch_optim_check.py): every
refusal is raised on every rank with the parameters, their storage and their gradients as they
were; rates per group, lr = 0, gradients torch made anew, state_dict on every rank, Megatron's
attributes, and zero_grad's two forms.

Env: CANZONA_EXEC_LIB, CANZONA_LIB, PYTHONPATH with python/. Writes only into its own temporary
folder.
"""
import os
import sys
import tempfile

import torch
import torch.distributed as dist

import canzona
import canzona.torch as ct

H, TP = 16, 2


class Net(torch.nn.Module):
    """A column-parallel fc1 (rows split), a row-parallel fc2 (columns split), a replicated norm:
    the shards of one TP rank (the forward's collectives do not matter to the optimizer)."""

    def __init__(self, seed, extra=False):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.fc1 = torch.nn.Linear(8, H // TP)
        self.norm = torch.nn.LayerNorm(H // TP)
        self.fc2 = torch.nn.Linear(H // TP, 4, bias=False)
        if extra:
            self.extra = torch.nn.Linear(4, 4, bias=False)
        with torch.no_grad():
            for p in self.parameters():
                p.copy_(torch.randn(p.shape, generator=g) * 0.3)

    def forward(self, x):
        y = self.fc2(torch.relu(self.norm(self.fc1(x))))
        return self.extra(y) if hasattr(self, "extra") else y


TP_DIMS = {"fc1.weight": 0, "fc1.bias": 0, "fc2.weight": 1}
V = 32


class LM(torch.nn.Module):
    """A token embedding, a hidden matrix, a norm and an output head named as Hugging Face
    names it (lm_head), as torchtitan does (output), or tied to the embedding (tied)."""

    def __init__(self, style):
        super().__init__()
        g = torch.Generator().manual_seed(7)
        self.embed = torch.nn.Embedding(V, 8)
        self.body = torch.nn.Linear(8, 8)
        self.norm = torch.nn.LayerNorm(8)
        head = torch.nn.Linear(8, V, bias=False)
        if style == "tied":
            head.weight = self.embed.weight
        setattr(self, "output" if style == "output" else "lm_head", head)
        self.head_name = "output" if style == "output" else "lm_head"
        with torch.no_grad():
            for p in self.parameters():
                p.copy_(torch.randn(p.shape, generator=g) * 0.3)

    def forward(self, idx):
        return getattr(self, self.head_name)(self.norm(torch.relu(self.body(self.embed(idx)))))


def loss_lm(model, seed):
    g = torch.Generator().manual_seed(seed * 101 + dist.get_rank())
    idx = torch.randint(0, V, (6,), generator=g)
    return torch.nn.functional.cross_entropy(model(idx), idx)


def loss_of(model, seed):
    g = torch.Generator().manual_seed(seed * 101 + dist.get_rank())
    x = torch.randn(6, 8, generator=g)
    return (model(x) ** 2).mean()


def snapshot(model):
    return {n: (p.detach().clone(), p.data_ptr(), None if p.grad is None else p.grad.clone())
            for n, p in model.named_parameters()}


def unchanged(model, before, what):
    for n, p in model.named_parameters():
        v, ptr, g = before[n]
        assert torch.equal(p.detach(), v), f"{what}: {n} changed"
        assert p.data_ptr() == ptr, f"{what}: {n}'s storage moved"
        if g is not None:
            assert torch.equal(p.grad, g), f"{what}: {n}'s gradient changed"


class Attn(torch.nn.Module):
    """One attention layer of 4 heads of 4 on a hidden size of 8, this TP rank's 2 heads: its
    query and key projections (rows split over TP) and the output projection (columns split),
    with weights large enough that some heads' logits pass the QK-clip bound of the test."""

    HEADS, D, HID = 4, 4, 8

    def __init__(self, seed):
        super().__init__()
        g = torch.Generator().manual_seed(seed + dist.get_rank() % TP)
        local = self.HEADS // TP * self.D
        self.q = torch.nn.Linear(self.HID, local, bias=False)
        self.k = torch.nn.Linear(self.HID, local, bias=False)
        self.o = torch.nn.Linear(local, self.HID, bias=False)
        with torch.no_grad():
            for p in self.parameters():
                p.copy_(torch.randn(p.shape, generator=g))
            self.q.weight[: self.D] *= 3.0  # the first local head's logits run high

    def forward(self, x):
        """(output, the largest pre-softmax logit of each local head)."""
        b, t, _ = x.shape
        n = self.HEADS // TP
        q = self.q(x).view(b, t, n, self.D).transpose(1, 2)
        k = self.k(x).view(b, t, n, self.D).transpose(1, 2)
        logits = q @ k.transpose(-1, -2) / self.D ** 0.5
        att = torch.softmax(logits, dim=-1) @ k
        return self.o(att.transpose(1, 2).reshape(b, t, n * self.D)), logits.amax(dim=(0, 2, 3))


def qk_clip_checks(tpg, rank):
    """QK-clip through canzona.torch: the maxima of a real forward, -inf for the other TP rank's
    heads, handed to one of two optimizers of the same model; after one step its query and key
    rows must be the other's times (tau / S) ** 0.5 per head, S the MAX of every rank's maxima
    (reduced here with torch.distributed: a reference that shares nothing with the executor),
    everything else equal; then a NaN on one rank and a short vector on another, refused on
    every rank with nothing changed."""
    from canzona import qk_clip

    dims = {"q.weight": 0, "k.weight": 0, "o.weight": 1}
    runs = qk_clip.attention("q.weight", "k.weight", 0, Attn.HEADS, Attn.D)
    a, b = Attn(5), Attn(5)
    opt_a = ct.Optimizer(a, tp_group=tpg, tp_dims=dims, lr=0.02)
    opt_b = ct.Optimizer(b, tp_group=tpg, tp_dims=dims, lr=0.02)
    x = torch.randn(2, 6, Attn.HID, generator=torch.Generator().manual_seed(11 + rank // TP))
    full = torch.full((Attn.HEADS,), -torch.inf)
    t, n = rank % TP, Attn.HEADS // TP
    for model in (a, b):
        y, mx = model(x)
        y.square().mean().backward()
    full[t * n:(t + 1) * n] = mx.detach()
    s = full.clone()
    dist.all_reduce(s, op=dist.ReduceOp.MAX)
    tau = float(s.median())  # some heads above, some not
    opt_a.set_qk_clip(tau, 1, Attn.HEADS, runs)
    opt_a.qk_logits(full.view(1, -1))
    opt_a.step()
    opt_b.step()
    above = int((s > tau).sum())
    assert above > 0 and opt_a.qk_clipped == above, (opt_a.qk_clipped, above)
    factor = torch.where(s > tau, (tau / s).sqrt(), torch.ones_like(s))
    for name in ("q", "k"):
        wa, wb = getattr(a, name).weight.detach(), getattr(b, name).weight.detach()
        for h in range(n):
            f = float(factor[t * n + h])
            rows = slice(h * Attn.D, (h + 1) * Attn.D)
            want = wb[rows] * f
            err = float((wa[rows] - want).abs().max() / want.abs().max())
            assert err <= 1e-6, f"{name} head {t * n + h}: {err:.3g} from {f:.6g} x"
            if f == 1.0:
                assert torch.equal(wa[rows], wb[rows]), f"{name} head {t * n + h} moved"
    assert torch.equal(a.o.weight, b.o.weight), "the output projection was scaled"
    # A NaN maximum on one rank, a short vector on another: refused on every rank, unchanged.
    before = {name: p.detach().clone() for name, p in a.named_parameters()}
    for bad_rank, vec, needle in ((3, torch.full((1, Attn.HEADS), torch.nan), "NaN"),
                                  (1, torch.zeros(3), "3 maxima")):
        a(x)[0].square().mean().backward()
        opt_a.qk_logits(vec if rank == bad_rank else full.view(1, -1))
        # The failing rank's own message, the others' naming it.
        needles = (needle,) if rank == bad_rank else (f"rank {bad_rank}: ", needle)
        refused(f"qk_logits {needle} on rank {bad_rank}", opt_a.step, *needles)
        opt_a.zero_grad()
        for name, p in a.named_parameters():
            assert torch.equal(p.detach(), before[name]), f"qk_logits {needle}: {name} changed"
    early = ct.Optimizer(Attn(5), tp_group=tpg, tp_dims=dims, overlap=True, early_updates=True)
    refused("qk-clip with early updates", lambda: early.set_qk_clip(tau, 1, Attn.HEADS, runs),
            "early updates are on")
    early.close()
    opt_a.close()
    opt_b.close()
    if rank == 0:
        print(f"ok: qk-clip, {above} of {Attn.HEADS} heads above tau = {tau:.3g}, clipped as "
              "the formula says on every rank; NaN and a short vector refused everywhere")


def refused(what, fn, *needles):
    """fn raises on this rank, with every needle in its message."""
    try:
        fn()
    except (canzona.Error, ValueError) as e:
        for n in needles:
            assert n in str(e), f"{what}: {n!r} not in {e}"
        return e
    raise AssertionError(f"{what}: accepted")


def tp_group():
    r, groups = dist.get_rank(), []
    for d in range(dist.get_world_size() // TP):
        groups.append(dist.new_group([d * TP + t for t in range(TP)]))
    return groups[r // TP]


def main():
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    tpg = tp_group()
    rank = dist.get_rank()
    with tempfile.TemporaryDirectory(prefix="cz-torch-optim-") as tmp:
        plan = os.path.join(tmp, "plan.json")
        box = [plan]
        dist.broadcast_object_list(box, src=0)  # rank 0's folder: one file for every rank
        plan = box[0]
        shared = os.path.dirname(plan)

        # Hyper-parameters out of range: refused before anything is planned or changed.
        m = Net(1)
        before = snapshot(m)
        refused("momentum 1.5", lambda: ct.Optimizer(m, tp_group=tpg, tp_dims=TP_DIMS,
                                                     momentum=1.5), "momentum = 1.5")
        refused("negative lr", lambda: ct.Optimizer(m, tp_group=tpg, tp_dims=TP_DIMS, lr=-0.1),
                "lr = -0.1")
        # Settings canzona takes once for all groups, and malformed ones (issue 39, item 8).
        named = dict(m.named_parameters())
        refused("betas in a group", lambda: ct.Optimizer(
            [{"params": list(named.items()), "lr": 0.01, "betas": (0.9, 0.99)}], tp_group=tpg,
            tp_dims=TP_DIMS), "param group 0 sets 'betas'", "once for all groups")
        refused("momentum in a group", lambda: ct.Optimizer(
            [{"params": list(named.items()), "lr": 0.01, "momentum": 0.9}], tp_group=tpg,
            tp_dims=TP_DIMS), "param group 0 sets 'momentum'")
        refused("nesterov='yes'", lambda: ct.Optimizer(m, tp_group=tpg, tp_dims=TP_DIMS,
                                                     nesterov="yes"), "nesterov = 'yes'")
        refused("three betas", lambda: ct.Optimizer(m, tp_group=tpg, tp_dims=TP_DIMS,
                                                  adamw_betas=(0.9, 0.95, 0.99)),
                "adamw_betas = (0.9, 0.95, 0.99); expected a pair")
        # Newton-Schulz coefficients: a table fixes the iteration count; rows are triples.
        refused("a table with another ns_steps", lambda: ct.Optimizer(
            m, tp_group=tpg, tp_dims=TP_DIMS, ns_coefficients="polar_express", ns_steps=8),
            "has 5 rows, one per iteration; set ns_steps to 5")
        refused("a row of two", lambda: ct.Optimizer(
            m, tp_group=tpg, tp_dims=TP_DIMS, ns_coefficients=[(3.0, -3.2, 1.2), (1.0, 2.0)]),
            "ns_coefficients[1]: (1.0, 2.0)")
        unchanged(m, before, "out-of-range hyper-parameters")
        table = ct.Optimizer(m, tp_group=tpg, tp_dims=TP_DIMS, ns_coefficients="polar_express")
        loss_of(m, 1).backward()
        table.step()  # 5 iterations, ns_steps from the table
        table.close()

        # A plan saved for inspection, then a model with a parameter the plan does not know.
        good = ct.Optimizer(Net(1), tp_group=tpg, tp_dims=TP_DIMS, save_plan=plan)
        good.close()
        dist.barrier()
        assert os.path.exists(plan)
        m = Net(1, extra=True)
        before = snapshot(m)
        refused("unknown parameter",
                lambda: ct.Optimizer(m, tp_group=tpg, tp_dims=TP_DIMS, plan=plan),
                "'extra.weight' is not in the plan")
        unchanged(m, before, "unknown parameter")

        # A plan for another shape (DP4·TP1 on this DP2·TP2 job) and groups that disagree with
        # the plan (no TP group: DP4·TP1 for a DP2·TP2 plan).
        other = os.path.join(shared, "plan41.json")
        if rank == 0:
            desc = canzona.model_description(Net(1).named_parameters(), tp_dims=TP_DIMS,
                                             tp_size=1)
            with open(other, "w") as f:
                f.write(canzona.planning.plan_text(desc, ct._cluster(4, 1)))
        dist.barrier()
        m = Net(1)
        before = snapshot(m)
        refused("another shape's plan", lambda: ct.Optimizer(m, tp_group=tpg, plan=other),
                "the plan is for DP4·TP1", "groups are DP2·TP2")
        refused("groups that disagree", lambda: ct.Optimizer(m, plan=plan),
                "the plan is for DP2·TP2", "groups are DP4·TP1")
        unchanged(m, before, "another shape")
        # A plan for another model (other shapes under the same names).
        big = os.path.join(shared, "plan_big.json")
        if rank == 0:
            named = [(n, torch.empty(p.shape[0] * 2, *p.shape[1:]))
                     for n, p in Net(1).named_parameters()]
            desc = canzona.model_description(named, tp_dims=TP_DIMS, tp_size=TP)
            with open(big, "w") as f:
                f.write(canzona.planning.plan_text(desc, ct._cluster(2, 2)))
        dist.barrier()
        refused("another model's plan", lambda: ct.Optimizer(m, tp_group=tpg, plan=big),
                "the plan's local shape")
        unchanged(m, before, "another model")

        # Tensors on a device canzona does not run on (a CPU-only torch has no CUDA tensor to
        # try: the meta device stands for one it cannot take).
        meta = torch.nn.Linear(4, 4, device="meta")
        refused("meta tensors", lambda: ct.Optimizer(meta, tp_group=tpg), "on meta")
        m = Net(1)
        before = snapshot(m)
        refused("NCCL communicators for CPU tensors",
                lambda: ct.Optimizer(m, tp_group=tpg, tp_dims=TP_DIMS, nccl_comms=(1, 2)),
                "nccl_comms", "CUDA parameters only")
        unchanged(m, before, "nccl_comms")

        # step() with no gradients, and a parameter re-assigned after construction.
        m = Net(1)
        opt = ct.Optimizer(m, tp_group=tpg, tp_dims=TP_DIMS, lr=0.02, adamw_lr=0.01)
        opt.zero_grad(set_to_none=True)
        before = snapshot(m)
        refused("no gradients", opt.step, "no gradients")
        unchanged(m, before, "no gradients")
        loss_of(m, 1).backward()
        keep = m.fc2.weight
        m.fc2.weight = torch.nn.Parameter(keep.detach().clone())
        before = snapshot(m)
        refused("re-assigned parameter", opt.step, "'fc2.weight' was re-assigned")
        unchanged(m, before, "re-assigned parameter")
        m.fc2.weight = keep
        with torch.no_grad():
            keep.data = keep.data.clone()
        refused("re-stored parameter", opt.step, "'fc2.weight'", "storage was replaced")
        opt.close()

        # step() without a fresh gradient on some rank (issue 39, item 9): right after
        # construction, after an in-place zero_grad, on a rank that ran no backward, after a
        # backward that failed part-way; refused on every rank with nothing changed.
        m = Net(1)
        opt = ct.Optimizer(m, tp_group=tpg, tp_dims=TP_DIMS, lr=0.02, adamw_lr=0.01)
        before = snapshot(m)
        refused("step right after construction", opt.step, "no gradients on any rank")
        unchanged(m, before, "step right after construction")
        loss_of(m, 1).backward()
        opt.step()
        opt.zero_grad(set_to_none=False)
        before = snapshot(m)
        refused("step after an in-place zero_grad", opt.step, "no gradients on any rank")
        unchanged(m, before, "step after an in-place zero_grad")
        if rank != 1:
            loss_of(m, 2).backward()
        before = snapshot(m)
        refused("a rank without backward", opt.step, "rank 1 ran no backward",
                "count as zeros")
        unchanged(m, before, "a rank without backward")
        opt.zero_grad()
        h = m.fc1(torch.randn(6, 8))
        if rank == 2:
            h.register_hook(lambda g: (_ for _ in ()).throw(RuntimeError("failed part-way")))
        try:
            (m.fc2(torch.relu(m.norm(h))) ** 2).mean().backward()
        except RuntimeError as e:
            assert rank == 2 and "failed part-way" in str(e), e
        before = snapshot(m)
        refused("a backward that failed part-way", opt.step,
                "rank 2 has no gradient for 'fc1.weight', 'fc1.bias' (2 of 5 trainable",
                "zero_grad() and run it again")
        unchanged(m, before, "a backward that failed part-way")
        # A parameter the loss does not reach: refused, or a zero gradient when asked.
        opt.zero_grad()
        (m.fc1(torch.randn(6, 8)) ** 2).mean().backward()
        refused("a parameter without a gradient", opt.step,
                "ranks 0, 1, 2, 3 have no gradient for 'fc2.weight'", "unused_parameters=True")
        opt.close()
        m = Net(1)
        opt = ct.Optimizer(m, tp_group=tpg, tp_dims=TP_DIMS, lr=0.02, adamw_lr=0.01,
                           unused_parameters=True)
        before = snapshot(m)
        (m.fc1(torch.randn(6, 8)) ** 2).mean().backward()
        opt.step()
        assert not torch.equal(m.fc1.weight.detach(), before["fc1.weight"][0])
        opt.zero_grad()
        refused("unused_parameters=True, no backward", opt.step, "no gradients on any rank")
        opt.close()

        # Rates that differ across ranks: refused on every rank by the executor, nothing changed.
        m = Net(1)
        opt = ct.Optimizer(m, tp_group=tpg, tp_dims=TP_DIMS, lr=0.02, adamw_lr=0.01)
        loss_of(m, 1).backward()
        if rank == 3:
            opt.param_groups[0]["lr"] = 0.03
        before = snapshot(m)
        refused("rates differ across ranks", opt.step, "different learning rates")
        unchanged(m, before, "rates differ")
        opt.close()

        # lr = 0 is 0: nothing moves (weight decay is multiplied by the rate).
        m = Net(1)
        opt = ct.Optimizer(m, tp_group=tpg, tp_dims=TP_DIMS, lr=0.0, adamw_lr=0.0)
        assert [g["lr"] for g in opt.param_groups] == [0.0, 0.0], opt.param_groups
        before = snapshot(m)
        loss_of(m, 1).backward()
        opt.step()
        for n, p in m.named_parameters():
            assert torch.equal(p.detach(), before[n][0]), f"lr = 0 moved {n}"
        opt.close()

        # Groups: Muon and AdamW groups, no decay for the norm and biases, and a gradient torch
        # made anew (set_to_none, a re-assigned .grad) equal to one accumulated in place.
        results = []
        for how in ("in place", "set_to_none", "assigned"):
            m = Net(1)
            named = dict(m.named_parameters())
            groups = [{"params": [("fc1.weight", named["fc1.weight"]),
                                  ("fc2.weight", named["fc2.weight"])], "lr": 0.02},
                      {"params": [(n, named[n]) for n in ("fc1.bias", "norm.weight",
                                                          "norm.bias")],
                       "lr": 0.01, "weight_decay": 0.0}]
            opt = ct.Optimizer(groups, tp_group=tpg, tp_dims=TP_DIMS)
            for step in range(3):
                opt.zero_grad(set_to_none=(how == "set_to_none"))
                for micro in range(2):
                    loss_of(m, step * 2 + micro).backward()
                if how == "assigned":
                    for p in m.parameters():
                        p.grad = p.grad.clone()
                opt.step()
            results.append({n: p.detach().clone() for n, p in m.named_parameters()})
            if how == "in place":
                state = opt.state_dict()
                assert state["step"] == 3
                assert set(state["state"]) == set(named), sorted(state["state"])
                assert all(isinstance(t, torch.Tensor) for f in state["state"].values()
                           for t in f.values())
                assert list(state["state"]["fc1.weight"]) == ["momentum"]
                # Full, unsharded tensors: fc1.weight's rows are the TP ranks' together.
                assert list(state["state"]["fc1.weight"]["momentum"].shape) == [H, 8]
                assert state["param_groups"][1]["weight_decay"] == 0.0
                everyone = [None] * dist.get_world_size()
                dist.all_gather_object(everyone, {n: {f: t.sum().item() for f, t in v.items()}
                                                  for n, v in state["state"].items()})
                assert all(e == everyone[0] for e in everyone), "state differs between ranks"
                opt.load_state_dict(state)
            opt.close()
        for n in results[0]:
            for other_result, how in ((results[1], "set_to_none"), (results[2], "assigned")):
                assert torch.allclose(results[0][n], other_result[n], rtol=0, atol=1e-6), \
                    f"{how}: {n} differs from in-place accumulation"
        # Rates per group matter: the same run with one rate for all differs on fc2.weight.
        m = Net(1)
        opt = ct.Optimizer(m, tp_group=tpg, tp_dims=TP_DIMS, lr=0.01, adamw_lr=0.01)
        for step in range(3):
            opt.zero_grad()
            for micro in range(2):
                loss_of(m, step * 2 + micro).backward()
            opt.step()
        assert not torch.allclose(m.fc2.weight.detach(), results[0]["fc2.weight"])
        assert not torch.equal(m.norm.weight.detach(), results[0]["norm.weight"])
        opt.close()

        # Clipping the torch way: clip_grad_norm_ before step() clips inside it; grad_norm is
        # the norm before clipping, the same with and without.
        runs = []
        for clip in (0.0, 1e-3):
            m = Net(1)
            opt = ct.Optimizer(m, tp_group=tpg, tp_dims=TP_DIMS, lr=0.02, adamw_lr=0.01)
            loss_of(m, 1).backward()
            opt.clip_grad_norm_(clip)
            opt.step()
            runs.append((float(opt.grad_norm), {n: p.detach().clone()
                                                for n, p in m.named_parameters()}))
            opt.close()
        assert runs[0][0] == runs[1][0] and runs[0][0] > 1e-3, (runs[0][0], runs[1][0])
        assert not torch.equal(runs[0][1]["norm.bias"], runs[1][1]["norm.bias"]), \
            "clip_grad_norm_ changed nothing"

        # clip_grad_norm_ returns the global norm as a 0-d tensor: NaN until the step that
        # computes it, then the norm before clipping, opt.grad_norm's value (issue 39, item 10).
        m = Net(1)
        opt = ct.Optimizer(m, tp_group=tpg, tp_dims=TP_DIMS, lr=0.02, adamw_lr=0.01)
        for step in range(2):
            opt.zero_grad()
            loss_of(m, step).backward()
            norm = opt.clip_grad_norm_(1e-3 if step == 0 else torch.tensor(1e-3))
            assert isinstance(norm, torch.Tensor) and norm.dim() == 0, norm
            assert torch.isnan(norm), f"clip_grad_norm_'s norm known before the step: {norm}"
            opt.step()
            assert norm.item() == float(opt.grad_norm) and norm.item() > 1e-3, \
                (norm, opt.grad_norm)
        refused("negative max_norm", lambda: opt.clip_grad_norm_(-1.0), "max_norm = -1.0")
        everyone = [None] * dist.get_world_size()
        dist.all_gather_object(everyone, norm.item())
        assert all(e == everyone[0] for e in everyone), f"the norm differs across ranks: {everyone}"
        # torch's own clip_grad_norm_ on these parameters would use this rank's unreduced norm:
        # refused however it is reached and given, nothing clipped; other tensors unaffected.
        before = {n: p.grad.clone() for n, p in m.named_parameters()}
        for how, clip in (("torch.nn.utils", lambda ps: torch.nn.utils.clip_grad_norm_(ps, 1.0)),
                          ("clip_grad module", lambda ps: torch.nn.utils.clip_grad.clip_grad_norm_(
                              ps, max_norm=1.0))):
            for given in (m.parameters(), list(m.parameters()), m.fc1.weight):
                refused(f"torch clipping via {how}", lambda: clip(given),
                        "torch.nn.utils.clip_grad_norm_ on", "opt.clip_grad_norm_(max_norm)")
        for n, p in m.named_parameters():
            assert torch.equal(p.grad, before[n]), f"{n}: refused torch clipping changed .grad"
        free = torch.ones(4, requires_grad=True)
        free.grad = torch.full((4,), 3.0)
        torch.nn.utils.clip_grad_norm_([free], 1.0)
        assert abs(float(free.grad.norm()) - 1.0) < 1e-6, "torch clipping of other tensors broke"
        opt.close()
        # Closed, the optimizer's parameters are the job's again: torch may clip them.
        torch.nn.utils.clip_grad_norm_(m.parameters(), 1e9)
        # early_updates with clipping: refused at the clip_grad_norm_ call and at construction,
        # before any parameter changes (no backward with early updates has run yet).
        m = Net(1)
        before = snapshot(m)
        refused("early_updates with max_grad_norm", lambda: ct.Optimizer(
            m, tp_group=tpg, tp_dims=TP_DIMS, overlap=True, early_updates=True,
            max_grad_norm=1.0), "early_updates", "max_grad_norm")
        unchanged(m, before, "early_updates with max_grad_norm")
        opt = ct.Optimizer(m, tp_group=tpg, tp_dims=TP_DIMS, overlap=True, early_updates=True)
        before = snapshot(m)
        refused("clip_grad_norm_ with early_updates", lambda: opt.clip_grad_norm_(1.0),
                "clip_grad_norm_", "early_updates")
        assert opt.clip_grad_norm_(0.0) is not None  # 0 (off) is what early updates run with
        unchanged(m, before, "clip_grad_norm_ with early_updates")
        opt.close()

        # Default assignment (issue 39, item 6): nn.Embedding weights, the output head and
        # 1-D parameters to AdamW, other matrices to Muon; optimizers= still overrides it.
        def kinds(o):
            sd = o.state_dict()
            return {n: ("muon" if "momentum" in f else "adamw") for n, f in sd["state"].items()}

        for style in ("lm_head", "output", "tied", "named"):
            lm = LM(style)
            given = list(lm.named_parameters()) if style == "named" else lm
            opt = ct.Optimizer(given, tp_group=tpg, lr=0.02, adamw_lr=0.01)
            loss_lm(lm, 1).backward()
            opt.step()
            got = kinds(opt)
            head = {"lm_head": "lm_head.weight", "output": "output.weight", "tied": None,
                    "named": "lm_head.weight"}[style]
            want = {n: "adamw" for n, _ in lm.named_parameters()}
            want["body.weight"] = "muon"
            assert got == want, f"{style}: {got}"
            muon = [g for g in opt.param_groups if g["lr"] == 0.02]
            assert [g["names"] for g in muon] == [["body.weight"]], (style, opt.param_groups)
            if head is not None:
                assert head in got, (style, got)
            opt.close()
        lm = LM("lm_head")
        opt = ct.Optimizer(lm, tp_group=tpg, optimizers={"embed.weight": "matrix"})
        loss_lm(lm, 1).backward()
        opt.step()
        got = kinds(opt)
        assert got["embed.weight"] == "muon" and got["lm_head.weight"] == "adamw", got
        opt.close()

        # A frozen parameter (requires_grad=False) kept in the module is never touched: its
        # values bit for bit after 3 steps, the others as without it (issue 39, item 7); one
        # frozen after construction is not touched either.
        results = []
        for with_frozen in (True, False):
            m = Net(1, extra=True)
            m.extra.weight.requires_grad_(False)
            frozen = m.extra.weight.detach().clone()
            ptr = m.extra.weight.data_ptr()
            given = m if with_frozen else [(n, p) for n, p in m.named_parameters()
                                           if not n.startswith("extra.")]
            opt = ct.Optimizer(given, tp_group=tpg, tp_dims=TP_DIMS, lr=0.02, adamw_lr=0.01,
                               weight_decay=0.1)
            for step in range(3):
                opt.zero_grad()
                loss_of(m, step).backward()
                opt.step()
            assert torch.equal(m.extra.weight.detach(), frozen), "the frozen weight changed"
            assert m.extra.weight.data_ptr() == ptr, "the frozen weight's storage moved"
            assert m.extra.weight.grad is None, "the frozen weight got a gradient"
            results.append({n: p.detach().clone() for n, p in m.named_parameters()})
            if with_frozen:
                # Frozen after construction: the executor holds it, at rate and decay 0.
                m.fc2.weight.requires_grad_(False)
                fc2 = m.fc2.weight.detach().clone()
                for step in range(2):
                    opt.zero_grad()
                    loss_of(m, step).backward()
                    opt.step()
                assert torch.equal(m.fc2.weight.detach(), fc2), "fc2 frozen later changed"
                assert not torch.equal(m.fc1.weight.detach(), results[0]["fc1.weight"])
            opt.close()
        for n in results[0]:
            assert torch.allclose(results[0][n], results[1][n], rtol=0, atol=1e-6), \
                f"{n}: differs with a frozen parameter in the module"

        # Megatron's attributes instead of declarations: the plan splits what they mark.
        m = Net(1)
        for name, p in m.named_parameters():
            if name in TP_DIMS:
                p.tensor_model_parallel, p.partition_dim = True, TP_DIMS[name]
        mplan = os.path.join(shared, "megatron.json")
        ct.Optimizer(m, tp_group=tpg, save_plan=mplan).close()
        dist.barrier()
        if rank == 0:
            import json

            with open(mplan) as f:
                dims = {p["name"]: p["tp_dim"] for p in json.load(f)["params"]}
            assert dims == {"fc1.weight": 0, "fc1.bias": 0, "norm.weight": None,
                            "norm.bias": None, "fc2.weight": 1}, dims
        dist.barrier()

        # torch's schedulers and conventions (issue 39, item 14). OneCycleLR with its defaults
        # cycles the groups' "momentum" (Muon's); the groups' momentum and betas drive the
        # step: set in the groups, the same bits as given to the constructor.
        def train(steps, sched=None, groups=None, **kw):
            m = Net(1)
            opt = ct.Optimizer(m, tp_group=tpg, tp_dims=TP_DIMS, lr=0.02, adamw_lr=0.01, **kw)
            s = sched(opt) if sched else None
            for g in opt.param_groups:
                g.update(groups or {})
            seen = []
            for step in range(steps):
                opt.zero_grad()
                loss = opt.step(lambda: loss_of(m, step).backward() or 1.5)
                assert loss == 1.5, loss  # step(closure) returns the closure's value
                seen.append([(g["lr"], g["momentum"]) for g in opt.param_groups])
                if s is not None:
                    s.step()
            return m, opt, seen

        cyc, opt, seen = train(3, lambda o: torch.optim.lr_scheduler.OneCycleLR(
            o, max_lr=[0.02, 0.01], total_steps=4))
        opt.close()
        assert len({x[0][1] for x in seen}) == 3 and all(0.85 <= x[0][1] <= 0.95 for x in seen), \
            seen
        flat, opt, _ = train(3, lambda o: torch.optim.lr_scheduler.OneCycleLR(
            o, max_lr=[0.02, 0.01], total_steps=4, cycle_momentum=False))
        opt.close()
        assert not torch.equal(cyc.fc1.weight, flat.fc1.weight), "cycled momentum changed nothing"
        by_group, opt, _ = train(2, groups={"momentum": 0.5, "betas": (0.8, 0.9)})
        opt.close()
        by_ctor, opt, _ = train(2, momentum=0.5, adamw_betas=(0.8, 0.9))
        for n, p in by_ctor.named_parameters():
            assert torch.equal(p, dict(by_group.named_parameters())[n]), \
                f"{n}: the groups' momentum and betas are not the constructor's"
        opt.param_groups[1]["momentum"] = 0.9
        loss_of(by_ctor, 1).backward()
        refused("momentum that differs across groups", opt.step,
                "param groups 0 and 1 hold momentum 0.5 and 0.9")
        opt.close()
        # Other schedulers change the groups as on torch's own optimizers.
        for make in (lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=4),
                     lambda o: torch.optim.lr_scheduler.StepLR(o, step_size=1, gamma=0.5)):
            _, opt, seen = train(3, make)
            opt.close()
            sgd = torch.optim.SGD([{"params": [torch.zeros(1)], "lr": 0.02},
                                   {"params": [torch.zeros(1)], "lr": 0.01}], lr=0.02)
            ref, want = make(sgd), []
            for _ in range(3):
                want.append([g["lr"] for g in sgd.param_groups])
                sgd.step()
                ref.step()
            assert [[lr for lr, _ in x] for x in seen] == want, (seen, want)
        # opt.state: torch's shape, full tensors (copies), the same as state_dict()'s.
        m, opt, _ = train(2)
        assert len(opt.state) == 5 and m.fc1.weight in opt.state
        st = opt.state[m.fc1.weight]
        assert set(st) == {"momentum_buffer", "step"} and list(st["momentum_buffer"].shape) == \
            [H, 8] and float(st["step"]) == 2, st
        assert set(opt.state[m.norm.weight]) == {"exp_avg", "exp_avg_sq", "step"}
        sd = opt.state_dict()["state"]
        assert torch.equal(st["momentum_buffer"], sd["fc1.weight"]["momentum"])
        assert torch.equal(opt.state[m.norm.bias]["exp_avg_sq"], sd["norm.bias"]["exp_avg_sq"])
        loss_of(m, 5).backward()
        assert opt.step() is None  # no closure, no loss (torch's convention)
        opt.zero_grad()
        assert all(p.grad is None for p in m.parameters()), "zero_grad()'s default is set_to_none"
        opt.close()

        # What must be equal across ranks at construction (issue 39, item 11): DP replicas
        # that start apart (no seed), a TP-sharded model given without tp_dims; refused naming
        # the parameter and the ranks, or DP rank 0's values broadcast, as DDP does.
        m = Net(1 + rank // TP)  # each DP rank its own values
        before = snapshot(m)
        refused("DP replicas that differ", lambda: ct.Optimizer(m, tp_group=tpg,
                                                                tp_dims=TP_DIMS),
                "differs across the DP ranks", "world ranks 0 and 2", "check_replicas='broadcast'")
        unchanged(m, before, "DP replicas that differ")
        opt = ct.Optimizer(m, tp_group=tpg, tp_dims=TP_DIMS, check_replicas="broadcast")
        ref = Net(1)
        for n, p in m.named_parameters():
            assert torch.equal(p.detach(), dict(ref.named_parameters())[n].detach()), \
                f"check_replicas='broadcast': {n} is not DP rank 0's"
        opt.close()
        m = Net(1 + rank % TP)  # TP shards that differ, declared as replicated (no tp_dims)
        before = snapshot(m)
        refused("a TP model without tp_dims", lambda: ct.Optimizer(m, tp_group=tpg),
                "is replicated over TP", "differs across the TP ranks", "tp_dims")
        unchanged(m, before, "a TP model without tp_dims")
        ct.Optimizer(m, tp_group=tpg, check_replicas=False).close()

        # A shape mismatch at load_state_dict names the parameter and both shapes, not the
        # temporary file it went through (issue 39, item 12).
        m = Net(1)
        opt = ct.Optimizer(m, tp_group=tpg, tp_dims=TP_DIMS)
        loss_of(m, 1).backward()
        opt.step()
        state = opt.state_dict()
        del state["checksum"]
        state["state"]["fc1.weight"]["momentum"] = torch.zeros(3, 8)
        e = refused("a state of another shape", lambda: opt.load_state_dict(state),
                    "momentum of parameter 'fc1.weight' has shape [3, 8]",
                    "'fc1.weight' has shape [16, 8]")
        assert "canzona-state" not in str(e) and "safetensors" not in str(e), e
        opt.close()

        # Collective calls out of step (issue 39, items 12 and 13): every rank that came raises
        # within timeout=, naming the call and the ranks that did not come (or came to another
        # call); gloo's own timeout would be 30 minutes.
        t = 2.0 * float(os.environ.get("CZ_TIME_SCALE", "1"))
        m = Net(1)
        opt = ct.Optimizer(m, tp_group=tpg, tp_dims=TP_DIMS, timeout=t)
        loss_of(m, 1).backward()
        if rank != 3:
            refused("a rank that never steps", opt.step,
                    "step(): rank 3 did not call it (rank", "waited timeout = ")
        opt.close()
        dist.barrier()
        opt = ct.Optimizer(m, tp_group=tpg, tp_dims=TP_DIMS, timeout=t)
        if rank == 0:
            refused("state_dict() on one rank", opt.state_dict,
                    "state_dict(): ranks 1, 2, 3 did not call it (rank 0 waited",
                    "state_dict() on every rank")
        opt.close()
        dist.barrier()
        opt = ct.Optimizer(m, tp_group=tpg, tp_dims=TP_DIMS, timeout=t)
        loss_of(m, 1).backward()
        if rank == 0:
            refused("state_dict() beside step()", opt.state_dict,
                    "state_dict(): ranks 1, 2, 3 called step() instead")
        else:
            refused("step() beside state_dict()", opt.step,
                    "step(): rank 0 called state_dict() instead")
        opt.close()
        dist.barrier()
        # The overlapped backward's first bucket is a collective too.
        opt = ct.Optimizer(m, tp_group=tpg, tp_dims=TP_DIMS, timeout=t, overlap=True)
        if rank != 1:
            refused("a rank without the overlapped backward", lambda: loss_of(m, 1).backward(),
                    "backward (overlap=True", "rank 1 did not call it")
        opt.close()
        dist.barrier()
        qk_clip_checks(tpg, rank)
    if rank == 0:
        print("ok: refusals on every rank with nothing changed; groups, lr = 0, set_to_none, "
              "assigned .grad, state_dict, Megatron attributes")
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
