/* The DP exchanges on the wire (wire.h; docs/EXECUTOR.md, "On the wire"). A bf16 job's
 * gradients travel as the job wrote them: the step's fp32 copy of a bucket (staged from bf16,
 * so rounding it back is exact) is narrowed into `buf` and reduce-scattered in bf16 into this
 * rank's range of `recv`, then widened and averaged into the fp32 gradients. Its parameters
 * travel as the job receives them: each rank's range of the fp32 master copy rounded into
 * `buf` (round to nearest even, what staging out does), gathered in place, and the other
 * ranks' ranges widened into the master copy, which they only pass on to the job (rounding
 * them again is exact), so the job's parameters are those of an fp32 all-gather bit for bit.
 * An fp32 exchange posts on the step's own buffers exactly as before the wire had a dtype. */
#include "wire.h"

#include "alloc.h"
#include "canzona_exec.h"
#include "compute.h"
#include "cz_format.h"

#include <stdint.h>

struct cz_wire {
    cz_dtype grad, param;
    uint16_t *buf;  /* bf16 copy of the held buckets, at their offsets in the flat buffer */
    uint16_t *recv; /* bf16: this rank's range of each held bucket, at off[b] */
    int64_t *off;   /* per bucket of the plan */
    int64_t grad_bytes, param_bytes;
};

cz_bucket_plane cz__wire_bucket_plane(cz_executor *ex, const cz_plan_bucket *bk)
{
    if (ex->grid.experts && bk->expert)
        return (cz_bucket_plane){&ex->planes.edp, ex->grid.edp, ex->grid.edp_rank,
                                 ex->grid.expert_base + bk->offset};
    return (cz_bucket_plane){&ex->planes.dp, ex->grid.dp, ex->grid.dp_rank, bk->offset};
}

bool cz__wire_exchanged(const cz_bucket_plane *bp)
{
    return !cz__exec_plane_local(bp->n);
}

/* A bucket's per-rank counts on its plane (its ranges: contiguous and rank-ordered, plan check). */
static void bucket_counts(const cz_plan_bucket *bk, const cz_bucket_plane *bp, size_t *counts)
{
    for (int r = 0; r < bp->n; r++)
        counts[r] = (size_t)(bk->ranges[2 * r + 1] - bk->ranges[2 * r]);
}

/* Bucket b as an exchange posts it: its plane, where it starts in the flat buffers, its
 * elements (every rank's range), and each rank's count into counts (room for the larger of the
 * DP and expert-DP planes: WIRE_MOST). */
typedef struct wire_bucket {
    const cz_plan_bucket *bk;
    cz_bucket_plane bp;
    int64_t start;
    size_t n;
} wire_bucket;
#define WIRE_MOST(ex) ((ex)->grid.dp > (ex)->grid.edp ? (ex)->grid.dp : (ex)->grid.edp)

static wire_bucket bucket_of(cz_executor *ex, size_t b, size_t *counts)
{
    wire_bucket x = {&ex->plan->buckets[b], cz__wire_bucket_plane(ex, &ex->plan->buckets[b]), 0, 0};
    bucket_counts(x.bk, &x.bp, counts);
    x.start = x.bp.base + x.bk->ranges[0];
    for (int r = 0; r < x.bp.n; r++)
        x.n += counts[r];
    return x;
}

int cz__wire_init(cz_executor *ex, cz_error *err)
{
    const cz_plan *plan = ex->plan;
    cz_wire *w = cz__exec_calloc(1, sizeof *w);
    if (!w)
        return cz__error_set(err, CZ_ENOMEM, "out of memory for the executor's wire state");
    ex->wire = w;
    bool bf16 = ex->bind.dtype == CZ_DTYPE_BF16;
    w->param = bf16 ? CZ_DTYPE_BF16 : CZ_DTYPE_FP32;
    w->grad = bf16 && !ex->cfg.grad_reduce_in_fp32 ? CZ_DTYPE_BF16 : CZ_DTYPE_FP32;
    if (!bf16)
        return CZ_OK;
    w->off = cz__exec_calloc(plan->nbuckets + 1, sizeof *w->off);
    if (!w->off)
        return cz__error_set(err, CZ_ENOMEM, "out of memory for the executor's wire state");
    int64_t total = 0;
    bool any = false;
    for (size_t b = 0; b < plan->nbuckets; b++) {
        const cz_plan_bucket *bk = &plan->buckets[b];
        cz_bucket_plane bp = cz__wire_bucket_plane(ex, bk);
        if (!cz__exec_holds_bucket(ex, bk) || !cz__wire_exchanged(&bp))
            continue;
        any = true;
        w->off[b] = total;
        total += bk->ranges[2 * bp.me + 1] - bk->ranges[2 * bp.me];
    }
    /* No held bucket goes on the wire (DP 1): no bf16 copies to travel in. */
    if (!any)
        return CZ_OK;
    size_t nbuf = ex->buffer_numel > 0 ? ex->buffer_numel : 1;
    w->buf = cz__compute_alloc(&ex->compute, CZ_EXEC_MEM_DP, nbuf * sizeof(uint16_t));
    if (w->grad == CZ_DTYPE_BF16)
        w->recv = cz__compute_alloc(&ex->compute, CZ_EXEC_MEM_DP,
                                    (size_t)(total > 0 ? total : 1) * sizeof(uint16_t));
    if (!w->buf || (w->grad == CZ_DTYPE_BF16 && !w->recv))
        return cz__error_set(err, CZ_ENOMEM,
                             "out of memory for the bf16 wire buffers (%zu + %lld elements)", nbuf,
                             (long long)total);
    return CZ_OK;
}

void cz__wire_free(cz_executor *ex)
{
    cz_wire *w = ex->wire;
    if (!w)
        return;
    if (ex->compute.ops) {
        if (w->buf)
            ex->compute.ops->release(&ex->compute, w->buf);
        if (w->recv)
            ex->compute.ops->release(&ex->compute, w->recv);
    }
    cz__exec_free(w->off);
    cz__exec_free(w);
    ex->wire = NULL;
}

int cz__wire_reduce_scatter(cz_executor *ex, size_t b, const float *G, float *recv,
                            cz_comm_req *req, cz_error *err)
{
    cz_wire *w = ex->wire;
    size_t counts[WIRE_MOST(ex)];
    wire_bucket x = bucket_of(ex, b, counts);
    cz_bucket_plane bp = x.bp;
    int64_t start = x.start;
    size_t n = x.n;
    const void *send = G + start;
    void *into = recv;
    if (!cz__wire_exchanged(&bp)) {
        w->grad_bytes += (int64_t)(n * cz__dtype_bytes(w->grad));
        return CZ_OK;
    }
    if (w->grad == CZ_DTYPE_BF16) {
        ex->compute.ops->convert(&ex->compute, w->buf + start, CZ_DTYPE_BF16, send, CZ_DTYPE_FP32,
                                 (int64_t)n);
        /* The plane reads the narrowed copy once it is written. */
        ex->compute.ops->event_record(&ex->compute, ex->ev_grads);
        send = w->buf + start;
        into = w->recv + w->off[b];
    }
    const cz_plane_ops *o = bp.plane->ops;
    int rc = req ? o->ireduce_scatter(bp.plane, send, into, counts, w->grad, ex->ev_grads, req, err)
                 : o->reduce_scatter(bp.plane, send, into, counts, w->grad, ex->ev_grads, err);
    if (rc == CZ_OK)
        w->grad_bytes += (int64_t)(n * cz__dtype_bytes(w->grad));
    return rc;
}

void cz__wire_reduced(cz_executor *ex, size_t b, float *G, const float *recv)
{
    cz_wire *w = ex->wire;
    const cz_plan_bucket *bk = &ex->plan->buckets[b];
    cz_bucket_plane bp = cz__wire_bucket_plane(ex, bk);
    int64_t lo = bk->ranges[2 * bp.me], n = bk->ranges[2 * bp.me + 1] - lo;
    float *mine = G + bp.base + lo;
    /* Averaged over DP. An expert buffer is summed over its expert-DP group and scaled by 1/DP
     * too, as Megatron-Core's DDP does (expert_gradient_scaling_factor = 1 / DP size without
     * average_in_collective): each EP rank's expert gradient already gathers the tokens of the
     * DP replicas of its EP group. */
    float inv = 1.0f / (float)ex->grid.dp;
    /* Not exchanged: the sum of one rank is its own range, in place (a bf16 job's gradients
     * are bf16 values, so the narrowing and widening it skips are exact), still averaged
     * unless that is x 1 (x * 1.0f is x, bit for bit). */
    if (!cz__wire_exchanged(&bp)) {
        if (ex->grid.dp > 1)
            ex->compute.ops->scale(&ex->compute, mine, mine, n, inv);
        return;
    }
    if (w->grad == CZ_DTYPE_BF16) {
        ex->compute.ops->convert(&ex->compute, mine, CZ_DTYPE_FP32, w->recv + w->off[b],
                                 CZ_DTYPE_BF16, n);
        recv = mine;
    }
    ex->compute.ops->scale(&ex->compute, mine, recv, n, inv);
}

int cz__wire_all_gather(cz_executor *ex, size_t b, float *P, cz_comm_req *req, cz_error *err)
{
    cz_wire *w = ex->wire;
    size_t counts[WIRE_MOST(ex)];
    wire_bucket x = bucket_of(ex, b, counts);
    cz_bucket_plane bp = x.bp;
    int64_t start = x.start;
    void *buf = P + start;
    if (!cz__wire_exchanged(&bp)) {
        w->param_bytes += (int64_t)(x.n * cz__dtype_bytes(w->param));
        return CZ_OK;
    }
    if (w->param == CZ_DTYPE_BF16) {
        int64_t lo = bp.base + x.bk->ranges[2 * bp.me];
        ex->compute.ops->convert(&ex->compute, w->buf + lo, CZ_DTYPE_BF16, P + lo, CZ_DTYPE_FP32,
                                 (int64_t)counts[bp.me]);
        ex->compute.ops->event_record(&ex->compute, ex->ev_params);
        buf = w->buf + start;
    }
    const cz_plane_ops *o = bp.plane->ops;
    int rc = req ? o->iall_gatherv(bp.plane, buf, counts, w->param, ex->ev_params, req, err)
                 : o->all_gather(bp.plane, buf, counts, w->param, ex->ev_params, err);
    if (rc == CZ_OK)
        w->param_bytes += (int64_t)(x.n * cz__dtype_bytes(w->param));
    return rc;
}

void cz__wire_gathered(cz_executor *ex, size_t b, float *P)
{
    cz_wire *w = ex->wire;
    if (w->param != CZ_DTYPE_BF16)
        return;
    const cz_plan_bucket *bk = &ex->plan->buckets[b];
    cz_bucket_plane bp = cz__wire_bucket_plane(ex, bk);
    /* bp.n == 1 (not exchanged): the loop below has no other rank's range. */
    for (int r = 0; r < bp.n; r++) {
        int64_t lo = bp.base + bk->ranges[2 * r], n = bk->ranges[2 * r + 1] - bk->ranges[2 * r];
        if (r != bp.me && n > 0)
            ex->compute.ops->convert(&ex->compute, P + lo, CZ_DTYPE_FP32, w->buf + lo,
                                     CZ_DTYPE_BF16, n);
    }
}

void cz_executor_wire(const cz_executor *ex, cz_exec_wire *out)
{
    if (!out)
        return;
    cz_exec_wire z = {CZ_DTYPE_FP32, CZ_DTYPE_FP32, 0, 0, 0, 0};
    const cz_wire *w = ex ? ex->wire : NULL;
    if (w)
        z.grad_dtype = w->grad, z.param_dtype = w->param, z.grad_bytes = w->grad_bytes,
        z.param_bytes = w->param_bytes;
    if (ex)
        z.tp_bytes = cz__exec_pipeline_sent(ex->pipe),
        z.etp_bytes = cz__exec_pipeline_sent(ex->epipe);
    *out = z;
}
