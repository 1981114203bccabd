/* The backend seam on its own: the compute table's version, kind and capabilities, its events,
 * and the one-process data plane (grouped send/receive, split, segments). */
#include "canzona_exec.h"
#include "cz_exec_testing.h"
#include "cz_format.h"

#include <check.h>
#include <math.h>
#include <string.h>

START_TEST(compute_table)
{
    cz_compute c;
    ck_assert_int_eq(cz__compute_open(&c, "cpu", NULL), 0);
    ck_assert_int_eq(c.ops->version, CZ_COMPUTE_OPS_VERSION);
    ck_assert_int_eq(c.ops->kind, CZ_BACKEND_CPU);
    ck_assert(c.ops->caps & CZ_COMPUTE_CAP_HOST_MEMORY);
    /* An event is complete once recorded (the CPU stream is the calling thread); waiting on
     * one never recorded is a bug in the caller and says so. */
    cz_event *e = c.ops->event_create(&c);
    ck_assert_ptr_nonnull(e);
    cz_error err;
    ck_assert_int_eq(c.ops->event_sync(&c, e, &err), CZ_EINTERNAL);
    ck_assert_ptr_nonnull(strstr(err.message, "never recorded"));
    c.ops->event_record(&c, e);
    ck_assert_int_eq(c.ops->event_sync(&c, e, &err), 0);
    c.ops->event_free(&c, e);
    /* sumsq doubles as the finiteness check. */
    double *s = c.ops->alloc(&c, sizeof(double));
    float x[3] = {3.0f, 4.0f, 0.0f};
    c.ops->sumsq(&c, x, 3, s);
    ck_assert_double_eq(*s, 25.0);
    x[2] = 3.0e38f; /* finite, and its square does not overflow a double */
    c.ops->sumsq(&c, x, 3, s);
    ck_assert(*s > 8.9e76 && *s < 9.1e76);
    x[1] = -INFINITY;
    c.ops->sumsq(&c, x, 3, s);
    ck_assert(!(*s < INFINITY));
    c.ops->release(&c, s);
    cz__compute_close(&c);
}
END_TEST

START_TEST(self_plane)
{
    cz_compute c;
    ck_assert_int_eq(cz__compute_open(&c, "cpu", NULL), 0);
    cz_plane w, sub;
    ck_assert_int_eq(cz__plane_self_open(&w, NULL), 0);
    w.compute = &c;
    ck_assert_int_eq(w.ops->version, CZ_DATA_PLANE_VERSION);
    ck_assert_int_eq(w.ops->kind, CZ_COMM_SELF);
    ck_assert_int_eq(w.ops->split(&w, 0, 0, &sub, NULL), 0);
    ck_assert_int_eq(sub.size, 1);
    ck_assert_ptr_eq(sub.compute, &c);
    cz_event *e = c.ops->event_create(&c);
    c.ops->event_record(&c, e);
    cz_comm_req *q = sub.ops->req_create(&sub);
    float a[4] = {1, 2, 3, 4}, b[4] = {0};
    cz_error err;
    ck_assert_int_eq(sub.ops->group_start(&sub, q, e, &err), 0);
    sub.ops->send(&sub, q, a + 1, 3, CZ_DTYPE_FP32, 0);
    sub.ops->recv(&sub, q, b, 3, CZ_DTYPE_FP32, 0);
    ck_assert_int_eq(sub.ops->group_end(&sub, q, &err), 0);
    ck_assert_int_eq(sub.ops->wait(&sub, q, &err), 0);
    ck_assert_float_eq(b[0], 2.0f);
    ck_assert_float_eq(b[2], 4.0f);
    /* A receive that does not match the send is refused, not half-copied. */
    ck_assert_int_eq(sub.ops->group_start(&sub, q, NULL, &err), 0);
    sub.ops->send(&sub, q, a, 2, CZ_DTYPE_FP32, 0);
    sub.ops->recv(&sub, q, b, 3, CZ_DTYPE_FP32, 0);
    ck_assert_int_eq(sub.ops->group_end(&sub, q, &err), CZ_EINTERNAL);
    ck_assert_ptr_nonnull(strstr(err.message, "send 2 != receive 3"));
    size_t counts[1] = {4};
    ck_assert_int_eq(sub.ops->reduce_scatter(&sub, a, b, counts, CZ_DTYPE_FP32, e, &err), 0);
    ck_assert_float_eq(b[3], 4.0f);
    sub.ops->req_free(&sub, q);
    c.ops->event_free(&c, e);
    cz__plane_close(&sub);
    cz__plane_close(&w);
    cz__compute_close(&c);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("exec_seam");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, compute_table);
    tcase_add_test(tc, self_plane);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
