/* cz_executor_create from a file: refusals before and while reading the plan. */
#include "canzona_exec.h"
#include "cz_format.h"
#include "cz_exec_testing.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static char path[256];

static void write_file(const char *text)
{
    const char *dir = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(path, sizeof path, "%s/cz_exec_open_%d.json", dir, (int)getpid());
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
}

static int create(cz_error *err)
{
    cz_exec_config cfg;
    cz_exec_config_init(&cfg);
    cfg.comm = "self";
    cz_executor *ex = (cz_executor *)&cfg; /* must be reset to NULL on failure */
    int rc = cz_executor_create(&ex, path, &cfg, err);
    ck_assert_ptr_null(ex);
    return rc;
}

START_TEST(schema_version)
{
    cz_error err;
    write_file("{\"schema\": \"canzona.plan/5\", \"params\": []}");
    ck_assert_int_eq(create(&err), CZ_EUNSUPPORTED);
    /* One parse: the reader checks $.schema before anything else and names the versions. */
    ck_assert_ptr_nonnull(
        strstr(err.message, "$.schema: unsupported schema version \"canzona.plan/5\""));
    ck_assert_ptr_nonnull(strstr(err.message, "reads \"canzona.plan/1\", \"canzona.plan/2\", "
                                              "\"canzona.plan/3\" and \"canzona.plan/4\""));
    /* Version 3 (expert groups) gets past the schema check to the reader. */
    write_file("{\"schema\": \"canzona.plan/3\", \"params\": []}");
    ck_assert_int_ne(create(&err), CZ_OK);
    ck_assert_ptr_null(strstr(err.message, "$.schema:"));
    /* Version 2 (block and cooperative tasks) gets past the schema check to the reader. */
    write_file("{\"schema\": \"canzona.plan/2\", \"params\": []}");
    ck_assert_int_ne(create(&err), CZ_OK);
    ck_assert_ptr_null(strstr(err.message, "$.schema:"));
    write_file("{\"params\": []}");
    ck_assert_int_eq(create(&err), CZ_EINVALID);
    ck_assert_ptr_nonnull(strstr(err.message, "missing required key \"schema\""));
    unlink(path);
}
END_TEST

START_TEST(bad_files)
{
    cz_error err;
    write_file("{\"schema\": ");
    ck_assert_int_eq(create(&err), CZ_EPARSE);
    ck_assert_ptr_nonnull(strstr(err.message, path));
    unlink(path);
    ck_assert_int_eq(create(&err), CZ_EIO);
    ck_assert_ptr_nonnull(strstr(err.message, path));
    /* Right schema, wrong content: the plan reader's message comes through. */
    write_file("{\"schema\": \"canzona.plan/1\"}");
    ck_assert_int_lt(create(&err), 0);
    ck_assert_ptr_nonnull(strstr(err.message, "$"));
    unlink(path);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("exec_open");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, schema_version);
    tcase_add_test(tc, bad_files);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
