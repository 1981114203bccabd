/* The callbacks plane's scratch does not grow with a subset's size (issue: the first member of
 * an expert-DP plane of 512 reserved 511 copies of the largest bucket, 33 GB at 32,768 GPUs).
 * One process plays the first member of a 513-member subset of a fake world: the fake
 * callbacks answer the split's sum as if every rank chose the same color, and fill each
 * received chunk with the sending member's index, so that a reduction's result is known. */
#include "canzona_exec.h"
#include "cz_exec_testing.h"

#include <check.h>
#include <stdlib.h>
#include <string.h>

enum { WORLD = 513 };

static size_t exchanges, largest_recv;

static int fake_all_reduce(void *user, cz_comm_group g, void *buf, size_t count, cz_comm_dtype t,
                           cz_comm_op op)
{
    (void)user, (void)g, (void)op;
    /* Only the split's (color, key) per rank comes here: every rank color 0, key its rank. */
    ck_assert_int_eq(t, CZ_COMM_INT64);
    ck_assert_uint_eq(count, 2 * WORLD);
    int64_t *ck = buf;
    for (int r = 0; r < WORLD; r++) {
        ck[2 * r] = 0;
        ck[2 * r + 1] = r;
    }
    return 0;
}

static int fake_broadcast(void *user, cz_comm_group g, void *buf, size_t count, cz_comm_dtype t,
                          int root)
{
    (void)user, (void)g, (void)buf, (void)count, (void)t, (void)root;
    return 0;
}

static int fake_exchange(void *user, cz_comm_group g, const cz_comm_transfer *t, int n)
{
    (void)user, (void)g;
    exchanges++;
    for (int k = 0; k < n; k++) {
        ck_assert_int_eq(t[k].dtype, CZ_COMM_FP32);
        if (t[k].send)
            continue;
        float *v = t[k].buf;
        for (size_t i = 0; i < t[k].count; i++)
            v[i] = (float)t[k].peer;
        if (t[k].count > largest_recv)
            largest_recv = t[k].count;
    }
    return 0;
}

START_TEST(subset_scratch_is_bounded)
{
    cz_comm_callbacks cb = {.version = CZ_COMM_CALLBACKS_VERSION,
                            .world_size = WORLD,
                            .world_rank = 0,
                            .all_reduce = fake_all_reduce,
                            .broadcast = fake_broadcast,
                            .exchange = fake_exchange};
    cz_error err;
    cz_plane world = {0}, sub = {0};
    ck_assert_int_eq(cz__plane_callbacks_open(&world, &cb, CZ_COMM_WORLD, WORLD, 0, &err), CZ_OK);
    ck_assert_msg(world.ops->split(&world, 0, 0, &sub, &err) == CZ_OK, "%s", err.message);
    ck_assert_int_eq(sub.size, WORLD);
    ck_assert_int_eq(sub.rank, 0);
    /* A plan whose largest bucket is 8 Mi elements: 32 MiB of fp32, 16 GiB for 512 copies. */
    cz_plan_bucket bucket = {.size = (int64_t)8 << 20};
    cz_plan plan = {.nbuckets = 1, .buckets = &bucket};
    ck_assert_msg(cz__plane_callbacks_reserve(&sub, &plan, &err) == CZ_OK, "%s", err.message);
    size_t bound = ((size_t)64 << 20) + bucket.size * sizeof(float);
    ck_assert_msg(cz__plane_callbacks_scratch(&sub) <= bound, "reserved %zu bytes, bound %zu",
                  cz__plane_callbacks_scratch(&sub), bound);
    /* A reduction of more elements than one chunk holds: every element gets every member's
     * value (the sum of 1 .. 512 on top of its own), in chunks under the bound. */
    size_t count = 100000;
    float *buf = malloc(count * sizeof *buf);
    for (size_t i = 0; i < count; i++)
        buf[i] = (float)(i % 7);
    exchanges = largest_recv = 0;
    ck_assert_msg(sub.ops->allreduce_sum(&sub, buf, count, 0, NULL, &err) == CZ_OK, "%s",
                  err.message);
    for (size_t i = 0; i < count; i++)
        ck_assert_msg(buf[i] == (float)(i % 7) + 512.0f * 513.0f / 2.0f, "element %zu: %g", i,
                      (double)buf[i]);
    ck_assert_uint_gt(exchanges, 2); /* more than one chunk */
    ck_assert_uint_le(largest_recv * sizeof(float) * 512, (size_t)64 << 20); /* each under it */
    ck_assert_msg(cz__plane_callbacks_scratch(&sub) <= bound, "%zu bytes after the reduction",
                  cz__plane_callbacks_scratch(&sub));
    free(buf);
    sub.ops->close(&sub);
    world.ops->close(&world);
}
END_TEST

static Suite *scratch_suite(void)
{
    Suite *s = suite_create("callbacks_scratch");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, subset_scratch_is_bounded);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(scratch_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
