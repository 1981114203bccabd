/* Tests of cz__cluster_load_sized: sizes from the command line override a cluster file's, DP is
 * derived as Megatron-LM derives it, contradictions are refused naming the numbers, and the
 * content hash is that of a file holding the resulting sizes. */
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
    ck_assert_ptr_nonnull(czt_tmpdir_make(tmpdir, sizeof tmpdir, "cz_sizes"));
}

static void remove_tmpdir(void)
{
    czt_tmpdir_remove(tmpdir);
}

static const char *cluster_file(const char *name, int gpus, int dp, int tp, int pp, int gpn)
{
    static char path[512];
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f,
            "{\"schema\": \"canzona.cluster/1\", \"name\": \"c\", \"gpus\": %d, \"dp\": %d, "
            "\"tp\": %d, \"pp\": %d, \"gpus_per_node\": %d, \"device\": {\"name\": \"x\", "
            "\"matmul_tflops\": 100, \"mem_gbps\": 1000, \"memory_gib\": 80}, \"links\": "
            "{\"intra_node_gbps\": 100, \"inter_node_gbps\": 10, \"latency_us\": 5}}\n",
            gpus, dp, tp, pp, gpn);
    fclose(f);
    return path;
}

static cz_cluster *load(const char *path, cz_cluster_sizes z)
{
    cz_cluster *c = NULL;
    cz_error err;
    ck_assert_msg(cz__cluster_load_sized(&c, path, &z, &err) == CZ_OK, "%s", err.message);
    return c;
}

START_TEST(test_derived_dp)
{
    const char *path = cluster_file("a.json", 256, 32, 8, 1, 8);
    /* TP 4 on the same 256 GPUs: DP = 256 / 4 = 64. */
    cz_cluster *c = load(path, (cz_cluster_sizes){.tp = 4});
    ck_assert_int_eq(c->gpus, 256);
    ck_assert_int_eq(c->dp, 64);
    ck_assert_int_eq(c->tp, 4);
    ck_assert_int_eq(c->pp, 1);
    cz_cluster_free(c);
    /* 4 nodes of 8 at TP 8 and PP 2: DP 2. */
    c = load(path, (cz_cluster_sizes){.nodes = 4, .tp = 8, .pp = 2});
    ck_assert_int_eq(c->gpus, 32);
    ck_assert_int_eq(c->dp, 2);
    cz_cluster_free(c);
    /* An explicit DP size sets the number of GPUs when no node count is given. */
    c = load(path, (cz_cluster_sizes){.dp = 16, .tp = 2, .gpus_per_node = 4});
    ck_assert_int_eq(c->gpus, 32);
    ck_assert_int_eq(c->gpus_per_node, 4);
    cz_cluster_free(c);
}
END_TEST

START_TEST(test_hash_of_the_result)
{
    /* The overridden cluster hashes like a file with those sizes written in, so a plan made with
     * --tp-size 4 validates against such a file. */
    cz_cluster *a = load(cluster_file("a.json", 256, 32, 8, 1, 8), (cz_cluster_sizes){.tp = 4});
    cz_cluster *b = NULL, *c = NULL;
    cz_error err;
    ck_assert_int_eq(cz_cluster_load(&b, cluster_file("b.json", 256, 64, 4, 1, 8), &err), CZ_OK);
    ck_assert_str_eq(a->sha256, b->sha256);
    ck_assert_int_eq(cz_cluster_load(&c, cluster_file("c.json", 256, 32, 8, 1, 8), &err), CZ_OK);
    ck_assert_str_ne(a->sha256, c->sha256);
    /* No sizes given: the file as it is. */
    cz_cluster *d = load(cluster_file("d.json", 256, 32, 8, 1, 8), (cz_cluster_sizes){0});
    ck_assert_str_eq(c->sha256, d->sha256);
    cz_cluster_free(a);
    cz_cluster_free(b);
    cz_cluster_free(c);
    cz_cluster_free(d);
}
END_TEST

START_TEST(test_contradictions)
{
    const char *path = cluster_file("a.json", 256, 32, 8, 1, 8);
    cz_cluster *c = NULL;
    cz_error err;
    ck_assert_int_eq(cz__cluster_load_sized(&c, path, &(cz_cluster_sizes){.tp = 3}, &err),
                     CZ_EINVALID);
    ck_assert_ptr_null(c);
    ck_assert_ptr_nonnull(strstr(err.message, "a.json"));
    ck_assert_ptr_nonnull(strstr(err.message, "TP size 3 x PP size 1 = 3 does not divide the 256"));
    ck_assert_int_eq(
        cz__cluster_load_sized(&c, path, &(cz_cluster_sizes){.dp = 16, .nodes = 4}, &err),
        CZ_EINVALID);
    ck_assert_ptr_nonnull(strstr(err.message, "DP size 16 x TP size 8 x PP size 1 = 128 GPUs"));
    ck_assert_ptr_nonnull(strstr(err.message, "4 nodes x 8 GPUs per node = 32"));
    /* A file's TP x PP beyond int is refused before DP multiplies it (no overflow). */
    path = cluster_file("huge.json", 1, 1, 2147483647, 2147483647, 8);
    ck_assert_int_eq(cz__cluster_load_sized(&c, path, &(cz_cluster_sizes){.dp = 1 << 20}, &err),
                     CZ_EINVALID);
    ck_assert_ptr_nonnull(strstr(err.message, "is more GPUs than supported"));
}
END_TEST

START_TEST(test_bucket_presets)
{
    /* A file with its own buckets {size 1000, align 128}. */
    static char path[512];
    snprintf(path, sizeof path, "%s/b.json", tmpdir);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs("{\"schema\": \"canzona.cluster/1\", \"name\": \"c\", \"gpus\": 256, \"dp\": 32, "
          "\"tp\": 8, \"pp\": 1, \"gpus_per_node\": 8, \"device\": {\"name\": \"x\", "
          "\"matmul_tflops\": 100, \"mem_gbps\": 1000, \"memory_gib\": 80}, \"links\": "
          "{\"intra_node_gbps\": 100, \"inter_node_gbps\": 10, \"latency_us\": 5}, "
          "\"buckets\": {\"size\": 1000, \"align\": 128}}\n",
          f);
    fclose(f);
    cz_cluster *c = load(path, (cz_cluster_sizes){.bucket_size = CZ_BUCKETS_PAPER});
    ck_assert_int_eq(c->bucket_size, 400000000);
    ck_assert_int_eq(c->bucket_align, 128);
    cz_cluster_free(c);
    /* Megatron's default max(4e7, 1e6 x DP): 4e7 at DP 32, 6.4e7 at DP 64 (TP 4). */
    c = load(path, (cz_cluster_sizes){.bucket_size = CZ_BUCKETS_MEGATRON});
    ck_assert_int_eq(c->bucket_size, 40000000);
    cz_cluster_free(c);
    c = load(path, (cz_cluster_sizes){.bucket_size = CZ_BUCKETS_MEGATRON, .tp = 4});
    ck_assert_int_eq(c->dp, 64);
    ck_assert_int_eq(c->bucket_size, 64000000);
    cz_cluster_free(c);
    /* A file without buckets gets one. */
    c = load(cluster_file("a.json", 256, 32, 8, 1, 8), (cz_cluster_sizes){.bucket_size = 5000});
    ck_assert_int_eq(c->bucket_size, 5000);
    ck_assert_int_eq(c->bucket_align, 64);
    cz_cluster_free(c);
}
END_TEST

START_TEST(test_parse_text)
{
    /* cz_cluster_parse: the same cluster and hash as the file of the same content, whatever
     * the text's layout; its errors name the given name. */
    const char *path = cluster_file("a.json", 256, 32, 8, 1, 8);
    cz_cluster *a = NULL, *b = NULL;
    cz_error err;
    ck_assert_int_eq(cz_cluster_load(&a, path, &err), CZ_OK);
    char text[1024];
    FILE *f = fopen(path, "r");
    ck_assert_ptr_nonnull(f);
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = '\0';
    for (char *c = text; *c; c++) /* another layout, the same content */
        if (*c == ' ')
            *c = '\n';
    ck_assert_msg(cz_cluster_parse(&b, text, "job", &err) == CZ_OK, "%s", err.message);
    ck_assert_int_eq(b->dp, 32);
    ck_assert_int_eq(b->tp, 8);
    ck_assert_str_eq(a->sha256, b->sha256);
    cz_cluster_free(a);
    cz_cluster_free(b);
    ck_assert_int_eq(cz_cluster_parse(&b, "{\"schema\": \"canzona.cluster/1\"", "job", &err),
                     CZ_EPARSE);
    ck_assert_ptr_nonnull(strstr(err.message, "job:1:"));
    ck_assert_int_eq(
        cz_cluster_parse(&b, "{\"schema\": \"canzona.cluster/1\", \"name\": 1}", NULL, &err),
        CZ_EINVALID);
    ck_assert_ptr_nonnull(strstr(err.message, "<cluster text>"));
    ck_assert_ptr_null(b);
}
END_TEST

static Suite *sizes_suite(void)
{
    Suite *s = suite_create("cluster_sizes");
    TCase *t = tcase_create("sizes");
    tcase_add_checked_fixture(t, make_tmpdir, remove_tmpdir);
    tcase_add_test(t, test_derived_dp);
    tcase_add_test(t, test_hash_of_the_result);
    tcase_add_test(t, test_parse_text);
    tcase_add_test(t, test_contradictions);
    tcase_add_test(t, test_bucket_presets);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(sizes_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
