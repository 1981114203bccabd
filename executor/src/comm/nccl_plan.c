/* Rooted or padded uneven collectives, and their NCCL call lists (see nccl_plan.h). */
#include "nccl_plan.h"

#include <stdio.h>

#include "cz_format.h"
#include "comm.h"
#include "cz_format.h"

#include <math.h>
#include <stdlib.h>

static void totals(const size_t *counts, int n, size_t *sum, size_t *max)
{
    *sum = *max = 0;
    for (int r = 0; r < n; r++) {
        *sum += counts[r];
        if (counts[r] > *max)
            *max = counts[r];
    }
}

double cz__nccl_time(cz_nccl_form f, const size_t *counts, int n, size_t elem_bytes, double alpha_s,
                     double bytes_per_s)
{
    size_t sum, max;
    totals(counts, n, &sum, &max);
    double s = (double)elem_bytes / bytes_per_s;
    if (f == CZ_NCCL_ROOTED)
        return (double)n * alpha_s + (double)sum * s;
    return (double)(n - 1) * alpha_s + (double)(n - 1) * (double)max * s;
}

cz_nccl_form cz__nccl_choose(const size_t *counts, int n, size_t elem_bytes, double alpha_s,
                             double bytes_per_s)
{
    double pad = cz__nccl_time(CZ_NCCL_PADDED, counts, n, elem_bytes, alpha_s, bytes_per_s);
    double root = cz__nccl_time(CZ_NCCL_ROOTED, counts, n, elem_bytes, alpha_s, bytes_per_s);
    return pad < root ? CZ_NCCL_PADDED : CZ_NCCL_ROOTED;
}

static cz_nccl_call call(cz_nccl_call_kind kind, int root, size_t count, cz_nccl_buf sb, size_t so,
                         cz_nccl_buf db, size_t d, int grouped)
{
    return (cz_nccl_call){kind, root, count, sb, db, so, d, grouped};
}

void *cz__nccl_call_ptr(cz_nccl_buf b, size_t off, size_t elem_bytes, void *send, void *recv,
                        void *scratch)
{
    char *base = b == CZ_NCCL_BUF_SEND ? send : b == CZ_NCCL_BUF_RECV ? recv : scratch;
    return base + off * elem_bytes;
}

int cz__nccl_plan_reduce_scatter(cz_nccl_call *out, const size_t *counts, int n, int me,
                                 cz_nccl_form f, size_t *scratch_elems)
{
    size_t sum, m, off = 0;
    int k = 0;
    totals(counts, n, &sum, &m);
    *scratch_elems = 0;
    if (f == CZ_NCCL_ROOTED) {
        for (int r = 0; r < n; r++) {
            if (counts[r])
                out[k++] = call(CZ_NCCL_REDUCE, r, counts[r], CZ_NCCL_BUF_SEND, off,
                                CZ_NCCL_BUF_RECV, 0, 1);
            off += counts[r];
        }
        return k;
    }
    if (m == 0)
        return 0;
    /* Slots of m elements at scratch[0 .. n m), the result at scratch[n m .. n m + m). The
     * padding of each slot is never read back, so it needs no zeroing. */
    *scratch_elems = (size_t)n * m + m;
    for (int r = 0; r < n; r++) {
        if (counts[r])
            out[k++] = call(CZ_NCCL_COPY, -1, counts[r], CZ_NCCL_BUF_SEND, off, CZ_NCCL_BUF_SCRATCH,
                            (size_t)r * m, 0);
        off += counts[r];
    }
    out[k++] = call(CZ_NCCL_REDUCE_SCATTER, -1, m, CZ_NCCL_BUF_SCRATCH, 0, CZ_NCCL_BUF_SCRATCH,
                    (size_t)n * m, 0);
    if (counts[me])
        out[k++] = call(CZ_NCCL_COPY, -1, counts[me], CZ_NCCL_BUF_SCRATCH, (size_t)n * m,
                        CZ_NCCL_BUF_RECV, 0, 0);
    return k;
}

int cz__nccl_plan_all_gather(cz_nccl_call *out, const size_t *counts, int n, int me, cz_nccl_form f,
                             size_t *scratch_elems)
{
    size_t sum, m, off = 0, mine = 0;
    int k = 0;
    totals(counts, n, &sum, &m);
    *scratch_elems = 0;
    if (f == CZ_NCCL_ROOTED) {
        for (int r = 0; r < n; r++) {
            if (counts[r])
                out[k++] = call(CZ_NCCL_BROADCAST, r, counts[r], CZ_NCCL_BUF_SEND, off,
                                CZ_NCCL_BUF_SEND, off, 1);
            off += counts[r];
        }
        return k;
    }
    if (m == 0)
        return 0;
    *scratch_elems = (size_t)n * m;
    for (int r = 0; r < me; r++)
        mine += counts[r];
    if (counts[me])
        out[k++] = call(CZ_NCCL_COPY, -1, counts[me], CZ_NCCL_BUF_SEND, mine, CZ_NCCL_BUF_SCRATCH,
                        (size_t)me * m, 0);
    /* In place: rank me's slot is already at scratch + me m. */
    out[k++] = call(CZ_NCCL_ALL_GATHER, -1, m, CZ_NCCL_BUF_SCRATCH, (size_t)me * m,
                    CZ_NCCL_BUF_SCRATCH, 0, 0);
    for (int r = 0; r < n; r++) {
        if (r != me && counts[r])
            out[k++] = call(CZ_NCCL_COPY, -1, counts[r], CZ_NCCL_BUF_SCRATCH, (size_t)r * m,
                            CZ_NCCL_BUF_SEND, off, 0);
        off += counts[r];
    }
    return k;
}

double cz__nccl_step_time(const struct cz_plan *plan, cz_nccl_policy policy, size_t elem_bytes,
                          double alpha_s, double bytes_per_s, int *npadded)
{
    int most = plan->dp > plan->edp ? plan->dp : plan->edp;
    size_t *counts = calloc((size_t)(most > 0 ? most : 1), sizeof *counts);
    double t = 0.0;
    *npadded = 0;
    if (!counts)
        return NAN;
    for (size_t b = 0; b < plan->nbuckets; b++) {
        const cz_plan_bucket *bk = &plan->buckets[b];
        /* One range per DP rank, or per expert-DP rank for an expert bucket. */
        int n = cz_plan_bucket_nranks(plan, bk);
        for (int r = 0; r < n; r++)
            counts[r] = (size_t)(bk->ranges[2 * r + 1] - bk->ranges[2 * r]);
        cz_nccl_form f = policy == CZ_NCCL_ALL_ROOTED ? CZ_NCCL_ROOTED
                         : policy == CZ_NCCL_ALL_PADDED
                             ? CZ_NCCL_PADDED
                             : cz__nccl_choose(counts, n, elem_bytes, alpha_s, bytes_per_s);
        *npadded += f == CZ_NCCL_PADDED;
        /* The reduce-scatter and the all-gather move the same segments: the model is the same. */
        t += 2.0 * cz__nccl_time(f, counts, n, elem_bytes, alpha_s, bytes_per_s);
    }
    free(counts);
    return t;
}

size_t cz__nccl_plan_scratch(const struct cz_plan *plan, size_t elem_bytes, double alpha_s,
                             double bytes_per_s)
{
    int most = plan->dp > plan->edp ? plan->dp : plan->edp;
    size_t need = 0, counts[most > 0 ? most : 1];
    for (size_t b = 0; b < plan->nbuckets; b++) {
        const cz_plan_bucket *bk = &plan->buckets[b];
        /* One range per DP rank, or per expert-DP rank for an expert bucket: the expert-DP
         * plane's scratch comes from the same bound (the DP plane's reserve sizes both). */
        int n = cz_plan_bucket_nranks(plan, bk);
        size_t sum, max;
        for (int r = 0; r < n; r++)
            counts[r] = (size_t)(bk->ranges[2 * r + 1] - bk->ranges[2 * r]);
        totals(counts, n, &sum, &max);
        /* The same rule the plane applies per call, on the same counts. */
        if (max == 0 ||
            cz__nccl_choose(counts, n, elem_bytes, alpha_s, bytes_per_s) != CZ_NCCL_PADDED)
            continue;
        /* The reduce-scatter's P m slots plus its m-element result; the all-gather's P m
         * slots fit in them. */
        size_t rs = (size_t)n * max + max;
        need = rs > need ? rs : need;
    }
    return need;
}

size_t cz__nccl_plan_scratch_bytes(const struct cz_plan *plan, double alpha_s, double bytes_per_s)
{
    size_t most = 0;
    for (size_t es = 2; es <= 4; es += 2) {
        size_t b = cz__nccl_plan_scratch(plan, es, alpha_s, bytes_per_s) * es;
        most = b > most ? b : most;
    }
    return most;
}

cz_nccl_wait cz__nccl_poll_until(const cz_nccl_poller *p, double timeout_s, int *npolls)
{
    double start = p->now(p->ctx);
    int n = 0;
    for (;;) {
        cz_nccl_state st = p->poll(p->ctx);
        n++;
        if (st != CZ_NCCL_STATE_PENDING) {
            if (npolls)
                *npolls = n;
            return st == CZ_NCCL_STATE_READY ? CZ_NCCL_WAIT_OK : CZ_NCCL_WAIT_FAILED;
        }
        if (p->now(p->ctx) - start >= timeout_s) {
            if (npolls)
                *npolls = n;
            return CZ_NCCL_WAIT_TIMEOUT;
        }
        p->pause(p->ctx);
    }
}

int cz__nccl_agree(struct cz_ctrl *ctrl, int local_rc, const char *what, cz_error *err)
{
    int64_t v = local_rc ? (int64_t)ctrl->rank : INT64_MAX;
    cz_error tmp;
    int crc = ctrl->ops->allreduce_min_i64(ctrl, &v, 1, local_rc ? &tmp : err);
    if (local_rc)
        return local_rc;
    if (crc)
        return crc;
    if (v != INT64_MAX)
        return cz__error_set(err, CZ_EIO,
                             "rank %lld failed to %s (see its message); this rank's part "
                             "succeeded and its communicator was aborted",
                             (long long)v, what);
    return CZ_OK;
}

double cz__nccl_timeout(double configured_s, const char *env)
{
    if (configured_s > 0.0)
        return configured_s;
    char *end = NULL;
    double x = env ? strtod(env, &end) : 0.0;
    return env && end != env && x > 0.0 ? x : CZ_NCCL_DEFAULT_TIMEOUT_S;
}

cz_nccl_close_step cz__nccl_close_step_of(cz_nccl_wait drained, int aborted, int borrowed)
{
    if (aborted)
        return CZ_NCCL_CLOSE_LEAVE;
    if (drained != CZ_NCCL_WAIT_OK)
        return CZ_NCCL_CLOSE_ABORT;
    return borrowed ? CZ_NCCL_CLOSE_LEAVE : CZ_NCCL_CLOSE_FINALIZE;
}

int cz__nccl_version_usable(int runtime, int built, char *why, size_t len)
{
    if (runtime / 10000 == built / 10000 && runtime >= CZ_NCCL_MIN_VERSION)
        return 1;
    if (why && len)
        snprintf(why, len,
                 "NCCL %d.%d.%d was found; this build needs NCCL %d.%d or newer of major version "
                 "%d (built against %d.%d.%d)",
                 runtime / 10000, runtime / 100 % 100, runtime % 100, CZ_NCCL_MIN_VERSION / 10000,
                 CZ_NCCL_MIN_VERSION / 100 % 100, built / 10000, built / 10000, built / 100 % 100,
                 built % 100);
    return 0;
}

int64_t cz__nccl_self_copy(size_t sent, int has_send, size_t received, int has_recv)
{
    if (!has_send && !has_recv)
        return 0;
    if (has_send != has_recv || sent != received || sent > (size_t)INT64_MAX)
        return -1;
    return (int64_t)sent;
}
