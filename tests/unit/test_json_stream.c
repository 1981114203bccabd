/* The streaming JSON writer against the jansson the build links: for random documents and for
 * the edge cases of number and string formatting, the file text must be json_dumps's with
 * JSON_PRESERVE_ORDER | JSON_INDENT(1) | JSON_REAL_PRECISION(17), and the hash the SHA-256 of
 * json_dumps's JSON_COMPACT | JSON_SORT_KEYS | JSON_REAL_PRECISION(17) (docs/FORMATS.md section
 * 5): what keeps plan files and their content hashes as they were before the writer streamed. */
#include "json_stream.h"

#include <check.h>
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng = 88172645463325252ull;
static uint64_t next(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static const char *const keys[] = {"id",   "name", "shape", "b",   "a",   "z",       "aa",
                                   "ab",   "A",    "load",  "ä",   "x y", "content", "zz",
                                   "cost", "\t",   "",      "k\"", "_",   "slots"};
static const double reals[] = {0.0,
                               -0.0,
                               1.0,
                               0.1,
                               1e16,
                               1e17,
                               1.5e17,
                               1e-5,
                               1e-4,
                               123.456,
                               5e-324,
                               1.7976931348623157e308,
                               -2.5e-7,
                               1e300,
                               0.3333333333333333,
                               12345678901234567.0,
                               2.0,
                               -1e-300,
                               9.9999999999999995e-8,
                               1e21,
                               1e22};
static const char *const strs[] = {
    "plain",      "",          "quote\"back\\slash",     "ctl\x01\x1f\x7f",
    "\b\f\n\r\t", "ünïcödé €", "emoji \xf0\x9f\x98\x80", "/slash/"};

/* The same random value into a jansson tree (returned) and the stream, under key (NULL in an
 * array). Object keys may repeat in the random draw: jansson keeps the last value in the first
 * position, which the stream cannot do, so a repeated key is skipped in both. */
static json_t *gen(cz_jstream *w, const char *key, int depth)
{
    int kind = (int)(next() % (depth > 3 ? 5 : 7));
    switch (kind) {
    case 0: {
        int64_t v = (int64_t)next() >> (next() % 64);
        cz__jw_int(w, key, v);
        return json_integer(v);
    }
    case 1: {
        double v = reals[next() % (sizeof reals / sizeof *reals)];
        if (next() % 2)
            v = (double)(int64_t)next() / (double)(1 + next() % 1000000);
        cz__jw_real(w, key, v);
        return json_real(v);
    }
    case 2: {
        const char *s = strs[next() % (sizeof strs / sizeof *strs)];
        cz__jw_string(w, key, s);
        return json_string(s);
    }
    case 3: {
        bool v = next() % 2;
        cz__jw_bool(w, key, v);
        return json_boolean(v);
    }
    case 4:
        cz__jw_null(w, key);
        return json_null();
    case 5: {
        json_t *a = json_array();
        int n = (int)(next() % 5);
        cz__jw_begin_array(w, key);
        for (int i = 0; i < n; i++)
            json_array_append_new(a, gen(w, NULL, depth + 1));
        cz__jw_end(w);
        return a;
    }
    default: {
        json_t *o = json_object();
        int n = (int)(next() % 7);
        cz__jw_begin_object(w, key);
        for (int i = 0; i < n; i++) {
            const char *k = keys[next() % (sizeof keys / sizeof *keys)];
            if (json_object_get(o, k))
                continue;
            json_object_set_new(o, k, gen(w, k, depth + 1));
        }
        cz__jw_end(w);
        return o;
    }
    }
}

static void check_doc(int members)
{
    cz_jstream w;
    cz__jw_init(&w);
    json_t *root = json_object();
    cz__jw_begin_object(&w, NULL);
    for (int i = 0; i < members; i++) {
        const char *k = keys[next() % (sizeof keys / sizeof *keys)];
        if (json_object_get(root, k) || strcmp(k, "content") == 0)
            continue;
        json_object_set_new(root, k, gen(&w, k, 1));
    }
    char hash[65], want_hash[65];
    cz__jw_end_with_hash(&w, "content", hash);
    cz__jw_newline(&w);
    ck_assert_int_eq(w.rc, CZ_OK);
    char *canon = json_dumps(root, JSON_COMPACT | JSON_SORT_KEYS | JSON_REAL_PRECISION(17));
    ck_assert_ptr_nonnull(canon);
    cz__sha256_hex(canon, strlen(canon), want_hash);
    ck_assert_str_eq(hash, want_hash);
    json_object_set_new(root, "content", json_string(want_hash));
    char *file = json_dumps(root, JSON_PRESERVE_ORDER | JSON_INDENT(1) | JSON_REAL_PRECISION(17));
    size_t len = 0;
    char *got = cz__jw_take(&w, &len);
    ck_assert_ptr_nonnull(got);
    ck_assert_uint_eq(len, strlen(file) + 1);
    ck_assert_int_eq(got[len - 1], '\n');
    got[len - 1] = '\0';
    ck_assert_str_eq(got, file);
    free(got);
    free(file);
    free(canon);
    json_decref(root);
    cz__jw_free(&w);
}

START_TEST(test_random_documents)
{
    for (int i = 0; i < 400; i++)
        check_doc(1 + i % 12);
}
END_TEST

START_TEST(test_empty_object)
{
    check_doc(0);
}
END_TEST

/* Every edge value alone, as a member of the top-level object. */
START_TEST(test_reals_as_jansson)
{
    for (size_t i = 0; i < sizeof reals / sizeof *reals; i++) {
        cz_jstream w;
        cz__jw_init(&w);
        cz__jw_begin_array(&w, NULL);
        cz__jw_real(&w, NULL, reals[i]);
        cz__jw_end(&w);
        json_t *a = json_pack("[f]", reals[i]);
        char *want = json_dumps(a, JSON_INDENT(1) | JSON_REAL_PRECISION(17));
        size_t len;
        char *got = cz__jw_take(&w, &len);
        ck_assert_ptr_nonnull(got);
        ck_assert_str_eq(got, want);
        free(got);
        free(want);
        json_decref(a);
        cz__jw_free(&w);
    }
}
END_TEST

/* What JSON cannot hold is refused, with the first failure kept. */
START_TEST(test_refusals)
{
    cz_jstream w;
    cz__jw_init(&w);
    cz__jw_begin_object(&w, NULL);
    cz__jw_real(&w, "nan", NAN);
    ck_assert_int_eq(w.rc, CZ_EINTERNAL);
    cz__jw_string(&w, "s", "\xff");
    ck_assert_int_eq(w.rc, CZ_EINTERNAL); /* the first failure is kept */
    size_t len;
    ck_assert_ptr_null(cz__jw_take(&w, &len));
    cz__jw_free(&w);

    static const char *const bad[] = {"\xc0\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xe2\x82",
                                      "\x80"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        cz__jw_init(&w);
        cz__jw_begin_array(&w, NULL);
        cz__jw_string(&w, NULL, bad[i]);
        ck_assert_int_eq(w.rc, CZ_EINVALID);
        ck_assert_ptr_null(json_string(bad[i])); /* jansson refuses the same strings */
        cz__jw_free(&w);
    }

    cz__jw_init(&w);
    cz__jw_begin_array(&w, NULL);
    cz__jw_int(&w, "key", 1); /* a key inside an array */
    ck_assert_int_eq(w.rc, CZ_EINTERNAL);
    cz__jw_free(&w);

    cz__jw_init(&w);
    cz__jw_end(&w); /* nothing open */
    ck_assert_int_eq(w.rc, CZ_EINTERNAL);
    cz__jw_free(&w);
}
END_TEST

/* The incremental SHA-256 agrees with the one-shot form for every split of the input. */
START_TEST(test_sha256_pieces)
{
    char data[300];
    for (size_t i = 0; i < sizeof data; i++)
        data[i] = (char)(next() & 0xff);
    char whole[65], pieces[65];
    for (size_t n = 0; n <= sizeof data; n += 7) {
        cz__sha256_hex(data, n, whole);
        for (size_t cut = 0; cut <= n; cut += 13) {
            cz_sha256 s;
            cz__sha256_init(&s);
            cz__sha256_update(&s, data, cut);
            cz__sha256_update(&s, data + cut, n - cut);
            cz__sha256_final(&s, pieces);
            ck_assert_str_eq(whole, pieces);
        }
    }
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("json_stream");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_random_documents);
    tcase_add_test(tc, test_empty_object);
    tcase_add_test(tc, test_reals_as_jansson);
    tcase_add_test(tc, test_refusals);
    tcase_add_test(tc, test_sha256_pieces);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
