/* Plans edited after `canzona plan` wrote them: the executor refuses every one that validate
 * refuses. Structural contradictions (overlapping parameters, a bucket of too many blocks) are
 * refused by the shared structural check even when the edit re-computes the content hash; what
 * only the model can tell (a matrix turned elementwise, blocks reordered or dropped, tp_dim
 * changed) passes the structural check and is refused by the content hash. Also: validate and
 * the executor on int64 values whose sums and products overflow (run under UBSan in CI). */
#include "canzona.h" /* cz_plan_build: the test plans in-process */
#include "canzona_exec.h"
#include "cz_format.h"
#include "cz_exec_testing.h"

#include <check.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static char base_path[512], edit_path[512], model_path[512], cluster_path[512];
static cz_model *model;
static cz_cluster *cluster;

static void setup(void)
{
    const char *src = getenv("CZ_SOURCE_DIR");
    ck_assert_ptr_nonnull(src);
    const char *dir = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(model_path, sizeof model_path, "%s/plans/models/test-small.json", src);
    snprintf(cluster_path, sizeof cluster_path, "%s/plans/clusters/cpu-4-dp2-tp2.json", src);
    snprintf(base_path, sizeof base_path, "%s/cz_plan_edits_%d.json", dir, (int)getpid());
    snprintf(edit_path, sizeof edit_path, "%s/cz_plan_edits_%d_e.json", dir, (int)getpid());
    cz_error err;
    cz_plan *plan = NULL;
    cz_settings s;
    cz_settings_init(&s);
    ck_assert_msg(cz_model_load(&model, model_path, &err) == 0, "%s", err.message);
    ck_assert_msg(cz_cluster_load(&cluster, cluster_path, &err) == 0, "%s", err.message);
    ck_assert_msg(cz_plan_build(&plan, model, cluster, &s, &err) == 0, "%s", err.message);
    ck_assert_msg(cz_plan_write(plan, base_path, &err) == 0, "%s", err.message);
    cz_plan_free(plan);
}

static void teardown(void)
{
    unlink(base_path);
    unlink(edit_path);
    cz_model_free(model);
    cz_cluster_free(cluster);
}

static json_t *load_base(void)
{
    json_error_t je;
    json_t *root = json_load_file(base_path, 0, &je);
    ck_assert_msg(root != NULL, "%s", je.text);
    return root;
}

static json_t *param_named(json_t *root, const char *name, int *id)
{
    json_t *params = json_object_get(root, "params");
    for (size_t i = 0; i < json_array_size(params); i++) {
        json_t *p = json_array_get(params, i);
        if (!strcmp(json_string_value(json_object_get(p, "name")), name)) {
            if (id)
                *id = (int)i;
            return p;
        }
    }
    ck_abort_msg("no parameter '%s' in the plan", name);
    return NULL;
}

/* Writes the edited plan; with rehash, records the hash of the edited content, as a tool that
 * knows the format could. */
static void save(json_t *root, int rehash)
{
    if (rehash) {
        char hash[65];
        cz_error err;
        ck_assert_int_eq(cz__plan_json_content_hash(root, hash, &err), 0);
        json_object_set_new(root, "content_sha256", json_string(hash));
    }
    ck_assert_int_eq(json_dump_file(root, edit_path, JSON_INDENT(1) | JSON_REAL_PRECISION(17)), 0);
}

/* cz_executor_create on the edited plan with the one-rank "self" communicator: returns the
 * error. A plan that passes every plan check fails later, on the communicator's size. */
static int exec_create(cz_error *err)
{
    cz_exec_config cfg;
    cz_exec_config_init(&cfg);
    cfg.comm = "self";
    cz_executor *ex = NULL;
    int rc = cz_executor_create(&ex, edit_path, &cfg, err);
    ck_assert_ptr_null(ex);
    return rc;
}

#define PASSED_PLAN_CHECKS "the world communicator has 1 ranks but the plan needs dp*tp"

static void expect_exec(const char *frag)
{
    cz_error err;
    cz_error_clear(&err);
    ck_assert_int_ne(exec_create(&err), 0);
    ck_assert_msg(strstr(err.message, frag), "executor said '%s', expected '%s'", err.message,
                  frag);
}

/* validate of the edited plan against the model and cluster lists a violation with code (through
 * the public report: an executor test reaches the planner only through canzona.h). */
static void expect_validate(const char *code, const char *frag)
{
    cz_error err;
    cz_plan *plan = NULL;
    cz_report *report = NULL;
    char *all = NULL;
    ck_assert_msg(cz_plan_read(&plan, edit_path, &err) == 0, "%s", err.message);
    ck_assert_msg(cz_plan_validate(&report, plan, model, cluster, &err) == 0, "%s", err.message);
    int found = 0;
    for (int i = 0;; i++) {
        char path[64];
        snprintf(path, sizeof path, "violations.%d.code", i);
        const char *c = cz_report_string(report, path);
        if (!c)
            break;
        snprintf(path, sizeof path, "violations.%d.message", i);
        const char *m = cz_report_string(report, path);
        found |= !strcmp(c, code) && m && strstr(m, frag) != NULL;
    }
    ck_assert_int_eq(cz_report_json(report, 0, &all, &err), 0);
    ck_assert_msg(found, "validate lacks %s '%s': %s", code, frag, all);
    cz_free(all);
    cz_report_free(report);
    cz_plan_free(plan);
}

/* A model-level edit: the structural check passes, the hash does not. */
static void expect_hash_guards(json_t *root, const char *code, const char *frag)
{
    save(root, 0);
    expect_exec("plan content hash mismatch: the plan was edited after it was written; re-run "
                "canzona plan");
    expect_validate("plan.content_hash", "edited after it was written");
    expect_validate(code, frag);
    save(root, 1);
    expect_exec(PASSED_PLAN_CHECKS);
    expect_validate(code, frag);
}

START_TEST(unedited_plan_passes)
{
    json_t *root = load_base();
    save(root, 0);
    expect_exec(PASSED_PLAN_CHECKS);
    json_decref(root);
}
END_TEST

START_TEST(missing_hash_refused)
{
    json_t *root = load_base();
    json_object_del(root, "content_sha256");
    save(root, 0);
    expect_exec("$.content_sha256: missing");
    json_decref(root);
}
END_TEST

START_TEST(overlap_refused)
{
    json_t *root = load_base();
    int q = 0;
    json_t *pq = param_named(root, "decoder.layers.1.self_attention.q_layernorm.weight", &q);
    json_t *pk = param_named(root, "decoder.layers.1.self_attention.k_layernorm.weight", NULL);
    ck_assert_int_eq(json_integer_value(json_object_get(pq, "bucket")),
                     json_integer_value(json_object_get(pk, "bucket")));
    json_object_set(pq, "offset", json_object_get(pk, "offset"));
    save(root, 0);
    expect_exec("plan content hash mismatch");
    save(root, 1);
    char frag[96];
    snprintf(frag, sizeof frag, "plan $.params[%d].offset: ", q);
    expect_exec(frag);
    expect_exec("overlaps or precedes 'decoder.layers.1.self_attention.k_layernorm.weight'");
    expect_validate("param.offset", "overlaps or precedes");
    json_decref(root);
}
END_TEST

/* Sets a group's slot loads to the sums of their tasks' costs, in task order as validate adds
 * them, after a task was removed. */
static void drop_task(json_t *root, int id)
{
    json_t *params = json_object_get(root, "params"), *sched = json_object_get(root, "tp_schedule");
    int dropped = 0;
    for (size_t k = 0; k < json_array_size(sched); k++) {
        json_t *groups = json_object_get(json_array_get(sched, k), "groups");
        for (size_t g = 0; g < json_array_size(groups); g++) {
            json_t *gr = json_array_get(groups, g), *slots = json_object_get(gr, "slots");
            for (size_t s = 0; s < json_array_size(slots); s++) {
                json_t *ids = json_array_get(slots, s);
                double load = 0;
                for (size_t t = 0; t < json_array_size(ids);) {
                    int pid = (int)json_integer_value(json_array_get(ids, t));
                    if (pid == id) {
                        json_array_remove(ids, t);
                        dropped++;
                        continue;
                    }
                    load += json_real_value(
                        json_object_get(json_array_get(params, (size_t)pid), "cost"));
                    t++;
                }
                json_array_set_new(json_object_get(gr, "load"), s, json_real(load));
            }
        }
    }
    ck_assert_int_eq(dropped, 1);
}

START_TEST(matrix_turned_elementwise)
{
    json_t *root = load_base();
    int id = 0;
    json_t *p = param_named(root, "extra.weight", &id);
    json_object_set_new(p, "optimizer", json_string("elementwise"));
    drop_task(root, id);
    expect_hash_guards(root, "param.optimizer",
                       "'extra.weight' is elementwise but the model says "
                       "matrix");
    json_decref(root);
}
END_TEST

START_TEST(blocks_reordered)
{
    json_t *root = load_base();
    json_t *p = param_named(root, "decoder.layers.0.self_attention.linear_qkv.weight", NULL);
    json_t *sizes = json_object_get(json_object_get(p, "blocks"), "sizes");
    json_array_clear(sizes);
    json_array_append_new(sizes, json_integer(128));
    json_array_append_new(sizes, json_integer(256));
    json_array_append_new(sizes, json_integer(128));
    expect_hash_guards(root, "param.blocks",
                       "has blocks dim 0 [128, 256, 128] but the model has "
                       "dim 0 [256, 128, 128]");
    json_decref(root);
}
END_TEST

START_TEST(blocks_dropped)
{
    json_t *root = load_base();
    json_t *p = param_named(root, "decoder.layers.1.mlp.linear_fc1.weight", NULL);
    json_object_del(p, "blocks");
    expect_hash_guards(root, "param.blocks", "has blocks none but the model has dim 0");
    json_decref(root);
}
END_TEST

START_TEST(tp_dim_changed)
{
    json_t *root = load_base();
    json_t *p = param_named(root, "decoder.layers.0.self_attention.linear_proj.weight", NULL);
    ck_assert_int_eq(json_integer_value(json_object_get(p, "tp_dim")), 1);
    json_object_set_new(p, "tp_dim", json_integer(0));
    json_object_set_new(p, "local_shape", json_pack("[i, i]", 128, 256));
    expect_hash_guards(root, "param.tp_dim", "has tp_dim 0 but the model has 1");
    json_decref(root);
}
END_TEST

/* One limit on blocks everywhere, with one message: model loader, validate, executor. */
START_TEST(too_many_blocks)
{
    const char *frag = "has 65 blocks; canzona supports at most 64 per parameter";
    json_t *root = load_base();
    json_t *p = param_named(root, "decoder.layers.1.mlp.linear_fc1.weight", NULL);
    json_t *sizes = json_array();
    for (int b = 0; b < 64; b++)
        json_array_append_new(sizes, json_integer(8));
    json_array_append_new(sizes, json_integer(512));
    json_object_set_new(p, "blocks", json_pack("{s:i, s:o}", "dim", 0, "sizes", sizes));
    save(root, 1);
    expect_exec(frag);
    expect_validate("param.blocks", frag);
    json_decref(root);

    FILE *f = fopen(edit_path, "w");
    ck_assert_ptr_nonnull(f);
    fputs("{\"schema\": \"canzona.model/1\", \"name\": \"m\", \"dtype\": \"fp32\", \"params\": "
          "[{\"name\": \"w\", \"shape\": [65, 4], \"tp_dim\": null, \"blocks\": {\"dim\": 0, "
          "\"sizes\": [",
          f);
    for (int b = 0; b < 65; b++)
        fprintf(f, "%s1", b ? ", " : "");
    fputs("]}}]}", f);
    fclose(f);
    cz_model *m = NULL;
    cz_error err;
    ck_assert_int_ne(cz_model_load(&m, edit_path, &err), 0);
    ck_assert_ptr_null(m);
    ck_assert_msg(strstr(err.message, "'w' has 65 blocks; canzona supports at most 64"), "%s",
                  err.message);
}
END_TEST

/* Values the reader accepts (each at most CZ_PLAN_MAX_ELEMENTS, 2^52) whose sum (offset +
 * numel) does not fit the bucket: refused with a message, never overflowed (UBSan aborts on
 * signed overflow); and values above the limit, or a shape whose product is, refused by the
 * reader with the field named. */
START_TEST(overflowing_values)
{
    json_t *root = load_base();
    json_t *p = param_named(root, "extra.weight", NULL);
    const int64_t most = INT64_C(1) << 52;
    json_object_set_new(p, "offset", json_integer(most - 1));
    save(root, 1);
    expect_exec("is not inside bucket");
    expect_validate("param.offset", "is not inside bucket");
    json_decref(root);

    root = load_base();
    p = param_named(root, "extra.weight", NULL);
    json_object_set_new(p, "offset", json_integer(INT64_MAX - 1));
    save(root, 1);
    expect_exec("offset: expected an integer in [0, 4503599627370496], found 9223372036854775806");
    json_decref(root);

    root = load_base();
    int id = 0;
    p = param_named(root, "extra.weight", &id);
    int64_t big = INT64_C(1) << 30;
    json_object_set_new(p, "shape", json_pack("[I, I]", (json_int_t)big, (json_int_t)big));
    json_object_set_new(p, "local_shape", json_pack("[I, I]", (json_int_t)big, (json_int_t)big));
    save(root, 1);
    char want[160];
    snprintf(want, sizeof want,
             "$.params[%d].shape: 1073741824 x 1073741824 elements, more than the "
             "4503599627370496 a plan may hold",
             id);
    expect_exec(want);
    json_decref(root);

    /* Both dimensions at the limit: their product is far past int64 (the fuzzer's find in the
     * reader's own check). */
    root = load_base();
    p = param_named(root, "extra.weight", &id);
    json_object_set_new(p, "shape", json_pack("[I, I]", (json_int_t)most, (json_int_t)most));
    json_object_set_new(p, "local_shape", json_pack("[I, I]", (json_int_t)most, (json_int_t)most));
    save(root, 1);
    expect_exec("4503599627370496 x 4503599627370496 elements, more than the 4503599627370496");
    json_decref(root);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("exec_plan_edits");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, unedited_plan_passes);
    tcase_add_test(tc, missing_hash_refused);
    tcase_add_test(tc, overlap_refused);
    tcase_add_test(tc, matrix_turned_elementwise);
    tcase_add_test(tc, blocks_reordered);
    tcase_add_test(tc, blocks_dropped);
    tcase_add_test(tc, tp_dim_changed);
    tcase_add_test(tc, too_many_blocks);
    tcase_add_test(tc, overflowing_values);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
