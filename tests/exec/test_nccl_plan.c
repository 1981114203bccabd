/* The NCCL data plane's decisions (nccl_plan.c) on the CPU: the rooted-vs-padded rule on
 * hand-worked counts, the call lists of both forms, and a simulation of the call lists over
 * P ranks (sum for reduce, copy for broadcast) against the uneven collectives' definitions. */
#include "cz_exec_testing.h"

#include "canzona_exec.h"
#include "cz_format.h"

#include "canzona.h"
#include "cz_format.h"

#include <check.h>
#include <stdio.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

START_TEST(rule_hand_worked)
{
    /* alpha = 10 us, 100 GB/s, fp32 (s beta = 4e-11 s per element): padded wins when
     * (P-1) m - N < alpha / (s beta) = 250000 elements. */
    size_t even[4] = {1000000, 1000000, 1000000, 1000000};
    ck_assert_int_eq(cz__nccl_choose(even, 4, 4, 10e-6, 100e9), CZ_NCCL_PADDED);
    /* (4-1) * 1.3M - 3.9M = 0 < 250000: padded. */
    size_t mild[4] = {1300000, 1000000, 800000, 800000};
    ck_assert_int_eq(cz__nccl_choose(mild, 4, 4, 10e-6, 100e9), CZ_NCCL_PADDED);
    /* (4-1) * 3M - 3.3M = 5.7M elements of padding: rooted. */
    size_t skew[4] = {3000000, 100000, 100000, 100000};
    ck_assert_int_eq(cz__nccl_choose(skew, 4, 4, 10e-6, 100e9), CZ_NCCL_ROOTED);
    /* The same skew on a tiny bucket is latency-bound: 3*300 - 330 = 570 < 250000: padded. */
    size_t tiny[4] = {300, 10, 10, 10};
    ck_assert_int_eq(cz__nccl_choose(tiny, 4, 4, 10e-6, 100e9), CZ_NCCL_PADDED);
    /* The model's times themselves: rooted 4 alpha + N s beta. */
    double t = cz__nccl_time(CZ_NCCL_ROOTED, skew, 4, 4, 10e-6, 100e9);
    ck_assert_double_eq_tol(t, 4 * 10e-6 + 3.3e6 * 4 / 100e9, 1e-12);
    t = cz__nccl_time(CZ_NCCL_PADDED, skew, 4, 4, 10e-6, 100e9);
    ck_assert_double_eq_tol(t, 3 * 10e-6 + 3 * 3e6 * 4 / 100e9, 1e-12);
}
END_TEST

START_TEST(lists_hand_worked)
{
    size_t counts[3] = {2, 0, 3}, scratch = 99;
    cz_nccl_call c[8];
    /* Rooted reduce-scatter: one grouped ncclReduce per non-empty segment, offsets 0 and 2. */
    int n = cz__nccl_plan_reduce_scatter(c, counts, 3, 1, CZ_NCCL_ROOTED, &scratch);
    ck_assert_int_eq(n, 2);
    ck_assert_int_eq(scratch, 0);
    ck_assert_int_eq(c[0].kind, CZ_NCCL_REDUCE);
    ck_assert_int_eq(c[0].root, 0);
    ck_assert_int_eq(c[0].count, 2);
    ck_assert_int_eq(c[1].root, 2);
    ck_assert_int_eq(c[1].src_off, 2);
    ck_assert_int_eq(c[1].count, 3);
    ck_assert(c[0].grouped && c[1].grouped);
    /* Padded on rank 2: m = 3, slots at 0, 3, 6, result at 9; scratch 12. */
    n = cz__nccl_plan_reduce_scatter(c, counts, 3, 2, CZ_NCCL_PADDED, &scratch);
    ck_assert_int_eq(scratch, 12);
    ck_assert_int_eq(n, 4);
    ck_assert_int_eq(c[1].kind, CZ_NCCL_COPY);
    ck_assert_int_eq(c[1].src_off, 2);
    ck_assert_int_eq(c[1].dst_off, 6);
    ck_assert_int_eq(c[2].kind, CZ_NCCL_REDUCE_SCATTER);
    ck_assert_int_eq(c[2].count, 3);
    ck_assert_int_eq(c[2].dst_off, 9);
    ck_assert_int_eq(c[3].dst_buf, CZ_NCCL_BUF_RECV);
    ck_assert_int_eq(c[3].count, 3);
    /* Rank 1 receives nothing: no copy out. */
    n = cz__nccl_plan_reduce_scatter(c, counts, 3, 1, CZ_NCCL_PADDED, &scratch);
    ck_assert_int_eq(n, 3);
    /* Rooted all-gather: in-place broadcasts. */
    n = cz__nccl_plan_all_gather(c, counts, 3, 0, CZ_NCCL_ROOTED, &scratch);
    ck_assert_int_eq(n, 2);
    ck_assert_int_eq(c[1].kind, CZ_NCCL_BROADCAST);
    ck_assert_int_eq(c[1].src_off, c[1].dst_off);
    /* Padded all-gather on rank 0: copy in, in-place gather from slot 0, copy out rank 2. */
    n = cz__nccl_plan_all_gather(c, counts, 3, 0, CZ_NCCL_PADDED, &scratch);
    ck_assert_int_eq(scratch, 9);
    ck_assert_int_eq(n, 3);
    ck_assert_int_eq(c[1].kind, CZ_NCCL_ALL_GATHER);
    ck_assert_int_eq(c[1].src_off, 0);
    ck_assert_int_eq(c[2].src_off, 6);
    ck_assert_int_eq(c[2].dst_off, 2);
}
END_TEST

/* Simulates P ranks replaying their lists: copies are local, and every rank must reach the
 * same sequence of collectives (as NCCL requires), which run together. */
enum { P = 4, MAXE = 64 };
static float bufs[P][3][MAXE * P + MAXE];

/* Through the plane's own address rule (cz__nccl_call_ptr). */
static float *at(int rank, cz_nccl_buf b, size_t off)
{
    return cz__nccl_call_ptr(b, off, sizeof(float), bufs[rank][CZ_NCCL_BUF_SEND],
                             bufs[rank][CZ_NCCL_BUF_RECV], bufs[rank][CZ_NCCL_BUF_SCRATCH]);
}

/* Runs every rank's local copies up to its next collective; returns false at the end. */
static bool local_until_collective(cz_nccl_call *list, int len, int r, int *pc)
{
    while (*pc < len && list[*pc].kind == CZ_NCCL_COPY) {
        const cz_nccl_call *c = &list[*pc];
        memmove(at(r, c->dst_buf, c->dst_off), at(r, c->src_buf, c->src_off),
                c->count * sizeof(float));
        (*pc)++;
    }
    return *pc < len;
}

static void simulate(cz_nccl_call lists[P][2 * P + 1], const int *lens)
{
    int pc[P] = {0};
    for (;;) {
        int live = 0;
        for (int r = 0; r < P; r++)
            live += local_until_collective(lists[r], lens[r], r, &pc[r]);
        if (live == 0)
            return;
        ck_assert_int_eq(live, P); /* every rank reaches the same collective */
        const cz_nccl_call *c0 = &lists[0][pc[0]];
        const cz_nccl_call *c[P];
        for (int r = 0; r < P; r++) {
            c[r] = &lists[r][pc[r]++];
            ck_assert_int_eq(c[r]->kind, c0->kind);
            ck_assert_int_eq(c[r]->count, c0->count);
            ck_assert_int_eq(c[r]->root, c0->root);
        }
        float tmp[MAXE * P];
        memset(tmp, 0, sizeof tmp);
        switch (c0->kind) {
        case CZ_NCCL_COPY:
            break;
        case CZ_NCCL_REDUCE:
            for (int r = 0; r < P; r++)
                for (size_t j = 0; j < c0->count; j++)
                    tmp[j] += *at(r, c[r]->src_buf, c[r]->src_off + j);
            memcpy(at(c0->root, c[c0->root]->dst_buf, c[c0->root]->dst_off), tmp,
                   c0->count * sizeof(float));
            break;
        case CZ_NCCL_BROADCAST:
            memcpy(tmp, at(c0->root, c[c0->root]->src_buf, c[c0->root]->src_off),
                   c0->count * sizeof(float));
            for (int r = 0; r < P; r++)
                memcpy(at(r, c[r]->dst_buf, c[r]->dst_off), tmp, c0->count * sizeof(float));
            break;
        case CZ_NCCL_REDUCE_SCATTER:
            for (int r = 0; r < P; r++)
                for (size_t j = 0; j < P * c0->count; j++)
                    tmp[j] += *at(r, c[r]->src_buf, c[r]->src_off + j);
            for (int r = 0; r < P; r++)
                memcpy(at(r, c[r]->dst_buf, c[r]->dst_off), tmp + r * c0->count,
                       c0->count * sizeof(float));
            break;
        case CZ_NCCL_ALL_GATHER:
            for (int r = 0; r < P; r++)
                memcpy(tmp + r * c0->count, at(r, c[r]->src_buf, c[r]->src_off),
                       c0->count * sizeof(float));
            for (int r = 0; r < P; r++)
                memmove(at(r, c[r]->dst_buf, c[r]->dst_off), tmp, P * c0->count * sizeof(float));
            break;
        }
    }
}

START_TEST(lists_simulated)
{
    size_t cases[3][P] = {{5, 0, 7, 1}, {4, 4, 4, 4}, {0, 0, 9, 0}};
    cz_nccl_call lists[P][2 * P + 1];
    int lens[P];
    for (int t = 0; t < 3; t++)
        for (int form = 0; form < 2; form++) {
            size_t *cn = cases[t], total = 0, scratch;
            for (int r = 0; r < P; r++)
                total += cn[r];
            /* Reduce-scatter: rank r's send holds r + 100 * j; the sum of segment r lands in
             * rank r's recv. */
            memset(bufs, 0, sizeof bufs);
            for (int r = 0; r < P; r++) {
                for (size_t j = 0; j < total; j++)
                    *at(r, CZ_NCCL_BUF_SEND, j) = (float)(r + 100 * (int)j);
                lens[r] =
                    cz__nccl_plan_reduce_scatter(lists[r], cn, P, r, (cz_nccl_form)form, &scratch);
                ck_assert(scratch <= (size_t)MAXE * P + MAXE);
            }
            simulate(lists, lens);
            size_t off = 0;
            for (int r = 0; r < P; r++) {
                for (size_t j = 0; j < cn[r]; j++)
                    ck_assert_float_eq(*at(r, CZ_NCCL_BUF_RECV, j),
                                       (float)(0 + 1 + 2 + 3 + 4 * 100 * (int)(off + j)));
                off += cn[r];
            }
            /* All-gather in place: rank r's segment is filled with r + 1 + j on rank r only. */
            memset(bufs, 0, sizeof bufs);
            off = 0;
            for (int r = 0; r < P; r++) {
                for (size_t j = 0; j < cn[r]; j++)
                    *at(r, CZ_NCCL_BUF_SEND, off + j) = (float)(r + 1 + (int)j);
                off += cn[r];
                lens[r] =
                    cz__nccl_plan_all_gather(lists[r], cn, P, r, (cz_nccl_form)form, &scratch);
            }
            simulate(lists, lens);
            for (int q = 0; q < P; q++) {
                off = 0;
                for (int r = 0; r < P; r++) {
                    for (size_t j = 0; j < cn[r]; j++)
                        ck_assert_float_eq(*at(q, CZ_NCCL_BUF_SEND, off + j),
                                           (float)(r + 1 + (int)j));
                    off += cn[r];
                }
            }
        }
}
END_TEST

START_TEST(step_time_hand_worked)
{
    /* DP 2, two buckets: {3, 1} elements and {2, 2}; alpha = 1 s, 1 byte/s, 1-byte elements.
     * Bucket 0: rooted 2 + 4 = 6, padded 1 + 3 = 4; bucket 1: rooted 2 + 4 = 6, padded 1 + 2 = 3.
     * Each counts twice (reduce-scatter and all-gather). */
    int64_t r0[4] = {0, 3, 3, 4}, r1[4] = {0, 2, 2, 4};
    cz_plan_bucket bk[2] = {{.ranges = r0}, {.ranges = r1}};
    cz_plan pl = {.dp = 2, .nbuckets = 2, .buckets = bk};
    int np = -1;
    ck_assert_double_eq(cz__nccl_step_time(&pl, CZ_NCCL_ALL_ROOTED, 1, 1.0, 1.0, &np), 24.0);
    ck_assert_int_eq(np, 0);
    ck_assert_double_eq(cz__nccl_step_time(&pl, CZ_NCCL_ALL_PADDED, 1, 1.0, 1.0, &np), 14.0);
    ck_assert_int_eq(np, 2);
    ck_assert_double_eq(cz__nccl_step_time(&pl, CZ_NCCL_BY_RULE, 1, 1.0, 1.0, &np), 14.0);
    ck_assert_int_eq(np, 2);
    /* Cheap latency, one rank with everything: {10, 0}: rooted 2*0.001 + 10, padded
     * 0.001 + 10; {9, 1}: rooted 0.002 + 10, padded 0.001 + 9: the rule takes each minimum. */
    int64_t r2[4] = {0, 10, 10, 10}, r3[4] = {0, 9, 9, 10};
    cz_plan_bucket bk2[2] = {{.ranges = r2}, {.ranges = r3}};
    pl.buckets = bk2;
    double t = cz__nccl_step_time(&pl, CZ_NCCL_BY_RULE, 1, 0.001, 1.0, &np);
    ck_assert_double_eq_tol(t, 2 * (10.001 + 9.001), 1e-9);
}
END_TEST

START_TEST(scratch_hand_worked)
{
    /* DP 3, fp32, alpha = 1 s, 1 byte/s (s beta = 4 s per element, so latency is worth a
     * quarter element: padded only where (P-1) m <= N, i.e. even buckets).
     * Bucket 0 {2, 2, 2}: padded, 3*2 + 2 = 8. Bucket 1 {5, 1, 0}: rooted (2*5 - 6 = 4
     * elements of padding cost 16 s > 1 s), no scratch. Bucket 2 {4, 4, 4}: padded, 16.
     * Bucket 3 empty. The plane needs max(8, 16) = 16 elements. */
    int64_t r0[6] = {0, 2, 2, 4, 4, 6}, r1[6] = {0, 5, 5, 6, 6, 6};
    int64_t r2[6] = {0, 4, 4, 8, 8, 12}, r3[6] = {0, 0, 0, 0, 0, 0};
    cz_plan_bucket bk[4] = {{.ranges = r0}, {.ranges = r1}, {.ranges = r2}, {.ranges = r3}};
    cz_plan pl = {.dp = 3, .nbuckets = 4, .buckets = bk};
    ck_assert_uint_eq(cz__nccl_plan_scratch(&pl, 4, 1.0, 1.0), 16);
    /* A huge latency makes every non-empty bucket padded: bucket 1 then needs 3*5 + 5 = 20. */
    ck_assert_uint_eq(cz__nccl_plan_scratch(&pl, 4, 1e9, 1.0), 20);
    /* Free latency and a skewed plan only: nothing padded, no scratch. */
    cz_plan_bucket skewed[2] = {bk[1], bk[3]};
    pl.nbuckets = 2;
    pl.buckets = skewed;
    ck_assert_uint_eq(cz__nccl_plan_scratch(&pl, 4, 1e-12, 1.0), 0);
    /* DP 1: one slot of m plus the result, 2 m, when padded (always: P alpha > 0 alpha). */
    int64_t r4[2] = {0, 7};
    cz_plan_bucket one = {.ranges = r4};
    cz_plan p1 = {.dp = 1, .nbuckets = 1, .buckets = &one};
    ck_assert_uint_eq(cz__nccl_plan_scratch(&p1, 4, 10e-6, 100e9), 14);
}
END_TEST

/* The scratch every call list of a plan's buckets (each rank, both collectives) asks for,
 * in the form the rule picks: what the plane's step path checks against the reservation. */
static size_t scratch_of_lists(const cz_plan *pl, size_t es, double alpha, double bw)
{
    int n = pl->dp;
    size_t need = 0, counts[n];
    cz_nccl_call calls[2 * n + 1];
    for (size_t b = 0; b < pl->nbuckets; b++) {
        for (int r = 0; r < n; r++)
            counts[r] = (size_t)(pl->buckets[b].ranges[2 * r + 1] - pl->buckets[b].ranges[2 * r]);
        cz_nccl_form f = cz__nccl_choose(counts, n, es, alpha, bw);
        for (int me = 0; me < n; me++) {
            size_t s1 = 0, s2 = 0;
            cz__nccl_plan_reduce_scatter(calls, counts, n, me, f, &s1);
            cz__nccl_plan_all_gather(calls, counts, n, me, f, &s2);
            need = s1 > need ? s1 : need;
            need = s2 > need ? s2 : need;
        }
    }
    return need;
}

START_TEST(scratch_bundled_plans)
{
    /* Plans the planner builds from the bundled models and clusters: the reservation equals
     * the largest scratch any call list of any rank asks for, under the default constants,
     * a latency so high that every bucket is padded, and one so low that none is. */
    static const char *cases[][2] = {
        {"test-small", "cpu-4-dp4-tp1"},
        {"test-small", "cpu-4-dp2-tp2"},
        {"test-mid", "cpu-4-dp4-tp1"},
        {"qwen3-0.6b", "h100-8-dp8-tp1"},
    };
    const char *src = getenv("CZ_SOURCE_DIR");
    ck_assert_ptr_nonnull(src);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char mp[512], cp[512];
        snprintf(mp, sizeof mp, "%s/plans/models/%s.json", src, cases[i][0]);
        snprintf(cp, sizeof cp, "%s/plans/clusters/%s.json", src, cases[i][1]);
        cz_error err;
        cz_model *model = NULL;
        cz_cluster *cluster = NULL;
        cz_plan *pl = NULL;
        cz_settings s;
        cz_settings_init(&s);
        ck_assert_msg(cz_model_load(&model, mp, &err) == 0, "%s", err.message);
        ck_assert_msg(cz_cluster_load(&cluster, cp, &err) == 0, "%s", err.message);
        ck_assert_msg(cz_plan_build(&pl, model, cluster, &s, &err) == 0, "%s", err.message);
        const double alphas[3] = {CZ_NCCL_DEFAULT_ALPHA_S, 1e3, 1e-15};
        for (int a = 0; a < 3; a++) {
            size_t want = scratch_of_lists(pl, 4, alphas[a], CZ_NCCL_DEFAULT_BYTES_PER_S);
            size_t got = cz__nccl_plan_scratch(pl, 4, alphas[a], CZ_NCCL_DEFAULT_BYTES_PER_S);
            ck_assert_msg(got == want, "%s on %s, alpha %g: reserved %zu, lists need %zu",
                          cases[i][0], cases[i][1], alphas[a], got, want);
            /* The plane's reservation in bytes covers the lists in fp32 and in bf16 (the
             * wire's dtypes), and is the larger of the two. */
            size_t b4 = 4 * want,
                   b2 = 2 * scratch_of_lists(pl, 2, alphas[a], CZ_NCCL_DEFAULT_BYTES_PER_S);
            ck_assert_uint_eq(
                cz__nccl_plan_scratch_bytes(pl, alphas[a], CZ_NCCL_DEFAULT_BYTES_PER_S),
                b4 > b2 ? b4 : b2);
            /* All padded: a real reservation (the largest bucket's P m + m). */
            if (a == 1)
                ck_assert_uint_gt(got, 0);
        }
        cz_plan_free(pl);
        cz_cluster_free(cluster);
        cz_model_free(model);
    }
}
END_TEST

/* A communicator whose states follow a script (the last one repeats) and a clock that only
 * moves when the poller pauses. */
typedef struct fake_comm {
    const cz_nccl_state *script;
    int n, i, pauses;
    double t, step;
} fake_comm;

static cz_nccl_state fake_poll(void *ctx)
{
    fake_comm *f = ctx;
    cz_nccl_state s = f->script[f->i < f->n ? f->i : f->n - 1];
    f->i++;
    return s;
}

static double fake_now(void *ctx)
{
    return ((fake_comm *)ctx)->t;
}

static void fake_pause(void *ctx)
{
    fake_comm *f = ctx;
    f->t += f->step;
    f->pauses++;
}

static cz_nccl_wait run_script(const cz_nccl_state *script, int n, double timeout, int *npolls,
                               int *pauses)
{
    fake_comm f = {script, n, 0, 0, 100.0, 1.0}; /* the clock starts anywhere */
    cz_nccl_poller p = {fake_poll, fake_now, fake_pause, &f};
    cz_nccl_wait w = cz__nccl_poll_until(&p, timeout, npolls);
    *pauses = f.pauses;
    return w;
}

START_TEST(poll_hand_worked)
{
    const cz_nccl_state R = CZ_NCCL_STATE_READY, P = CZ_NCCL_STATE_PENDING,
                        F = CZ_NCCL_STATE_FAILED;
    int np = -1, pa = -1;
    /* Ready at once: one poll, no pause, even with no time at all. */
    cz_nccl_state s1[] = {R};
    ck_assert_int_eq(run_script(s1, 1, 0.0, &np, &pa), CZ_NCCL_WAIT_OK);
    ck_assert_int_eq(np, 1);
    ck_assert_int_eq(pa, 0);
    /* Pending twice, then ready: three polls, a pause between each. */
    cz_nccl_state s2[] = {P, P, R};
    ck_assert_int_eq(run_script(s2, 3, 10.0, &np, &pa), CZ_NCCL_WAIT_OK);
    ck_assert_int_eq(np, 3);
    ck_assert_int_eq(pa, 2);
    /* An error while pending ends the wait as a failure, not a timeout. */
    cz_nccl_state s3[] = {P, F};
    ck_assert_int_eq(run_script(s3, 2, 10.0, &np, &pa), CZ_NCCL_WAIT_FAILED);
    ck_assert_int_eq(np, 2);
    /* Never settles, 1 s per pause, 2.5 s limit: polls at t = 0, 1, 2, 3; the fourth sees
     * 3 s >= 2.5 s and gives up without pausing again. */
    cz_nccl_state s4[] = {P};
    ck_assert_int_eq(run_script(s4, 1, 2.5, &np, &pa), CZ_NCCL_WAIT_TIMEOUT);
    ck_assert_int_eq(np, 4);
    ck_assert_int_eq(pa, 3);
    /* No time at all and pending: one poll, then the timeout. */
    ck_assert_int_eq(run_script(s4, 1, 0.0, &np, &pa), CZ_NCCL_WAIT_TIMEOUT);
    ck_assert_int_eq(np, 1);
    ck_assert_int_eq(pa, 0);
    /* Ready on the poll made at the deadline: the state wins over the clock. */
    cz_nccl_state s5[] = {P, P, P, R};
    ck_assert_int_eq(run_script(s5, 4, 3.0, &np, &pa), CZ_NCCL_WAIT_OK);
    ck_assert_int_eq(np, 4);
}
END_TEST

/* The close of a plane whose peer died: its stream never drains, the drain times out with the
 * plane's limit, and the communicator is aborted (which ends its kernels) instead of being
 * finalized or waited for; a drained plane of ours is finalized, the job's is left alone, an
 * already aborted one is not touched again. */
START_TEST(close_hand_worked)
{
    const cz_nccl_state P = CZ_NCCL_STATE_PENDING, R = CZ_NCCL_STATE_READY,
                        F = CZ_NCCL_STATE_FAILED;
    int np, pa;
    cz_nccl_state never[] = {P}, drains[] = {P, R}, fails[] = {P, F};
    cz_nccl_wait dead = run_script(never, 1, 300.0, &np, &pa);
    ck_assert_int_eq(dead, CZ_NCCL_WAIT_TIMEOUT);
    ck_assert_int_eq(cz__nccl_close_step_of(dead, 0, 0), CZ_NCCL_CLOSE_ABORT);
    ck_assert_int_eq(cz__nccl_close_step_of(dead, 0, 1), CZ_NCCL_CLOSE_ABORT);
    cz_nccl_wait ok = run_script(drains, 2, 300.0, &np, &pa);
    ck_assert_int_eq(cz__nccl_close_step_of(ok, 0, 0), CZ_NCCL_CLOSE_FINALIZE);
    ck_assert_int_eq(cz__nccl_close_step_of(ok, 0, 1), CZ_NCCL_CLOSE_LEAVE);
    cz_nccl_wait failed = run_script(fails, 2, 300.0, &np, &pa);
    ck_assert_int_eq(cz__nccl_close_step_of(failed, 0, 0), CZ_NCCL_CLOSE_ABORT);
    ck_assert_int_eq(cz__nccl_close_step_of(dead, 1, 0), CZ_NCCL_CLOSE_LEAVE);
    ck_assert_int_eq(cz__nccl_close_step_of(ok, 1, 0), CZ_NCCL_CLOSE_LEAVE);
}
END_TEST

/* A group's exchange with its own rank becomes one device copy: both halves posted with one
 * count; nothing posted is no copy; one half alone, or two counts, is the caller's bug. */
START_TEST(self_copy_rule)
{
    ck_assert_int_eq(cz__nccl_self_copy(0, 0, 0, 0), 0);
    ck_assert_int_eq(cz__nccl_self_copy(96, 1, 96, 1), 96);
    ck_assert_int_eq(cz__nccl_self_copy(96, 1, 0, 0), -1);
    ck_assert_int_eq(cz__nccl_self_copy(0, 0, 96, 1), -1);
    ck_assert_int_eq(cz__nccl_self_copy(96, 1, 95, 1), -1);
}
END_TEST

/* The NCCL found at run time against the header the plugin was built with (2.28.9 here). */
START_TEST(version_check)
{
    char why[256] = "";
    ck_assert(cz__nccl_version_usable(22809, 22809, why, sizeof why));
    ck_assert(cz__nccl_version_usable(22904, 22809, why, sizeof why));  /* newer */
    ck_assert(cz__nccl_version_usable(21800, 22809, why, sizeof why));  /* older, has the API */
    ck_assert(!cz__nccl_version_usable(21703, 22809, why, sizeof why)); /* no ncclCommSplit */
    ck_assert_msg(strstr(why, "NCCL 2.17.3 was found") && strstr(why, "2.28.9"), "%s", why);
    ck_assert(!cz__nccl_version_usable(30001, 22809, why, sizeof why)); /* another major */
    ck_assert_msg(strstr(why, "NCCL 3.0.1 was found"), "%s", why);
}
END_TEST

/* A control plane of one rank standing for many: the other ranks' contribution to the
 * min-reduction is `peers` (INT64_MAX = they all succeeded). */
typedef struct fake_ctrl {
    int64_t peers, seen;
    int calls, fail;
} fake_ctrl;

static int fake_min(cz_ctrl *c, int64_t *v, int n, cz_error *err)
{
    fake_ctrl *f = c->impl;
    f->calls++;
    f->seen = v[0];
    if (f->fail)
        return cz__error_set(err, CZ_EIO, "control plane down");
    for (int i = 0; i < n; i++)
        v[i] = v[i] < f->peers ? v[i] : f->peers;
    return CZ_OK;
}

static const cz_ctrl_ops fake_ctrl_ops = {
    .kind = CZ_COMM_SELF, .name = "fake", .allreduce_min_i64 = fake_min};

START_TEST(agree_hand_worked)
{
    fake_ctrl f = {.peers = INT64_MAX};
    cz_ctrl c = {.ops = &fake_ctrl_ops, .impl = &f, .size = 4, .rank = 3};
    cz_error err = {0};
    /* Everyone succeeded. */
    ck_assert_int_eq(cz__nccl_agree(&c, CZ_OK, "create it", &err), CZ_OK);
    ck_assert_int_eq(f.calls, 1);
    ck_assert(f.seen == INT64_MAX);
    /* Rank 1 failed: this rank, fine itself, learns it and returns an error naming it. */
    f.peers = 1;
    ck_assert_int_eq(cz__nccl_agree(&c, CZ_OK, "create it", &err), CZ_EIO);
    ck_assert_ptr_nonnull(strstr(err.message, "rank 1 failed to create it"));
    /* This rank timed out: it still takes part (contributing its rank) and keeps its own
     * error and message. */
    cz__error_set(&err, CZ_ETIMEOUT, "own timeout");
    ck_assert_int_eq(cz__nccl_agree(&c, CZ_ETIMEOUT, "create it", &err), CZ_ETIMEOUT);
    ck_assert_int_eq(f.calls, 3);
    ck_assert(f.seen == 3);
    ck_assert_str_eq(err.message, "own timeout");
    /* The control plane itself failing is an error too. */
    f.peers = INT64_MAX;
    f.fail = 1;
    ck_assert_int_eq(cz__nccl_agree(&c, CZ_OK, "create it", &err), CZ_EIO);
    ck_assert_ptr_nonnull(strstr(err.message, "control plane down"));
}
END_TEST

START_TEST(timeout_knob)
{
    ck_assert_double_eq(cz__nccl_timeout(5.0, NULL), 5.0);
    ck_assert_double_eq(cz__nccl_timeout(2.0, "12"), 2.0); /* the config wins */
    ck_assert_double_eq(cz__nccl_timeout(0.0, "12"), 12.0);
    ck_assert_double_eq(cz__nccl_timeout(0.0, "0.5"), 0.5);
    ck_assert_double_eq(cz__nccl_timeout(0.0, "soon"), CZ_NCCL_DEFAULT_TIMEOUT_S);
    ck_assert_double_eq(cz__nccl_timeout(0.0, "-1"), CZ_NCCL_DEFAULT_TIMEOUT_S);
    ck_assert_double_eq(cz__nccl_timeout(-3.0, NULL), CZ_NCCL_DEFAULT_TIMEOUT_S);
    ck_assert_double_eq(CZ_NCCL_DEFAULT_TIMEOUT_S, 300.0);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("nccl_plan");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, rule_hand_worked);
    tcase_add_test(tc, lists_hand_worked);
    tcase_add_test(tc, lists_simulated);
    tcase_add_test(tc, step_time_hand_worked);
    tcase_add_test(tc, scratch_hand_worked);
    tcase_add_test(tc, scratch_bundled_plans);
    tcase_add_test(tc, poll_hand_worked);
    tcase_add_test(tc, close_hand_worked);
    tcase_add_test(tc, version_check);
    tcase_add_test(tc, self_copy_rule);
    tcase_add_test(tc, agree_hand_worked);
    tcase_add_test(tc, timeout_knob);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
