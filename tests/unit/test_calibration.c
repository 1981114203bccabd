/* Reading calibration files (calibration_io.c): the bundled H200 file, and every kind of mistake
 * refused with the file, the JSON path and what was expected. */
#include "cz_test_util.h"

#include <check.h>
#include <jansson.h>

/* A small valid version 1 file: two GEMMs, one copy. */
static const char *const MINIMAL =
    "{\"schema\": \"canzona.calibration/1\","
    " \"generator\": {\"name\": \"canzona-bench calibrate\", \"version\": \"0.1.0\"},"
    " \"device\": {\"name\": \"NVIDIA H200\", \"compute_capability\": \"9.0\", \"sm_count\": 132,"
    "  \"memory_gib\": 139.8, \"driver_cuda\": 13000, \"cuda_runtime\": 13000, \"cublas\": 130100,"
    "  \"cusolver\": 120004, \"nccl\": 22803, \"measured_at\": \"2026-11-27T12:16:46Z\"},"
    " \"gemm\": [{\"m\": 1000, \"n\": 1000, \"k\": 1000, \"batch\": 1, \"dtype\": \"bf16\","
    "   \"seconds\": 0.001, \"tflops\": 2.0},"
    "  {\"m\": 2000, \"n\": 1000, \"k\": 1000, \"batch\": 2, \"dtype\": \"fp32\","
    "   \"seconds\": 0.004, \"tflops\": 2.0}],"
    " \"launch_overhead_s\": 4e-6,"
    " \"ns_iteration_overhead_s\": {\"fp32\": 3.7e-5, \"bf16\": 5.4e-5},"
    " \"copy\": [{\"direction\": \"h2d\", \"pinned\": true, \"bytes\": 1000000000,"
    "   \"seconds\": 0.02, \"gb_per_s\": 50.0}]}";

/* MINIMAL with one edit: set (or, value NULL, remove) the member key of the object at path
 * ("" for the root, "gemm.0", "device"), then parse it; returns the code, message in err. */
static int parse_edited(const char *path, const char *key, json_t *value, cz_error *err)
{
    json_error_t je;
    json_t *root = json_loads(MINIMAL, 0, &je), *o = root;
    ck_assert_ptr_nonnull(root);
    char buf[64];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *tok = strtok(buf, "."); tok; tok = strtok(NULL, "."))
        o = json_is_array(o) ? json_array_get(o, (size_t)atoi(tok)) : json_object_get(o, tok);
    ck_assert_ptr_nonnull(o);
    if (value)
        json_object_set_new(o, key, value);
    else
        json_object_del(o, key);
    char *text = json_dumps(root, 0);
    cz_calibration *cal = NULL;
    int rc = cz__calibration_parse(&cal, text, strlen(text), "cal.json", err);
    ck_assert(rc == CZ_OK ? cal != NULL : cal == NULL);
    cz__calibration_free(cal);
    free(text);
    json_decref(root);
    return rc;
}

#define EXPECT(rc_expr, code, text)                                                                \
    do {                                                                                           \
        cz_error e_;                                                                               \
        cz_error_clear(&e_);                                                                       \
        int r_ = (rc_expr);                                                                        \
        ck_assert_msg(r_ == (code), "code %d, expected %d: %s", r_, (code), e_.message);           \
        ck_assert_msg(strstr(e_.message, (text)) != NULL, "'%s' not in: %s", (text), e_.message);  \
    } while (0)

START_TEST(bundled_h200)
{
    char path[1024];
    const char *src = getenv("CZ_SOURCE_DIR");
    snprintf(path, sizeof path, "%s/plans/calibration/h200.json", src ? src : ".");
    cz_calibration *cal = NULL;
    cz_error err;
    ck_assert_msg(cz__calibration_load(&cal, path, &err) == CZ_OK, "%s", err.message);
    ck_assert_int_eq(cal->version, 1);
    ck_assert_int_eq((int)cal->ngemm, 58);
    ck_assert_str_eq(cal->device_name, "NVIDIA H200");
    ck_assert(cal->launch_s == 4.152959883213043e-06);
    ck_assert(cal->ns_iteration_s[CZ_GEMM_BF16] == 5.456858500011209e-05);
    ck_assert_int_eq((int)cal->ncoll, 0);
    ck_assert_int_eq((int)strlen(cal->sha256), 64);
    cz__calibration_free(cal);
}
END_TEST

START_TEST(minimal_and_mistakes)
{
    cz_error err;
    cz_calibration *cal = NULL;
    ck_assert_int_eq(cz__calibration_parse(&cal, MINIMAL, strlen(MINIMAL), "cal.json", &err),
                     CZ_OK);
    ck_assert_int_eq((int)cal->ngemm, 2);
    ck_assert(cal->gemm[1].prec == CZ_GEMM_FP32 && cal->gemm[1].batch == 2);
    cz__calibration_free(cal);

    EXPECT(parse_edited("", "extra", json_true(), &e_), CZ_EINVALID, "cal.json: $: ");
    EXPECT(parse_edited("", "extra", json_true(), &e_), CZ_EINVALID, "extra");
    EXPECT(parse_edited("", "launch_overhead_s", NULL, &e_), CZ_EINVALID,
           "cal.json: $: missing required key \"launch_overhead_s\"");
    EXPECT(parse_edited("", "schema", json_string("canzona.calibration/3"), &e_), CZ_EUNSUPPORTED,
           "$.schema: unsupported schema version \"canzona.calibration/3\"");
    EXPECT(parse_edited("", "schema", json_string("canzona.cluster/1"), &e_), CZ_EINVALID,
           "$.schema: expected \"canzona.calibration/1\" or \"canzona.calibration/2\"");
    EXPECT(parse_edited("gemm.0", "tflops", json_real(3.0), &e_), CZ_EINVALID,
           "cal.json: $.gemm[0]: tflops is 3, but 2 m n k batch / seconds gives 2");
    EXPECT(parse_edited("gemm.1", "seconds", json_real(-1), &e_), CZ_EINVALID,
           "$.gemm[1].seconds: expected a positive number, found -1");
    EXPECT(parse_edited("gemm.0", "dtype", json_string("fp16"), &e_), CZ_EINVALID,
           "$.gemm[0].dtype: expected one of \"bf16\", \"fp32\", found \"fp16\"");
    EXPECT(parse_edited("gemm.0", "m", json_integer(0), &e_), CZ_EINVALID, "$.gemm[0].m");
    EXPECT(parse_edited("device", "compute_capability", json_string("nine"), &e_), CZ_EINVALID,
           "$.device.compute_capability: expected a version like \"9.0\", found \"nine\"");
    EXPECT(parse_edited("device", "sm_count", NULL, &e_), CZ_EINVALID,
           "$.device: missing required key \"sm_count\"");
    EXPECT(parse_edited("copy.0", "gb_per_s", json_real(40), &e_), CZ_EINVALID,
           "$.copy[0]: gb_per_s is 40, but bytes / seconds gives 50");
    EXPECT(parse_edited("ns_iteration_overhead_s", "bf16", json_real(-1e-6), &e_), CZ_EINVALID,
           "$.ns_iteration_overhead_s.bf16: expected a non-negative number");
    /* Collectives need version 2, which needs them. */
    EXPECT(parse_edited("", "collectives", json_array(), &e_), CZ_EINVALID,
           "$.collectives: measured collectives need schema \"canzona.calibration/2\"");
    EXPECT(parse_edited("", "schema", json_string("canzona.calibration/2"), &e_), CZ_EINVALID,
           "$: missing required key \"collectives\"");
    EXPECT(cz__calibration_parse(&cal, "{\"schema\": ", 11, "cal.json", &e_), CZ_EPARSE,
           "cal.json:1:");
}
END_TEST

/* Version 2: collectives read, sorted by (op, scope, ranks, bytes), duplicates refused. */
START_TEST(collectives_v2)
{
    json_error_t je;
    json_t *root = json_loads(MINIMAL, 0, &je);
    json_object_set_new(root, "schema", json_string("canzona.calibration/2"));
    json_t *coll = json_pack(
        "[{s:s, s:i, s:b, s:I, s:f}, {s:s, s:i, s:b, s:I, s:f}, {s:s, s:i, s:b, s:I, s:f}]", "op",
        "all_reduce", "ranks", 8, "inter_node", 0, "bytes", (json_int_t)1048576, "seconds", 3e-5,
        "op", "all_gather", "ranks", 8, "inter_node", 0, "bytes", (json_int_t)4096, "seconds", 1e-5,
        "op", "all_reduce", "ranks", 8, "inter_node", 0, "bytes", (json_int_t)4096, "seconds",
        1.2e-5);
    json_object_set_new(root, "collectives", coll);
    char *text = json_dumps(root, 0);
    cz_calibration *cal = NULL;
    cz_error err;
    ck_assert_msg(cz__calibration_parse(&cal, text, strlen(text), "cal.json", &err) == CZ_OK, "%s",
                  err.message);
    ck_assert_int_eq(cal->version, 2);
    ck_assert_int_eq((int)cal->ncoll, 3);
    ck_assert(cal->coll[0].op == CZ_CAL_ALL_REDUCE && cal->coll[0].bytes == 4096);
    ck_assert(cal->coll[1].op == CZ_CAL_ALL_REDUCE && cal->coll[1].bytes == 1048576);
    ck_assert(cal->coll[2].op == CZ_CAL_ALL_GATHER);
    cz__calibration_free(cal);
    free(text);
    /* The same all-gather twice. */
    json_array_append(coll, json_array_get(coll, 1));
    text = json_dumps(root, 0);
    EXPECT(cz__calibration_parse(&cal, text, strlen(text), "cal.json", &e_), CZ_EINVALID,
           "$.collectives: two measurements of all_gather over 8 ranks (inside a node) of 4096");
    free(text);
    json_object_set_new(json_array_get(coll, 0), "op", json_string("broadcast"));
    text = json_dumps(root, 0);
    EXPECT(cz__calibration_parse(&cal, text, strlen(text), "cal.json", &e_), CZ_EINVALID,
           "$.collectives[0].op: expected one of \"all_reduce\"");
    free(text);
    json_decref(root);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("calibration");
    TCase *t = tcase_create("reader");
    tcase_add_test(t, bundled_h200);
    tcase_add_test(t, minimal_and_mistakes);
    tcase_add_test(t, collectives_v2);
    suite_add_tcase(s, t);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? 1 : 0;
}
