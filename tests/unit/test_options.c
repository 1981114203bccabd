/* The public options structs (canzona.h): each *_INIT macro holds the same values as its *_init
 * function, and each function refuses a struct of another version (or one left zeroed) with
 * CZ_EUNSUPPORTED, naming the struct and the way to initialize it. */
#include "cz_hand_plan.h"
#include "cz_types.h"

#include <check.h>
#include <stdlib.h>
#include <string.h>

/* A struct filled by its function over garbage equals the macro's static copy byte for byte
 * (both copy a static object, so padding is zero in both). */
#define EXPECT_INIT_MATCHES(type, macro, init)                                                     \
    do {                                                                                           \
        static const type from_macro = macro;                                                      \
        type from_init;                                                                            \
        memset(&from_init, 0xa5, sizeof from_init);                                                \
        init(&from_init);                                                                          \
        ck_assert_msg(memcmp(&from_macro, &from_init, sizeof from_init) == 0,                      \
                      #macro " differs from " #init "()");                                         \
    } while (0)

START_TEST(test_init_macros)
{
    EXPECT_INIT_MATCHES(cz_settings, CZ_SETTINGS_INIT, cz_settings_init);
    EXPECT_INIT_MATCHES(cz_inspect_options, CZ_INSPECT_OPTIONS_INIT, cz_inspect_options_init);
    EXPECT_INIT_MATCHES(cz_diff_options, CZ_DIFF_OPTIONS_INIT, cz_diff_options_init);
    EXPECT_INIT_MATCHES(cz_sim_options, CZ_SIM_OPTIONS_INIT, cz_sim_options_init);
    EXPECT_INIT_MATCHES(cz_render_options, CZ_RENDER_OPTIONS_INIT, cz_render_options_init);
    EXPECT_INIT_MATCHES(cz_import_hf_options, CZ_IMPORT_HF_OPTIONS_INIT, cz_import_hf_options_init);
    cz_settings s = CZ_SETTINGS_INIT;
    ck_assert_int_eq(s.version, CZ_SETTINGS_VERSION);
    ck_assert_int_eq(s.dp, CZ_DP_ALPHA);
    ck_assert_int_eq(s.tp, CZ_TP_ROLLBACK);
    ck_assert_int_eq(s.ns_steps, 5);
}
END_TEST

static void expect_refused(int rc, const cz_error *err, const char *type)
{
    ck_assert_int_eq(rc, CZ_EUNSUPPORTED);
    ck_assert_msg(strstr(err->message, type) && strstr(err->message, "_init()"),
                  "message does not name %s and its init: %s", type, err->message);
}

START_TEST(test_versions_refused)
{
    cz_plan *p = hand_plan();
    cz_error err;
    cz_report *report = NULL;
    cz_sim_result *sim = NULL;
    char *text = NULL;

    cz_inspect_options io = CZ_INSPECT_OPTIONS_INIT;
    io.version = 0;
    expect_refused(cz_plan_inspect(&report, p, &io, &err), &err, "cz_inspect_options");
    cz_diff_options dopt = CZ_DIFF_OPTIONS_INIT;
    dopt.version = CZ_DIFF_OPTIONS_VERSION + 1;
    expect_refused(cz_plan_diff(&report, p, p, &dopt, &err), &err, "cz_diff_options");
    cz_sim_options so = {0};
    expect_refused(cz_plan_simulate(&sim, p, NULL, &so, &err), &err, "cz_sim_options");
    cz_render_options ro = CZ_RENDER_OPTIONS_INIT;
    ro.version = 0;
    expect_refused(cz_plan_render(&text, p, NULL, &ro, &err), &err, "cz_render_options");
    /* The simulation options a rendering carries are checked too. */
    cz_render_options_init(&ro);
    ro.sim = &so;
    expect_refused(cz_plan_render(&text, p, NULL, &ro, &err), &err, "cz_sim_options");
    cz_import_hf_options ho = CZ_IMPORT_HF_OPTIONS_INIT;
    ho.version = 0;
    expect_refused(cz_model_import_hf(&text, "unused.json", &ho, &err), &err,
                   "cz_import_hf_options");
    ck_assert_ptr_null(report);
    ck_assert_ptr_null(sim);
    ck_assert_ptr_null(text);

    /* The current version is accepted (the hand plan simulates without a cluster). */
    cz_sim_options_init(&so);
    ck_assert_int_eq(cz_plan_simulate(&sim, p, NULL, &so, &err), CZ_OK);
    cz_sim_result_free(sim);
    cz_plan_free(p);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("options");
    TCase *tc = tcase_create("options");
    tcase_add_test(tc, test_init_macros);
    tcase_add_test(tc, test_versions_refused);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
