"""The Python package on one process: the same steps as the C consumer give the same numbers,
buffers are checked, options reach the library, the optimizer state (Muon, Shampoo, SOAP)
round-trips through state_dict(), the model description and the planner CLI, and the ctypes mirror of
cz_exec_config matches the C layout.
Env: CANZONA_EXEC_LIB, CANZONA_CLI, CZ_CONSUMER (the C consumer), CZ_CONFIG_LAYOUT,
CZ_SOURCE_DIR."""
import ctypes
import json
import os
import subprocess
import tempfile
import unittest

import numpy as np

import canzona
from canzona import _lib, _ns_coeffs

ONE_GPU = {"schema": "canzona.cluster/1", "name": "one", "gpus": 1, "dp": 1, "tp": 1, "pp": 1,
           "gpus_per_node": 1,
           "device": {"name": "cpu", "matmul_tflops": 1, "mem_gbps": 10, "memory_gib": 16},
           "links": {"intra_node_gbps": 10, "inter_node_gbps": 10, "latency_us": 0},
           "buckets": {"size": 1000}}


class Base(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="canzona-py-")
        self.dir = self.tmp.name
        self.plan = os.path.join(self.dir, "plan.json")
        model = os.path.join(os.environ["CZ_SOURCE_DIR"], "tests", "data", "model_tiny.json")
        canzona.plan(model, ONE_GPU, self.plan)

    def tearDown(self):
        self.tmp.cleanup()

    def executor(self, **kw):
        ex = canzona.Executor(self.plan, comm="self", dtype="fp32", **kw)
        i = np.arange(ex.numel)
        P = ((i % 7) + 1).astype(np.float32) * np.float32(0.1)
        G = np.zeros(ex.numel, np.float32)
        ex.bind(P, G)
        return ex, P, G

    @staticmethod
    def grads(G, step):
        i = np.arange(G.size)
        G[:] = ((i % 5) + 1).astype(np.float32) * np.float32(0.01) * np.float32(1 + step)


class SameAsC(Base):
    def test_three_steps_match_the_c_consumer(self):
        ex, P, G = self.executor()
        for _ in range(3):
            i = np.arange(G.size)
            G[:] = ((i % 5) + 1).astype(np.float32) * np.float32(0.01)
            ex.step()
        total = 0.0
        for v in P.tolist():  # in order, as the C consumer sums
            total += v
        mine = "elements %d checksum %.6f grad_norm %.6f" % (ex.numel, total, ex.grad_norm())
        theirs = subprocess.run([os.environ["CZ_CONSUMER"], self.plan], capture_output=True,
                                text=True, check=True).stdout.strip()
        self.assertEqual(mine, theirs)
        self.assertEqual(ex.timings()["steps"], 3)
        self.assertEqual((ex.dp_rank, ex.tp_rank), (0, 0))
        ex.close()


class Buffers(Base):
    def test_wrong_buffers_refused(self):
        ex = canzona.Executor(self.plan, comm="self", dtype="fp32")
        n = ex.numel
        ok = np.zeros(n, np.float32)
        with self.assertRaisesRegex(ValueError, "plan's local buffer has %d" % n):
            ex.bind(np.zeros(n - 1, np.float32), np.zeros(n - 1, np.float32))
        with self.assertRaisesRegex(TypeError, "float64"):
            ex.bind(np.zeros(n, np.float64), ok)
        with self.assertRaisesRegex(ValueError, "not C-contiguous"):
            ex.bind(np.zeros(2 * n, np.float32)[::2], ok)
        ro = np.zeros(n, np.float32)
        ro.flags.writeable = False
        with self.assertRaisesRegex(ValueError, "read-only"):
            ex.bind(ro, ok)
        with self.assertRaisesRegex(TypeError, "NumPy array or a torch tensor"):
            ex.bind([0.0] * n, ok)
        with self.assertRaises(canzona.Error) as cm:
            ex.step()  # nothing bound
        self.assertEqual(cm.exception.code, _lib.CZ_EINVALID)
        ex.close()
        with self.assertRaisesRegex(canzona.Error, "closed"):
            ex.step()

    def test_errors_carry_the_library_message(self):
        with self.assertRaises(canzona.Error) as cm:
            canzona.Executor(os.path.join(self.dir, "missing.json"), comm="self")
        self.assertIn("missing.json", str(cm.exception))
        with self.assertRaisesRegex(TypeError, "unknown executor option 'lr_muon'"):
            canzona.Executor(self.plan, comm="self", lr_muon=0.1)
        with self.assertRaisesRegex(canzona.Error, "ns_eps") as cm:
            canzona.Executor(self.plan, comm="self", ns_eps=0.0)  # cfg.muon.ns_eps
        self.assertEqual(cm.exception.code_name, "CZ_EINVALID")
        self.assertEqual(_lib.error_code_name(_lib.CZ_ETIMEOUT), "CZ_ETIMEOUT")
        self.assertEqual(_lib.error_code_name(7), "CZ_E?")
        # A name that is no field of the config or of an optimizer's struct (ctypes would
        # take it silently) is refused.
        for name in ("soap_nonsense", "adamw", "muon", "shampoo_version_x"):
            with self.assertRaisesRegex(TypeError, "unknown executor option"):
                canzona.Executor(self.plan, comm="self", **{name: 1})


class Options(Base):
    def test_options_and_rates_reach_the_library(self):
        # A different learning rate gives different parameters; set_lr before the first step
        # to the configured value gives the same as configuring it.
        a, Pa, Ga = self.executor(lr=0.01, adamw_lr=1e-3)
        b, Pb, Gb = self.executor()
        b.set_lr(0.01, 1e-3)
        c, Pc, Gc = self.executor()
        for ex, G in ((a, Ga), (b, Gb), (c, Gc)):
            self.grads(G, 0)
            ex.step()
        np.testing.assert_array_equal(Pa, Pb)
        self.assertFalse(np.array_equal(Pa, Pc))
        with self.assertRaisesRegex(canzona.Error, "muon_lr"):
            a.set_lr(-1.0, 1e-3)

    def test_wire_dtypes_and_bytes(self):
        # fp32 both ways, every byte of the buffer posted once per step each way; a bf16 job
        # reduces in bf16 unless grad_reduce_in_fp32, and all-gathers in bf16 either way.
        ex, P, G = self.executor()
        for s in range(3):
            self.grads(G, s)
            ex.step()
        # One process: no TP plane, so no micro-group exchange.
        self.assertEqual(ex.wire(), {"grad_dtype": "fp32", "param_dtype": "fp32",
                                     "grad_bytes": 3 * 4 * ex.numel,
                                     "param_bytes": 3 * 4 * ex.numel,
                                     "tp_bytes": 0, "etp_bytes": 0})
        for fp32, grads in ((0, "bf16"), (1, "fp32")):
            b = canzona.Executor(self.plan, comm="self", dtype="bf16", grad_reduce_in_fp32=fp32)
            self.assertEqual(b.wire(), {"grad_dtype": grads, "param_dtype": "bf16",
                                        "grad_bytes": 0, "param_bytes": 0,
                                        "tp_bytes": 0, "etp_bytes": 0})
            b.close()
        ex.close()

    def test_max_grad_norm_clips(self):
        ex, P, G = self.executor(max_grad_norm=1e-3)
        self.grads(G, 0)
        ex.step()
        self.assertGreater(ex.grad_norm(), 1e-3)  # reported before clipping


# Polar Express (arXiv 2505.16932, Algorithm 1), its first 5 rows, written out here: each row
# as Algorithm 1 scales it (a/1.01, b/1.01^3, c/1.01^5), the first once more for its 1.01 in
# the normalization, which the executor's bundled "polar_express" folds into that row.
_PE = [(8.28721201814563, -23.595886519098837, 17.300387312530933),
       (4.107059111542203, -2.9478499167379106, 0.5448431082926601),
       (3.9486908534822946, -2.908902115962949, 0.5518191394370137),
       (3.3184196573706015, -2.488488024314874, 0.51004894012372),
       (2.300652019954817, -1.6689039845747493, 0.4188073119525673)]
_PE = [(a / 1.01, b / 1.01**3, c / 1.01**5) for a, b, c in _PE]
_PE[0] = (_PE[0][0] / 1.01, _PE[0][1] / 1.01**3, _PE[0][2] / 1.01**5)


class Coefficients(Base):
    def two_steps(self, **kw):
        ex, P, G = self.executor(**kw)
        for step in range(2):
            self.grads(G, step)
            ex.step()
        ex.close()
        return P

    def test_named_table_equals_its_rows(self):
        named = self.two_steps(ns_coeffs="polar_express")  # ns_steps follows: 5
        rows = self.two_steps(ns_coeffs=_PE)
        np.testing.assert_array_equal(named, rows)
        self.assertFalse(np.array_equal(named, self.two_steps()))  # jordan
        # one triple is repeated: the same as jordan's name
        np.testing.assert_array_equal(self.two_steps(ns_coeffs=(3.4445, -4.775, 2.0315)), self.two_steps())

    def test_steps_follow_the_table(self):
        self.assertEqual(_ns_coeffs.steps("polar_express", None), 5)
        self.assertEqual(_ns_coeffs.steps(_PE[:3], None), 3)
        self.assertEqual(_ns_coeffs.steps("cubic", None), 5)
        self.assertEqual(_ns_coeffs.steps("cubic", 8), 8)
        self.assertEqual(_ns_coeffs.text([(1, 2, 3), (4, 5, 6)]), "1.0,2.0,3.0;4.0,5.0,6.0")
        with self.assertRaisesRegex(canzona.Error, "has 5 rows, one per iteration; set ns_steps to 5"):
            canzona.Executor(self.plan, comm="self", ns_coeffs="polar_express", ns_steps=8)
        with self.assertRaisesRegex(canzona.Error, "unknown Newton-Schulz coefficient set 'quartic'"):
            canzona.Executor(self.plan, comm="self", ns_coeffs="quartic")
        with self.assertRaisesRegex(ValueError, r"ns_coefficients\[1\]: \(1, 2\)"):
            _ns_coeffs.text([(1, 2, 3), (1, 2)])


class State(Base):
    def test_state_dict_round_trip_resumes(self):
        a, Pa, Ga = self.executor()
        for s in range(3):
            self.grads(Ga, s)
            a.step()
        sd = a.state_dict()
        self.assertEqual(sd["step"], 3)
        kinds = sorted({k.rsplit(".", 1)[1] for k in sd["state"]})
        self.assertEqual(kinds, ["exp_avg", "exp_avg_sq", "momentum"])
        self.assertEqual(sd["state"]["embed.exp_avg"].shape, (100, 16))
        self.assertGreater(float(np.abs(sd["state"]["embed.exp_avg"]).max()), 0.0)
        b, Pb, Gb = self.executor()
        Pb[:] = Pa
        b.load_state_dict(sd)
        for s in range(3, 5):
            self.grads(Ga, s)
            self.grads(Gb, s)
            a.step()
            b.step()
        np.testing.assert_array_equal(Pa, Pb)
        # A file on disk works the same, and a damaged state dict is refused by name.
        path = os.path.join(self.dir, "s.safetensors")
        a.save_state(path)
        b.load_state(path)
        del sd["state"]["embed.exp_avg"]
        with self.assertRaisesRegex(canzona.Error, "no tensor 'embed.exp_avg'"):
            b.load_state_dict(sd)


class MatrixOptimizerState(Base):
    """Shampoo's and SOAP's state round-trips through state_dict() too."""

    def round_trip(self, optimizer, **options):
        self.plan = os.path.join(self.dir, optimizer + ".json")
        model = os.path.join(os.environ["CZ_SOURCE_DIR"], "tests", "data", "model_tiny.json")
        canzona.plan(model, ONE_GPU, self.plan,
                     extra_args=("--optimizer", optimizer, "--precondition-frequency", "2",
                                 "--max-precond-dim", "16"))
        a, Pa, Ga = self.executor(**options)
        for s in range(3):
            self.grads(Ga, s)
            a.step()
        sd = a.state_dict()
        self.assertEqual(sd["step"], 3)
        b, Pb, Gb = self.executor(**options)
        c, Pc, Gc = self.executor(**options)  # the same steps without the state
        Pb[:] = Pa
        Pc[:] = Pa
        b.load_state_dict(sd)
        for s in range(3, 6):  # across the refreshes at 4 and 6
            for ex, G in ((a, Ga), (b, Gb), (c, Gc)):
                self.grads(G, s)
                ex.step()
        np.testing.assert_array_equal(Pa, Pb)
        self.assertFalse(np.array_equal(Pa, Pc))
        return sd["state"]

    def test_shampoo(self):
        # Without weight decay: its part of Shampoo's momentum, kept beside the parameters and
        # saved inside the momentum tensor, would make the resumed run equal only up to
        # rounding (exec.test_checkpoint checks that case).
        state = self.round_trip("shampoo", shampoo_max_dim=16, shampoo_momentum=0.5,
                                shampoo_grafting="adam", weight_decay=0.0)
        # layers.0.experts.1.w is 32 x 16: two 16 x 16 tiles, named by their first row.
        t = state["layers.0.experts.1.w.shampoo.16_0.inv_root_left"]
        self.assertEqual(t.shape, (16, 16))
        self.assertGreater(float(np.abs(t).max()), 0.0)
        self.assertIn("layers.1.qkv.shampoo.32_0.momentum", state)
        self.assertNotIn("layers.0.qkv.momentum", state)

    def test_soap(self):
        state = self.round_trip("soap")
        # qkv's 16 x 16 blocks are rotated on both sides; w's 32 rows exceed max_precond_dim.
        self.assertEqual(state["layers.0.qkv.soap.16_0.Q_right"].shape, (16, 16))
        self.assertEqual(state["layers.0.experts.0.w.soap.0_0.exp_avg_sq"].shape, (32, 16))
        self.assertNotIn("layers.0.experts.0.w.soap.0_0.Q_left", state)
        self.assertIn("layers.0.experts.0.w.soap.0_0.Q_right", state)


class NorMuonOptions(Base):
    """normuon, normuon_beta2 and normuon_eps reach cz_exec_config.normuon: the update
    changes with them, the state carries the second moment (one value per row of each block
    for "row", per column for "col"), and bad values are refused by the library, named."""

    def run3(self, **kw):
        ex, P, G = self.executor(**kw)
        for s in range(3):
            self.grads(G, s)
            ex.step()
        return ex, P.copy()

    def test_modes_change_the_update_and_the_state(self):
        plain = self.run3()[1]
        row_ex, row = self.run3(normuon="row")
        col_ex, col = self.run3(normuon="col", normuon_beta2=0.5)
        slow = self.run3(normuon="col", normuon_beta2=0.9)[1]
        self.assertFalse(np.array_equal(plain, row))
        self.assertFalse(np.array_equal(row, col))
        self.assertFalse(np.array_equal(col, slow))
        self.assertTrue(np.array_equal(plain, self.run3(normuon=None)[1]))
        # qkv (48 x 16) has 3 row blocks: by rows one value per row, by columns one row per
        # block; the experts' w (32 x 16) is one unit.
        rs, cs = row_ex.state_dict()["state"], col_ex.state_dict()["state"]
        self.assertEqual(rs["layers.0.qkv.normuon_v"].shape, (48, 1))
        self.assertEqual(cs["layers.0.qkv.normuon_v"].shape, (3, 16))
        self.assertEqual(cs["layers.1.experts.0.w.normuon_v"].shape, (1, 16))
        self.assertGreater(float(np.min(rs["layers.0.qkv.normuon_v"])), 0.0)
        # A plain Muon state lacks the second moment: refused by name.
        sd = self.run3()[0].state_dict()
        with self.assertRaisesRegex(canzona.Error, "no tensor 'layers.0.qkv.normuon_v'"):
            row_ex.load_state_dict(sd)

    def test_bad_values_refused(self):
        with self.assertRaisesRegex(ValueError, "normuon 'rows': expected 'row', 'col' or None"):
            canzona.Executor(self.plan, comm="self", normuon="rows")
        for b in (1.0, -0.1):
            with self.assertRaisesRegex(canzona.Error, r"normuon.beta2 = %g; expected a value "
                                        r"in \[0, 1\)" % b):
                canzona.Executor(self.plan, comm="self", normuon="row", normuon_beta2=b)
        with self.assertRaisesRegex(canzona.Error, "normuon.eps = 0; expected a finite value > 0"):
            canzona.Executor(self.plan, comm="self", normuon="col", normuon_eps=0.0)


class Planning(unittest.TestCase):
    class P:
        def __init__(self, *shape):
            self.shape = shape

    def test_model_description(self):
        named = [("emb.weight", self.P(50, 16)), ("layers.0.qkv.weight", self.P(24, 16)),
                 ("layers.0.norm.weight", self.P(16,)), ("layers.0.proj.weight", self.P(16, 8))]
        m = canzona.model_description(
            named, name="toy", tp_size=2,
            tp_dims={"emb.weight": 0, "*.qkv.weight": 0, "*.proj.weight": 1},
            blocks={"*.qkv.weight": (0, [16, 16, 16])},
            optimizers={"emb.weight": "elementwise"})
        p = {x["name"]: x for x in m["params"]}
        self.assertEqual([x["name"] for x in m["params"]], [n for n, _ in named])
        self.assertEqual(p["emb.weight"], {"name": "emb.weight", "shape": [100, 16], "tp_dim": 0,
                                           "optimizer": "elementwise"})
        self.assertEqual(p["layers.0.qkv.weight"]["shape"], [48, 16])
        self.assertEqual(p["layers.0.qkv.weight"]["blocks"], {"dim": 0, "sizes": [16, 16, 16]})
        self.assertEqual(p["layers.0.norm.weight"], {"name": "layers.0.norm.weight",
                                                     "shape": [16], "tp_dim": None,
                                                     "optimizer": "elementwise"})
        self.assertEqual(p["layers.0.proj.weight"]["shape"], [16, 16])
        with self.assertRaisesRegex(canzona.Error, "1-D and 2-D"):
            canzona.model_description([("conv", self.P(4, 4, 3))])
        # Per-head Muon: heads of 8 rows inside the Q, K, V blocks (2 per block per TP rank).
        mh = canzona.model_description(
            named, name="toy", tp_size=2,
            tp_dims={"emb.weight": 0, "*.qkv.weight": 0, "*.proj.weight": 1},
            blocks={"*.qkv.weight": (0, [16, 16, 16])}, heads={"*.qkv.weight": (0, 8)},
            optimizers={"emb.weight": "elementwise"})
        ph = {x["name"]: x for x in mh["params"]}
        self.assertEqual(ph["layers.0.qkv.weight"]["heads"], {"dim": 0, "size": 8})
        self.assertNotIn("heads", ph["layers.0.proj.weight"])
        with tempfile.TemporaryDirectory(prefix="canzona-py-") as tmp:
            cluster = dict(ONE_GPU, gpus=2, tp=2, gpus_per_node=2)
            out = canzona.plan(m, cluster, os.path.join(tmp, "toy.plan.json"))
            with open(out) as f:
                plan = json.load(f)
            self.assertEqual(plan["schema"], "canzona.plan/1")
            # The per-head QKV at TP 2: its three blocks are TP-local tasks over both slots.
            with open(canzona.plan(mh, cluster, os.path.join(tmp, "heads.plan.json"))) as f:
                hplan = json.load(f)
            qkv = next(q["id"] for q in hplan["params"] if q["name"] == "layers.0.qkv.weight")
            local = [t for s in hplan["tp_schedule"] for g in s["groups"] for sl in g["slots"]
                     for t in sl if isinstance(t, dict) and t["param"] == qkv]
            self.assertEqual(sorted((t["block"], t["width"]) for t in local),
                             [(0, 2), (0, 2), (1, 2), (1, 2), (2, 2), (2, 2)])
            cut = dict(mh, params=[dict(x, heads={"dim": 0, "size": 16}) if "heads" in x else x
                                   for x in mh["params"]])
            with self.assertRaisesRegex(canzona.Error, "whole heads over tp = 2"):
                canzona.plan(cut, cluster, os.path.join(tmp, "cut.json"))
            bad = dict(m, params=[dict(m["params"][0], shape=[99, 16])])
            with self.assertRaisesRegex(canzona.Error, "tp"):
                canzona.plan(bad, cluster, os.path.join(tmp, "bad.json"))
            # Planned in this process through libcanzona: the CLI's plan, byte for byte (the
            # inputs' hashes are of their canonical content, file or text), and the planner's
            # own messages.
            with open(out) as f:
                self.assertEqual(canzona.planning.plan_text(m, cluster), f.read())
            with self.assertRaisesRegex(canzona.Error, "tp"):
                canzona.planning.plan_text(bad, cluster)
            with self.assertRaisesRegex(canzona.Error, "<cluster>"):
                canzona.planning.plan_text(m, dict(cluster, gpus=3))
            with self.assertRaisesRegex(canzona.Error, "unknown dp strategy"):
                canzona.planning.plan_text(m, cluster, dp="nope")
            # Newton-Schulz coefficients: recorded, and a table prices its rows (as the CLI's
            # --ns-coeffs does, byte for byte).
            pe = json.loads(canzona.planning.plan_text(m, cluster, ns_coeffs="polar_express"))
            self.assertEqual((pe["settings"]["ns_coeffs"], pe["settings"]["ns_steps"]),
                             ("polar_express", 5))
            two = canzona.planning.plan_text(m, cluster, ns_coeffs=[(3, -3.2, 1.2), (2, -1.5, 0.5)])
            out2 = canzona.plan(m, cluster, os.path.join(tmp, "two.plan.json"),
                                extra_args=["--ns-coeffs", "3,-3.2,1.2;2,-1.5,0.5"])
            with open(out2) as f:
                self.assertEqual(two, f.read())
            two, five = json.loads(two), plan  # the default: jordan, 5 iterations
            self.assertEqual(two["settings"]["ns_steps"], 2)
            for a, b in zip(two["params"], five["params"]):
                if a["optimizer"] == "matrix":
                    self.assertLess(a["cost"], b["cost"])
            with self.assertRaisesRegex(canzona.Error, "set ns_steps to 5"):
                canzona.planning.plan_text(m, cluster, ns_coeffs="polar_express", ns_steps=3)


class Layout(unittest.TestCase):
    def test_config_mirror_matches_c(self):
        out = subprocess.run([os.environ["CZ_CONFIG_LAYOUT"]], capture_output=True, text=True,
                             check=True).stdout.split("\n")
        c = dict(line.split() for line in out if line)
        self.assertEqual(int(c.pop("sizeof")), ctypes.sizeof(_lib.ExecConfig))
        mirror = {}
        for name, ctype in _lib.ExecConfig._fields_:
            offset = getattr(_lib.ExecConfig, name).offset
            if isinstance(ctype, type) and issubclass(ctype, ctypes.Structure):
                # An optimizer's struct: its fields as "muon.momentum", offsets in the config.
                for sub, _ in ctype._fields_:
                    mirror[name + "." + sub] = offset + getattr(ctype, sub).offset
            else:
                mirror[name] = offset
        self.assertEqual({k: int(v) for k, v in c.items()}, mirror)

    def test_qk_clip_mirror_matches_c(self):
        out = subprocess.run([os.environ["CZ_CONFIG_LAYOUT"], "qk"], capture_output=True,
                             text=True, check=True).stdout.split("\n")
        c = {k: int(v) for k, v in (line.split() for line in out if line)}
        mirror = {"rows.sizeof": ctypes.sizeof(_lib.QkClipRows),
                  "spec.sizeof": ctypes.sizeof(_lib.QkClipSpec)}
        for prefix, struct in (("rows", _lib.QkClipRows), ("spec", _lib.QkClipSpec)):
            for name, _ in struct._fields_:
                mirror[f"{prefix}.{name}"] = getattr(struct, name).offset
        self.assertEqual(c, mirror)

    def test_qk_clip_runs(self):
        """The helpers' rows, by hand: grouped attention (2 groups of 2 heads of 4), Megatron's
        interleaved fused QKV, and latent attention."""
        from canzona import qk_clip
        self.assertEqual(qk_clip.attention("q", "k", 0, 4, 4, kv_heads=2),
                         [("q", 0, 8, 0, 0, 2, 0.5), ("k", 0, 4, 0, 0, 2, 0.5),
                          ("q", 8, 8, 0, 2, 2, 0.5), ("k", 4, 4, 0, 2, 2, 0.5)])
        self.assertEqual(qk_clip.megatron_qkv("qkv", 1, 4, 2, 4),
                         [("qkv", 0, 8, 1, 0, 2, 0.5), ("qkv", 8, 4, 1, 0, 2, 0.5),
                          ("qkv", 16, 8, 1, 2, 2, 0.5), ("qkv", 24, 4, 1, 2, 2, 0.5)])
        self.assertEqual(qk_clip.mla("q", "kv", 0, 2, 3, 1, 2),
                         [("q", 0, 3, 0, 0, 1, 0.5), ("q", 3, 1, 0, 0, 1, 1.0),
                          ("kv", 0, 3, 0, 0, 1, 0.5), ("q", 4, 3, 0, 1, 1, 0.5),
                          ("q", 7, 1, 0, 1, 1, 1.0), ("kv", 5, 3, 0, 1, 1, 0.5)])
        with self.assertRaisesRegex(ValueError, "must divide"):
            qk_clip.attention("q", "k", 0, 4, 4, kv_heads=3)


class SplitFolder(Base):
    def test_torch_optimizer_names_the_plan_file(self):
        # canzona.torch reads the whole plan and runs the bucket-wise step: a split plan folder
        # is refused before the executor is asked, naming the folder's plan.json.
        import canzona.torch
        msg = canzona.torch.Optimizer._check_topology(self.dir, 1, 1)
        self.assertIn("is a folder", msg)
        self.assertIn(os.path.join(self.dir, "plan.json"), msg)
        self.assertIsNone(canzona.torch.Optimizer._check_topology(self.plan, 1, 1))


class FullySharded(unittest.TestCase):
    def test_plan_text_layout_fsdp(self):
        # Planned in this process with layout "fsdp": the CLI's --layout fsdp plan, byte for
        # byte, with torch.chunk's rows (7 rows over 4 ranks: 2 per rank, the last 1).
        import canzona.planning
        m = {"schema": "canzona.model/1", "name": "uneven", "dtype": "fp32", "params": [
            {"name": "a.weight", "shape": [7, 12], "tp_dim": None, "optimizer": "matrix"},
            {"name": "a.bias", "shape": [7], "tp_dim": None, "optimizer": "elementwise"},
            {"name": "b.weight", "shape": [3, 7], "tp_dim": None, "optimizer": "matrix"}]}
        cluster = {"schema": "canzona.cluster/1", "name": "c", "gpus": 4, "dp": 4, "tp": 1,
                   "pp": 1, "gpus_per_node": 4,
                   "device": {"name": "cpu", "matmul_tflops": 0.5, "mem_gbps": 40,
                              "memory_gib": 16},
                   "links": {"intra_node_gbps": 10, "inter_node_gbps": 10, "latency_us": 2}}
        text = canzona.planning.plan_text(m, cluster, layout="fsdp")
        doc = json.loads(text)
        self.assertEqual((doc["schema"], doc["settings"]["layout"]), ("canzona.plan/4", "fsdp"))
        self.assertEqual({q["name"]: q["shard_rows"] for q in doc["params"]},
                         {"a.weight": 2, "a.bias": 2, "b.weight": 1})
        with tempfile.TemporaryDirectory(prefix="canzona-py-") as d:
            out = canzona.plan(m, cluster, os.path.join(d, "fsdp.plan.json"),
                               extra_args=["--layout", "fsdp"])
            with open(out) as f:
                self.assertEqual(text, f.read())
        self.assertNotIn('"fsdp"', canzona.planning.plan_text(m, cluster))
        with self.assertRaisesRegex(canzona.Error, "unknown layout 'zero3'"):
            canzona.planning.plan_text(m, cluster, layout="zero3")

    def test_torch_optimizer_refuses_fsdp_plans(self):
        # A fully sharded plan (canzona.plan/4) for a job whose parameters are not FSDP2
        # shards is refused before the executor is asked (tests/python/torch_fsdp_check.py
        # runs FSDP2 jobs and the refusals the other way round).
        import canzona.torch
        with tempfile.TemporaryDirectory(prefix="canzona-py-") as d:
            plan = os.path.join(d, "plan.json")
            with open(plan, "w") as f:
                json.dump({"schema": "canzona.plan/4", "settings": {"layout": "fsdp"},
                           "topology": {"dp": 1, "tp": 1, "pp": 1}}, f)
            msg = canzona.torch.Optimizer._check_topology(plan, 1, 1)
        self.assertIn("plan layout fsdp is for a model FSDP2 shards (fully_shard)", msg)


if __name__ == "__main__":
    unittest.main()
