/* The .npy reader of canzona-bench (--init-dir): crafted files in a temporary folder, each
 * accepted or refused with a message naming what is wrong; and the file names given to
 * parameters in --dump-dir and --init-dir. */
#include "npy.h"

#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

static char dir[256], path[300];

static void setup(void)
{
    const char *tmp = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(dir, sizeof dir, "%s/cz_npy_XXXXXX", tmp);
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/a.npy", dir);
}

static void teardown(void)
{
    unlink(path);
    rmdir(dir);
}

/* Writes a version 1.0 file: header text padded with spaces and a newline as numpy does, then
 * nvalues float32 values (value k = k, or bad at index bad_at) and extra trailing bytes. */
static void craft(const char *header, size_t nvalues, long bad_at, float bad, size_t extra)
{
    size_t n = strlen(header);
    size_t total = 10 + n + 1, pad = (64 - total % 64) % 64, hlen = n + pad + 1;
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    unsigned char head[10] = {0x93,
                              'N',
                              'U',
                              'M',
                              'P',
                              'Y',
                              1,
                              0,
                              (unsigned char)(hlen & 0xff),
                              (unsigned char)(hlen >> 8)};
    fwrite(head, 1, 10, f);
    fwrite(header, 1, n, f);
    for (size_t i = 0; i < pad; i++)
        fputc(' ', f);
    fputc('\n', f);
    for (size_t k = 0; k < nvalues; k++) {
        float v = (long)k == bad_at ? bad : (float)k;
        fwrite(&v, sizeof v, 1, f);
    }
    for (size_t i = 0; i < extra; i++)
        fputc(0, f);
    fclose(f);
}

static void expect_ok(int ndim, int64_t rows, int64_t cols)
{
    float *data = NULL;
    cz_error err;
    int rc = cz_npy_read(path, ndim, rows, cols, &data, &err);
    ck_assert_msg(rc == 0, "%s", err.message);
    for (int64_t k = 0; k < rows * (ndim == 1 ? 1 : cols); k++)
        ck_assert_float_eq(data[k], (float)k);
    free(data);
}

static void expect_refused(int ndim, int64_t rows, int64_t cols, const char *frag)
{
    float *data = (float *)&data; /* must come back NULL */
    cz_error err;
    cz_error_clear(&err);
    ck_assert_int_ne(cz_npy_read(path, ndim, rows, cols, &data, &err), 0);
    ck_assert_ptr_null(data);
    ck_assert_msg(strstr(err.message, frag), "message '%s' lacks '%s'", err.message, frag);
    ck_assert_ptr_nonnull(strstr(err.message, path));
}

START_TEST(round_trip)
{
    float v[6] = {0, 1, 2, 3, 4, 5};
    cz_error err;
    ck_assert_int_eq(cz_npy_write(path, v, 2, 2, 3, &err), 0);
    expect_ok(2, 2, 3);
    ck_assert_int_eq(cz_npy_write(path, v, 1, 6, 1, &err), 0);
    expect_ok(1, 6, 1);
}
END_TEST

START_TEST(dict_syntax)
{
    /* Any key order, either quote, whitespace anywhere Python allows, trailing comma or not. */
    craft("{ \"shape\" : ( 2 ,3 ) ,'fortran_order':False,\t'descr' : \"<f4\" }", 6, -1, 0, 0);
    expect_ok(2, 2, 3);
    craft("{'descr': '<f4', 'fortran_order': False, 'shape': (6,)}", 6, -1, 0, 0);
    expect_ok(1, 6, 1);
    craft("{'descr': '<f4', 'fortran_order': False, 'shape': (6), }", 6, -1, 0, 0);
    expect_refused(1, 6, 1, "header 'shape': expected a tuple of integers");
    craft("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), 'x': 1}", 6, -1, 0, 0);
    expect_refused(2, 2, 3, "header has key 'x' (unknown)");
    craft("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2, 3)}", 6, -1, 0, 0);
    expect_refused(2, 2, 3, "header has key 'descr' twice");
    craft("{'descr': '<f4', 'shape': (2, 3)}", 6, -1, 0, 0);
    expect_refused(2, 2, 3, "header lacks 'fortran_order'");
    craft("{'descr': '<f4' 'fortran_order': False, 'shape': (2, 3)}", 6, -1, 0, 0);
    expect_refused(2, 2, 3, "expected ',' or '}'");
    craft("not a dict", 6, -1, 0, 0);
    expect_refused(2, 2, 3, "header is not a Python dict literal");
}
END_TEST

START_TEST(wrong_dims)
{
    /* The first two dimensions match: a substring match on "(2, 3" accepted this. */
    craft("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3, 4), }", 24, -1, 0, 0);
    expect_refused(2, 2, 3, "header shape (2, 3, 4); expected (2, 3)");
    craft("{'descr': '<f4', 'fortran_order': False, 'shape': (6,), }", 6, -1, 0, 0);
    expect_refused(2, 2, 3, "header shape (6,); expected (2, 3)");
    craft("{'descr': '<f4', 'fortran_order': False, 'shape': (3, 2), }", 6, -1, 0, 0);
    expect_refused(2, 2, 3, "header shape (3, 2); expected (2, 3)");
}
END_TEST

START_TEST(wrong_dtype_or_order)
{
    craft("{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), }", 12, -1, 0, 0);
    expect_refused(2, 2, 3, "dtype '<f8'; expected '<f4'");
    /* '<f4' and False elsewhere in the header no longer pass for the real values. */
    craft("{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), } '<f4'", 12, -1, 0, 0);
    expect_refused(2, 2, 3, "header has bytes after the dict");
    craft("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), } False", 6, -1, 0, 0);
    expect_refused(2, 2, 3, "header has bytes after the dict");
    craft("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }", 6, -1, 0, 0);
    expect_refused(2, 2, 3, "fortran_order is True; expected False");
}
END_TEST

START_TEST(data_length)
{
    craft("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 6, -1, 0, 4);
    expect_refused(2, 2, 3, "trailing bytes after the 6 float32 values");
    craft("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 6, -1, 0, 1);
    expect_refused(2, 2, 3, "trailing bytes");
    craft("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 5, -1, 0, 0);
    expect_refused(2, 2, 3, "truncated data: expected 6 float32 values, found 5");
}
END_TEST

START_TEST(non_finite_values)
{
    craft("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 6, 4, NAN, 0);
    expect_refused(2, 2, 3, "element 4 (row 1, column 1) is NaN; initial values must be finite");
    craft("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 6, 0, -INFINITY, 0);
    expect_refused(2, 2, 3, "element 0 (row 0, column 0) is infinite");
}
END_TEST

/* --dump-dir on a full disk: the write fails with the file and the system's reason named, and
 * the file keeps its old content (no truncated .npy, no temporary file left). */
START_TEST(write_errors_keep_the_old_file)
{
    float old[4] = {0, 1, 2, 3};
    static float big[8192];
    cz_error err;
    ck_assert_int_eq(cz_npy_write(path, old, 1, 4, 1, &err), 0);
    /* A disk that fills after 4 KiB, as this test process sees it: writes past a file-size
     * limit fail (EFBIG) where a full disk's fail with ENOSPC. The test runs in its own
     * process (Check's fork mode), so the limit ends with it. */
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit rl = {4096, 4096};
    ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &rl), 0);
    ck_assert_int_eq(cz_npy_write(path, big, 1, 8192, 1, &err), CZ_EIO);
    ck_assert_msg(strstr(err.message, path) && strstr(err.message, strerror(EFBIG)), "%s",
                  err.message);
    expect_ok(1, 4, 1);
    int entries = 0;
    DIR *d = opendir(dir);
    ck_assert_ptr_nonnull(d);
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        entries += e->d_name[0] != '.';
    closedir(d);
    ck_assert_int_eq(entries, 1);
    /* A full device is written in place (never replaced) and its error named. */
    if (access("/dev/full", W_OK) == 0) {
        ck_assert_int_eq(cz_npy_write("/dev/full", old, 1, 4, 1, &err), CZ_EIO);
        ck_assert_msg(strstr(err.message, "/dev/full") && strstr(err.message, strerror(ENOSPC)),
                      "%s", err.message);
    }
}
END_TEST

/* --dump-dir and --init-dir files are named after parameters: a name never leaves the folder. */
START_TEST(param_paths)
{
    char *p = NULL;
    cz_error err;
    ck_assert_int_eq(cz_npy_param_path("d", "decoder.layers.0.mlp.weight", &p, &err), 0);
    ck_assert_str_eq(p, "d/decoder.layers.0.mlp.weight.npy");
    free(p);
    ck_assert_int_eq(cz_npy_param_path("d", "..weight", &p, &err), 0); /* a plain file name */
    ck_assert_str_eq(p, "d/..weight.npy");
    free(p);
    const char *bad[] = {"../x", "a/../../etc/x", "/etc/passwd", "a/b", "..", ".", ""};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        p = (char *)bad;
        ck_assert_int_eq(cz_npy_param_path("d", bad[i], &p, &err), CZ_EINVALID);
        ck_assert_ptr_null(p);
        ck_assert_msg(strstr(err.message, "cannot be a file name inside d"), "%s", err.message);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("npy");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, round_trip);
    tcase_add_test(tc, dict_syntax);
    tcase_add_test(tc, wrong_dims);
    tcase_add_test(tc, wrong_dtype_or_order);
    tcase_add_test(tc, data_length);
    tcase_add_test(tc, non_finite_values);
    tcase_add_test(tc, param_paths);
    tcase_add_test(tc, write_errors_keep_the_old_file);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
