/* Optimizer-state checkpoints on one process: a save/load round trip resumes bit for bit and
 * restores the step count, TP-sharded state comes back whole (a checkpoint saved at tp = 2 is
 * read back by hand and loaded at tp = 1), and every damaged or foreign file is refused with
 * its name and the tensor at fault, leaving the executor's state untouched. */
#include "exec_internal.h"
#include "exec_fixture.h"

#include <check.h>
#include <jansson.h>
#include <stdio.h>
#include <sys/stat.h>
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

static void rig_open(rig *r, const fx_param *ps, int np)
{
    cz_exec_config cfg;
    cz_exec_config_init(&cfg);
    cfg.comm = "self";
    r->pl = fx_plan(ps, np, 1);
    cz_error err;
    ck_assert_msg(cz_executor_create_from_plan(&r->ex, r->pl, &cfg, &err) == 0, "%s", err.message);
    r->n = cz_executor_buffer_numel(r->ex);
    r->P = calloc(r->n, sizeof(float));
    r->G = calloc(r->n, sizeof(float));
    for (size_t k = 0; k < r->n; k++)
        r->P[k] = 0.5f * fx_val(k);
    ck_assert_int_eq(cz_executor_bind_buffers(r->ex, r->P, r->G, r->n, NULL), 0);
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

/* Every state tensor of the executor, in one array, to compare before and after. */
static size_t state_copy(const cz_executor *ex, float *out)
{
    size_t k = 0;
    for (size_t i = 0; i < ex->plan->nparams; i++) {
        const cz_plan_param *p = &ex->plan->params[i];
        int64_t full = p->def.shape[0] * p->def.shape[1];
        if (ex->momentum[i])
            for (int64_t j = 0; j < full; j++)
                out[k++] = ex->momentum[i][j];
        if (ex->adam_m[i])
            for (int64_t j = 0; j < p->numel; j++) {
                out[k++] = ex->adam_m[i][j];
                out[k++] = ex->adam_v[i][j];
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
    ck_assert_mem_eq(data + off + b, a.ex->momentum[1], 24 * sizeof(float));
    json_t *v = json_object_get(root, "norm.exp_avg_sq");
    ck_assert_int_eq(json_array_size(json_object_get(v, "shape")), 1);
    o = json_object_get(v, "data_offsets");
    b = (size_t)json_integer_value(json_array_get(o, 0));
    ck_assert_mem_eq(data + off + b, a.ex->adam_v[3], 4 * sizeof(float));
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
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    cleanup();
    return failed ? 1 : 0;
}
