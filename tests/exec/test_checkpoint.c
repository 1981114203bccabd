/* Optimizer-state checkpoints on one process: a save/load round trip resumes bit for bit and
 * restores the step count, TP-sharded state comes back whole (a checkpoint saved at tp = 2 is
 * read back by hand and loaded at tp = 1), and every damaged or foreign file is refused with
 * its name and the tensor at fault, leaving the executor's state untouched. */
#include "canzona_exec.h"
#include "cz_exec_testing.h"
#include "cz_format.h"
#include "exec_fixture.h"

#include <check.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static const fx_param PARAMS[] = {
    {"emb", 2, 8, 4, 0, CZ_KIND_ELEMENTWISE, 0, 0, {0}},
    {"qkv", 2, 6, 4, 0, CZ_KIND_MATRIX, 0, 2, {2, 4}},
    {"proj", 2, 4, 6, 1, CZ_KIND_MATRIX, 0, 0, {0}},
    {"norm", 1, 4, 1, -1, CZ_KIND_ELEMENTWISE, 0, 0, {0}},
};
#define NP ((int)(sizeof PARAMS / sizeof PARAMS[0]))

typedef struct rig {
    cz_plan *pl;
    cz_executor *ex;
    float *P, *G;
    size_t n;
} rig;

/* Opens an executor over a one-process plan of ps with the matrix optimizer opt; cfg (NULL =
 * defaults) carries its settings. */
static void rig_open_with(rig *r, const fx_param *ps, int np, cz_optimizer opt,
                          const cz_exec_config *with)
{
    cz_exec_config cfg;
    cz_exec_config_init(&cfg);
    if (with)
        cfg = *with;
    cfg.comm = "self";
    r->pl = fx_plan(ps, np, 1);
    r->pl->settings.optimizer = opt;
    if (opt != CZ_OPTIM_MUON) {
        /* Refreshes every 2 steps; SOAP leaves sides above 4 unrotated (proj's 6 columns). */
        r->pl->settings.precondition_frequency = 2;
        r->pl->settings.max_precond_dim = 4;
    }
    cz_error err;
    ck_assert_msg(cz_executor_create_from_plan(&r->ex, r->pl, &cfg, &err) == 0, "%s", err.message);
    r->n = cz_executor_buffer_numel(r->ex);
    r->P = calloc(r->n, sizeof(float));
    r->G = calloc(r->n, sizeof(float));
    for (size_t k = 0; k < r->n; k++)
        r->P[k] = 0.5f * fx_val(k);
    ck_assert_int_eq(cz_executor_bind_buffers(r->ex, r->P, r->G, r->n, NULL), 0);
}

static void rig_open(rig *r, const fx_param *ps, int np)
{
    rig_open_with(r, ps, np, CZ_OPTIM_MUON, NULL);
}

static void rig_step(rig *r, uint64_t salt)
{
    cz_error err;
    for (size_t k = 0; k < r->n; k++)
        r->G[k] = 0.1f * fx_val(salt * 100003 + k);
    ck_assert_msg(cz_executor_step(r->ex, &err) == 0, "%s", err.message);
}

static void rig_close(rig *r)
{
    cz_executor_free(r->ex);
    cz_plan_free(r->pl);
    free(r->P);
    free(r->G);
}

static char g_dir[64];

static const char *tmp_path(const char *name)
{
    static char buf[4][128];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", g_dir, name);
    return buf[k];
}

static size_t read_file(const char *path, char **out)
{
    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    *out = malloc((size_t)n + 1);
    ck_assert_int_eq(fread(*out, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    return (size_t)n;
}

static void write_file(const char *path, const char *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(fwrite(data, 1, n, f), n);
    fclose(f);
}

/* The executor's state through its optimizers' table (optimizer.h): tensor k of parameter i
 * (a Muon momentum by its part), an AdamW moment (k 0: exp_avg, 1: exp_avg_sq), Shampoo's
 * weight-decay part of its momentum. */
static float *mat_buf(const cz_executor *ex, int i, int64_t k, const cz_block *part)
{
    cz_optim *o = (cz_optim *)&ex->matrix_opt;
    return o->ops->state_buffer(o, i, k, part);
}

static float *adam_buf(const cz_executor *ex, int i, int k)
{
    cz_optim *o = (cz_optim *)&ex->elem_opt;
    return o->ops->state_buffer(o, i, k, NULL);
}

static float *decay_buf(const cz_executor *ex, int i)
{
    cz_optim *o = (cz_optim *)&ex->matrix_opt;
    return o->ops->state_addend ? o->ops->state_addend(o, i) : NULL;
}

/* Every state tensor of the executor, in one array, to compare before and after. */
static size_t state_copy(const cz_executor *ex, float *out)
{
    size_t k = 0;
    for (size_t i = 0; i < ex->plan->nparams; i++) {
        const cz_plan_param *p = &ex->plan->params[i];
        int64_t full = p->def.shape[0] * p->def.shape[1];
        cz_block whole = {0, 0, p->def.shape[0], p->def.shape[1]};
        const float *mom = mat_buf(ex, (int)i, 0, &whole);
        if (mom)
            for (int64_t j = 0; j < full; j++)
                out[k++] = mom[j];
        if (adam_buf(ex, (int)i, 0))
            for (int64_t j = 0; j < p->numel; j++) {
                out[k++] = adam_buf(ex, (int)i, 0)[j];
                out[k++] = adam_buf(ex, (int)i, 1)[j];
            }
    }
    return k;
}

START_TEST(round_trip_resumes_exactly)
{
    rig a, b;
    rig_open(&a, PARAMS, NP);
    for (int s = 0; s < 3; s++)
        rig_step(&a, (uint64_t)s);
    cz_error err;
    ck_assert_msg(cz_executor_save_state(a.ex, tmp_path("s.safetensors"), &err) == 0, "%s",
                  err.message);
    rig_open(&b, PARAMS, NP);
    memcpy(b.P, a.P, a.n * sizeof(float));
    ck_assert_msg(cz_executor_load_state(b.ex, tmp_path("s.safetensors"), &err) == 0, "%s",
                  err.message);
    ck_assert_int_eq(b.ex->steps, 3);
    float sa[256], sb[256];
    size_t na = state_copy(a.ex, sa), nb = state_copy(b.ex, sb);
    ck_assert_uint_eq(na, nb);
    ck_assert(na > 0);
    ck_assert_mem_eq(sa, sb, na * sizeof(float));
    /* The next steps (AdamW bias correction included) continue as if never interrupted. */
    for (int s = 3; s < 5; s++) {
        rig_step(&a, (uint64_t)s);
        rig_step(&b, (uint64_t)s);
    }
    ck_assert_mem_eq(a.P, b.P, a.n * sizeof(float));
    rig_close(&a);
    rig_close(&b);
}
END_TEST

/* The header as the file holds it, and the offset of its data. */
static char *header_of(const char *data, size_t *data_off)
{
    uint64_t n = 0;
    for (int i = 0; i < 8; i++)
        n |= (uint64_t)(unsigned char)data[i] << (8 * i);
    char *h = calloc(1, n + 1);
    memcpy(h, data + 8, n);
    *data_off = 8 + n;
    return h;
}

START_TEST(file_is_safetensors_with_full_tensors)
{
    rig a;
    rig_open(&a, PARAMS, NP);
    rig_step(&a, 1);
    cz_error err;
    ck_assert_msg(cz_executor_save_state(a.ex, tmp_path("f.safetensors"), &err) == 0, "%s",
                  err.message);
    char *data;
    size_t len = read_file(tmp_path("f.safetensors"), &data), off;
    char *h = header_of(data, &off);
    ck_assert_uint_eq(off % 8, 0);
    json_error_t je;
    json_t *root = json_loads(h, 0, &je);
    ck_assert_ptr_nonnull(root);
    /* 2 momenta + 2x2 moments + metadata. */
    ck_assert_uint_eq(json_object_size(root), 7);
    ck_assert_str_eq(
        json_string_value(json_object_get(json_object_get(root, "__metadata__"), "step")), "1");
    json_t *m = json_object_get(root, "qkv.momentum");
    ck_assert_int_eq(json_integer_value(json_array_get(json_object_get(m, "shape"), 0)), 6);
    ck_assert_int_eq(json_integer_value(json_array_get(json_object_get(m, "shape"), 1)), 4);
    json_t *o = json_object_get(m, "data_offsets");
    size_t b = (size_t)json_integer_value(json_array_get(o, 0));
    cz_block whole = {0, 0, 6, 4};
    ck_assert_mem_eq(data + off + b, mat_buf(a.ex, 1, 0, &whole), 24 * sizeof(float));
    json_t *v = json_object_get(root, "norm.exp_avg_sq");
    ck_assert_int_eq(json_array_size(json_object_get(v, "shape")), 1);
    o = json_object_get(v, "data_offsets");
    b = (size_t)json_integer_value(json_array_get(o, 0));
    ck_assert_mem_eq(data + off + b, adam_buf(a.ex, 3, 1), 4 * sizeof(float));
    ck_assert_uint_eq((size_t)json_integer_value(json_array_get(o, 1)) + off <= len, 1);
    json_decref(root);
    free(h);
    free(data);
    rig_close(&a);
}
END_TEST

/* Rewrites the saved file's header with one edit (a textual replacement) and expects load to
 * fail with code and a message naming the file and containing want; the state is untouched. */
static void refused(const char *from, const char *to, int code, const char *want)
{
    rig a;
    rig_open(&a, PARAMS, NP);
    rig_step(&a, 1);
    cz_error err;
    ck_assert_int_eq(cz_executor_save_state(a.ex, tmp_path("ok.safetensors"), &err), 0);
    char *data;
    size_t len = read_file(tmp_path("ok.safetensors"), &data), off;
    char *h = header_of(data, &off);
    char *at = strstr(h, from);
    ck_assert_msg(at != NULL, "'%s' not in the header", from);
    /* Same length keeps the data offsets valid. */
    ck_assert_uint_eq(strlen(from), strlen(to));
    memcpy(data + 8 + (at - h), to, strlen(to));
    write_file(tmp_path("bad.safetensors"), data, len);
    float before[256], after[256];
    size_t n = state_copy(a.ex, before);
    int rc = cz_executor_load_state(a.ex, tmp_path("bad.safetensors"), &err);
    ck_assert_int_eq(rc, code);
    ck_assert_msg(strstr(err.message, "bad.safetensors") && strstr(err.message, want), "%s",
                  err.message);
    ck_assert_uint_eq(state_copy(a.ex, after), n);
    ck_assert_mem_eq(before, after, n * sizeof(float));
    ck_assert_int_eq(a.ex->steps, 1);
    free(h);
    free(data);
    rig_close(&a);
}

START_TEST(foreign_or_damaged_files_refused)
{
    refused("qkv.momentum", "qkv.momentux", CZ_EMISMATCH, "no tensor 'qkv.momentum'");
    refused("\"F32\"", "\"F16\"", CZ_EINVALID, "dtype F16, expected F32");
    refused("canzona.optim/1", "canzona.optim/2", CZ_EINVALID, "__metadata__.format");
    refused("\"step\":\"1\"", "\"step\":\"x\"", CZ_EINVALID, "__metadata__.step");
    refused("[6,4]", "[4,6]", CZ_EMISMATCH, "shape differs from the plan's [6, 4]");
    refused("[0,", "[4,", CZ_EINVALID, "data_offsets");
}
END_TEST

START_TEST(truncated_missing_and_extra_refused)
{
    rig a;
    rig_open(&a, PARAMS, NP);
    rig_step(&a, 1);
    cz_error err;
    ck_assert_int_eq(cz_executor_save_state(a.ex, tmp_path("t.safetensors"), &err), 0);
    char *data;
    size_t len = read_file(tmp_path("t.safetensors"), &data);
    write_file(tmp_path("short.safetensors"), data, len - 4);
    ck_assert_int_eq(cz_executor_load_state(a.ex, tmp_path("short.safetensors"), &err),
                     CZ_EINVALID);
    ck_assert_msg(strstr(err.message, "data_offsets"), "%s", err.message);
    write_file(tmp_path("tiny.safetensors"), data, 5);
    ck_assert_int_eq(cz_executor_load_state(a.ex, tmp_path("tiny.safetensors"), &err), CZ_EINVALID);
    ck_assert_msg(strstr(err.message, "not a safetensors file"), "%s", err.message);
    ck_assert_int_eq(cz_executor_load_state(a.ex, tmp_path("none.safetensors"), &err), CZ_EIO);
    ck_assert_msg(strstr(err.message, "none.safetensors"), "%s", err.message);
    free(data);

    /* A checkpoint of a model with one more parameter holds a tensor this plan does not know. */
    fx_param more[NP + 1];
    memcpy(more, PARAMS, sizeof PARAMS);
    more[NP] = (fx_param){"extra", 1, 4, 1, -1, CZ_KIND_ELEMENTWISE, 0, 0, {0}};
    rig b;
    rig_open(&b, more, NP + 1);
    rig_step(&b, 1);
    ck_assert_int_eq(cz_executor_save_state(b.ex, tmp_path("more.safetensors"), &err), 0);
    ck_assert_int_eq(cz_executor_load_state(a.ex, tmp_path("more.safetensors"), &err),
                     CZ_EMISMATCH);
    ck_assert_msg(strstr(err.message, "'extra.exp_avg"), "%s", err.message);
    /* ... and the other way round a tensor is missing. */
    ck_assert_int_eq(cz_executor_load_state(b.ex, tmp_path("t.safetensors"), &err), CZ_EMISMATCH);
    ck_assert_msg(strstr(err.message, "no tensor 'extra.exp_avg'"), "%s", err.message);
    rig_close(&a);
    rig_close(&b);
}
END_TEST

START_TEST(failed_save_keeps_the_old_file)
{
    rig a;
    rig_open(&a, PARAMS, NP);
    rig_step(&a, 1);
    cz_error err;
    const char *path = tmp_path("keep.safetensors");
    ck_assert_int_eq(cz_executor_save_state(a.ex, path, &err), 0);
    char *old;
    size_t n = read_file(path, &old);
    rig_step(&a, 2);
    ck_assert_int_eq(chmod(path, 0444), 0);
    ck_assert_int_ne(cz_executor_save_state(a.ex, path, &err), 0);
    ck_assert_msg(strstr(err.message, "keep.safetensors"), "%s", err.message);
    char *now;
    ck_assert_uint_eq(read_file(path, &now), n);
    ck_assert_mem_eq(old, now, n);
    ck_assert_int_eq(chmod(path, 0644), 0);
    /* Replaced whole once it may be. */
    ck_assert_int_eq(cz_executor_save_state(a.ex, path, &err), 0);
    free(now);
    n = read_file(path, &now);
    ck_assert(strstr(now + 8, "\"step\":\"2\"") != NULL);
    free(old);
    free(now);
    rig_close(&a);
}
END_TEST

START_TEST(refused_during_async_step)
{
    rig a;
    rig_open(&a, PARAMS, NP);
    cz_error err;
    ck_assert_int_eq(cz_executor_step_async(a.ex, &err), 0);
    ck_assert_int_eq(cz_executor_save_state(a.ex, tmp_path("x.safetensors"), &err), CZ_EINVALID);
    ck_assert_int_eq(cz_executor_load_state(a.ex, tmp_path("x.safetensors"), &err), CZ_EINVALID);
    ck_assert_int_eq(cz_executor_wait(a.ex, &err), 0);
    ck_assert_int_eq(cz_executor_save_state(NULL, "x", &err), CZ_EINVALID);
    rig_close(&a);
}
END_TEST

/* ---- Shampoo and SOAP ---- */

/* True when this build's cpu backend runs Shampoo and SOAP (it has LAPACKE). */
static bool have_linalg(void)
{
    cz_compute c;
    cz_error err;
    ck_assert_int_eq(cz__compute_open(&c, "cpu", &err), 0);
    bool has = cz__compute_has_linalg(&c, NULL);
    cz__compute_close(&c);
    return has;
}

/* Shampoo with every optional buffer kept (filtered gradient, grafting, momentum) and sides
 * above 4 cut into tiles: proj (4 x 6) is two tiles, qkv's two blocks one each. Without
 * weight decay: the part of the momentum that the weight decay feeds stays zero, so the file's
 * momentum is the host's bit for bit (shampoo_momentum_with_weight_decay covers the rest). */
static void shampoo_config(cz_exec_config *cfg, int max_dim)
{
    cz_exec_config_init(cfg);
    cfg->shampoo.max_dim = max_dim;
    cfg->shampoo.momentum = 0.5f;
    cfg->shampoo.grafting = CZ_GRAFT_ADAM;
    cfg->weight_decay = 0.0f;
}

/* Bytes of the weight-decay part of Shampoo's momentum this process keeps (a checkpoint moves
 * it besides the file's tensors). */
static size_t decay_bytes(const cz_executor *ex)
{
    size_t n = 0;
    for (size_t i = 0; i < ex->plan->nparams; i++)
        if (decay_buf(ex, (int)i))
            n += (size_t)ex->plan->params[i].numel * sizeof(float);
    return n;
}

/* Every matrix-state tensor of the executor (Shampoo's or SOAP's) and its AdamW moments,
 * back to back in out (which has room for max floats); returns the count. */
static size_t matrix_state_copy(const cz_executor *ex, float *out, size_t max)
{
    size_t k = 0;
    cz_state_tensor t[64];
    for (size_t i = 0; i < ex->plan->nparams; i++) {
        const cz_plan_param *p = &ex->plan->params[i];
        if (adam_buf(ex, (int)i, 0))
            for (int64_t j = 0; j < p->numel && k + 2 <= max; j++) {
                out[k++] = adam_buf(ex, (int)i, 0)[j];
                out[k++] = adam_buf(ex, (int)i, 1)[j];
            }
        if (p->def.kind != CZ_KIND_MATRIX)
            continue;
        const cz_optim *o = &ex->matrix_opt;
        int64_t n = o->ops->state_tensors(o, p, t, 64);
        ck_assert_int_le(n, 64);
        for (int64_t j = 0; j < n; j++) {
            const float *b = mat_buf(ex, (int)i, j, NULL);
            ck_assert_ptr_nonnull(b);
            for (int64_t e = 0; e < t[j].rows * t[j].cols && k < max; e++)
                out[k++] = b[e];
        }
    }
    ck_assert_uint_lt(k, max);
    return k;
}

/* Runs `before` steps, saves, loads into a fresh executor and runs both to `after` steps
 * (across preconditioner refreshes): the state after the load and the final parameters equal
 * bit for bit, and a third executor that continues without the state ends elsewhere. */
static void resumes_exactly(cz_optimizer opt, const cz_exec_config *cfg, int before, int after)
{
    rig a, b, c;
    rig_open_with(&a, PARAMS, NP, opt, cfg);
    for (int s = 0; s < before; s++)
        rig_step(&a, (uint64_t)s);
    cz_error err;
    ck_assert_msg(cz_executor_save_state(a.ex, tmp_path("m.safetensors"), &err) == 0, "%s",
                  err.message);
    rig_open_with(&b, PARAMS, NP, opt, cfg);
    rig_open_with(&c, PARAMS, NP, opt, cfg);
    memcpy(b.P, a.P, a.n * sizeof(float));
    memcpy(c.P, a.P, a.n * sizeof(float));
    c.ex->steps = before; /* the control differs only in the state */
    ck_assert_msg(cz_executor_load_state(b.ex, tmp_path("m.safetensors"), &err) == 0, "%s",
                  err.message);
    ck_assert_int_eq(b.ex->steps, before);
    static float sa[4096], sb[4096];
    size_t na = matrix_state_copy(a.ex, sa, 4096), nb = matrix_state_copy(b.ex, sb, 4096);
    ck_assert_uint_eq(na, nb);
    ck_assert_mem_eq(sa, sb, na * sizeof(float));
    for (int s = before; s < after; s++) {
        rig_step(&a, (uint64_t)s);
        rig_step(&b, (uint64_t)s);
        rig_step(&c, (uint64_t)s);
    }
    ck_assert_mem_eq(a.P, b.P, a.n * sizeof(float));
    double diff = 0.0;
    for (size_t k = 0; k < a.n; k++)
        diff = fmax(diff, fabs((double)a.P[k] - (double)c.P[k]));
    ck_assert_msg(diff > 1e-4, "continuing without the state moved by only %g", diff);
    rig_close(&a);
    rig_close(&b);
    rig_close(&c);
}

START_TEST(shampoo_round_trip_resumes_exactly)
{
    if (!have_linalg())
        return;
    cz_exec_config cfg;
    shampoo_config(&cfg, 4);
    /* Saved after step 3 (inverse roots from step 2), refreshed again at 4 and 6 after the
     * load: the inverse roots must come from the file, not from a refresh. */
    resumes_exactly(CZ_OPTIM_SHAMPOO, &cfg, 3, 7);
    /* The defaults (AdaGrad grafting, no momentum) keep fewer buffers. */
    cz_exec_config_init(&cfg);
    resumes_exactly(CZ_OPTIM_SHAMPOO, &cfg, 3, 6);
}
END_TEST

START_TEST(soap_round_trip_resumes_exactly)
{
    if (!have_linalg())
        return;
    /* Saved after the initialising call and two updates (a refresh after update 2), resumed
     * across the refreshes after updates 4 and 6. */
    resumes_exactly(CZ_OPTIM_SOAP, NULL, 3, 8);
    /* Saved right after the initialising call: the bases exist, the moments are zero. */
    resumes_exactly(CZ_OPTIM_SOAP, NULL, 1, 5);
}
END_TEST

/* The tensor `key` of the header: its shape must be [rows, cols] and its data equal buf. */
static void expect_tensor(json_t *root, const char *data, size_t off, const char *key, int64_t rows,
                          int64_t cols, const float *buf)
{
    json_t *t = json_object_get(root, key);
    ck_assert_msg(t != NULL, "no tensor '%s'", key);
    json_t *shape = json_object_get(t, "shape");
    ck_assert_int_eq(json_array_size(shape), 2);
    ck_assert_int_eq(json_integer_value(json_array_get(shape, 0)), rows);
    ck_assert_int_eq(json_integer_value(json_array_get(shape, 1)), cols);
    json_t *o = json_object_get(t, "data_offsets");
    size_t b = (size_t)json_integer_value(json_array_get(o, 0));
    ck_assert_uint_eq((size_t)json_integer_value(json_array_get(o, 1)) - b,
                      (size_t)(rows * cols) * sizeof(float));
    ck_assert_mem_eq(data + off + b, buf, (size_t)(rows * cols) * sizeof(float));
}

START_TEST(shampoo_and_soap_tensor_names)
{
    if (!have_linalg())
        return;
    cz_exec_config cfg;
    shampoo_config(&cfg, 4);
    rig a;
    rig_open_with(&a, PARAMS, NP, CZ_OPTIM_SHAMPOO, &cfg);
    for (int s = 0; s < 3; s++)
        rig_step(&a, (uint64_t)s);
    cz_error err;
    ck_assert_int_eq(cz_executor_save_state(a.ex, tmp_path("n.safetensors"), &err), 0);
    char *data;
    size_t off;
    read_file(tmp_path("n.safetensors"), &data);
    char *h = header_of(data, &off);
    json_t *root = json_loads(h, 0, NULL);
    ck_assert_ptr_nonnull(root);
    /* qkv: blocks of 2 and 4 rows (2 tiles); proj 4 x 6 at max_dim 4: tiles at columns 0 and
     * 4. 7 tensors per tile, 4 AdamW moments, the metadata. */
    ck_assert_uint_eq(json_object_size(root), 4 * 7 + 4 + 1);
    expect_tensor(root, data, off, "qkv.shampoo.0_0.factor_left", 2, 2, mat_buf(a.ex, 1, 0, NULL));
    expect_tensor(root, data, off, "qkv.shampoo.2_0.inv_root_right", 4, 4,
                  mat_buf(a.ex, 1, 7 + 3, NULL));
    expect_tensor(root, data, off, "proj.shampoo.0_4.factor_right", 2, 2,
                  mat_buf(a.ex, 2, 7 + 1, NULL));
    expect_tensor(root, data, off, "proj.shampoo.0_4.momentum", 4, 2,
                  mat_buf(a.ex, 2, 7 + 6, NULL));
    expect_tensor(root, data, off, "proj.shampoo.0_0.filtered_grad", 4, 4,
                  mat_buf(a.ex, 2, 5, NULL));
    expect_tensor(root, data, off, "proj.shampoo.0_0.grafting", 4, 4, mat_buf(a.ex, 2, 4, NULL));
    json_decref(root);
    free(h);
    free(data);
    rig_close(&a);

    rig_open_with(&a, PARAMS, NP, CZ_OPTIM_SOAP, NULL);
    for (int s = 0; s < 3; s++)
        rig_step(&a, (uint64_t)s);
    ck_assert_int_eq(cz_executor_save_state(a.ex, tmp_path("n.safetensors"), &err), 0);
    read_file(tmp_path("n.safetensors"), &data);
    h = header_of(data, &off);
    root = json_loads(h, 0, NULL);
    /* qkv's two blocks: both sides <= 4, 6 tensors each; proj: its 6 columns unrotated, 4. */
    ck_assert_uint_eq(json_object_size(root), 2 * 6 + 4 + 4 + 1);
    expect_tensor(root, data, off, "qkv.soap.2_0.Q_left", 4, 4, mat_buf(a.ex, 1, 6 + 1, NULL));
    expect_tensor(root, data, off, "qkv.soap.0_0.GG_right", 4, 4, mat_buf(a.ex, 1, 2, NULL));
    expect_tensor(root, data, off, "proj.soap.0_0.Q_left", 4, 4, mat_buf(a.ex, 2, 1, NULL));
    expect_tensor(root, data, off, "proj.soap.0_0.exp_avg_sq", 4, 6, mat_buf(a.ex, 2, 3, NULL));
    ck_assert_ptr_null(json_object_get(root, "proj.soap.0_0.Q_right"));
    json_decref(root);
    free(h);
    free(data);
    rig_close(&a);
}
END_TEST

/* Saves a checkpoint of (from_opt, from_cfg), loads it into an executor of (to_opt, to_cfg):
 * refused with code and a message containing want, the target's state untouched. */
/* ---- what a header or the data may not claim ---- */

/* A checkpoint file rebuilt from a header (serialized as our writer does, padded to 8 bytes)
 * and data bytes. */
static void write_checkpoint(const char *path, json_t *header, const char *data, size_t n)
{
    char *h = json_dumps(header, JSON_COMPACT | JSON_SORT_KEYS);
    ck_assert_ptr_nonnull(h);
    size_t hl = strlen(h), padded = (hl + 7) / 8 * 8;
    char *f = malloc(8 + padded + n);
    for (int k = 0; k < 8; k++)
        f[k] = (char)((uint64_t)padded >> (8 * k) & 0xff);
    memcpy(f + 8, h, hl);
    memset(f + 8 + hl, ' ', padded - hl);
    memcpy(f + 8 + padded, data, n);
    write_file(path, f, 8 + padded + n);
    free(f);
    free(h);
}

/* A saved checkpoint of a's state: its header (parsed) and its data section. */
typedef struct saved {
    json_t *header;
    char *file;
    size_t len, off; /* the data starts at file + off */
} saved;

static void save_and_parse(rig *a, saved *s)
{
    cz_error err;
    ck_assert_msg(cz_executor_save_state(a->ex, tmp_path("orig.safetensors"), &err) == 0, "%s",
                  err.message);
    s->len = read_file(tmp_path("orig.safetensors"), &s->file);
    char *h = header_of(s->file, &s->off);
    json_error_t je;
    s->header = json_loads(h, 0, &je);
    ck_assert_ptr_nonnull(s->header);
    free(h);
}

static void saved_free(saved *s)
{
    json_decref(s->header);
    free(s->file);
}

/* Every state tensor of a, whatever its optimizer. */
static size_t any_state_copy(const cz_executor *ex, float *out, size_t max)
{
    if (ex->matrix_opt.ops->id != CZ_OPTIM_MUON)
        return matrix_state_copy(ex, out, max);
    ck_assert_uint_le(256, max);
    return state_copy(ex, out);
}

/* Loading path into a must fail with code and a message naming the file and containing want,
 * and leave a's state and step count as they were. */
static void load_refused(rig *a, const char *path, int code, const char *want)
{
    static float before[4096], after[4096];
    size_t n = any_state_copy(a->ex, before, 4096);
    int64_t steps = a->ex->steps;
    cz_error err;
    int rc = cz_executor_load_state(a->ex, path, &err);
    ck_assert_msg(rc == code, "rc %d (want %d): %s", rc, code, rc ? err.message : "loaded");
    ck_assert_msg(strstr(err.message, path) && strstr(err.message, want), "%s", err.message);
    ck_assert_uint_eq(any_state_copy(a->ex, after, 4096), n);
    ck_assert_mem_eq(before, after, n * sizeof(float));
    ck_assert_int_eq(a->ex->steps, steps);
}

/* The step count with __metadata__.step set to text. */
static int load_step(rig *a, saved *s, const char *text, cz_error *err)
{
    json_object_set_new(json_object_get(s->header, "__metadata__"), "step", json_string(text));
    write_checkpoint(tmp_path("step.safetensors"), s->header, s->file + s->off, s->len - s->off);
    return cz_executor_load_state(a->ex, tmp_path("step.safetensors"), err);
}

START_TEST(step_count_digits_in_range)
{
    rig a;
    rig_open(&a, PARAMS, NP);
    rig_step(&a, 1);
    saved s;
    save_and_parse(&a, &s);
    /* Past int64, int64's largest (a step after it overflows), signs, spaces, other bases. */
    static const char *const bad[] = {"9223372036854775807",
                                      "99999999999999999999999",
                                      "9007199254740993",
                                      "+5",
                                      " 5",
                                      "5 ",
                                      "-1",
                                      "0x5",
                                      "",
                                      "1e3"};
    cz_error err;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        load_step(&a, &s, bad[i], &err);
        load_refused(&a, tmp_path("step.safetensors"), CZ_EINVALID, "__metadata__.step");
    }
    /* The largest count a double holds exactly still loads, and a step after it runs. */
    ck_assert_msg(load_step(&a, &s, "9007199254740992", &err) == 0, "%s", err.message);
    ck_assert_int_eq(a.ex->steps, (int64_t)1 << 53);
    rig_step(&a, 2);
    ck_assert_int_eq(a.ex->steps, ((int64_t)1 << 53) + 1);
    ck_assert_msg(load_step(&a, &s, "07", &err) == 0, "%s", err.message);
    ck_assert_int_eq(a.ex->steps, 7);
    saved_free(&s);
    rig_close(&a);
}
END_TEST

/* Sets element k of tensor key in the saved data to x. */
static void poke(saved *s, const char *key, int64_t k, float x)
{
    json_t *o = json_object_get(json_object_get(s->header, key), "data_offsets");
    ck_assert_msg(o != NULL, "no tensor %s", key);
    size_t b = (size_t)json_integer_value(json_array_get(o, 0));
    memcpy(s->file + s->off + b + (size_t)k * sizeof x, &x, sizeof x);
}

/* A copy of s with element k of key set to x, loaded into a: refused naming the tensor. */
static void value_refused(rig *a, const saved *s, const char *key, int64_t k, float x,
                          const char *want)
{
    saved c = *s;
    c.file = malloc(s->len);
    memcpy(c.file, s->file, s->len);
    poke(&c, key, k, x);
    write_file(tmp_path("value.safetensors"), c.file, c.len);
    free(c.file);
    char msg[256];
    snprintf(msg, sizeof msg, "'%s' holds %s", key, want);
    load_refused(a, tmp_path("value.safetensors"), CZ_EINVALID, msg);
}

START_TEST(non_finite_or_impossible_state_refused)
{
    rig a;
    rig_open(&a, PARAMS, NP);
    rig_step(&a, 1);
    saved s;
    save_and_parse(&a, &s);
    value_refused(&a, &s, "qkv.momentum", 5, NAN, "a non-finite value (nan) at [1, 1]");
    value_refused(&a, &s, "emb.exp_avg", 0, INFINITY, "a non-finite value (inf) at [0, 0]");
    value_refused(&a, &s, "norm.exp_avg_sq", 2, -0.5f,
                  "a negative value in a sum of squares (-0.5) at [2, 0]");
    /* A first moment and a momentum may be negative. */
    poke(&s, "emb.exp_avg", 1, -3.0f);
    poke(&s, "proj.momentum", 1, -3.0f);
    write_file(tmp_path("neg.safetensors"), s.file, s.len);
    cz_error err;
    ck_assert_msg(cz_executor_load_state(a.ex, tmp_path("neg.safetensors"), &err) == 0, "%s",
                  err.message);
    saved_free(&s);
    rig_close(&a);
    if (!have_linalg())
        return;
    /* Shampoo: a factor's diagonal sums squares, so does the grafting accumulator; the
     * factor's off-diagonal elements may be negative. SOAP: its second moment. */
    cz_exec_config cfg;
    shampoo_config(&cfg, 4);
    cfg.shampoo.grafting = CZ_GRAFT_ADAGRAD;
    rig_open_with(&a, PARAMS, NP, CZ_OPTIM_SHAMPOO, &cfg);
    for (int t = 0; t < 3; t++)
        rig_step(&a, (uint64_t)t);
    save_and_parse(&a, &s);
    value_refused(&a, &s, "proj.shampoo.0_0.factor_left", 5, -1.0f,
                  "a negative diagonal value in a Gram factor");
    value_refused(&a, &s, "proj.shampoo.0_4.grafting", 3, -1e-3f,
                  "a negative value in a sum of squares");
    value_refused(&a, &s, "qkv.shampoo.0_0.inv_root_right", 0, NAN, "a non-finite value");
    poke(&s, "proj.shampoo.0_0.factor_left", 1, -1.0f);
    write_file(tmp_path("neg.safetensors"), s.file, s.len);
    ck_assert_msg(cz_executor_load_state(a.ex, tmp_path("neg.safetensors"), &err) == 0, "%s",
                  err.message);
    saved_free(&s);
    rig_close(&a);
    rig_open_with(&a, PARAMS, NP, CZ_OPTIM_SOAP, NULL);
    for (int t = 0; t < 3; t++)
        rig_step(&a, (uint64_t)t);
    save_and_parse(&a, &s);
    value_refused(&a, &s, "qkv.soap.0_0.exp_avg_sq", 0, -2.0f,
                  "a negative value in a sum of squares");
    value_refused(&a, &s, "qkv.soap.2_0.GG_left", 0, -2.0f, "a negative diagonal value");
    saved_free(&s);
    rig_close(&a);
}
END_TEST

START_TEST(header_that_lies_refused)
{
    rig a;
    rig_open(&a, PARAMS, NP);
    rig_step(&a, 1);
    saved s;
    save_and_parse(&a, &s);
    const char *bad = tmp_path("lies.safetensors");
    char *data = s.file + s.off;
    size_t n = s.len - s.off;
    /* emb's two moments (32 floats each) made to share their bytes. */
    json_t *h = json_deep_copy(s.header);
    json_t *m = json_object_get(json_object_get(h, "emb.exp_avg"), "data_offsets");
    json_object_set(json_object_get(h, "emb.exp_avg_sq"), "data_offsets", m);
    write_checkpoint(bad, h, data, n);
    load_refused(&a, bad, CZ_EINVALID, "without gaps or overlaps");
    json_decref(h);
    /* Every tensor 2 bytes later (unaligned), the data 2 bytes longer. */
    h = json_deep_copy(s.header);
    const char *k;
    json_t *v;
    json_object_foreach(h, k, v)
    {
        json_t *o = json_object_get(v, "data_offsets");
        for (size_t j = 0; o && j < 2; j++)
            json_array_set_new(o, j, json_integer(json_integer_value(json_array_get(o, j)) + 2));
    }
    char *shifted = calloc(1, n + 2);
    memcpy(shifted + 2, data, n);
    write_checkpoint(bad, h, shifted, n + 2);
    load_refused(&a, bad, CZ_EINVALID, "begin at byte 2 of the data, but the header ends at 0");
    free(shifted);
    json_decref(h);
    /* Bytes after the last tensor. */
    char *longer = calloc(1, n + 8);
    memcpy(longer, data, n);
    write_checkpoint(bad, s.header, longer, n + 8);
    load_refused(&a, bad, CZ_EINVALID, "8 bytes follow the last tensor's data");
    free(longer);
    /* A member written twice: the file holds it with other offsets first. */
    char *text = json_dumps(s.header, JSON_COMPACT | JSON_SORT_KEYS);
    char *at = strstr(text, "\"norm.exp_avg\"");
    ck_assert_ptr_nonnull(at);
    size_t hl = strlen(text), pre = (size_t)(at - text);
    const char *dup = "\"norm.exp_avg\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},";
    size_t dl = strlen(dup), padded = (hl + dl + 7) / 8 * 8;
    char *f = malloc(8 + padded + n);
    for (int b = 0; b < 8; b++)
        f[b] = (char)((uint64_t)padded >> (8 * b) & 0xff);
    memcpy(f + 8, text, pre);
    memcpy(f + 8 + pre, dup, dl);
    memcpy(f + 8 + pre + dl, at, hl - pre);
    memset(f + 8 + hl + dl, ' ', padded - hl - dl);
    memcpy(f + 8 + padded, data, n);
    write_file(bad, f, 8 + padded + n);
    load_refused(&a, bad, CZ_EPARSE, "duplicate");
    free(f);
    free(text);
    /* A tensor entry with a member safetensors does not have. */
    h = json_deep_copy(s.header);
    json_object_set_new(json_object_get(h, "qkv.momentum"), "scale", json_real(2.0));
    write_checkpoint(bad, h, data, n);
    load_refused(&a, bad, CZ_EINVALID, "unknown member 'scale'");
    json_decref(h);
    saved_free(&s);
    rig_close(&a);
}
END_TEST

/* Distributed Shampoo adds the weight decay to the direction before the momentum; the
 * executor keeps that part of the momentum beside the parameters (cz__shampoo_decay_momentum)
 * and the file holds the whole, as the reference's momentum: host part + weight-decay part.
 * A load puts the whole into the host part and restarts the other from zero, the same sum:
 * the run continues as the uninterrupted one up to rounding (the sum is formed in another
 * order), while a run without the state ends elsewhere. */
START_TEST(shampoo_momentum_with_weight_decay)
{
    if (!have_linalg())
        return;
    for (int nesterov = 0; nesterov < 2; nesterov++) {
        cz_exec_config cfg;
        shampoo_config(&cfg, 4);
        cfg.weight_decay = 0.05f;
        cfg.shampoo.nesterov = nesterov;
        rig a, b, c;
        rig_open_with(&a, PARAMS, NP, CZ_OPTIM_SHAMPOO, &cfg);
        for (int s = 0; s < 3; s++)
            rig_step(&a, (uint64_t)s);
        cz_error err;
        ck_assert_int_eq(cz_executor_save_state(a.ex, tmp_path("wd.safetensors"), &err), 0);
        /* proj (param 2, 4 x 6, not TP-split here) tile 0_4: host momentum + decay part. */
        saved sv;
        sv.len = read_file(tmp_path("wd.safetensors"), &sv.file);
        char *h = header_of(sv.file, &sv.off);
        sv.header = json_loads(h, 0, NULL);
        free(h);
        json_t *o = json_object_get(json_object_get(sv.header, "proj.shampoo.0_4.momentum"),
                                    "data_offsets");
        const char *at = sv.file + sv.off + json_integer_value(json_array_get(o, 0));
        const float *host = mat_buf(a.ex, 2, 7 + 6, NULL);
        const float *decay = decay_buf(a.ex, 2);
        ck_assert_ptr_nonnull(decay);
        double most = 0;
        for (int r = 0; r < 4; r++)
            for (int k = 0; k < 2; k++) {
                float want = host[r * 2 + k] + decay[r * 6 + 4 + k], got;
                memcpy(&got, at + (size_t)(r * 2 + k) * sizeof got, sizeof got);
                ck_assert_float_eq(got, want);
                most = fmax(most, fabs((double)decay[r * 6 + 4 + k]));
            }
        ck_assert_msg(most > 1e-4, "the weight-decay part is %g: nothing tested", most);
        rig_open_with(&b, PARAMS, NP, CZ_OPTIM_SHAMPOO, &cfg);
        rig_open_with(&c, PARAMS, NP, CZ_OPTIM_SHAMPOO, &cfg);
        memcpy(b.P, a.P, a.n * sizeof(float));
        memcpy(c.P, a.P, a.n * sizeof(float));
        c.ex->steps = 3;
        ck_assert_int_eq(cz_executor_load_state(b.ex, tmp_path("wd.safetensors"), &err), 0);
        for (int k = 0; k < 24; k++)
            ck_assert_float_eq(decay_buf(b.ex, 2)[k], 0.0f);
        for (int s = 3; s < 7; s++) {
            rig_step(&a, (uint64_t)s);
            rig_step(&b, (uint64_t)s);
            rig_step(&c, (uint64_t)s);
        }
        double dmax = 0, cmax = 0, pmax = 0;
        for (size_t k = 0; k < a.n; k++) {
            dmax = fmax(dmax, fabs((double)a.P[k] - (double)b.P[k]));
            cmax = fmax(cmax, fabs((double)a.P[k] - (double)c.P[k]));
            pmax = fmax(pmax, fabs((double)a.P[k]));
        }
        ck_assert_msg(dmax <= 1e-6 * pmax, "resumed run differs by %g (of %g)", dmax, pmax);
        ck_assert_msg(cmax > 1e-4, "continuing without the state moved by only %g", cmax);
        saved_free(&sv);
        rig_close(&a);
        rig_close(&b);
        rig_close(&c);
    }
}
END_TEST

/* A checkpoint just loaded saves the bytes it was read from, a negative zero in Shampoo's
 * momentum included: the weight-decay part restarts at zero and must not be added as +0 (the
 * safetensors fuzz harness found -0 saved as +0). */
START_TEST(shampoo_momentum_saved_as_loaded)
{
    if (!have_linalg())
        return;
    cz_exec_config cfg;
    shampoo_config(&cfg, 4);
    cfg.weight_decay = 0.05f;
    rig a;
    rig_open_with(&a, PARAMS, NP, CZ_OPTIM_SHAMPOO, &cfg);
    for (int s = 0; s < 3; s++)
        rig_step(&a, (uint64_t)s);
    saved sv;
    save_and_parse(&a, &sv);
    poke(&sv, "proj.shampoo.0_4.momentum", 3, -0.0f);
    write_file(tmp_path("negzero.safetensors"), sv.file, sv.len);
    cz_error err;
    ck_assert_msg(cz_executor_load_state(a.ex, tmp_path("negzero.safetensors"), &err) == 0, "%s",
                  err.message);
    ck_assert_int_eq(cz_executor_save_state(a.ex, tmp_path("again.safetensors"), &err), 0);
    char *again;
    ck_assert_uint_eq(read_file(tmp_path("again.safetensors"), &again), sv.len);
    ck_assert_mem_eq(again, sv.file, sv.len);
    free(again);
    saved_free(&sv);
    rig_close(&a);
}
END_TEST

/* A checkpoint read from a FIFO whose writer never stops: the load reads no more than this
 * plan's checkpoint can hold, refuses, and the writer sees the pipe closed. */
START_TEST(pipe_read_up_to_the_plans_size)
{
    rig a;
    rig_open(&a, PARAMS, NP);
    rig_step(&a, 1);
    saved s;
    save_and_parse(&a, &s);
    const char *fifo = tmp_path("fifo"), *count = tmp_path("written");
    ck_assert_int_eq(mkfifo(fifo, 0600), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        /* The writer: the whole checkpoint, then up to 64 MiB of zeros. */
        signal(SIGPIPE, SIG_IGN);
        int fd = open(fifo, O_WRONLY);
        size_t total = 0;
        bool open_end = fd >= 0 && write(fd, s.file, s.len) == (ssize_t)s.len;
        static char zeros[65536];
        while (open_end && total < ((size_t)64 << 20)) {
            ssize_t w = write(fd, zeros, sizeof zeros);
            open_end = w > 0;
            total += w > 0 ? (size_t)w : 0;
        }
        FILE *f = fopen(count, "w");
        if (f)
            fprintf(f, "%zu\n", total);
        if (f)
            fclose(f);
        _exit(0);
    }
    cz_error err;
    int rc = cz_executor_load_state(a.ex, fifo, &err);
    int status = 0;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(rc == CZ_EINVALID, "rc %d: %s", rc, rc ? err.message : "loaded");
    ck_assert_msg(strstr(err.message, "more than") &&
                      strstr(err.message, "this plan's optimizer state is"),
                  "%s", err.message);
    char *text;
    read_file(count, &text);
    size_t zeros = strtoull(text, NULL, 10);
    /* The cap is the data (a few hundred bytes here), 64 KiB of header room and 256 bytes per
     * tensor; the pipe buffers another 64 KiB or so. */
    ck_assert_msg(zeros < ((size_t)1 << 20), "the writer got %zu bytes of zeros through", zeros);
    free(text);
    saved_free(&s);
    rig_close(&a);
}
END_TEST

static void refused_across(cz_optimizer from_opt, const cz_exec_config *from_cfg,
                           cz_optimizer to_opt, const cz_exec_config *to_cfg, int code,
                           const char *want)
{
    rig a, b;
    rig_open_with(&a, PARAMS, NP, from_opt, from_cfg);
    rig_open_with(&b, PARAMS, NP, to_opt, to_cfg);
    for (int s = 0; s < 3; s++) {
        rig_step(&a, (uint64_t)s);
        rig_step(&b, (uint64_t)s + 7);
    }
    cz_error err;
    ck_assert_int_eq(cz_executor_save_state(a.ex, tmp_path("x.safetensors"), &err), 0);
    static float before[4096], after[4096];
    size_t n =
        to_opt == CZ_OPTIM_MUON ? state_copy(b.ex, before) : matrix_state_copy(b.ex, before, 4096);
    ck_assert_int_eq(cz_executor_load_state(b.ex, tmp_path("x.safetensors"), &err), code);
    ck_assert_msg(strstr(err.message, "x.safetensors") && strstr(err.message, want), "%s",
                  err.message);
    size_t m =
        to_opt == CZ_OPTIM_MUON ? state_copy(b.ex, after) : matrix_state_copy(b.ex, after, 4096);
    ck_assert_uint_eq(n, m);
    ck_assert_mem_eq(before, after, n * sizeof(float));
    rig_close(&a);
    rig_close(&b);
}

START_TEST(shampoo_and_soap_foreign_files_refused)
{
    if (!have_linalg())
        return;
    cz_exec_config full, plain, wide;
    shampoo_config(&full, 4);
    cz_exec_config_init(&plain);
    plain.shampoo.max_dim = 4;
    shampoo_config(&wide, 8);
    refused_across(CZ_OPTIM_SHAMPOO, &full, CZ_OPTIM_MUON, NULL, CZ_EMISMATCH,
                   "no tensor 'qkv.momentum'");
    refused_across(CZ_OPTIM_MUON, NULL, CZ_OPTIM_SHAMPOO, &full, CZ_EMISMATCH,
                   "no tensor 'qkv.shampoo.0_0.factor_left'");
    refused_across(CZ_OPTIM_SOAP, NULL, CZ_OPTIM_SHAMPOO, &full, CZ_EMISMATCH,
                   "no tensor 'qkv.shampoo.0_0.factor_left'");
    refused_across(CZ_OPTIM_SHAMPOO, &full, CZ_OPTIM_SOAP, NULL, CZ_EMISMATCH,
                   "no tensor 'qkv.soap.0_0.GG_left'");
    /* Another max_dim tiles proj differently: one 4 x 6 tile in the file, two here. */
    refused_across(CZ_OPTIM_SHAMPOO, &wide, CZ_OPTIM_SHAMPOO, &full, CZ_EMISMATCH,
                   "'proj.shampoo.0_0.factor_right': shape differs from the plan's [4, 4]");
    refused_across(CZ_OPTIM_SHAMPOO, &full, CZ_OPTIM_SHAMPOO, &wide, CZ_EMISMATCH,
                   "'proj.shampoo.0_0.factor_right': shape differs from the plan's [6, 6]");
    /* Settings that keep fewer buffers find the file's extra ones foreign. */
    refused_across(CZ_OPTIM_SHAMPOO, &full, CZ_OPTIM_SHAMPOO, &plain, CZ_EMISMATCH,
                   "is not part of this plan's optimizer state");
}
END_TEST

/* A re-shaped or re-typed Shampoo/SOAP tensor is refused like a momentum. */
static void refused_edit(cz_optimizer opt, const char *key, const char *from, const char *to,
                         int code, const char *want)
{
    cz_exec_config cfg;
    shampoo_config(&cfg, 4);
    rig a;
    rig_open_with(&a, PARAMS, NP, opt, &cfg);
    for (int s = 0; s < 3; s++)
        rig_step(&a, (uint64_t)s);
    cz_error err;
    ck_assert_int_eq(cz_executor_save_state(a.ex, tmp_path("e.safetensors"), &err), 0);
    char *data;
    size_t len = read_file(tmp_path("e.safetensors"), &data), off;
    char *h = header_of(data, &off);
    char *at = strstr(h, key);
    ck_assert_msg(at != NULL, "'%s' not in the header", key);
    at = strstr(at, from);
    ck_assert_ptr_nonnull(at);
    ck_assert_uint_eq(strlen(from), strlen(to));
    memcpy(data + 8 + (at - h), to, strlen(to));
    write_file(tmp_path("e2.safetensors"), data, len);
    static float before[4096], after[4096];
    size_t n = matrix_state_copy(a.ex, before, 4096);
    ck_assert_int_eq(cz_executor_load_state(a.ex, tmp_path("e2.safetensors"), &err), code);
    ck_assert_msg(strstr(err.message, want), "%s", err.message);
    ck_assert_uint_eq(matrix_state_copy(a.ex, after, 4096), n);
    ck_assert_mem_eq(before, after, n * sizeof(float));
    free(h);
    free(data);
    rig_close(&a);
}

START_TEST(shampoo_and_soap_damaged_tensors_refused)
{
    if (!have_linalg())
        return;
    refused_edit(CZ_OPTIM_SHAMPOO, "\"proj.shampoo.0_0.momentum\"", "[4,4]", "[2,8]", CZ_EMISMATCH,
                 "'proj.shampoo.0_0.momentum': shape differs from the plan's [4, 4]");
    refused_edit(CZ_OPTIM_SOAP, "\"qkv.soap.2_0.Q_left\"", "F32", "F16", CZ_EINVALID,
                 "'qkv.soap.2_0.Q_left': dtype F16");
}
END_TEST

/* ---- staging through host memory ---- */

/* A cpu backend that claims device memory: the checkpoint must move its state only through
 * download and upload (counted here), as it does for a GPU backend. */
static cz_compute_ops g_staged;
static const cz_compute_ops *g_cpu;
static size_t g_down, g_up;

static int staged_download(cz_compute *c, void *host, const void *src, size_t bytes, cz_error *err)
{
    g_down += bytes;
    return g_cpu->download(c, host, src, bytes, err);
}

static int staged_upload(cz_compute *c, void *dst, const void *host, size_t bytes, cz_error *err)
{
    g_up += bytes;
    return g_cpu->upload(c, dst, host, bytes, err);
}

static void make_staged(cz_executor *ex)
{
    g_cpu = ex->compute.ops;
    g_staged = *g_cpu;
    g_staged.caps &= ~(unsigned)CZ_COMPUTE_CAP_HOST_MEMORY;
    g_staged.name = "staged-cpu";
    g_staged.download = staged_download;
    g_staged.upload = staged_upload;
    ex->compute.ops = &g_staged;
}

static void staged_same(cz_optimizer opt, const cz_exec_config *cfg)
{
    rig a;
    rig_open_with(&a, PARAMS, NP, opt, cfg);
    for (int s = 0; s < 3; s++)
        rig_step(&a, (uint64_t)s);
    cz_error err;
    ck_assert_int_eq(cz_executor_save_state(a.ex, tmp_path("plain.safetensors"), &err), 0);
    make_staged(a.ex);
    g_down = g_up = 0;
    ck_assert_msg(cz_executor_save_state(a.ex, tmp_path("staged.safetensors"), &err) == 0, "%s",
                  err.message);
    char *x, *y, *h;
    size_t nx = read_file(tmp_path("plain.safetensors"), &x), off;
    ck_assert_uint_eq(read_file(tmp_path("staged.safetensors"), &y), nx);
    ck_assert_mem_eq(x, y, nx);
    h = header_of(x, &off);
    /* One process: every tensor downloaded once, straight into the file (and the part of
     * Shampoo's momentum kept beside the parameters, added to it). */
    ck_assert_uint_eq(g_down, nx - off + decay_bytes(a.ex));
    static float sa[4096], sb[4096];
    size_t na = opt == CZ_OPTIM_MUON ? state_copy(a.ex, sa) : matrix_state_copy(a.ex, sa, 4096);

    rig b;
    rig_open_with(&b, PARAMS, NP, opt, cfg);
    memcpy(b.P, a.P, a.n * sizeof(float));
    make_staged(b.ex);
    ck_assert_msg(cz_executor_load_state(b.ex, tmp_path("staged.safetensors"), &err) == 0, "%s",
                  err.message);
    ck_assert_uint_eq(g_up, nx - off + decay_bytes(b.ex));
    size_t nb = opt == CZ_OPTIM_MUON ? state_copy(b.ex, sb) : matrix_state_copy(b.ex, sb, 4096);
    ck_assert_uint_eq(na, nb);
    ck_assert_mem_eq(sa, sb, na * sizeof(float));
    rig_step(&a, 3);
    rig_step(&b, 3);
    ck_assert_mem_eq(a.P, b.P, a.n * sizeof(float));

    /* A backend without upload cannot stage: refused, naming it. */
    g_staged.upload = NULL;
    ck_assert_int_eq(cz_executor_load_state(b.ex, tmp_path("staged.safetensors"), &err),
                     CZ_EUNSUPPORTED);
    ck_assert_msg(strstr(err.message, "staged-cpu") && strstr(err.message, "upload"), "%s",
                  err.message);
    ck_assert_int_eq(cz_executor_save_state(b.ex, tmp_path("none.safetensors"), &err),
                     CZ_EUNSUPPORTED);
    ck_assert_int_eq(access(tmp_path("none.safetensors"), F_OK), -1);
    a.ex->compute.ops = g_cpu;
    b.ex->compute.ops = g_cpu;
    free(h);
    free(x);
    free(y);
    rig_close(&a);
    rig_close(&b);
}

START_TEST(staged_through_host_memory)
{
    staged_same(CZ_OPTIM_MUON, NULL);
    if (!have_linalg())
        return;
    cz_exec_config cfg;
    shampoo_config(&cfg, 4);
    staged_same(CZ_OPTIM_SHAMPOO, &cfg);
    staged_same(CZ_OPTIM_SOAP, NULL);
}
END_TEST

static void cleanup(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", g_dir);
}

int main(void)
{
    snprintf(g_dir, sizeof g_dir, "/tmp/cz_ckpt_XXXXXX");
    const char *tmpdir = getenv("TMPDIR");
    if (tmpdir && strlen(tmpdir) < 40)
        snprintf(g_dir, sizeof g_dir, "%s/cz_ckpt_XXXXXX", tmpdir);
    if (!mkdtemp(g_dir))
        return 1;
    Suite *s = suite_create("exec_checkpoint");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, round_trip_resumes_exactly);
    tcase_add_test(tc, file_is_safetensors_with_full_tensors);
    tcase_add_test(tc, foreign_or_damaged_files_refused);
    tcase_add_test(tc, truncated_missing_and_extra_refused);
    tcase_add_test(tc, failed_save_keeps_the_old_file);
    tcase_add_test(tc, refused_during_async_step);
    tcase_add_test(tc, shampoo_round_trip_resumes_exactly);
    tcase_add_test(tc, soap_round_trip_resumes_exactly);
    tcase_add_test(tc, shampoo_momentum_with_weight_decay);
    tcase_add_test(tc, shampoo_momentum_saved_as_loaded);
    tcase_add_test(tc, shampoo_and_soap_tensor_names);
    tcase_add_test(tc, shampoo_and_soap_foreign_files_refused);
    tcase_add_test(tc, shampoo_and_soap_damaged_tensors_refused);
    tcase_add_test(tc, staged_through_host_memory);
    tcase_add_test(tc, step_count_digits_in_range);
    tcase_add_test(tc, non_finite_or_impossible_state_refused);
    tcase_add_test(tc, header_that_lies_refused);
    tcase_add_test(tc, pipe_read_up_to_the_plans_size);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    cleanup();
    return failed ? 1 : 0;
}
