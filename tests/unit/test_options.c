/* The public options structs (canzona.h): each *_INIT macro holds the same values as its *_init
 * function; each function accepts every version from 1 to the library's own, reading an older
 * struct no further than its own fields, and refuses a newer one (or one left zeroed) with
 * CZ_EUNSUPPORTED, naming the struct, both versions and the way to initialize it; and
 * cz_error_code_name names every code. */
#include "cz_hand_plan.h"
#include "cz_types.h"

#include <check.h>
#include <stddef.h>
#include <stdio.h>
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
    ck_assert_int_eq(s.dp, CZ_DP_JOINT);
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

/* A refusal of version have names it and the library's own version. */
static void expect_versions_named(const cz_error *err, int have, int current)
{
    char a[32], b[48];
    snprintf(a, sizeof a, "version %d", have);
    snprintf(b, sizeof b, have < 1 ? "1 to %d" : "version %d", current);
    ck_assert_msg(strstr(err->message, a) && strstr(err->message, b),
                  "message does not name versions %d and %d: %s", have, current, err->message);
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

    /* Both versions are named: the one given and this library's. */
    so.version = CZ_SIM_OPTIONS_VERSION + 1;
    expect_refused(cz_plan_simulate(&sim, p, NULL, &so, &err), &err, "cz_sim_options");
    expect_versions_named(&err, CZ_SIM_OPTIONS_VERSION + 1, CZ_SIM_OPTIONS_VERSION);
    so.version = 0;
    expect_refused(cz_plan_simulate(&sim, p, NULL, &so, &err), &err, "cz_sim_options");
    expect_versions_named(&err, 0, CZ_SIM_OPTIONS_VERSION);
    dopt.version = CZ_DIFF_OPTIONS_VERSION + 1;
    expect_refused(cz_plan_diff(&report, p, p, &dopt, &err), &err, "cz_diff_options");
    expect_versions_named(&err, CZ_DIFF_OPTIONS_VERSION + 1, CZ_DIFF_OPTIONS_VERSION);
    cz_settings st = CZ_SETTINGS_INIT;
    cz_model *m = NULL;
    cz_cluster *c = NULL;
    cz_plan *built = NULL;
    st.version = CZ_SETTINGS_VERSION + 1;
    expect_refused(cz_plan_build(&built, m, c, &st, &err), &err, "cz_settings");
    expect_versions_named(&err, CZ_SETTINGS_VERSION + 1, CZ_SETTINGS_VERSION);
    ck_assert_ptr_null(built);

    /* The current version is accepted (the hand plan simulates without a cluster). */
    cz_sim_options_init(&so);
    ck_assert_int_eq(cz_plan_simulate(&sim, p, NULL, &so, &err), CZ_OK);
    cz_sim_result_free(sim);
    cz_plan_free(p);
}
END_TEST

/* cz_sim_options as versions 1 to 4 had it (canzona.h's history): each appended fields. */
struct sim_options_v1 {
    int version;
    cz_sim_uneven uneven;
    cz_muon_tp_mode muon_tp;
};
struct sim_options_v2 {
    int version;
    cz_sim_uneven uneven;
    cz_muon_tp_mode muon_tp;
    int overlap_param_gather, overlap_grad_reduce, muon_ns_batch_size, gtp;
};
/* Version 3 is version 4 without deferred_updates, read up to gather_forward_order. */
struct sim_options_v4 {
    int version;
    cz_sim_uneven uneven;
    cz_muon_tp_mode muon_tp;
    int overlap_param_gather, overlap_grad_reduce, muon_ns_batch_size, gtp;
    int iteration, seq_len, micro_batch_size, micro_batches;
    double pass_efficiency;
    int gather_forward_order;
    int deferred_updates;
};
/* cz_import_hf_options's version 1 (version 2 appended ep_size). */
struct import_hf_options_v1 {
    int version;
    const char *name;
    cz_dtype dtype;
    int tp_size, vocab_divisible_by, split_qkv, split_gate_up;
};

/* An old struct at the start of a current-sized buffer of 0xff bytes: a library that read past
 * the old struct's fields would find -1 in every later int (gtp, iteration, ep_size, ...), which
 * each refuses with CZ_EINVALID; one that reads only the old fields takes the defaults. */
static void *in_garbage(const void *old, size_t n, size_t current)
{
    unsigned char *b = malloc(current);
    ck_assert_ptr_nonnull(b);
    memset(b, 0xff, current);
    memcpy(b, old, n);
    return b;
}

START_TEST(test_old_versions_accepted)
{
    cz_plan *p = hand_plan();
    cz_error err;
    cz_sim_result *sim = NULL;
    cz_report *ref_report = NULL, *report = NULL;
    cz_sim_options cur = CZ_SIM_OPTIONS_INIT;
    cur.uneven = CZ_SIM_UNEVEN_PADDED;
    ck_assert_int_eq(cz_plan_simulate(&sim, p, NULL, &cur, &err), CZ_OK);
    ck_assert_int_eq(cz_sim_result_report(&ref_report, sim, &err), CZ_OK);
    cz_sim_result_free(sim);

    struct sim_options_v1 v1 = {1, CZ_SIM_UNEVEN_PADDED, CZ_MUON_TP_DUPLICATED};
    struct sim_options_v2 v2 = {2, CZ_SIM_UNEVEN_PADDED, CZ_MUON_TP_DUPLICATED, 0, 0, 1, 1};
    struct sim_options_v4 v3 = {
        3, CZ_SIM_UNEVEN_PADDED, CZ_MUON_TP_DUPLICATED, 0, 0, 1, 1, 0, 4096, 1, 8, 0.6, 1, 0};
    struct sim_options_v4 v4 = v3;
    v4.version = 4;
    v4.deferred_updates = 1;
    const void *olds[] = {&v1, &v2, &v3, &v4};
    const size_t sizes[] = {sizeof v1, sizeof v2, offsetof(struct sim_options_v4, deferred_updates),
                            sizeof v4};
    for (int v = 0; v < 4; v++) {
        void *b = in_garbage(olds[v], sizes[v], sizeof(cz_sim_options));
        int rc = cz_plan_simulate(&sim, p, NULL, b, &err);
        ck_assert_msg(rc == CZ_OK, "cz_sim_options version %d: %s", v + 1, err.message);
        /* The same step as the current struct with the same settings (the rest defaults). */
        ck_assert_int_eq(cz_sim_result_report(&report, sim, &err), CZ_OK);
        char *want = NULL, *got = NULL;
        ck_assert_int_eq(cz_report_json(ref_report, 0, &want, &err), CZ_OK);
        ck_assert_int_eq(cz_report_json(report, 0, &got, &err), CZ_OK);
        ck_assert_str_eq(got, want);
        cz_free(want);
        cz_free(got);
        cz_report_free(report);
        cz_sim_result_free(sim);
        free(b);
    }
    cz_report_free(ref_report);

    /* import-hf version 1: its ep_size is the default 1, so the missing file is the error. */
    struct import_hf_options_v1 h1 = {1, NULL, CZ_DTYPE_BF16, 1, 128, 1, 1};
    void *hb = in_garbage(&h1, sizeof h1, sizeof(cz_import_hf_options));
    char *text = NULL;
    ck_assert_int_eq(cz_model_import_hf(&text, "no-such-config.json", hb, &err), CZ_EIO);
    free(hb);
    cz_plan_free(p);
}
END_TEST

START_TEST(test_error_code_names)
{
    static const struct {
        int code;
        const char *name;
    } codes[] = {{CZ_OK, "CZ_OK"},
                 {CZ_EIO, "CZ_EIO"},
                 {CZ_EPARSE, "CZ_EPARSE"},
                 {CZ_EINVALID, "CZ_EINVALID"},
                 {CZ_ENOMEM, "CZ_ENOMEM"},
                 {CZ_EMISMATCH, "CZ_EMISMATCH"},
                 {CZ_EUNSUPPORTED, "CZ_EUNSUPPORTED"},
                 {CZ_EINTERNAL, "CZ_EINTERNAL"},
                 {CZ_ETIMEOUT, "CZ_ETIMEOUT"}};
    for (size_t i = 0; i < sizeof codes / sizeof *codes; i++)
        ck_assert_str_eq(cz_error_code_name(codes[i].code), codes[i].name);
    /* Every code from CZ_OK down to the last is named (none left out above). */
    for (int code = CZ_OK; code >= CZ_ETIMEOUT; code--)
        ck_assert_str_ne(cz_error_code_name(code), "CZ_E?");
    ck_assert_str_eq(cz_error_code_name(CZ_ETIMEOUT - 1), "CZ_E?");
    ck_assert_str_eq(cz_error_code_name(1), "CZ_E?");
    ck_assert_str_eq(cz_error_code_name(-1000), "CZ_E?");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("options");
    TCase *tc = tcase_create("options");
    tcase_add_test(tc, test_init_macros);
    tcase_add_test(tc, test_versions_refused);
    tcase_add_test(tc, test_old_versions_accepted);
    tcase_add_test(tc, test_error_code_names);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
