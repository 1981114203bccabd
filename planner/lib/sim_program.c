/*
 * The simulator's program of one DP rank's TP group (docs/SIMULATOR.md): what each of its GPUs
 * runs after the gradients are synchronized (the elementwise updates, every micro-group's
 * gather, computes and scatter, the tasks of a pipelined plan), built from the plan and replayed
 * on one compute and one communication stream per GPU (cz__sim_prog_run).
 */
#include "cz_sim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void cz__sim_prog_free(sim_prog *pg)
{
    free(pg->elem);
    free(pg->gather);
    free(pg->scatter);
    free(pg->compute);
    free(pg->first);
    free(pg->tasks);
    free(pg->scratch);
    free(pg->sent);
    memset(pg, 0, sizeof *pg);
}

int cz__sim_prog_alloc(sim_prog *pg, int ngroups, int R)
{
    memset(pg, 0, sizeof *pg);
    pg->ngroups = ngroups;
    size_t g = ngroups > 0 ? (size_t)ngroups : 1;
    pg->elem = calloc((size_t)R, sizeof *pg->elem);
    pg->gather = calloc(g, sizeof *pg->gather);
    pg->scatter = calloc(g, sizeof *pg->scatter);
    pg->compute = calloc(g * (size_t)R, sizeof *pg->compute);
    pg->first = calloc(g + 1, sizeof *pg->first);
    pg->scratch = calloc((size_t)R, sizeof *pg->scratch);
    if (!pg->elem || !pg->gather || !pg->scatter || !pg->compute || !pg->first || !pg->scratch) {
        cz__sim_prog_free(pg);
        return CZ_ENOMEM;
    }
    return CZ_OK;
}

/* Whether parameter p belongs to the ranks cx simulates (dense or expert), and the rank of its
 * bucket's partition that rank *d of cx is (the expert-DP rank of an expert rank; false for an
 * expert of another EP rank). */
bool cz__sim_in_side(const sim_ctx *cx, const cz_plan_param *p, int *d)
{
    if (p->expert != cx->expert)
        return false;
    if (!cx->expert)
        return true;
    int ep = cx->plan->ep;
    if (p->ep_rank != *d % ep)
        return false;
    *d /= ep;
    return true;
}

static const cz_plan_bucket *param_bucket(const sim_ctx *cx, const cz_plan_param *p)
{
    int bi = cx->bucket_index[p->id];
    return bi >= 0 ? &cx->plan->buckets[bi] : NULL;
}

/* Elements of param p's local shard that lie in DP rank d's range of its bucket. */
int64_t cz__sim_param_overlap(const sim_ctx *cx, const cz_plan_param *p, int d)
{
    const cz_plan_bucket *b = param_bucket(cx, p);
    if (!b || !b->ranges || !cz__sim_in_side(cx, p, &d) || d < 0 ||
        d >= cz_plan_bucket_nranks(cx->plan, b))
        return 0;
    int64_t lo = b->ranges[2 * d], hi = b->ranges[2 * d + 1];
    int64_t s = p->offset > lo ? p->offset : lo, end;
    /* offset and numel come from the plan file, each only bounded by int64_t. */
    if (__builtin_add_overflow(p->offset, p->numel, &end))
        end = INT64_MAX;
    int64_t e = end < hi ? end : hi;
    return e > s ? e - s : 0;
}

const cz_rank_schedule *cz__sim_find_schedule(const sim_ctx *cx, int stage, int d)
{
    const cz_plan *plan = cx->plan;
    if (cx->expert) /* expert rank d of the stage, cz_plan_expert_rank's order */
        return (size_t)stage * (size_t)cx->D + (size_t)d < plan->nexpert_schedules
                   ? &plan->expert_schedules[(size_t)stage * (size_t)cx->D + (size_t)d]
                   : NULL;
    size_t i = (size_t)stage * (size_t)plan->dp + (size_t)d;
    if (i < plan->nschedules && plan->schedules[i].stage == stage &&
        plan->schedules[i].dp_rank == d)
        return &plan->schedules[i];
    for (i = 0; i < plan->nschedules; i++)
        if (plan->schedules[i].stage == stage && plan->schedules[i].dp_rank == d)
            return &plan->schedules[i];
    return NULL;
}

/* Bytes one TP rank holds of param p (its local shard). */
static double shard_bytes(const sim_ctx *cx, const cz_plan_param *p)
{
    return (double)p->numel * cx->elem_bytes;
}

/* Duration of a synchronous-compute gather: ring all-gather over TP of the split matrices'
 * shards (replicated matrices are already whole on every TP rank). */
static double sc_gather_seconds(const sim_ctx *cx, int stage, int d, double shard_sum)
{
    if (!cx->cluster)
        return 0.0;
    return cz__sim_coll_seconds(cx, CZ_COLL_ALL_GATHER, cx->R, shard_sum,
                                cz__sim_tp_gbps(cx, stage, d), cz__sim_tp_inter(cx, stage, d));
}

/* Fills the elementwise work of DP rank d: owned local shards, or for fragmented parameters
 * (even, split layout) the part of each shard that lies in the rank's slice. */
void cz__sim_prog_elementwise(const sim_ctx *cx, sim_prog *pg, int stage, int d)
{
    const cz_plan *plan = cx->plan;
    double e = 0.0;
    for (size_t i = 0; i < plan->nparams; i++) {
        const cz_plan_param *p = &plan->params[i];
        int own = d;
        if (p->def.kind != CZ_KIND_ELEMENTWISE || p->stage != stage ||
            !cz__sim_in_side(cx, p, &own))
            continue;
        double share = cx->sec[i] / cx->R;
        if (cx->zero1_elementwise) {
            /* an even slice of the ZeRO-1 buffer, padding aside */
            e += share / (cx->expert ? plan->edp : cx->D);
        } else if (cz_plan_param_fragmented(plan, p)) {
            if (p->numel > 0)
                e += share * (double)cz__sim_param_overlap(cx, p, d) / (double)p->numel;
        } else if (p->dp_owner == own) {
            e += share;
        }
    }
    for (int t = 0; t < cx->R; t++)
        pg->elem[t] = e;
}

/* The even (ZeRO-1) baseline: every matrix that touches the rank's slice is gathered over DP
 * and updated whole, redundantly, on every TP rank (synchronous compute). One group. */
int cz__sim_prog_build_even(const sim_ctx *cx, sim_prog *pg, int stage, int d, double *frag_s)
{
    const cz_plan *plan = cx->plan;
    int rc = cz__sim_prog_alloc(pg, 1, cx->R);
    if (rc)
        return rc;
    cz__sim_prog_elementwise(cx, pg, stage, d);
    double work = 0.0, shard_sum = 0.0, missing = 0.0;
    int max_sharing = 1;
    for (size_t i = 0; i < plan->nparams; i++) {
        const cz_plan_param *p = &plan->params[i];
        if (p->def.kind != CZ_KIND_MATRIX || p->stage != stage || p->numel <= 0)
            continue;
        int64_t mine = cz__sim_param_overlap(cx, p, d);
        if (mine <= 0)
            continue;
        work += cx->sec[i];
        if (p->def.tp_dim >= 0)
            shard_sum += shard_bytes(cx, p);
        if (mine < p->numel) {
            int sharing = 0;
            for (int r = 0; r < cx->D; r++)
                sharing += cz__sim_param_overlap(cx, p, r) > 0; /* 0 for ranks of another side */
            if (sharing > max_sharing)
                max_sharing = sharing;
            missing += (double)(p->numel - mine) * cx->elem_bytes;
        }
    }
    for (int t = 0; t < cx->R; t++)
        pg->compute[t] = work;
    pg->gather[0] = sc_gather_seconds(cx, stage, d, shard_sum);
    pg->comm_s = pg->gather[0];
    *frag_s = cx->cluster
                  ? cz__sim_coll_seconds(cx, CZ_COLL_ALL_TO_ALL, max_sharing, missing,
                                         cz__sim_dp_gbps(cx, stage), cz__sim_dp_inter(cx, stage))
                  : 0.0;
    return CZ_OK;
}

/* What one task of a micro-group costs: its compute on each slot it occupies, the all-reduces
 * of a cooperative task on each member (both in seconds with a cluster, else in the plan's
 * cost unit with free communication), and the share of its matrix's elements it covers (its
 * block's region, or the whole matrix). */
typedef struct task_work {
    double compute, allreduce, share, comm;
} task_work;

/* The share of matrix d's elements that a task of block `block` covers (1: the whole). */
static double task_share(const cz_param_def *d, int block)
{
    if (block < 0)
        return 1.0;
    int64_t r0, c0, rows, cols;
    cz_task_region(d, block, &r0, &c0, &rows, &cols);
    double whole = (double)d->shape[0] * (double)(d->ndim == 1 ? 1 : d->shape[1]);
    return whole > 0 ? (double)rows * (double)cols / whole : 1.0;
}

/* The simulator's all-reduce among a cooperative task's w members. */
typedef struct sim_ar {
    const sim_ctx *cx;
    int w, inter;
    double gbps;
} sim_ar;

static double sim_allreduce(double bytes, const void *ctx)
{
    const sim_ar *x = ctx;
    return cz__sim_coll_seconds(x->cx, CZ_COLL_ALL_REDUCE, x->w, bytes, x->gbps, x->inter);
}

static task_work task_work_of(const sim_ctx *cx, const cz_plan_group *grp, int k, int stage, int d)
{
    const cz_plan *plan = cx->plan;
    int id = grp->task_param[k], slot = grp->task_slot ? grp->task_slot[k] : 0;
    int w = cz_group_task_width(grp, k), block = cz_group_task_block(grp, k);
    const cz_plan_param *p = &plan->params[id];
    task_work tw = {cx->sec[id], 0.0, 1.0, 0.0};
    if (block < 0 && w == 1)
        return tw;
    int64_t r0, c0, rows, cols;
    cz_task_region(&p->def, block, &r0, &c0, &rows, &cols);
    tw.share = task_share(&p->def, block);
    if (!cx->cluster || cx->tpw) {
        /* Cost-proportional (the task's recorded cost, as the metrics count it), or a Megatron
         * TP mode, which is modelled per whole matrix: the block's share of it. */
        double cost = grp->task_cost ? grp->task_cost[k] : p->cost * tw.share / w;
        tw.compute = !cx->cluster ? cost : cx->sec[id] * tw.share / w;
        return tw;
    }
    cz_settings st = plan->settings;
    st.unit = CZ_UNIT_TIME;
    if (w == 1 || cz_task_is_local(&p->def, w)) {
        /* A TP-local task: each member its 1/w of the heads, nothing all-reduced. */
        tw.compute = cz__cost_block(&p->def, block, &st, cx->cluster, plan->dtype) / w;
        return tw;
    }
    /* The cost model's pipeline (cz__coop_time_of) with the simulator's all-reduce on the links
     * the k GPUs share: the Gram panels' all-reduces (as many as the plan records for the task,
     * cz_coop_gram_bytes in all per iteration) overlap the computation, and only what they leave
     * exposed, with the norm's all-reduce per step, is charged as the task's all-reduce time. */
    const cz_cluster *c = cx->cluster;
    int first = (stage * cx->D + d) * cx->R + slot;
    int spans = cz__sim_group_spans_nodes(first, 1, w, c->gpus_per_node);
    sim_ar ar = {cx, w, spans, cz__sim_link_gbps(c, spans)};
    cz_coop_time ct = cz__coop_time_of(rows, cols, w, cz_group_task_panels(grp, k), &st, c,
                                       plan->dtype, sim_allreduce, &ar);
    tw.compute = ct.compute;
    tw.allreduce = ct.exposed;
    tw.comm = ct.comm;
    return tw;
}

/* The Newton-Schulz matrices of task k of grp: its block, or every block of its matrix, or the
 * whole matrix; *n of them into rows[], cols[] (room for CZ_MAX_BLOCKS). */
static int task_matrices(const cz_plan *plan, const cz_plan_group *grp, int k, int64_t *rows,
                         int64_t *cols)
{
    const cz_param_def *d = &plan->params[grp->task_param[k]].def;
    int block = cz_group_task_block(grp, k), n = 0;
    int all = block < 0 && d->nblocks > 0 && d->block_sizes;
    for (int b = all ? 0 : block; b < (all ? d->nblocks : block + 1) && n < CZ_MAX_BLOCKS; b++) {
        int64_t r0, c0;
        cz_task_region(d, b, &r0, &c0, &rows[n], &cols[n]);
        n++;
    }
    return n;
}

/* The executor batches the Newton-Schulz of the same-shape matrices a slot hosts in one
 * micro-group (cz__muon_prepare_tasks, one ns_batched call per shape): each iteration's launches
 * and calls are paid once per shape, not once per matrix. The tasks' costs count each matrix
 * alone; here each slot's hosted tasks are scaled to the batched time, their share of it in
 * proportion to their cost. */
static void batch_group(const sim_ctx *cx, const cz_plan_group *grp, sim_task *tasks, int n)
{
    const cz_plan *plan = cx->plan;
    const cz_cluster *c = cx->cluster;
    int steps = plan->settings.ns_steps;
    cz_gemm_prec prec = cz__dm_ns_prec(plan->dtype);
    int64_t rows[CZ_MAX_BLOCKS], cols[CZ_MAX_BLOCKS];
    for (int slot = 0; slot < cx->R; slot++) {
        double alone = 0.0, change = 0.0; /* the batches' time less the matrices' alone */
        int shapes = 0;
        int64_t sa[64], sb[64];
        int cnt[64];
        for (int i = 0; i < n; i++) {
            if (tasks[i].slot != slot || tasks[i].width != 1)
                continue;
            alone += tasks[i].compute;
            int nm = task_matrices(plan, grp, tasks[i].index, rows, cols);
            for (int j = 0; j < nm; j++) {
                int64_t a = rows[j] < cols[j] ? rows[j] : cols[j];
                int64_t b = rows[j] < cols[j] ? cols[j] : rows[j], q = 0;
                while (q < shapes && (sa[q] != a || sb[q] != b))
                    q++;
                if (q == shapes) {
                    if (shapes == 64) /* more shapes than any model has: the rest alone */
                        continue;
                    sa[q] = a, sb[q] = b, cnt[q] = 0, shapes++;
                }
                cnt[q]++;
            }
        }
        for (int q = 0; q < shapes; q++)
            change += cz__dm_ns_seconds(c, sa[q], sb[q], cnt[q], steps, prec) -
                      cnt[q] * cz__dm_ns_seconds(c, sa[q], sb[q], 1, steps, prec);
        if (!(alone > 0.0) || change >= 0.0)
            continue;
        double f = (alone + change) / alone;
        for (int i = 0; i < n; i++)
            if (tasks[i].slot == slot && tasks[i].width == 1)
                tasks[i].compute *= f;
    }
}

void cz__sim_prog_sent_most(const sim_prog *pg, int R, int64_t *most)
{
    if (*most < 0)
        return;
    if (!pg->sent) {
        *most = -1;
        return;
    }
    for (int t = 0; t < R; t++) {
        int64_t b = llround(pg->sent[t]);
        *most = b > *most ? b : *most;
    }
}

/* Member m's part of a task of width w on block `block` of d, as the executor cuts it
 * (cz__task_parts): the task's region, sliced along its long side when w > 1. */
static void member_part(const cz_param_def *d, int block, int w, int m, int64_t *r0, int64_t *c0,
                        int64_t *rows, int64_t *cols)
{
    cz_task_region(d, block, r0, c0, rows, cols);
    if (w <= 1)
        return;
    bool tall = *rows > *cols;
    int64_t s, n;
    cz_coop_slice(tall ? *rows : *cols, w, m, &s, &n);
    if (tall)
        *r0 += s, *rows = n;
    else
        *c0 += s, *cols = n;
}

/* Elements of TP rank t's shard of p inside the rectangle at (r0, c0) of the full matrix: its
 * ranges along the TP dimension cut the rectangle's extent there, and it holds the other
 * dimension whole. A replicated matrix is whole on every rank. */
static double shard_in_rect(const cz_plan_param *p, int R, int t, int64_t r0, int64_t c0,
                            int64_t rows, int64_t cols)
{
    if (p->def.tp_dim < 0 || R == 1)
        return (double)rows * (double)cols;
    int64_t lo[CZ_MAX_BLOCKS], hi[CZ_MAX_BLOCKS], in = 0;
    int n = cz__shard_ranges(p, R, t, lo, hi, CZ_MAX_BLOCKS);
    bool along_rows = p->def.tp_dim == 0;
    int64_t a0 = along_rows ? r0 : c0, a1 = a0 + (along_rows ? rows : cols);
    for (int k = 0; k < n; k++) {
        int64_t s = lo[k] > a0 ? lo[k] : a0, e = hi[k] < a1 ? hi[k] : a1;
        in += e > s ? e - s : 0;
    }
    return (double)in * (double)(along_rows ? cols : rows);
}

/* What a task's exchanges move (the executor's gathers and scatters, pipeline.c): each member
 * j = slot + m receives from every other rank t that rank's shard of its part, and sends the
 * update of that piece back; a replicated matrix is whole on its host, so it gathers nothing
 * and scatters the whole part; a TP-local task moves nothing. Into the R-long send/recv
 * arrays of the gather (scatter 0) or of the scatter. */
static void task_exchange(const sim_ctx *cx, const cz_plan_param *p, int block, int slot, int w,
                          int scatter, double *send, double *recv)
{
    if (cz_task_is_local(&p->def, w) || (!scatter && p->def.tp_dim < 0))
        return;
    for (int m = 0; m < w; m++) {
        int64_t r0, c0, rows, cols;
        int j = slot + m;
        member_part(&p->def, block, w, m, &r0, &c0, &rows, &cols);
        for (int t = 0; t < cx->R; t++) {
            if (t == j)
                continue;
            double b = shard_in_rect(p, cx->R, t, r0, c0, rows, cols) * cx->elem_bytes;
            send[scatter ? j : t] += b;
            recv[scatter ? t : j] += b;
        }
    }
}

int cz__sim_prog_build(const sim_ctx *cx, sim_prog *pg, int stage, int d, cz_error *err)
{
    const cz_plan *plan = cx->plan;
    const cz_rank_schedule *rs = cz__sim_find_schedule(cx, stage, d);
    int ngroups = rs ? rs->ngroups : 0;
    int R = cx->R, rc = CZ_OK;
    double *send = NULL, *recv = NULL;
    char *grams_done = NULL;
    if ((rc = cz__sim_prog_alloc(pg, ngroups, R)))
        return cz__error_set(err, rc, "out of memory simulating DP rank %d", d);
    cz__sim_prog_elementwise(cx, pg, stage, d);
    send = calloc((size_t)R, sizeof *send);
    recv = calloc((size_t)R, sizeof *recv);
    pg->sent = calloc((size_t)R, sizeof *pg->sent);
    grams_done = calloc(plan->nparams ? plan->nparams : 1, 1);
    if (!send || !recv || !pg->sent || !grams_done) {
        rc = cz__error_set(err, CZ_ENOMEM, "out of memory simulating DP rank %d", d);
        goto done;
    }
    size_t ntasks = 0;
    for (int g = 0; g < ngroups; g++)
        ntasks += rs->groups[g].ntasks > 0 ? (size_t)rs->groups[g].ntasks : 0;
    pg->tasks = malloc((ntasks ? ntasks : 1) * sizeof *pg->tasks);
    if (!pg->tasks) {
        rc = cz__error_set(err, CZ_ENOMEM, "out of memory simulating DP rank %d", d);
        goto done;
    }
    double gbps = cx->cluster ? cz__sim_tp_gbps(cx, stage, d) : 0.0;
    int inter = cx->cluster ? cz__sim_tp_inter(cx, stage, d) : 0;
    for (int g = 0; g < ngroups; g++) {
        const cz_plan_group *grp = &rs->groups[g];
        double *comp = &pg->compute[(size_t)g * (size_t)R];
        double shard_sum = 0.0, work = 0.0, gram_s = 0.0;
        pg->first[g] = pg->ntasks;
        for (int k = 0; k < grp->ntasks; k++) {
            int id = grp->task_param[k];
            int slot = grp->task_slot ? grp->task_slot[k] : 0;
            int w = cz_group_task_width(grp, k);
            if (id < 0 || (size_t)id >= plan->nparams || slot < 0 || w < 1 || slot + w > R) {
                rc = cz__error_set(err, CZ_EINVALID,
                                   "tp_schedule of DP rank %d, group %d, task %d: param %d on "
                                   "slot %d (width %d) is out of range (%zu params, %d TP ranks)",
                                   d, g, k, id, slot, w, plan->nparams, R);
                goto done;
            }
            const cz_plan_param *p = &plan->params[id];
            task_work tw = task_work_of(cx, grp, k, stage, d);
            if (!cx->pipelined) {
                work += tw.compute;
                if (cx->muon_tp == CZ_MUON_TP_DUPLICATED && p->def.tp_dim >= 0)
                    shard_sum += shard_bytes(cx, p) * tw.share;
                /* A Megatron TP mode's Gram all-reduces are the whole matrix's: counted once
                 * for all its block tasks. */
                if (cx->tpw && cx->cluster && cx->tpw[id].grams > 0 && !grams_done[id]) {
                    grams_done[id] = 1;
                    gram_s += cx->tpw[id].grams * cz__sim_collective_seconds(CZ_COLL_ALL_REDUCE, R,
                                                                             cx->tpw[id].gram_bytes,
                                                                             gbps, cx->lat_us) +
                              cx->tpw[id].scalar_allreduce *
                                  cz__sim_collective_seconds(CZ_COLL_ALL_REDUCE, R, 4.0, gbps,
                                                             cx->lat_us);
                }
                continue;
            }
            bool local = cz_task_is_local(&p->def, w);
            pg->tasks[pg->ntasks++] =
                (sim_task){slot, w, k, tw.compute, tw.allreduce, tw.comm, local};
            pg->coop_tasks += w > 1 && !local;
            task_exchange(cx, p, cz_group_task_block(grp, k), slot, w, 0, send, recv);
        }
        pg->first[g + 1] = pg->ntasks;
        if (cx->pipelined && cx->dm && plan->settings.optimizer == CZ_OPTIM_MUON)
            batch_group(cx, grp, &pg->tasks[pg->first[g]], pg->ntasks - pg->first[g]);
        if (!cx->pipelined) {
            for (int t = 0; t < R; t++)
                comp[t] = work;
            /* distributed mode's Gram all-reduces interleave with the iterations; in this
             * serial model they add to the group's collective time like the gather. */
            pg->gather[g] = sc_gather_seconds(cx, stage, d, shard_sum) + gram_s;
            /* The executor's sc all-gather: each rank's shards reach the R - 1 others. */
            for (int t = 0; t < R; t++)
                pg->sent[t] += shard_sum * (R - 1);
            pg->comm_s += pg->gather[g];
            continue;
        }
        double worst = 0.0;
        for (int t = 0; t < R; t++) {
            worst = fmax(worst, fmax(send[t], recv[t]));
            pg->sent[t] += send[t];
            send[t] = recv[t] = 0.0;
        }
        pg->gather[g] =
            cx->cluster ? cz__sim_coll_seconds(cx, CZ_COLL_ALL_TO_ALL, R, worst, gbps, inter) : 0.0;
        /* Scatter: the reverse. A replicated matrix is whole on its host (no gather), which
         * sends the whole update (a member: its slice) to every other rank. */
        for (int k = 0; k < grp->ntasks; k++) {
            const cz_plan_param *p = &plan->params[grp->task_param[k]];
            int slot = grp->task_slot ? grp->task_slot[k] : 0;
            task_exchange(cx, p, cz_group_task_block(grp, k), slot, cz_group_task_width(grp, k), 1,
                          send, recv);
        }
        worst = 0.0;
        for (int t = 0; t < R; t++) {
            worst = fmax(worst, fmax(send[t], recv[t]));
            pg->sent[t] += send[t];
            send[t] = recv[t] = 0.0;
        }
        pg->scatter[g] =
            cx->cluster ? cz__sim_coll_seconds(cx, CZ_COLL_ALL_TO_ALL, R, worst, gbps, inter) : 0.0;
        pg->comm_s += pg->gather[g] + pg->scatter[g];
    }
done:
    free(send);
    free(recv);
    free(grams_done);
    if (rc)
        cz__sim_prog_free(pg);
    return rc;
}

/* Runs one TP group's program. finish and busy have R entries; the timeline arrays and
 * coop_ar / coop_comm / coop_wait (R entries each: the time each slot waits on cooperative
 * all-reduces its computation does not hide, the time of those all-reduces hidden or not, and
 * the time it waits for slower members) may be NULL. The pipelined comm stream issues G0, G1,
 * S0, G2, S1, ..., S(n-1): the next group's gather is in flight while this group computes, and
 * a scatter waits for every TP rank to finish the group's compute. Within a group each slot
 * runs its tasks in order; a cooperative task starts when the last of its members is free and
 * keeps them all until its last all-reduce. */
void cz__sim_prog_run(const sim_prog *pg, int R, int pipelined, double *finish, double *busy,
                      cz_sim_span *tl_gather, cz_sim_span *tl_scatter, cz_sim_span *tl_compute,
                      double *coop_ar, double *coop_comm, double *coop_wait, cz_sim_coop *tl_coop)
{
    int ncoop = 0;
    int G = pg->ngroups;
    double comm = 0.0, prev_end = 0.0;
    for (int t = 0; t < R; t++) {
        finish[t] = pg->elem[t];
        busy[t] = pg->elem[t];
        if (coop_ar)
            coop_ar[t] = 0.0;
        if (coop_comm)
            coop_comm[t] = 0.0;
        if (coop_wait)
            coop_wait[t] = 0.0;
    }
    if (!pipelined) {
        for (int g = 0; g < G; g++) {
            double gs = 0.0;
            for (int t = 0; t < R; t++)
                gs = fmax(gs, finish[t]);
            double ge = gs + pg->gather[g];
            for (int t = 0; t < R; t++) {
                double c = pg->compute[(size_t)g * R + t];
                if (tl_compute)
                    tl_compute[(size_t)g * R + t] = (cz_sim_span){ge, ge + c};
                finish[t] = ge + c;
                busy[t] += c;
            }
            if (tl_gather)
                tl_gather[g] = (cz_sim_span){gs, ge};
            /* A scatter (layer sharding's return all-to-all) waits for every rank's compute. */
            double ss = ge, se = ge;
            if (pg->scatter[g] > 0) {
                for (int t = 0; t < R; t++)
                    ss = fmax(ss, finish[t]);
                se = ss + pg->scatter[g];
                for (int t = 0; t < R; t++)
                    finish[t] = se;
            }
            if (tl_scatter)
                tl_scatter[g] = (cz_sim_span){ss, se};
        }
        return;
    }
    for (int g = 0; g <= G; g++) {
        double group_end = 0.0;
        if (g < G) {
            double gs = comm, ge = gs + pg->gather[g];
            comm = ge;
            if (tl_gather)
                tl_gather[g] = (cz_sim_span){gs, ge};
            double *cs = pg->scratch;
            for (int t = 0; t < R; t++)
                finish[t] = cs[t] = fmax(finish[t], ge);
            for (int i = pg->first[g]; i < pg->first[g + 1]; i++) {
                const sim_task *k = &pg->tasks[i];
                double begin = finish[k->slot];
                for (int x = k->slot + 1; x < k->slot + k->width; x++)
                    begin = fmax(begin, finish[x]);
                if (tl_coop && k->width > 1 && !k->local)
                    tl_coop[ncoop++] =
                        (cz_sim_coop){g,           k->index, k->slot,
                                      k->width,    begin,    begin + k->compute + k->allreduce,
                                      k->allreduce};
                for (int x = k->slot; x < k->slot + k->width; x++) {
                    if (coop_wait)
                        coop_wait[x] += begin - finish[x];
                    if (coop_ar)
                        coop_ar[x] += k->allreduce;
                    if (coop_comm)
                        coop_comm[x] += k->comm;
                    finish[x] = begin + k->compute + k->allreduce;
                    busy[x] += k->compute; /* waits and all-reduces are not compute */
                }
            }
            for (int t = 0; t < R; t++) {
                if (tl_compute)
                    tl_compute[(size_t)g * R + t] = (cz_sim_span){cs[t], finish[t]};
                group_end = fmax(group_end, finish[t]);
            }
        }
        if (g >= 1) {
            double ss = fmax(comm, prev_end), se = ss + pg->scatter[g - 1];
            comm = se;
            if (tl_scatter)
                tl_scatter[g - 1] = (cz_sim_span){ss, se};
        }
        prev_end = group_end;
    }
    for (int t = 0; t < R; t++)
        finish[t] = fmax(finish[t], comm);
}
