/* The GPU plugin's loader (gpu_loader.c) on the CPU: a library the plugin needs that the
 * system's search does not find is looked for in the loader's folders and loaded first; when
 * it is in none, the message names it and the folders searched. A fake plugin stands for the
 * real one: it needs libcz_fake_dep.so.1, built into a folder of its own (CZ_FAKE_DEP_DIR) and
 * not on the plugin's run path. Each test runs in its own process (Check forks), so a library
 * loaded by one is not there for the next. */
#include "cz_exec_testing.h"

#include <check.h>
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

static const char *plugin(void)
{
    const char *p = getenv("CZ_FAKE_PLUGIN");
    ck_assert_msg(p != NULL, "CZ_FAKE_PLUGIN is not set (run through ctest)");
    return p;
}

START_TEST(missing_library_named)
{
    cz_error err = {0};
    char dirs[] = "/nonexistent-a\0/nonexistent-b\0";
    void *h = cz__gpu_dlopen(plugin(), dirs, &err);
    ck_assert_ptr_null(h);
    ck_assert_int_eq(err.code, CZ_EUNSUPPORTED);
    ck_assert_msg(strstr(err.message, "need libcz_fake_dep.so.1, which was not found") != NULL,
                  "%s", err.message);
    ck_assert_msg(strstr(err.message, "/nonexistent-a, /nonexistent-b"), "%s", err.message);
    ck_assert_msg(strstr(err.message, "CZ_NVIDIA_LIBS"), "%s", err.message);
}
END_TEST

START_TEST(found_in_a_folder)
{
    cz_error err = {0};
    const char *dir = getenv("CZ_FAKE_DEP_DIR");
    ck_assert_ptr_nonnull(dir);
    size_t n = strlen(dir);
    char *dirs = calloc(n + 32, 1);
    memcpy(dirs, "/nonexistent", 12); /* the first folder lacks it, the second has it */
    memcpy(dirs + 13, dir, n);
    void *h = cz__gpu_dlopen(plugin(), dirs, &err);
    ck_assert_msg(h != NULL, "%s", err.message);
    int (*fn)(void);
    *(void **)&fn = dlsym(h, "cz_fake_plugin_value");
    ck_assert_ptr_nonnull(fn);
    ck_assert_int_eq(fn(), 43);
    free(dirs);
}
END_TEST

START_TEST(not_a_library)
{
    /* A failure that is not a missing library is reported as dlopen words it. */
    cz_error err = {0};
    const char *src = getenv("CZ_SOURCE_DIR");
    ck_assert_ptr_nonnull(src);
    char path[4096];
    snprintf(path, sizeof path, "%s/README.md", src);
    ck_assert_ptr_null(cz__gpu_dlopen(path, "\0", &err));
    ck_assert_msg(strstr(err.message, "the GPU plugin could not be loaded") != NULL, "%s",
                  err.message);
}
END_TEST

START_TEST(search_folders_listed)
{
    /* CZ_NVIDIA_LIBS comes first; folders that do not exist are left out. */
    const char *dir = getenv("CZ_FAKE_DEP_DIR");
    ck_assert_ptr_nonnull(dir);
    char env[4200];
    snprintf(env, sizeof env, "/nonexistent:%s", dir);
    setenv("CZ_NVIDIA_LIBS", env, 1);
    const char *list = cz__gpu_search_dirs();
    ck_assert_str_eq(list, dir);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("gpu_loader");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, missing_library_named);
    tcase_add_test(tc, found_in_a_folder);
    tcase_add_test(tc, not_a_library);
    tcase_add_test(tc, search_folders_listed);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
