/* What a training loop sets and reads: Muon's two update scalings and both momentum forms on
 * hand-computed cases, the learning-rate default of each scaling, learning rates and weight
 * decays changed between steps, the global gradient norm and clipping inside the step. */
#include "canzona_exec.h"
#include "cz_exec_testing.h"
#include "cz_format.h"
#include "exec_fixture.h"

#include <check.h>
#include <math.h>
#include <string.h>

static const fx_param PARAMS[] = {
    {"emb", 2, 8, 4, 0, CZ_KIND_ELEMENTWISE, 0, 0, {0}},
    {"qkv", 2, 6, 4, 0, CZ_KIND_MATRIX, 0, 2, {2, 4}},
    {"proj", 2, 4, 6, 1, CZ_KIND_MATRIX, 0, 0, {0}},
    {"norm", 1, 4, 1, -1, CZ_KIND_ELEMENTWISE, 0, 0, {0}},
};
#define NP ((int)(sizeof PARAMS / sizeof PARAMS[0]))

static cz_muon_hparams cubic(cz_muon_scaling scaling)
{
    cz_muon_hparams h = {0};
    h.lr = 0.1f;
    h.eps = 1e-7f;
    h.scale_coeff = 0.2f;
    h.ns_steps = 60;
    h.coeffs = *cz__ns_coeffs_find("cubic");
    h.scaling = scaling;
    return h;
}

/* A block with orthonormal directions: diag(3, 3) on top of zero rows (tall) or its transpose
 * (wide). Its polar factor is [I; 0] (or [I 0]), so the update is the scale times that. */
static void polar_case(int64_t rows, int64_t cols, cz_muon_scaling scaling, double want_scale)
{
    float g[8] = {0}, out[8];
    for (int64_t i = 0; i < 2; i++)
        g[i * cols + i] = 3.0f;
    cz_plan_param p = {.def.name = "m",
                       .def.ndim = 2,
                       .def.shape = {rows, cols},
                       .def.tp_dim = -1,
                       .def.block_dim = -1};
    const cz_plan_param *ps[1] = {&p};
    const float *in[1] = {g};
    float *o[1] = {out};
    cz_compute cpu;
    ck_assert_int_eq(cz__compute_open(&cpu, "cpu", NULL), 0);
    cz_muon_hparams h = cubic(scaling);
    ck_assert_int_eq(cz__muon_orthogonalize(&cpu, &h, ps, in, o, 1, NULL), 0);
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++)
            ck_assert_double_eq_tol(out[i * cols + j], i == j ? want_scale : 0.0, 1e-5);
    cz__compute_close(&cpu);
}

START_TEST(scalings_by_hand)
{
    /* rms: 0.2 * sqrt(max(m, n)); shape: sqrt(max(1, m / n)). */
    polar_case(4, 2, CZ_MUON_SCALE_RMS, 0.2 * 2.0);
    polar_case(2, 4, CZ_MUON_SCALE_RMS, 0.2 * 2.0);
    polar_case(2, 2, CZ_MUON_SCALE_RMS, 0.2 * sqrt(2.0));
    polar_case(4, 2, CZ_MUON_SCALE_SHAPE, sqrt(2.0));
    polar_case(2, 4, CZ_MUON_SCALE_SHAPE, 1.0);
    polar_case(2, 2, CZ_MUON_SCALE_SHAPE, 1.0);
}
END_TEST

START_TEST(momentum_forms_by_hand)
{
    /* Through the backend's op, as the pipeline calls it. buf = 0.95*0.5 + 1 = 1.475;
     * plain: input = buf; Nesterov: input = g + 0.95*buf = 2.40125 (second element: buf = -2,
     * input -2 + 0.95*-2 = -3.9). */
    cz_compute cpu;
    ck_assert_int_eq(cz__compute_open(&cpu, "cpu", NULL), 0);
    float g[2] = {1.0f, -2.0f}, buf[2] = {0.5f, 0.0f}, in[2];
    cpu.ops->momentum(&cpu, g, buf, in, 2, 0.95f, 0);
    ck_assert_float_eq_tol(buf[0], 1.475f, 1e-6f);
    ck_assert_float_eq_tol(in[0], 1.475f, 1e-6f);
    ck_assert_float_eq_tol(in[1], -2.0f, 1e-6f);
    float buf2[2] = {0.5f, 0.0f};
    cpu.ops->momentum(&cpu, g, buf2, in, 2, 0.95f, 1);
    ck_assert_float_eq_tol(buf2[0], 1.475f, 1e-6f);
    ck_assert_float_eq_tol(in[0], 2.40125f, 1e-6f);
    ck_assert_float_eq_tol(in[1], -3.9f, 1e-6f);
    /* In place (input over the gradient), as the pipeline does. */
    float gg[2] = {1.0f, -2.0f}, buf3[2] = {0.5f, 0.0f};
    cpu.ops->momentum(&cpu, gg, buf3, gg, 2, 0.95f, 1);
    ck_assert_float_eq_tol(gg[0], 2.40125f, 1e-6f);
    cz__compute_close(&cpu);
}
END_TEST

START_TEST(defaults_fit_the_scaling)
{
    cz_exec_config cfg;
    cz_exec_config_init(&cfg);
    ck_assert_int_eq(cfg.muon.nesterov, 1);
    ck_assert_int_eq(cfg.muon.scaling, CZ_MUON_SCALE_RMS);
    cz_muon_hparams h;
    ck_assert_int_eq(cz__muon_hparams_from_config(&h, &cfg, NULL), 0);
    ck_assert_float_eq(h.lr, 1e-3f);
    cfg.muon.scaling = CZ_MUON_SCALE_SHAPE;
    ck_assert_int_eq(cz__muon_hparams_from_config(&h, &cfg, NULL), 0);
    ck_assert_float_eq(h.lr, 0.02f);
    cfg.lr = 0.005f;
    ck_assert_int_eq(cz__muon_hparams_from_config(&h, &cfg, NULL), 0);
    ck_assert_float_eq(h.lr, 0.005f);
    cz_error err;
    cfg.muon.scaling = (cz_muon_scaling)7;
    ck_assert_int_eq(cz__muon_hparams_from_config(&h, &cfg, &err), CZ_EINVALID);
    ck_assert_ptr_nonnull(strstr(err.message, "muon_scaling = 7"));
    cfg.muon.scaling = CZ_MUON_SCALE_RMS;
    /* Since config version 6, 0 is a rate of 0 and only the default's value means the default;
     * other negative rates are refused. */
    cfg.lr = 0.0f;
    ck_assert_int_eq(cz__muon_hparams_from_config(&h, &cfg, NULL), 0);
    ck_assert_float_eq(h.lr, 0.0f);
    cfg.lr = -2.0f;
    ck_assert_int_eq(cz__muon_hparams_from_config(&h, &cfg, &err), CZ_EINVALID);
    ck_assert_ptr_nonnull(strstr(err.message, "lr = -2"));
    cfg.lr = CZ_EXEC_LR_DEFAULT;
    ck_assert_int_eq(cz__muon_hparams_from_config(&h, &cfg, NULL), 0);
    ck_assert_float_eq(h.lr, 1e-3f);
    cfg.muon.ns_eps = 0.0f;
    ck_assert_int_eq(cz__muon_hparams_from_config(&h, &cfg, &err), CZ_EINVALID);
    ck_assert_ptr_nonnull(strstr(err.message, "ns_eps = 0"));
    cfg.muon.ns_eps = 1e-6f;
    ck_assert_int_eq(cz__muon_hparams_from_config(&h, &cfg, &err), 0);
    ck_assert_float_eq(h.eps, 1e-6f);
}
END_TEST

typedef struct rig {
    cz_plan *pl;
    cz_executor *ex;
    float *P, *G;
    size_t n;
} rig;

static void rig_open(rig *r, const cz_exec_config *cfg)
{
    r->pl = fx_plan(PARAMS, NP, 1);
    cz_error err;
    ck_assert_msg(cz_executor_create_from_plan(&r->ex, r->pl, cfg, &err) == 0, "%s", err.message);
    r->n = cz_executor_buffer_numel(r->ex);
    r->P = calloc(r->n, sizeof(float));
    r->G = calloc(r->n, sizeof(float));
    for (size_t k = 0; k < r->n; k++)
        r->P[k] = 0.5f * fx_val(k);
    ck_assert_int_eq(cz_executor_bind_buffers(r->ex, r->P, r->G, r->n, NULL), 0);
}

static void rig_grads(rig *r, uint64_t salt, float scale)
{
    for (size_t k = 0; k < r->n; k++)
        r->G[k] = scale * fx_val(salt * 100003 + k);
}

static void rig_close(rig *r)
{
    cz_executor_free(r->ex);
    cz_plan_free(r->pl);
    free(r->P);
    free(r->G);
}

static cz_exec_config self_cfg(void)
{
    cz_exec_config cfg;
    cz_exec_config_init(&cfg);
    cfg.comm = "self";
    return cfg;
}

/* Two Muon steps through the whole executor, by hand. With ns_steps = 0 the orthogonalization
 * is only the normalisation X = in / ||in||_F, so every number below follows from the
 * formulas. One 4 x 2 matrix w (p0 = 0), mu = 0.5, lr = 0.1, wd = 0.1; g1 = e00, g2 = 2 e11.
 *   step 1: buf = e00; input e00 (plain) or g1 + mu*buf = 1.5 e00 (Nesterov): both normalise
 *           to e00, so w = -lr*s*e00.
 *   step 2: buf = 0.5 e00 + 2 e11; input buf (plain) = (0.5, 2), or g2 + mu*buf = (0.25, 3)
 *           (Nesterov), normalised by sqrt(4.25) or sqrt(9.0625); w = w*(1 - lr*wd) - lr*s*X.
 * s = 0.2*sqrt(max(4, 2)) = 0.4 (rms) or sqrt(max(1, 4/2)) = sqrt(2) (shape). */
START_TEST(muon_steps_by_hand)
{
    static const fx_param W[] = {{"w", 2, 4, 2, 0, CZ_KIND_MATRIX, 0, 0, {0}}};
    for (int scaling = 0; scaling < 2; scaling++)
        for (int nesterov = 0; nesterov < 2; nesterov++) {
            cz_exec_config cfg = self_cfg();
            cfg.muon.ns_steps = 0;
            cfg.muon.momentum = 0.5f;
            cfg.lr = 0.1f;
            cfg.weight_decay = 0.1f;
            cfg.muon.nesterov = nesterov;
            cfg.muon.scaling = scaling ? CZ_MUON_SCALE_SHAPE : CZ_MUON_SCALE_RMS;
            cz_plan *pl = fx_plan(W, 1, 1);
            cz_executor *ex = NULL;
            cz_error err;
            ck_assert_int_eq(cz_executor_create_from_plan(&ex, pl, &cfg, &err), 0);
            float P[8] = {0}, G[8] = {0};
            ck_assert_int_eq(cz_executor_bind_buffers(ex, P, G, 8, &err), 0);
            double s = scaling ? sqrt(2.0) : 0.4, lr = 0.1, decay = 1.0 - 0.1 * 0.1;
            G[0] = 1.0f; /* row-major 4 x 2: (0,0) at index 0, (1,1) at index 3 */
            ck_assert_int_eq(cz_executor_step(ex, &err), 0);
            ck_assert_double_eq_tol(P[0], -lr * s, 1e-6);
            for (int k = 1; k < 8; k++)
                ck_assert_float_eq(P[k], 0.0f);
            G[0] = 0.0f;
            G[3] = 2.0f;
            ck_assert_int_eq(cz_executor_step(ex, &err), 0);
            double a = nesterov ? 0.25 : 0.5, b = nesterov ? 3.0 : 2.0, nrm = sqrt(a * a + b * b);
            ck_assert_double_eq_tol(P[0], -lr * s * decay - lr * s * a / nrm, 1e-6);
            ck_assert_double_eq_tol(P[3], -lr * s * b / nrm, 1e-6);
            for (int k = 1; k < 8; k++)
                if (k != 3)
                    ck_assert_float_eq(P[k], 0.0f);
            cz_executor_free(ex);
            cz_plan_free(pl);
        }
}
END_TEST

START_TEST(rates_set_between_steps)
{
    /* b starts with other rates and weight decays, is set to a's before its first step, and
     * must then follow a bit for bit; a second change applies from the next step on. */
    cz_exec_config ca = self_cfg(), cb = self_cfg();
    ca.lr = 0.004f;
    ca.adamw.lr = 2e-4f;
    cb.lr = 0.05f;
    cb.adamw.lr = 1e-2f;
    cb.weight_decay = cb.adamw.weight_decay = 0.3f;
    rig a, b;
    rig_open(&a, &ca);
    rig_open(&b, &cb);
    cz_error err;
    ck_assert_int_eq(cz_executor_set_lr(b.ex, 0.004f, 2e-4f, &err), 0);
    ck_assert_int_eq(cz_executor_set_weight_decay(b.ex, 0.01f, 0.01f, &err), 0);
    for (int s = 0; s < 3; s++) {
        if (s == 2) {
            ck_assert_int_eq(cz_executor_set_lr(a.ex, 0.001f, 1e-4f, &err), 0);
            ck_assert_int_eq(cz_executor_set_lr(b.ex, 0.001f, 1e-4f, &err), 0);
            ck_assert_int_eq(cz_executor_set_weight_decay(a.ex, 0.1f, 0.0f, &err), 0);
            ck_assert_int_eq(cz_executor_set_weight_decay(b.ex, 0.1f, 0.0f, &err), 0);
        }
        rig_grads(&a, (uint64_t)s + 1, 1.0f);
        rig_grads(&b, (uint64_t)s + 1, 1.0f);
        float before = a.P[0];
        ck_assert_int_eq(cz_executor_step(a.ex, &err), 0);
        ck_assert_int_eq(cz_executor_step(b.ex, &err), 0);
        ck_assert(a.P[0] != before);
        for (size_t k = 0; k < a.n; k++)
            ck_assert_float_eq(a.P[k], b.P[k]);
    }
    ck_assert_int_eq(cz_executor_set_lr(a.ex, -1.0f, 0.0f, &err), CZ_EINVALID);
    ck_assert_ptr_nonnull(strstr(err.message, "muon_lr = -1"));
    ck_assert_int_eq(cz_executor_set_weight_decay(a.ex, 0.0f, NAN, &err), CZ_EINVALID);
    ck_assert_ptr_nonnull(strstr(err.message, "adamw_wd = nan"));
    rig_close(&a);
    rig_close(&b);
}
END_TEST

START_TEST(momentum_set_between_steps)
{
    /* b starts with other momentum coefficients, is set to a's before its first step and must
     * then follow it bit for bit; a change applies from the next step on (and moves a). */
    cz_exec_config ca = self_cfg(), cb = self_cfg();
    ca.muon.momentum = 0.9f;
    ca.adamw.beta1 = 0.8f;
    ca.adamw.beta2 = 0.99f;
    cb.muon.momentum = 0.5f;
    cb.adamw.beta1 = 0.3f;
    cb.adamw.beta2 = 0.6f;
    rig a, b, c;
    rig_open(&a, &ca);
    rig_open(&b, &cb);
    rig_open(&c, &ca);
    cz_error err;
    ck_assert_int_eq(cz_executor_set_momentum(b.ex, 0.9f, 0.8f, 0.99f, &err), 0);
    for (int s = 0; s < 3; s++) {
        if (s == 2) {
            ck_assert_int_eq(cz_executor_set_momentum(a.ex, 0.6f, 0.7f, 0.9f, &err), 0);
            ck_assert_int_eq(cz_executor_set_momentum(b.ex, 0.6f, 0.7f, 0.9f, &err), 0);
        }
        rig_grads(&a, (uint64_t)s + 1, 1.0f);
        rig_grads(&b, (uint64_t)s + 1, 1.0f);
        rig_grads(&c, (uint64_t)s + 1, 1.0f);
        ck_assert_int_eq(cz_executor_step(a.ex, &err), 0);
        ck_assert_int_eq(cz_executor_step(b.ex, &err), 0);
        ck_assert_int_eq(cz_executor_step(c.ex, &err), 0);
        bool differ = false;
        for (size_t k = 0; k < a.n; k++) {
            ck_assert_float_eq(a.P[k], b.P[k]);
            differ = differ || a.P[k] != c.P[k];
        }
        ck_assert(differ == (s == 2)); /* c kept the first coefficients */
    }
    ck_assert_int_eq(cz_executor_set_momentum(a.ex, 1.0f, 0.5f, 0.5f, &err), CZ_EINVALID);
    ck_assert_ptr_nonnull(strstr(err.message, "muon_momentum = 1"));
    ck_assert_int_eq(cz_executor_set_momentum(a.ex, 0.5f, 0.5f, NAN, &err), CZ_EINVALID);
    ck_assert_ptr_nonnull(strstr(err.message, "adamw_beta2 = nan"));
    rig_close(&a);
    rig_close(&b);
    rig_close(&c);
}
END_TEST

START_TEST(grad_norm_and_clip)
{
    cz_exec_config cfg = self_cfg();
    rig a;
    rig_open(&a, &cfg);
    ck_assert(isnan(cz_executor_grad_norm(a.ex)));
    rig_grads(&a, 9, 1.0f);
    /* The norm of every gradient element, summed per parameter in double as documented. */
    double sq = 0.0;
    for (int i = 0; i < NP; i++) {
        const cz_plan_param *p = &a.pl->params[i];
        double s = 0.0;
        for (int64_t k = 0; k < p->numel; k++)
            s += (double)a.G[p->offset + k] * a.G[p->offset + k];
        sq += s;
    }
    double norm = sqrt(sq);
    cz_error err;
    ck_assert_int_eq(cz_executor_step(a.ex, &err), 0);
    ck_assert_double_eq_tol(cz_executor_grad_norm(a.ex), norm, 1e-12 * norm);

    /* Clipping to half the norm equals a run whose gradients were scaled by
     * max / (norm + 1e-6) beforehand; a norm below the limit is left alone. */
    cz_exec_config clip = self_cfg();
    clip.max_grad_norm = (float)(norm / 2);
    rig c, d;
    rig_open(&c, &clip);
    rig_open(&d, &cfg);
    rig_grads(&c, 9, 1.0f);
    float f = (float)((double)clip.max_grad_norm / (norm + 1e-6));
    for (size_t k = 0; k < d.n; k++)
        d.G[k] = fx_val(9 * 100003 + k) * f;
    ck_assert_int_eq(cz_executor_step(c.ex, &err), 0);
    ck_assert_int_eq(cz_executor_step(d.ex, &err), 0);
    ck_assert_double_eq_tol(cz_executor_grad_norm(c.ex), norm, 1e-12 * norm);
    for (size_t k = 0; k < c.n; k++)
        ck_assert_float_eq(c.P[k], d.P[k]);
    rig_grads(&c, 10, 0.01f);
    rig_grads(&d, 10, 0.01f);
    ck_assert_int_eq(cz_executor_step(c.ex, &err), 0);
    ck_assert_int_eq(cz_executor_step(d.ex, &err), 0);
    ck_assert(cz_executor_grad_norm(c.ex) < clip.max_grad_norm);
    for (size_t k = 0; k < c.n; k++)
        ck_assert_float_eq(c.P[k], d.P[k]);
    rig_close(&a);
    rig_close(&c);
    rig_close(&d);
}
END_TEST

/* The MPI planes' time limit: the config's (version 5) over CZ_MPI_TIMEOUT_S over 1800 s; a
 * config of another version is not read past its own fields. */
/* CZ_EXEC_CONFIG_INIT and cz_exec_config_init give the same config: the same strings and
 * every other byte equal (padding included: both come from zero-padded objects). */
START_TEST(config_init_macro)
{
    static const cz_exec_config macro = CZ_EXEC_CONFIG_INIT;
    cz_exec_config fn, m;
    memcpy(&m, &macro, sizeof m); /* an assignment need not copy the padding */
    memset(&fn, 0xa5, sizeof fn);
    cz_exec_config_init(&fn);
    ck_assert_int_eq(m.version, CZ_EXEC_CONFIG_VERSION);
    ck_assert_str_eq(m.backend, fn.backend);
    ck_assert_str_eq(m.muon.ns_coeffs, fn.muon.ns_coeffs);
    m.backend = fn.backend = NULL;
    m.muon.ns_coeffs = fn.muon.ns_coeffs = NULL;
    ck_assert_mem_eq(&m, &fn, sizeof m);
    ck_assert_float_eq(fn.soap.eps, 1e-8f);
    ck_assert_double_eq(fn.mpi_timeout_s, 0.0);
}
END_TEST

START_TEST(mpi_timeout_resolution)
{
    cz_exec_config cfg;
    cz_exec_config_init(&cfg);
    ck_assert_double_eq(cfg.mpi_timeout_s, 0.0);
    ck_assert_double_eq(cz__comm_mpi_timeout(&cfg, NULL), 1800.0);
    ck_assert_double_eq(cz__comm_mpi_timeout(&cfg, "12"), 12.0);
    ck_assert_double_eq(cz__comm_mpi_timeout(&cfg, "0.5"), 0.5);
    ck_assert_double_eq(cz__comm_mpi_timeout(&cfg, "soon"), 1800.0);
    ck_assert_double_eq(cz__comm_mpi_timeout(&cfg, "5s"), 1800.0);
    ck_assert_double_eq(cz__comm_mpi_timeout(&cfg, "-1"), 1800.0);
    ck_assert_double_eq(cz__comm_mpi_timeout(&cfg, "inf"), 1800.0);
    ck_assert_double_eq(cz__comm_mpi_timeout(NULL, "7"), 7.0);
    cfg.mpi_timeout_s = 3.0;
    ck_assert_double_eq(cz__comm_mpi_timeout(&cfg, "12"), 3.0); /* the config wins */
}
END_TEST

int main(void)
{
    Suite *s = suite_create("exec_knobs");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, scalings_by_hand);
    tcase_add_test(tc, momentum_forms_by_hand);
    tcase_add_test(tc, defaults_fit_the_scaling);
    tcase_add_test(tc, muon_steps_by_hand);
    tcase_add_test(tc, rates_set_between_steps);
    tcase_add_test(tc, momentum_set_between_steps);
    tcase_add_test(tc, grad_norm_and_clip);
    tcase_add_test(tc, mpi_timeout_resolution);
    tcase_add_test(tc, config_init_macro);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
