/* Every version of cz_exec_config the library has had is accepted: versions 1 to 6 (one flat
 * struct, each version appending fields; written out below as they were) are read in their own
 * layout, no further than their own fields, into version 7's (each optimizer's settings in its
 * own struct), the fields a version lacks taking the defaults and lr = 0 meaning what it meant
 * in that version; version 0 and one above the library's are refused naming both versions, and
 * so is an optimizer's struct of a version the library does not know. */
#include "canzona_exec.h"
#include "cz_exec_testing.h"
#include "exec_fixture.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Version 1 (the first executor). */
#define V1_FIELDS                                                                                  \
    int version;                                                                                   \
    const char *backend;                                                                           \
    const char *comm;                                                                              \
    int dp_rank, tp_rank;                                                                          \
    const void *world_comm, *dp_comm, *tp_comm;                                                    \
    float lr;                                                                                      \
    float momentum;                                                                                \
    int nesterov;                                                                                  \
    float weight_decay;                                                                            \
    int ns_steps;                                                                                  \
    const char *ns_coeffs;                                                                         \
    float ns_eps;                                                                                  \
    float scale_coeff;                                                                             \
    float adamw_lr;                                                                                \
    float adamw_beta1;                                                                             \
    float adamw_beta2;                                                                             \
    float adamw_eps;                                                                               \
    float adamw_weight_decay;                                                                      \
    int check_finite;
/* Version 2: Muon's scalings, clipping, bf16 and the memory space, the stream. */
#define V2_FIELDS                                                                                  \
    V1_FIELDS                                                                                      \
    cz_muon_scaling muon_scaling;                                                                  \
    float max_grad_norm;                                                                           \
    cz_exec_memory memory;                                                                         \
    int dtype;                                                                                     \
    void *stream;
/* Version 3: Shampoo and SOAP. */
#define V3_FIELDS                                                                                  \
    V2_FIELDS                                                                                      \
    float shampoo_beta1;                                                                           \
    float shampoo_beta2;                                                                           \
    float shampoo_eps;                                                                             \
    float shampoo_momentum;                                                                        \
    int shampoo_nesterov;                                                                          \
    int shampoo_start_step;                                                                        \
    int shampoo_max_dim;                                                                           \
    int shampoo_bias_correction;                                                                   \
    cz_shampoo_grafting shampoo_grafting;                                                          \
    float shampoo_graft_beta2;                                                                     \
    float shampoo_graft_eps;                                                                       \
    float soap_beta1;                                                                              \
    float soap_beta2;                                                                              \
    float soap_shampoo_beta;                                                                       \
    float soap_eps;                                                                                \
    int soap_bias_correction;
#define V4_FIELDS                                                                                  \
    V3_FIELDS                                                                                      \
    double nccl_timeout_s;
#define V5_FIELDS                                                                                  \
    V4_FIELDS                                                                                      \
    double mpi_timeout_s;
#define V6_FIELDS                                                                                  \
    V5_FIELDS                                                                                      \
    const cz_comm_callbacks *callbacks;

struct cfg_v1 {
    V1_FIELDS
};
struct cfg_v2 {
    V2_FIELDS
};
struct cfg_v3 {
    V3_FIELDS
};
struct cfg_v4 {
    V4_FIELDS
};
struct cfg_v5 {
    V5_FIELDS
};
struct cfg_v6 {
    V6_FIELDS
};

/* Every old struct filled with values no default has (each version's own fields). */
#define FILL_V1(c, v)                                                                              \
    do {                                                                                           \
        (c).version = (v);                                                                         \
        (c).backend = "cpu";                                                                       \
        (c).comm = "self";                                                                         \
        (c).dp_rank = (c).tp_rank = -1;                                                            \
        (c).world_comm = (c).dp_comm = (c).tp_comm = NULL;                                         \
        (c).lr = 0.5f;                                                                             \
        (c).momentum = 0.5f;                                                                       \
        (c).nesterov = 0;                                                                          \
        (c).weight_decay = 0.25f;                                                                  \
        (c).ns_steps = 7;                                                                          \
        (c).ns_coeffs = "cubic";                                                                   \
        (c).ns_eps = 1e-6f;                                                                        \
        (c).scale_coeff = 0.3f;                                                                    \
        (c).adamw_lr = 1e-2f;                                                                      \
        (c).adamw_beta1 = 0.8f;                                                                    \
        (c).adamw_beta2 = 0.9f;                                                                    \
        (c).adamw_eps = 1e-6f;                                                                     \
        (c).adamw_weight_decay = 0.125f;                                                           \
        (c).check_finite = 0;                                                                      \
    } while (0)
#define FILL_V2(c, v)                                                                              \
    do {                                                                                           \
        FILL_V1(c, v);                                                                             \
        (c).muon_scaling = CZ_MUON_SCALE_SHAPE;                                                    \
        (c).max_grad_norm = 2.0f;                                                                  \
        (c).memory = CZ_EXEC_MEMORY_HOST;                                                          \
        (c).dtype = CZ_DTYPE_FP32;                                                                 \
        (c).stream = NULL;                                                                         \
    } while (0)
#define FILL_V3(c, v)                                                                              \
    do {                                                                                           \
        FILL_V2(c, v);                                                                             \
        (c).shampoo_beta1 = 0.5f;                                                                  \
        (c).shampoo_beta2 = 0.99f;                                                                 \
        (c).shampoo_eps = 1e-6f;                                                                   \
        (c).shampoo_momentum = 0.25f;                                                              \
        (c).shampoo_nesterov = 1;                                                                  \
        (c).shampoo_start_step = 3;                                                                \
        (c).shampoo_max_dim = 64;                                                                  \
        (c).shampoo_bias_correction = 0;                                                           \
        (c).shampoo_grafting = CZ_GRAFT_ADAM;                                                      \
        (c).shampoo_graft_beta2 = 0.5f;                                                            \
        (c).shampoo_graft_eps = 1e-5f;                                                             \
        (c).soap_beta1 = 0.5f;                                                                     \
        (c).soap_beta2 = 0.75f;                                                                    \
        (c).soap_shampoo_beta = 0.625f;                                                            \
        (c).soap_eps = 1e-5f;                                                                      \
        (c).soap_bias_correction = 0;                                                              \
    } while (0)

/* The old struct at the start of a buffer of 0xff bytes as large as any config: a reader that
 * went past its fields would find NaNs and -1s there instead of the defaults. */
static void *in_garbage(const void *old, size_t n)
{
    size_t size = sizeof(cz_exec_config) > 512 ? sizeof(cz_exec_config) : 512;
    unsigned char *b = malloc(size);
    ck_assert_ptr_nonnull(b);
    memset(b, 0xff, size);
    memcpy(b, old, n);
    return b;
}

static void read_ok(cz_exec_config *out, const void *old, size_t n, int version)
{
    cz_error err;
    void *b = in_garbage(old, n);
    int rc = cz__exec_config_read(out, b, &err);
    free(b);
    ck_assert_msg(rc == CZ_OK, "cz_exec_config version %d refused: %s", version, err.message);
    ck_assert_int_eq(out->version, CZ_EXEC_CONFIG_VERSION);
    ck_assert_int_eq(out->muon.version, CZ_MUON_CONFIG_VERSION);
    ck_assert_int_eq(out->adamw.version, CZ_ADAMW_CONFIG_VERSION);
    ck_assert_int_eq(out->soap.version, CZ_SOAP_CONFIG_VERSION);
    ck_assert_int_eq(out->shampoo.version, CZ_SHAMPOO_CONFIG_VERSION);
    ck_assert_int_eq(out->normuon.version, CZ_NORMUON_CONFIG_VERSION);
}

/* NorMuon's defaults (what every version before 9 runs: plain Muon). */
static void expect_normuon_defaults(const cz_exec_config *c)
{
    ck_assert_int_eq(c->normuon.mode, CZ_NORMUON_NONE);
    ck_assert_float_eq(c->normuon.beta2, 0.95f);
    ck_assert_float_eq(c->normuon.eps, 1e-8f);
}

/* Version 1's fields, wherever version 7 keeps them. */
static void expect_v1(const cz_exec_config *c)
{
    ck_assert_str_eq(c->backend, "cpu");
    ck_assert_str_eq(c->comm, "self");
    ck_assert_int_eq(c->dp_rank, -1);
    ck_assert_ptr_null(c->world_comm);
    ck_assert_float_eq(c->muon.momentum, 0.5f);
    ck_assert_int_eq(c->muon.nesterov, 0);
    ck_assert_float_eq(c->weight_decay, 0.25f);
    ck_assert_int_eq(c->muon.ns_steps, 7);
    ck_assert_str_eq(c->muon.ns_coeffs, "cubic");
    ck_assert_float_eq(c->muon.ns_eps, 1e-6f);
    ck_assert_float_eq(c->muon.scale_coeff, 0.3f);
    ck_assert_float_eq(c->adamw.lr, 1e-2f);
    ck_assert_float_eq(c->adamw.beta1, 0.8f);
    ck_assert_float_eq(c->adamw.beta2, 0.9f);
    ck_assert_float_eq(c->adamw.eps, 1e-6f);
    ck_assert_float_eq(c->adamw.weight_decay, 0.125f);
    ck_assert_int_eq(c->check_finite, 0);
}

static void expect_v2(const cz_exec_config *c)
{
    ck_assert_int_eq(c->muon.scaling, CZ_MUON_SCALE_SHAPE);
    ck_assert_float_eq(c->max_grad_norm, 2.0f);
    ck_assert_int_eq(c->dtype, CZ_DTYPE_FP32);
}

static void expect_v3(const cz_exec_config *c)
{
    ck_assert_float_eq(c->shampoo.beta1, 0.5f);
    ck_assert_float_eq(c->shampoo.beta2, 0.99f);
    ck_assert_float_eq(c->shampoo.eps, 1e-6f);
    ck_assert_float_eq(c->shampoo.momentum, 0.25f);
    ck_assert_int_eq(c->shampoo.nesterov, 1);
    ck_assert_int_eq(c->shampoo.start_step, 3);
    ck_assert_int_eq(c->shampoo.max_dim, 64);
    ck_assert_int_eq(c->shampoo.bias_correction, 0);
    ck_assert_int_eq(c->shampoo.grafting, CZ_GRAFT_ADAM);
    ck_assert_float_eq(c->shampoo.graft_beta2, 0.5f);
    ck_assert_float_eq(c->shampoo.graft_eps, 1e-5f);
    ck_assert_float_eq(c->soap.beta1, 0.5f);
    ck_assert_float_eq(c->soap.beta2, 0.75f);
    ck_assert_float_eq(c->soap.shampoo_beta, 0.625f);
    ck_assert_float_eq(c->soap.eps, 1e-5f);
    ck_assert_int_eq(c->soap.bias_correction, 0);
}

/* The defaults of what the versions after `after` added. */
static void expect_defaults_after(const cz_exec_config *c, int after)
{
    cz_exec_config d;
    cz_exec_config_init(&d);
    if (after < 2) {
        ck_assert_int_eq(c->muon.scaling, d.muon.scaling);
        ck_assert_float_eq(c->max_grad_norm, d.max_grad_norm);
        ck_assert_int_eq(c->memory, d.memory);
        ck_assert_int_eq(c->dtype, d.dtype);
        ck_assert_ptr_null(c->stream);
    }
    if (after < 3) {
        ck_assert_int_eq(memcmp(&c->shampoo, &d.shampoo, sizeof d.shampoo), 0);
        ck_assert_int_eq(memcmp(&c->soap, &d.soap, sizeof d.soap), 0);
    }
    if (after < 4)
        ck_assert_double_eq(c->nccl_timeout_s, 0.0);
    if (after < 5)
        ck_assert_double_eq(c->mpi_timeout_s, 0.0);
    if (after < 6)
        ck_assert_ptr_null(c->callbacks);
}

START_TEST(old_versions_read)
{
    cz_exec_config c;
    struct cfg_v1 v1;
    FILL_V1(v1, 1);
    read_ok(&c, &v1, sizeof v1, 1);
    expect_v1(&c);
    expect_defaults_after(&c, 1);
    ck_assert_float_eq(c.lr, 0.5f);

    struct cfg_v2 v2;
    FILL_V2(v2, 2);
    read_ok(&c, &v2, sizeof v2, 2);
    expect_v1(&c);
    expect_v2(&c);
    expect_defaults_after(&c, 2);

    struct cfg_v3 v3;
    FILL_V3(v3, 3);
    read_ok(&c, &v3, sizeof v3, 3);
    expect_v1(&c);
    expect_v2(&c);
    expect_v3(&c);
    expect_defaults_after(&c, 3);

    struct cfg_v4 v4;
    FILL_V3(v4, 4);
    v4.nccl_timeout_s = 12.0;
    read_ok(&c, &v4, sizeof v4, 4);
    expect_v3(&c);
    ck_assert_double_eq(c.nccl_timeout_s, 12.0);
    expect_defaults_after(&c, 4);

    struct cfg_v5 v5;
    FILL_V3(v5, 5);
    v5.nccl_timeout_s = 12.0;
    v5.mpi_timeout_s = 34.0;
    read_ok(&c, &v5, sizeof v5, 5);
    expect_v3(&c);
    ck_assert_double_eq(c.nccl_timeout_s, 12.0);
    ck_assert_double_eq(c.mpi_timeout_s, 34.0);
    expect_defaults_after(&c, 5);

    static const cz_comm_callbacks cb = {.version = CZ_COMM_CALLBACKS_VERSION};
    struct cfg_v6 v6;
    FILL_V3(v6, 6);
    v6.nccl_timeout_s = 12.0;
    v6.mpi_timeout_s = 34.0;
    v6.callbacks = &cb;
    read_ok(&c, &v6, sizeof v6, 6);
    expect_v1(&c);
    expect_v2(&c);
    expect_v3(&c);
    ck_assert_double_eq(c.mpi_timeout_s, 34.0);
    ck_assert_ptr_eq(c.callbacks, &cb);
}
END_TEST

START_TEST(lr_zero_by_version)
{
    /* lr = 0: a rate of 0 in version 1 (whose default was 0.02) and from version 6 on; the
     * optimizer's default in versions 2 to 5. */
    cz_exec_config c;
    struct cfg_v1 v1;
    FILL_V1(v1, 1);
    v1.lr = 0.0f;
    read_ok(&c, &v1, sizeof v1, 1);
    ck_assert_float_eq(c.lr, 0.0f);
    struct cfg_v2 v2;
    FILL_V2(v2, 2);
    v2.lr = 0.0f;
    read_ok(&c, &v2, sizeof v2, 2);
    ck_assert_float_eq(c.lr, CZ_EXEC_LR_DEFAULT);
    struct cfg_v5 v5;
    FILL_V3(v5, 5);
    v5.nccl_timeout_s = v5.mpi_timeout_s = 0.0;
    v5.lr = 0.0f;
    read_ok(&c, &v5, sizeof v5, 5);
    ck_assert_float_eq(c.lr, CZ_EXEC_LR_DEFAULT);
    v5.lr = 0.125f;
    read_ok(&c, &v5, sizeof v5, 5);
    ck_assert_float_eq(c.lr, 0.125f);
    struct cfg_v6 v6;
    FILL_V3(v6, 6);
    v6.nccl_timeout_s = v6.mpi_timeout_s = 0.0;
    v6.callbacks = NULL;
    v6.lr = 0.0f;
    read_ok(&c, &v6, sizeof v6, 6);
    ck_assert_float_eq(c.lr, 0.0f);
}
END_TEST

START_TEST(current_version_read)
{
    cz_exec_config in = CZ_EXEC_CONFIG_INIT, c;
    in.soap.beta1 = 0.5f;
    in.adamw.lr = 0.25f;
    in.muon.ns_steps = 3;
    cz_error err;
    ck_assert_int_eq(cz__exec_config_read(&c, &in, &err), CZ_OK);
    ck_assert_int_eq(memcmp(&c, &in, sizeof c), 0);
    /* NULL: the defaults. */
    cz_exec_config d;
    cz_exec_config_init(&d);
    ck_assert_int_eq(cz__exec_config_read(&c, NULL, &err), CZ_OK);
    ck_assert_int_eq(memcmp(&c, &d, sizeof c), 0);
}
END_TEST

/* Version 7: this layout up to the optimizers' structs, nothing after them read (the 0xff
 * bytes beyond would make grad_reduce_in_fp32 -1); grad_reduce_in_fp32 keeps its default. */
START_TEST(version_7_read)
{
    cz_exec_config in = CZ_EXEC_CONFIG_INIT, c;
    in.version = 7;
    in.soap.beta1 = 0.5f;
    in.muon.ns_steps = 3;
    in.comm = "self";
    read_ok(&c, &in, CZ__OPTIONS_END(cz_exec_config, shampoo), 7);
    ck_assert_float_eq(c.soap.beta1, 0.5f);
    ck_assert_int_eq(c.muon.ns_steps, 3);
    ck_assert_str_eq(c.comm, "self");
    ck_assert_int_eq(c.grad_reduce_in_fp32, 0);
    expect_normuon_defaults(&c);
}
END_TEST

/* Version 8: this layout up to grad_reduce_in_fp32, NorMuon (version 9) at its defaults
 * however the bytes beyond are set. */
START_TEST(version_8_read)
{
    cz_exec_config in = CZ_EXEC_CONFIG_INIT, c;
    in.version = 8;
    in.grad_reduce_in_fp32 = 1;
    in.comm = "self";
    read_ok(&c, &in, CZ__OPTIONS_END(cz_exec_config, grad_reduce_in_fp32), 8);
    ck_assert_int_eq(c.grad_reduce_in_fp32, 1);
    ck_assert_str_eq(c.comm, "self");
    expect_normuon_defaults(&c);
}
END_TEST

/* A refusal names the struct, the version given and the library's. */
static void expect_refused(const cz_error *err, const char *type, int have, int current)
{
    char a[64], b[64];
    snprintf(a, sizeof a, "%s version %d", type, have);
    snprintf(b, sizeof b, have < 1 ? "1 to %d" : "version %d", current);
    ck_assert_int_eq(err->code, CZ_EUNSUPPORTED);
    ck_assert_msg(strstr(err->message, a) && strstr(err->message, b),
                  "message does not name %s and %s: %s", a, b, err->message);
}

START_TEST(versions_refused)
{
    cz_exec_config in = CZ_EXEC_CONFIG_INIT, c;
    cz_error err;
    in.comm = "self";
    in.version = 0;
    ck_assert_int_eq(cz__exec_config_read(&c, &in, &err), CZ_EUNSUPPORTED);
    expect_refused(&err, "cz_exec_config", 0, CZ_EXEC_CONFIG_VERSION);
    /* What every version has is still read (create opens the caller's communication). */
    ck_assert_str_eq(c.comm, "self");
    in.version = CZ_EXEC_CONFIG_VERSION + 1;
    ck_assert_int_eq(cz__exec_config_read(&c, &in, &err), CZ_EUNSUPPORTED);
    expect_refused(&err, "cz_exec_config", CZ_EXEC_CONFIG_VERSION + 1, CZ_EXEC_CONFIG_VERSION);
    in.version = CZ_EXEC_CONFIG_VERSION;
    in.soap.version = 0;
    ck_assert_int_eq(cz__exec_config_read(&c, &in, &err), CZ_EUNSUPPORTED);
    expect_refused(&err, "cz_soap_config", 0, CZ_SOAP_CONFIG_VERSION);
    in.soap.version = CZ_SOAP_CONFIG_VERSION;
    in.muon.version = CZ_MUON_CONFIG_VERSION + 1;
    ck_assert_int_eq(cz__exec_config_read(&c, &in, &err), CZ_EUNSUPPORTED);
    expect_refused(&err, "cz_muon_config", CZ_MUON_CONFIG_VERSION + 1, CZ_MUON_CONFIG_VERSION);
    in.muon.version = CZ_MUON_CONFIG_VERSION;
    in.normuon.version = 0;
    ck_assert_int_eq(cz__exec_config_read(&c, &in, &err), CZ_EUNSUPPORTED);
    expect_refused(&err, "cz_normuon_config", 0, CZ_NORMUON_CONFIG_VERSION);
}
END_TEST

static const fx_param PARAMS[] = {
    {"emb", 2, 8, 4, 0, CZ_KIND_ELEMENTWISE, 0, 0, {0}},
    {"proj", 2, 4, 6, 1, CZ_KIND_MATRIX, 0, 0, {0}},
};

START_TEST(create_takes_every_version)
{
    /* Through the public API: a version-3 config runs a step; version 0 and the one above the
     * library's are refused. */
    cz_plan *plan = fx_plan(PARAMS, 2, 1);
    ck_assert_ptr_nonnull(plan);
    struct cfg_v3 v3;
    FILL_V3(v3, 3);
    cz_error err;
    cz_executor *ex = NULL;
    ck_assert_msg(
        cz_executor_create_from_plan(&ex, plan, (const cz_exec_config *)(void *)&v3, &err) == CZ_OK,
        "%s", err.message);
    size_t n = cz_executor_buffer_numel(ex);
    float *p = calloc(n, sizeof *p), *g = calloc(n, sizeof *g);
    for (size_t k = 0; k < n; k++)
        p[k] = fx_val(k), g[k] = fx_val(k + 11);
    ck_assert_int_eq(cz_executor_bind_buffers(ex, p, g, n, &err), CZ_OK);
    ck_assert_msg(cz_executor_step(ex, &err) == CZ_OK, "%s", err.message);
    cz_executor_free(ex);
    cz_exec_config cfg = CZ_EXEC_CONFIG_INIT;
    cfg.comm = "self";
    int bad[] = {0, CZ_EXEC_CONFIG_VERSION + 1};
    for (int i = 0; i < 2; i++) {
        cfg.version = bad[i];
        ex = NULL;
        ck_assert_int_eq(cz_executor_create_from_plan(&ex, plan, &cfg, &err), CZ_EUNSUPPORTED);
        ck_assert_ptr_null(ex);
        expect_refused(&err, "cz_exec_config", bad[i], CZ_EXEC_CONFIG_VERSION);
    }
    free(p);
    free(g);
    cz_plan_free(plan);
}
END_TEST

START_TEST(nested_init_macros)
{
    /* Each optimizer's INIT macro is the value cz_exec_config_init writes. */
    cz_exec_config d;
    cz_exec_config_init(&d);
    static const cz_muon_config muon = CZ_MUON_CONFIG_INIT;
    static const cz_adamw_config adamw = CZ_ADAMW_CONFIG_INIT;
    static const cz_soap_config soap = CZ_SOAP_CONFIG_INIT;
    static const cz_shampoo_config shampoo = CZ_SHAMPOO_CONFIG_INIT;
    /* Muon's holds a string (the coefficients' name: equal text, not an equal pointer, since
     * a build need not merge string literals across objects; ASan's does not) and padding
     * after its last field: compared field by field. The others are 4-byte fields only. */
    ck_assert_int_eq(d.muon.version, muon.version);
    ck_assert_float_eq(d.muon.momentum, muon.momentum);
    ck_assert_int_eq(d.muon.nesterov, muon.nesterov);
    ck_assert_int_eq(d.muon.ns_steps, muon.ns_steps);
    ck_assert_str_eq(d.muon.ns_coeffs, muon.ns_coeffs);
    ck_assert_float_eq(d.muon.ns_eps, muon.ns_eps);
    ck_assert_float_eq(d.muon.scale_coeff, muon.scale_coeff);
    ck_assert_int_eq(d.muon.scaling, muon.scaling);
    ck_assert_int_eq(memcmp(&d.adamw, &adamw, sizeof adamw), 0);
    ck_assert_int_eq(memcmp(&d.soap, &soap, sizeof soap), 0);
    ck_assert_int_eq(memcmp(&d.shampoo, &shampoo, sizeof shampoo), 0);
    static const cz_normuon_config normuon = CZ_NORMUON_CONFIG_INIT;
    ck_assert_int_eq(memcmp(&d.normuon, &normuon, sizeof normuon), 0);
    ck_assert_float_eq(d.lr, CZ_EXEC_LR_DEFAULT);
    ck_assert_float_eq(d.weight_decay, 0.01f);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("config_versions");
    TCase *tc = tcase_create("config_versions");
    tcase_add_test(tc, old_versions_read);
    tcase_add_test(tc, lr_zero_by_version);
    tcase_add_test(tc, current_version_read);
    tcase_add_test(tc, version_7_read);
    tcase_add_test(tc, version_8_read);
    tcase_add_test(tc, versions_refused);
    tcase_add_test(tc, create_takes_every_version);
    tcase_add_test(tc, nested_init_macros);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
