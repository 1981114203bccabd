/* Tests of Megatron-Core's TP rules: the vocabulary padding formula, the model's optional
 * "megatron" record (read and checked by the loader) and the planner refusing a cluster whose
 * TP the model cannot run at. */
#include "cz_test_util.h"
#include "cz_types.h"

#include <check.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char tmpdir[256];

static void make_tmpdir(void)
{
    ck_assert_ptr_nonnull(czt_tmpdir_make(tmpdir, sizeof tmpdir, "cz_megatron"));
}

static void remove_tmpdir(void)
{
    czt_tmpdir_remove(tmpdir);
}

/* A two-layer model whose embedding has `rows` rows, with the given "megatron" record (a JSON
 * object's members, ' for "); loads it and returns the loader's code. */
static int load_with(const char *record, int64_t rows, cz_model **out, cz_error *err)
{
    char path[512];
    snprintf(path, sizeof path, "%s/model.json", tmpdir);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    char text[2048];
    snprintf(text, sizeof text,
             "{'schema': 'canzona.model/1', 'name': 'm', 'dtype': 'bf16', %s%s%s"
             "'params': [{'name': 'embedding.word_embeddings.weight', 'shape': [%lld, 64], "
             "'tp_dim': 0, 'optimizer': 'elementwise'},"
             "{'repeat': 2, 'prefix': 'decoder.layers.{i}.', 'params': ["
             "{'name': 'qkv', 'shape': [128, 64], 'tp_dim': 0, 'optimizer': 'matrix'},"
             "{'name': 'proj', 'shape': [64, 64], 'tp_dim': 1, 'optimizer': 'matrix'}]},"
             "{'name': 'output_layer.weight', 'shape': [%lld, 64], 'tp_dim': 0, "
             "'optimizer': 'elementwise'}]}",
             record ? "'megatron': {" : "", record ? record : "", record ? "}, " : "",
             (long long)rows, (long long)rows);
    for (char *p = text; *p; p++)
        if (*p == '\'')
            *p = '"';
    fputs(text, f);
    fclose(f);
    cz_error_clear(err);
    *out = NULL;
    return cz_model_load(out, path, err);
}

START_TEST(test_padded_vocab)
{
    /* Megatron-LM's _vocab_size_with_padding: up to a multiple of divisible_by x TP. */
    ck_assert_int_eq(cz__megatron_padded_vocab(128256, 128, 1), 128256);
    ck_assert_int_eq(cz__megatron_padded_vocab(128256, 128, 4), 128512);
    ck_assert_int_eq(cz__megatron_padded_vocab(128256, 128, 8), 129024);
    ck_assert_int_eq(cz__megatron_padded_vocab(151936, 128, 8), 152576);
    ck_assert_int_eq(cz__megatron_padded_vocab(50257, 128, 1), 50304);
    ck_assert_int_eq(cz__megatron_padded_vocab(1000, 1, 1), 1000);
    ck_assert_int_eq(cz__megatron_padded_vocab(1001, 1, 8), 1008);
    ck_assert_int_eq(cz__megatron_padded_vocab(0, 128, 1), -1);
    ck_assert_int_eq(cz__megatron_padded_vocab(10, INT64_MAX, 2), -1);
}
END_TEST

static const char *const good_record =
    "'num_attention_heads': 8, 'num_query_groups': 2, 'vocab_size': 1000, "
    "'make_vocab_size_divisible_by': 128, 'tensor_model_parallel_size': 2, "
    "'padded_vocab_size': 1024";

START_TEST(test_record_loads)
{
    cz_model *m;
    cz_error err;
    ck_assert_msg(load_with(good_record, 1024, &m, &err) == CZ_OK, "%s", err.message);
    ck_assert_int_eq(m->megatron.num_attention_heads, 8);
    ck_assert_int_eq(m->megatron.num_query_groups, 2);
    ck_assert_int_eq(m->megatron.vocab_size, 1000);
    ck_assert_int_eq(m->megatron.make_vocab_size_divisible_by, 128);
    ck_assert_int_eq(m->megatron.tensor_model_parallel_size, 2);
    ck_assert_int_eq(m->megatron.padded_vocab_size, 1024);
    cz_model_free(m);
    /* Models without the record (every model before it existed) still load. */
    ck_assert_msg(load_with(NULL, 1000, &m, &err) == CZ_OK, "%s", err.message);
    ck_assert_int_eq(m->megatron.num_attention_heads, 0);
    ck_assert_int_eq(m->megatron.padded_vocab_size, 0);
    cz_model_free(m);
    /* Heads alone, without the vocabulary part. */
    ck_assert_msg(load_with("'num_attention_heads': 4, 'num_query_groups': 4", 1000, &m, &err) ==
                      CZ_OK,
                  "%s", err.message);
    cz_model_free(m);
}
END_TEST

static const struct {
    const char *record;
    int64_t rows;
    const char *want[3];
} bad_records[] = {
    {"'num_attention_heads': 8, 'num_query_groups': 3",
     1000,
     {"$.megatron.num_query_groups", "3 query groups do not divide 8"}},
    {"'num_attention_heads': 8", 1000, {"$.megatron", "\"num_attention_heads\" is given without"}},
    {"'vocab_size': 1000, 'make_vocab_size_divisible_by': 128, 'tensor_model_parallel_size': 1",
     1000,
     {"$.megatron", "\"vocab_size\" is given without \"padded_vocab_size\""}},
    {"'vocab_size': 1000, 'make_vocab_size_divisible_by': 128, 'tensor_model_parallel_size': 2, "
     "'padded_vocab_size': 1000",
     1000,
     {"$.megatron.padded_vocab_size", "expected 1024", "found 1000"}},
    {good_record, 1000, {"$.megatron.padded_vocab_size", "1024 does not match the 1000 rows"}},
    {"'num_heads': 8", 1000, {"$.megatron", "num_heads"}},
    {"'num_attention_heads': 0, 'num_query_groups': 1", 1000, {"num_attention_heads"}},
};

START_TEST(test_record_errors)
{
    cz_model *m;
    cz_error err;
    int rc = load_with(bad_records[_i].record, bad_records[_i].rows, &m, &err);
    ck_assert_int_eq(rc, CZ_EINVALID);
    ck_assert_ptr_null(m);
    ck_assert_ptr_nonnull(strstr(err.message, "model.json"));
    for (int k = 0; k < 3 && bad_records[_i].want[k]; k++)
        ck_assert_msg(strstr(err.message, bad_records[_i].want[k]), "case %d: '%s' not in: %s", _i,
                      bad_records[_i].want[k], err.message);
}
END_TEST

/* A tiny in-memory model with a megatron record. */
static cz_model *model_with(int64_t heads, int64_t groups, int64_t vocab, int64_t div, int64_t tp)
{
    int64_t padded = vocab ? cz__megatron_padded_vocab(vocab, div, tp) : 64;
    cz_model *m = czt_model_new("m", CZ_DTYPE_BF16, 1);
    czt_model_add(m, "embedding.word_embeddings.weight", padded, 64, 0, CZ_KIND_ELEMENTWISE, -1);
    czt_model_add(m, "decoder.layers.0.qkv", 128, 64, 0, CZ_KIND_MATRIX, 0);
    czt_model_add(m, "decoder.layers.0.proj", 64, 64, 1, CZ_KIND_MATRIX, 0);
    m->megatron.num_attention_heads = heads;
    m->megatron.num_query_groups = groups;
    if (vocab) {
        m->megatron.vocab_size = vocab;
        m->megatron.make_vocab_size_divisible_by = div;
        m->megatron.tensor_model_parallel_size = tp;
        m->megatron.padded_vocab_size = padded;
    }
    return m;
}

static int build(const cz_model *m, int tp, cz_error *err)
{
    cz_cluster *c = czt_cluster_new(2, tp, 1);
    cz_settings s;
    cz_settings_init(&s);
    cz_plan *p = NULL;
    cz_error_clear(err);
    int rc = cz_plan_build(&p, m, c, &s, err);
    cz_plan_free(p);
    cz_cluster_free(c);
    return rc;
}

START_TEST(test_plan_refuses_heads)
{
    cz_error err;
    /* Qwen2.5-7B's 28 heads and 4 query groups: TP 4 works, TP 8 does not. */
    cz_model *m = model_with(28, 4, 0, 0, 0);
    ck_assert_msg(build(m, 4, &err) == CZ_OK, "%s", err.message);
    ck_assert_int_eq(build(m, 8, &err), CZ_EINVALID);
    ck_assert_ptr_nonnull(strstr(err.message, "test-model.json"));
    ck_assert_ptr_nonnull(strstr(err.message, "num_attention_heads (28)"));
    ck_assert_ptr_nonnull(strstr(err.message, "tensor-parallel size (8)"));
    ck_assert_ptr_nonnull(strstr(err.message, "test-cluster.json"));
    cz_model_free(m);
    /* 64 heads, 8 query groups (Llama-3.1-70B): TP 16 splits a KV head. */
    m = model_with(64, 8, 0, 0, 0);
    ck_assert_msg(build(m, 8, &err) == CZ_OK, "%s", err.message);
    ck_assert_int_eq(build(m, 16, &err), CZ_EINVALID);
    ck_assert_ptr_nonnull(strstr(err.message, "num_query_groups (the KV heads, 8)"));
    ck_assert_ptr_nonnull(strstr(err.message, "1, 2, 4, 8"));
    cz_model_free(m);
}
END_TEST

START_TEST(test_plan_checks_vocab_padding)
{
    cz_error err;
    /* Padded for TP 8 at 128: 1000 -> 1024. At TP 4 Megatron pads to 1024 as well; at TP 16
     * to 2048, so the model's embedding would be the wrong size. */
    cz_model *m = model_with(16, 16, 1000, 128, 8);
    ck_assert_msg(build(m, 8, &err) == CZ_OK, "%s", err.message);
    ck_assert_msg(build(m, 4, &err) == CZ_OK, "%s", err.message);
    ck_assert_int_eq(build(m, 16, &err), CZ_EMISMATCH);
    ck_assert_ptr_nonnull(strstr(err.message, "padded to 1024"));
    ck_assert_ptr_nonnull(strstr(err.message, "pads it to 2048"));
    ck_assert_ptr_nonnull(strstr(err.message, "--tp-size 16"));
    cz_model_free(m);
    /* Without padding beyond TP (divisible_by 1), 1000 rows serve TP 1, 2, 4 and 8. */
    m = model_with(8, 8, 1000, 1, 1);
    for (int tp = 1; tp <= 8; tp *= 2)
        ck_assert_msg(build(m, tp, &err) == CZ_OK, "tp %d: %s", tp, err.message);
    cz_model_free(m);
}
END_TEST

static Suite *megatron_suite(void)
{
    Suite *s = suite_create("megatron");
    TCase *t = tcase_create("rules");
    tcase_add_checked_fixture(t, make_tmpdir, remove_tmpdir);
    tcase_add_test(t, test_padded_vocab);
    tcase_add_test(t, test_record_loads);
    tcase_add_loop_test(t, test_record_errors, 0,
                        (int)(sizeof bad_records / sizeof bad_records[0]));
    tcase_add_test(t, test_plan_refuses_heads);
    tcase_add_test(t, test_plan_checks_vocab_padding);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(megatron_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
