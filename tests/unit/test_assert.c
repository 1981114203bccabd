/* CZ_ASSERT in both builds: the release form returns CZ_EINTERNAL and says where, the debug
 * form aborts. Both forms are compiled here, whatever the build type, by including the header
 * once with NDEBUG and once without. */
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef NDEBUG
#define NDEBUG
#endif
#include "cz_assert.h"

static int release_line; /* the line of CZ_ASSERT in release_check */

static int release_check(int v, cz_error *err)
{
    release_line = __LINE__ + 1;
    CZ_ASSERT(v >= 0, err);
    return CZ_OK;
}

static int release_check_goto(int v, int *cleaned, cz_error *err)
{
    int rc = CZ_OK;
    CZ_ASSERT_GOTO(v >= 0, err, rc, out);
    rc = 1;
out:
    *cleaned = 1;
    return rc;
}

#undef NDEBUG
#undef CZ_ASSERT_H
#undef CZ_ASSERT_FAIL_
#undef CZ_ASSERT
#undef CZ_ASSERT_GOTO
#include "cz_assert.h"

static int debug_check(int v, cz_error *err)
{
    CZ_ASSERT(v >= 0, err);
    return CZ_OK;
}

START_TEST(test_release_holds)
{
    cz_error err = {0};
    ck_assert_int_eq(release_check(3, &err), CZ_OK);
    ck_assert_int_eq(err.code, CZ_OK);
}
END_TEST

START_TEST(test_release_fails_with_place)
{
    cz_error err = {0};
    char want[64];
    ck_assert_int_eq(release_check(-1, &err), CZ_EINTERNAL);
    ck_assert_int_eq(err.code, CZ_EINTERNAL);
    snprintf(want, sizeof want, "test_assert.c:%d: ", release_line);
    ck_assert_msg(strstr(err.message, want) != NULL, "message '%s' lacks '%s'", err.message, want);
    ck_assert_ptr_nonnull(strstr(err.message, "'v >= 0'"));
    ck_assert_ptr_nonnull(strstr(err.message, "a planner bug"));
}
END_TEST

START_TEST(test_release_goto_cleans_up)
{
    cz_error err = {0};
    int cleaned = 0;
    ck_assert_int_eq(release_check_goto(-5, &cleaned, &err), CZ_EINTERNAL);
    ck_assert_int_eq(cleaned, 1);
    cleaned = 0;
    ck_assert_int_eq(release_check_goto(5, &cleaned, &err), 1);
    ck_assert_int_eq(cleaned, 1);
}
END_TEST

START_TEST(test_debug_holds)
{
    ck_assert_int_eq(debug_check(0, NULL), CZ_OK);
}
END_TEST

START_TEST(test_debug_aborts)
{
    debug_check(-1, NULL);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("assert");
    TCase *tc = tcase_create("forms");
    tcase_add_test(tc, test_release_holds);
    tcase_add_test(tc, test_release_fails_with_place);
    tcase_add_test(tc, test_release_goto_cleans_up);
    tcase_add_test(tc, test_debug_holds);
    tcase_add_test_raise_signal(tc, test_debug_aborts, SIGABRT);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
