/* The executor against an independent reference (tests/exec/ref_optim.h, written from the
 * formulas of docs/EXECUTOR.md in double precision), through the public API only (canzona.h,
 * canzona_exec.h): a plan built by cz_plan_build, parameters bound by name, single process.
 * Also the edges the formulas guard: zero gradients (the eps of Muon's normalisation and of
 * AdamW's denominator) and +/-Inf gradients (the finiteness check). */
#include "ref_optim.h"

#include <check.h>
#include <unistd.h>

static cz_error err;

typedef struct fixture {
    char dir[256];
    cz_plan *plan;
    cz_executor *ex;
    cz_exec_config cfg;
    float *P[REF_NPARAMS], *G[REF_NPARAMS];
    double *RP[REF_NPARAMS], *RG[REF_NPARAMS];
    ref_state st[REF_NPARAMS];
} fixture;

static int numel(int i)
{
    return REF_PARAMS[i].rows * REF_PARAMS[i].cols;
}

static void fx_open(fixture *f, const cz_exec_config *cfg)
{
    memset(f, 0, sizeof *f);
    const char *tmp = getenv("TMPDIR");
    snprintf(f->dir, sizeof f->dir, "%s/cz-ref-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    ck_assert_ptr_nonnull(mkdtemp(f->dir));
    ck_assert_msg(ref_plan(f->dir, 1, &f->plan, &err) == CZ_OK, "%s", err.message);
    f->cfg = *cfg;
    f->cfg.comm = "self";
    ck_assert_msg(cz_executor_create_from_plan(&f->ex, f->plan, &f->cfg, &err) == CZ_OK, "%s",
                  err.message);
    for (int i = 0; i < REF_NPARAMS; i++) {
        int n = numel(i);
        f->P[i] = malloc((size_t)n * sizeof(float));
        f->G[i] = malloc((size_t)n * sizeof(float));
        f->RP[i] = malloc((size_t)n * sizeof(double));
        f->RG[i] = malloc((size_t)n * sizeof(double));
        f->st[i].buf = calloc((size_t)n, sizeof(double));
        f->st[i].m = calloc((size_t)n, sizeof(double));
        f->st[i].v = calloc((size_t)n, sizeof(double));
        for (int k = 0; k < n; k++) {
            f->P[i][k] = (float)(0.5 * ref_val(1000003u * (uint64_t)i + (uint64_t)k));
            f->RP[i][k] = f->P[i][k];
        }
        ck_assert_msg(cz_executor_bind_param(f->ex, REF_PARAMS[i].name, f->P[i], f->G[i],
                                             REF_PARAMS[i].rows, REF_PARAMS[i].cols, &err) == CZ_OK,
                      "%s", err.message);
    }
}

static void fx_close(fixture *f)
{
    cz_executor_free(f->ex);
    cz_plan_free(f->plan);
    for (int i = 0; i < REF_NPARAMS; i++) {
        free(f->P[i]);
        free(f->G[i]);
        free(f->RP[i]);
        free(f->RG[i]);
        free(f->st[i].buf);
        free(f->st[i].m);
        free(f->st[i].v);
    }
    char path[320];
    snprintf(path, sizeof path, "%s/model.json", f->dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/cluster.json", f->dir);
    unlink(path);
    rmdir(f->dir);
}

/* Gradients of one step, scaled; the reference gets the very same values. */
static void fx_grads(fixture *f, int step, double scale)
{
    for (int i = 0; i < REF_NPARAMS; i++)
        for (int k = 0; k < numel(i); k++) {
            f->G[i][k] = (float)(scale * ref_val(7777u + 1000003u * (uint64_t)(step * 16 + i) +
                                                 (uint64_t)k));
            f->RG[i][k] = f->G[i][k];
        }
}

static void fx_step(fixture *f)
{
    ck_assert_msg(cz_executor_step(f->ex, &err) == CZ_OK, "%s", err.message);
    ref_hp h;
    ref_hp_from(&f->cfg, &h);
    for (int i = 0; i < REF_NPARAMS; i++)
        ref_step(&h, &REF_PARAMS[i], &f->st[i], f->RP[i], f->RG[i]);
}

/* max |executor - reference| over the parameter, against the largest change the reference made
 * from the starting values: the comparison is on what the steps did, not on the values. */
static double rel_error(const fixture *f, int i)
{
    double worst = 0, change = 0;
    for (int k = 0; k < numel(i); k++) {
        double p0 = (float)(0.5 * ref_val(1000003u * (uint64_t)i + (uint64_t)k));
        worst = fmax(worst, fabs(f->P[i][k] - f->RP[i][k]));
        change = fmax(change, fabs(f->RP[i][k] - p0));
    }
    return change > 0 ? worst / change : worst;
}

/* Three steps with default hyperparameters (Nesterov, rms scaling, Jordan's coefficients), then
 * with plain momentum, the shape scaling and the cubic coefficients, then with Polar Express's
 * table (one triple per iteration):
 * every parameter within 1e-3 of the reference's change (fp32 against double; a wrong scale,
 * bias correction, momentum, transpose or block split is off by far more). */
START_TEST(matches_reference)
{
    for (int variant = 0; variant < 3; variant++) {
        cz_exec_config cfg;
        cz_exec_config_init(&cfg);
        if (variant == 2)
            cfg.muon.ns_coeffs = "polar_express"; /* a table: 5 rows, 5 iterations */
        if (variant == 1) {
            cfg.muon.nesterov = 0;
            cfg.muon.scaling = CZ_MUON_SCALE_SHAPE;
            cfg.muon.ns_coeffs = "cubic";
            cfg.muon.ns_steps = 8;
        }
        fixture f;
        fx_open(&f, &cfg);
        for (int step = 0; step < 3; step++) {
            fx_grads(&f, step, 1.0);
            fx_step(&f);
        }
        for (int i = 0; i < REF_NPARAMS; i++) {
            double e = rel_error(&f, i);
            ck_assert_msg(e <= 1e-3, "variant %d, %s: executor differs from the reference by %.3g",
                          variant, REF_PARAMS[i].name, e);
        }
        fx_close(&f);
    }
}
END_TEST

/* Zero gradients: Muon normalises 0 by (0 + eps) and AdamW divides 0 by (0 + eps), so only the
 * decoupled weight decay acts, p <- p (1 - lr wd); without either eps the step gives NaN. */
START_TEST(zero_gradients_decay_only)
{
    cz_exec_config cfg;
    cz_exec_config_init(&cfg);
    ref_hp hp;
    ref_hp_from(&cfg, &hp);
    fixture f;
    fx_open(&f, &cfg);
    for (int step = 0; step < 2; step++) {
        fx_grads(&f, step, 0.0);
        fx_step(&f);
    }
    for (int i = 0; i < REF_NPARAMS; i++) {
        double keep = REF_PARAMS[i].matrix ? 1.0 - hp.lr * hp.wd
                                           : 1.0 - (double)cfg.adamw.lr * cfg.adamw.weight_decay;
        for (int k = 0; k < numel(i); k++) {
            double p0 = (float)(0.5 * ref_val(1000003u * (uint64_t)i + (uint64_t)k));
            ck_assert_msg(isfinite(f.P[i][k]), "%s[%d] = %g after zero gradients",
                          REF_PARAMS[i].name, k, (double)f.P[i][k]);
            ck_assert_msg(fabs(f.P[i][k] - p0 * keep * keep) <= 1e-6 * fabs(p0) + 1e-12,
                          "%s[%d]: %.9g, expected %.9g", REF_PARAMS[i].name, k, (double)f.P[i][k],
                          p0 * keep * keep);
        }
    }
    fx_close(&f);
}
END_TEST

/* +Inf and -Inf in one gradient element, of a matrix and of an elementwise parameter: the step
 * is refused naming the parameter and changes no parameter. */
START_TEST(inf_gradient_refused)
{
    const int which[] = {0, 2, 3, 4};
    for (int w = 0; w < 4; w++)
        for (int sign = -1; sign <= 1; sign += 2) {
            cz_exec_config cfg;
            cz_exec_config_init(&cfg);
            fixture f;
            fx_open(&f, &cfg);
            fx_grads(&f, 0, 1.0);
            int i = which[w], k = numel(i) / 2 + 1;
            f.G[i][k] = sign * INFINITY;
            float *before[REF_NPARAMS];
            for (int j = 0; j < REF_NPARAMS; j++) {
                before[j] = malloc((size_t)numel(j) * sizeof(float));
                memcpy(before[j], f.P[j], (size_t)numel(j) * sizeof(float));
            }
            ck_assert_int_eq(cz_executor_step(f.ex, &err), CZ_EINVALID);
            ck_assert_msg(strstr(err.message, REF_PARAMS[i].name) != NULL,
                          "%cInf in %s: message '%s' does not name it", sign > 0 ? '+' : '-',
                          REF_PARAMS[i].name, err.message);
            for (int j = 0; j < REF_NPARAMS; j++) {
                ck_assert_msg(!memcmp(before[j], f.P[j], (size_t)numel(j) * sizeof(float)),
                              "%cInf in %s changed %s", sign > 0 ? '+' : '-', REF_PARAMS[i].name,
                              REF_PARAMS[j].name);
                free(before[j]);
            }
            fx_close(&f);
        }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("reference");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, matches_reference);
    tcase_add_test(tc, zero_gradients_decay_only);
    tcase_add_test(tc, inf_gradient_refused);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
