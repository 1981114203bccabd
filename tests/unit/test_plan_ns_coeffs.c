/* Newton-Schulz coefficient sets in planning: a table's row count is the iteration count the
 * cost model prices (a different ns_steps is refused), the plan keeps its own canonical copy,
 * files record it only when it is not jordan and read it back, refusing a file whose ns_steps
 * disagrees with its table. */
#include "cz_test_util.h"
#include "cz_types.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char tmpdir[256];

static void make_tmpdir(void)
{
    ck_assert_ptr_nonnull(czt_tmpdir_make(tmpdir, sizeof tmpdir, "cz_ns_coeffs"));
}

static void remove_tmpdir(void)
{
    czt_tmpdir_remove(tmpdir);
}

static cz_model *model(void)
{
    cz_model *m = czt_model_new("two", CZ_DTYPE_BF16, 0);
    czt_model_add(m, "w", 64, 256, -1, CZ_KIND_MATRIX, -1);
    czt_model_add(m, "v", 128, 128, -1, CZ_KIND_MATRIX, -1);
    return m;
}

static cz_plan *build(const char *coeffs, int steps, int want_rc, cz_error *err)
{
    cz_model *m = model();
    cz_cluster *c = czt_cluster_new(1, 1, 1);
    cz_settings s;
    cz_plan *p = NULL;
    cz_settings_init(&s);
    s.unit = CZ_UNIT_FLOPS;
    s.ns_coeffs = coeffs;
    s.ns_steps = steps;
    ck_assert_int_eq(cz_plan_build(&p, m, c, &s, err), want_rc);
    cz_model_free(m);
    cz_cluster_free(c);
    return p;
}

START_TEST(cost_follows_the_rows)
{
    cz_error err;
    char table[] = "3, -3.2, 1.2; 2, -1.5, 0.5; 1.875, -1.25, 0.375";
    cz_plan *five = build(NULL, 5, CZ_OK, &err), *three = build(NULL, 3, CZ_OK, &err);
    cz_plan *pe = build("polar_express", 5, CZ_OK, &err), *t3 = build(table, 3, CZ_OK, &err);
    ck_assert_ptr_null(five->settings.ns_coeffs);
    ck_assert_str_eq(pe->settings.ns_coeffs, "polar_express");
    ck_assert_str_eq(t3->settings.ns_coeffs,
                     "3,-3.2000000000000002,1.2;2,-1.5,0.5;1.875,-1.25,0.375");
    /* the copy is the plan's: the caller's string may go */
    memset(table, 'x', sizeof table - 1);
    ck_assert_str_eq(t3->settings.ns_coeffs,
                     "3,-3.2000000000000002,1.2;2,-1.5,0.5;1.875,-1.25,0.375");
    for (size_t i = 0; i < five->nparams; i++) {
        ck_assert_double_eq(pe->params[i].cost, five->params[i].cost);
        ck_assert_double_eq(t3->params[i].cost, three->params[i].cost);
        ck_assert_double_lt(t3->params[i].cost, five->params[i].cost);
    }
    cz_plan_free(five);
    cz_plan_free(three);
    cz_plan_free(pe);
    cz_plan_free(t3);
    /* the jordan name is the default: not recorded */
    cz_plan *j = build("jordan", 7, CZ_OK, &err);
    ck_assert_ptr_null(j->settings.ns_coeffs);
    cz_plan_free(j);
}
END_TEST

START_TEST(conflicts_refused)
{
    cz_error err;
    ck_assert_ptr_null(build("polar_express", 8, CZ_EINVALID, &err));
    ck_assert_ptr_nonnull(strstr(err.message, "has 5 rows, one per iteration; set ns_steps to 5"));
    ck_assert_ptr_null(build("quintic", 5, CZ_EINVALID, &err));
    ck_assert_ptr_nonnull(strstr(err.message, "unknown Newton-Schulz coefficient set 'quintic'"));
    ck_assert_ptr_null(build("1,2,3;4,5", 2, CZ_EINVALID, &err));
    ck_assert_ptr_nonnull(strstr(err.message, "row 2 has fewer than 3"));
}
END_TEST

START_TEST(files_record_and_read_back)
{
    cz_error err;
    char a[512], b[512], c[512];
    snprintf(a, sizeof a, "%s/jordan.json", tmpdir);
    snprintf(b, sizeof b, "%s/table.json", tmpdir);
    snprintf(c, sizeof c, "%s/bad.json", tmpdir);
    cz_plan *j = build(NULL, 5, CZ_OK, &err), *t = build("1.5,-0.5,0;2,-1.5,0.5", 2, CZ_OK, &err);
    ck_assert_msg(cz_plan_write(j, a, &err) == CZ_OK, "%s", err.message);
    ck_assert_msg(cz_plan_write(t, b, &err) == CZ_OK, "%s", err.message);
    char *ta = czt_slurp(a, NULL), *tb = czt_slurp(b, NULL);
    ck_assert(ta && tb);
    ck_assert_ptr_null(strstr(ta, "ns_coeffs"));
    ck_assert_ptr_nonnull(strstr(tb, "\"ns_coeffs\": \"1.5,-0.5,0;2,-1.5,0.5\""));
    cz_plan *q = NULL;
    ck_assert_msg(cz_plan_read(&q, b, &err) == CZ_OK, "%s", err.message);
    ck_assert_str_eq(q->settings.ns_coeffs, t->settings.ns_coeffs);
    ck_assert_int_eq(q->settings.ns_steps, 2);
    cz_plan_free(q);
    q = NULL;
    /* the same file with another ns_steps: refused, naming the key */
    char *at = strstr(tb, "\"ns_steps\": 2");
    ck_assert_ptr_nonnull(at);
    at[strlen("\"ns_steps\": ")] = '3';
    FILE *f = fopen(c, "wb");
    ck_assert_ptr_nonnull(f);
    fputs(tb, f);
    fclose(f);
    ck_assert_int_eq(cz_plan_read(&q, c, &err), CZ_EINVALID);
    ck_assert_ptr_nonnull(strstr(err.message, "$.settings.ns_coeffs"));
    ck_assert_ptr_nonnull(strstr(err.message, "set ns_steps to 2"));
    ck_assert_ptr_null(q);
    free(ta);
    free(tb);
    cz_plan_free(j);
    cz_plan_free(t);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("plan_ns_coeffs");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, make_tmpdir, remove_tmpdir);
    tcase_add_test(tc, cost_follows_the_rows);
    tcase_add_test(tc, conflicts_refused);
    tcase_add_test(tc, files_record_and_read_back);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
