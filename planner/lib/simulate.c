/*
 * Event model of one optimizer step of a plan: alpha-beta collectives, one compute stream and
 * one communication stream per GPU. The assumptions and formulas are written down in
 * docs/SIMULATOR.md; keep the two in step.
 */
#include "cz_analysis.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

double cz__sim_collective_seconds(cz_coll_kind kind, int n, double bytes, double gbps,
                                  double latency_us)
{
    if (n <= 1 || !(bytes > 0))
        return 0.0;
    if (!(gbps > 0))
        return HUGE_VAL;
    double lat = (latency_us > 0 ? latency_us : 0.0) * 1e-6;
    double bw = gbps * 1e9;
    switch (kind) {
    case CZ_COLL_REDUCE_SCATTER:
    case CZ_COLL_ALL_GATHER:
        return (n - 1) * lat + (n - 1) * bytes / bw;
    case CZ_COLL_ALL_REDUCE:
        return 2.0 * (n - 1) * lat + 2.0 * (n - 1) / n * bytes / bw;
    case CZ_COLL_ALL_TO_ALL:
    case CZ_COLL_ROOTED_GROUP:
        return (n - 1) * lat + bytes / bw;
    }
    return 0.0;
}

double cz__sim_uneven_seconds(const int64_t *len, int n, double elem_bytes, double gbps,
                              double latency_us, cz_sim_uneven model)
{
    /* Summed in double: a plan read from a file may hold slices whose sum exceeds int64_t. */
    double total = 0, most = 0, busiest = 0;
    for (int d = 0; d < n; d++) {
        total += (double)len[d];
        most = (double)len[d] > most ? (double)len[d] : most;
    }
    if (model == CZ_SIM_UNEVEN_PADDED)
        return cz__sim_collective_seconds(CZ_COLL_REDUCE_SCATTER, n, most * elem_bytes, gbps,
                                          latency_us);
    /* The ring link leaving rank d is idle only for d's own slice (the reduce toward d ends
     * at d; the broadcast from d starts there), so it carries every other slice once. */
    for (int d = 0; d < n; d++)
        busiest = total - (double)len[d] > busiest ? total - (double)len[d] : busiest;
    return cz__sim_collective_seconds(CZ_COLL_ROOTED_GROUP, n, busiest * elem_bytes, gbps,
                                      latency_us);
}

int cz__sim_group_spans_nodes(int first, int stride, int n, int gpus_per_node)
{
    if (gpus_per_node <= 0 || n <= 1)
        return 0;
    int node0 = first / gpus_per_node;
    for (int i = 1; i < n; i++)
        if ((first + i * stride) / gpus_per_node != node0)
            return 1;
    return 0;
}

void cz_sim_result_free(cz_sim_result *r)
{
    if (!r)
        return;
    free(r->gpu_busy);
    free(r->tl_elementwise);
    free(r->tl_gather);
    free(r->tl_scatter);
    free(r->tl_compute);
    free(r->tl_coop);
    free(r);
}

/* One task as the pipelined program runs it: on slots slot .. slot + width - 1, computing for
 * `compute` and, when cooperative, waiting `allreduce` on each of them for the all-reduces its
 * computation does not hide (comm: the time of all of them, hidden or not). */
typedef struct sim_task {
    int slot, width, index; /* index: the task's position in its micro-group */
    double compute, allreduce, comm;
} sim_task;

/* What one DP rank's TP group runs after the gradients are synchronized. */
typedef struct sim_prog {
    int ngroups;
    double *elem;    /* R: elementwise updates per TP rank */
    double *gather;  /* ngroups: collective durations */
    double *scatter; /* ngroups */
    double *compute; /* ngroups * R: synchronous compute's work per slot */
    /* Pipelined: the tasks of group g are tasks[first[g] .. first[g + 1] - 1], in execution
     * order, replayed by prog_run (a cooperative task waits for its slowest member). */
    int *first;
    sim_task *tasks;
    double *scratch; /* R */
    int ntasks, coop_tasks;
    double comm_s; /* sum of the TP collective durations (gathers and scatters) */
} sim_prog;

typedef struct sim_ctx {
    const cz_plan *plan;
    const cz_cluster *cluster; /* NULL: cost-proportional, free communication */
    int R, D, P;
    int pipelined;
    double *sec;       /* per param: seconds (or cost) of its whole update across TP */
    double elem_bytes; /* gradient and parameter bytes per element */
    double lat_us;
    int *bucket_index; /* per param: index into plan->buckets, -1 when none */
    cz_sim_uneven uneven;
    int megatron_aug26;    /* Megatron's current layer-wise rule: its own bucket layout */
    int zero1_elementwise; /* elementwise parameters updated under ZeRO-1 (even slices) */
    int64_t *lw_buckets;   /* scratch for the layout's bucket sizes (nparams + 1) */
    cz_muon_tp_mode muon_tp;
    cz_muon_tp_work *tpw; /* per param under blockwise / distributed: its Gram all-reduces */
    /* A plan with expert groups simulates its expert ranks with a copy of the context whose
     * "DP ranks" are the expert ranks (D = ep * edp, in cz_plan_expert_rank's order) and whose
     * TP groups are the ETP groups (R = etp); expert is 1 in that copy, 0 in the dense one. */
    int expert;
    int dm;            /* the cluster's device model is on: fixed costs, batching */
    int megatron;      /* sc plan under one of Megatron's modes as Megatron runs it */
    int gtp, ns_batch; /* Megatron's GTP shards of the TP group; layer-sharded batch size */
    int overlap_param, overlap_grad;
} sim_ctx;

static void prog_free(sim_prog *pg)
{
    free(pg->elem);
    free(pg->gather);
    free(pg->scatter);
    free(pg->compute);
    free(pg->first);
    free(pg->tasks);
    free(pg->scratch);
    memset(pg, 0, sizeof *pg);
}

static int prog_alloc(sim_prog *pg, int ngroups, int R)
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
        prog_free(pg);
        return CZ_ENOMEM;
    }
    return CZ_OK;
}

static double tp_gbps(const sim_ctx *cx, int stage, int d)
{
    const cz_cluster *c = cx->cluster;
    int first = (stage * cx->D + d) * cx->R;
    return cz__sim_group_spans_nodes(first, 1, cx->R, c->gpus_per_node) ? c->links.inter_node_gbps
                                                                        : c->links.intra_node_gbps;
}

static double dp_gbps(const sim_ctx *cx, int stage)
{
    const cz_cluster *c = cx->cluster;
    for (int t = 0; t < cx->R; t++)
        if (cz__sim_group_spans_nodes(stage * cx->D * cx->R + t, cx->R, cx->D, c->gpus_per_node))
            return c->links.inter_node_gbps;
    return c->links.intra_node_gbps;
}

/* Whether parameter p belongs to the ranks cx simulates (dense or expert), and the rank of its
 * bucket's partition that rank *d of cx is (the expert-DP rank of an expert rank; false for an
 * expert of another EP rank). */
static bool in_side(const sim_ctx *cx, const cz_plan_param *p, int *d)
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

static int tp_inter(const sim_ctx *cx, int stage, int d)
{
    return cz__sim_group_spans_nodes((stage * cx->D + d) * cx->R, 1, cx->R,
                                     cx->cluster->gpus_per_node);
}

static int dp_inter(const sim_ctx *cx, int stage)
{
    return dp_gbps(cx, stage) == cx->cluster->links.inter_node_gbps &&
           cx->cluster->links.inter_node_gbps != cx->cluster->links.intra_node_gbps;
}

/* A collective as the device model times it: the calibration's measurement or alpha-beta plus
 * one NCCL call (cz__dm_collective_seconds); without the device model the alpha-beta formula
 * alone, as always. */
typedef struct ab_ctx {
    cz_coll_kind kind;
    int n;
    double gbps, lat_us;
} ab_ctx;

static double ab_seconds(double bytes, const void *ctx)
{
    const ab_ctx *x = ctx;
    return cz__sim_collective_seconds(x->kind, x->n, bytes, x->gbps, x->lat_us);
}

static double coll_seconds(const sim_ctx *cx, cz_coll_kind kind, int n, double bytes, double gbps,
                           int inter)
{
    ab_ctx x = {kind, n, gbps, cx->lat_us};
    if (!cx->dm)
        return ab_seconds(bytes, &x);
    if (kind == CZ_COLL_ROOTED_GROUP) { /* one grouped call; no calibration of its own */
        double t = ab_seconds(bytes, &x);
        return t > 0 ? t + cz__dm_call_seconds(cx->cluster) : t;
    }
    static const cz_cal_op ops[] = {CZ_CAL_REDUCE_SCATTER, CZ_CAL_ALL_GATHER, CZ_CAL_ALL_REDUCE,
                                    CZ_CAL_ALL_TO_ALL};
    return cz__dm_collective_seconds(cx->cluster, ops[kind], n, inter, bytes, ab_seconds, &x);
}

/* An uneven DP collective (cz__sim_uneven_seconds) with the device model's call. */
static double uneven_seconds(const sim_ctx *cx, const int64_t *len, double gbps, int inter)
{
    if (!cx->dm)
        return cz__sim_uneven_seconds(len, cx->D, cx->elem_bytes, gbps, cx->lat_us, cx->uneven);
    if (cx->uneven == CZ_SIM_UNEVEN_PADDED) {
        double most = 0;
        for (int d = 0; d < cx->D; d++)
            most = (double)len[d] > most ? (double)len[d] : most;
        return coll_seconds(cx, CZ_COLL_REDUCE_SCATTER, cx->D, most * cx->elem_bytes, gbps, inter);
    }
    double t = cz__sim_uneven_seconds(len, cx->D, cx->elem_bytes, gbps, cx->lat_us, cx->uneven);
    return t > 0 ? t + cz__dm_call_seconds(cx->cluster) : t;
}

static const cz_plan_bucket *param_bucket(const sim_ctx *cx, const cz_plan_param *p)
{
    int bi = cx->bucket_index[p->id];
    return bi >= 0 ? &cx->plan->buckets[bi] : NULL;
}

/* Elements of param p's local shard that lie in DP rank d's range of its bucket. */
static int64_t param_overlap(const sim_ctx *cx, const cz_plan_param *p, int d)
{
    const cz_plan_bucket *b = param_bucket(cx, p);
    if (!b || !b->ranges || !in_side(cx, p, &d) || d < 0 || d >= cz_plan_bucket_nranks(cx->plan, b))
        return 0;
    int64_t lo = b->ranges[2 * d], hi = b->ranges[2 * d + 1];
    int64_t s = p->offset > lo ? p->offset : lo, end;
    /* offset and numel come from the plan file, each only bounded by int64_t. */
    if (__builtin_add_overflow(p->offset, p->numel, &end))
        end = INT64_MAX;
    int64_t e = end < hi ? end : hi;
    return e > s ? e - s : 0;
}

static const cz_rank_schedule *find_schedule(const sim_ctx *cx, int stage, int d)
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
    return coll_seconds(cx, CZ_COLL_ALL_GATHER, cx->R, shard_sum, tp_gbps(cx, stage, d),
                        tp_inter(cx, stage, d));
}

/* Fills the elementwise work of DP rank d: owned local shards, or for fragmented parameters
 * (even, split layout) the part of each shard that lies in the rank's slice. */
static void prog_elementwise(const sim_ctx *cx, sim_prog *pg, int stage, int d)
{
    const cz_plan *plan = cx->plan;
    double e = 0.0;
    for (size_t i = 0; i < plan->nparams; i++) {
        const cz_plan_param *p = &plan->params[i];
        int own = d;
        if (p->def.kind != CZ_KIND_ELEMENTWISE || p->stage != stage || !in_side(cx, p, &own))
            continue;
        double share = cx->sec[i] / cx->R;
        if (cx->zero1_elementwise) {
            /* an even slice of the ZeRO-1 buffer, padding aside */
            e += share / (cx->expert ? plan->edp : cx->D);
        } else if (cz_plan_param_fragmented(plan, p)) {
            if (p->numel > 0)
                e += share * (double)param_overlap(cx, p, d) / (double)p->numel;
        } else if (p->dp_owner == own) {
            e += share;
        }
    }
    for (int t = 0; t < cx->R; t++)
        pg->elem[t] = e;
}

/* The even (ZeRO-1) baseline: every matrix that touches the rank's slice is gathered over DP
 * and updated whole, redundantly, on every TP rank (synchronous compute). One group. */
static int prog_build_even(const sim_ctx *cx, sim_prog *pg, int stage, int d, double *frag_s)
{
    const cz_plan *plan = cx->plan;
    int rc = prog_alloc(pg, 1, cx->R);
    if (rc)
        return rc;
    prog_elementwise(cx, pg, stage, d);
    double work = 0.0, shard_sum = 0.0, missing = 0.0;
    int max_sharing = 1;
    for (size_t i = 0; i < plan->nparams; i++) {
        const cz_plan_param *p = &plan->params[i];
        if (p->def.kind != CZ_KIND_MATRIX || p->stage != stage || p->numel <= 0)
            continue;
        int64_t mine = param_overlap(cx, p, d);
        if (mine <= 0)
            continue;
        work += cx->sec[i];
        if (p->def.tp_dim >= 0)
            shard_sum += shard_bytes(cx, p);
        if (mine < p->numel) {
            int sharing = 0;
            for (int r = 0; r < cx->D; r++)
                sharing += param_overlap(cx, p, r) > 0; /* 0 for ranks of another side */
            if (sharing > max_sharing)
                max_sharing = sharing;
            missing += (double)(p->numel - mine) * cx->elem_bytes;
        }
    }
    for (int t = 0; t < cx->R; t++)
        pg->compute[t] = work;
    pg->gather[0] = sc_gather_seconds(cx, stage, d, shard_sum);
    pg->comm_s = pg->gather[0];
    *frag_s = cx->cluster ? coll_seconds(cx, CZ_COLL_ALL_TO_ALL, max_sharing, missing,
                                         dp_gbps(cx, stage), dp_inter(cx, stage))
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
    return coll_seconds(x->cx, CZ_COLL_ALL_REDUCE, x->w, bytes, x->gbps, x->inter);
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
    if (w == 1) {
        tw.compute = cz__cost_block(&p->def, block, &st, cx->cluster, plan->dtype);
        return tw;
    }
    /* The cost model's pipeline (cz__coop_time_of) with the simulator's all-reduce on the links
     * the k GPUs share: the Gram panels' all-reduces (as many as the plan records for the task,
     * cz_coop_gram_bytes in all per iteration) overlap the computation, and only what they leave
     * exposed, with the norm's all-reduce per step, is charged as the task's all-reduce time. */
    const cz_cluster *c = cx->cluster;
    int first = (stage * cx->D + d) * cx->R + slot;
    int spans = cz__sim_group_spans_nodes(first, 1, w, c->gpus_per_node);
    sim_ar ar = {cx, w, spans, spans ? c->links.inter_node_gbps : c->links.intra_node_gbps};
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

static int prog_build(const sim_ctx *cx, sim_prog *pg, int stage, int d, cz_error *err)
{
    const cz_plan *plan = cx->plan;
    const cz_rank_schedule *rs = find_schedule(cx, stage, d);
    int ngroups = rs ? rs->ngroups : 0;
    int R = cx->R, rc = CZ_OK;
    double *send = NULL, *recv = NULL;
    char *grams_done = NULL;
    if ((rc = prog_alloc(pg, ngroups, R)))
        return cz__error_set(err, rc, "out of memory simulating DP rank %d", d);
    prog_elementwise(cx, pg, stage, d);
    send = calloc((size_t)R, sizeof *send);
    recv = calloc((size_t)R, sizeof *recv);
    grams_done = calloc(plan->nparams ? plan->nparams : 1, 1);
    if (!send || !recv || !grams_done) {
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
    double gbps = cx->cluster ? tp_gbps(cx, stage, d) : 0.0;
    int inter = cx->cluster ? tp_inter(cx, stage, d) : 0;
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
            /* The task's elements in every TP rank's shard; a cooperative member j computes
             * the j-th of w slices of the task's long side, so each member gathers from (and
             * scatters to) every other rank 1/w of what that rank holds of the task. */
            double b = shard_bytes(cx, p) * tw.share / w;
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
            pg->tasks[pg->ntasks++] = (sim_task){slot, w, k, tw.compute, tw.allreduce, tw.comm};
            pg->coop_tasks += w > 1;
            for (int j = slot; j < slot + w; j++)
                for (int t = 0; t < R; t++) {
                    if (t == j || p->def.tp_dim < 0)
                        continue;
                    send[t] += b;
                    recv[j] += b;
                }
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
            pg->comm_s += pg->gather[g];
            continue;
        }
        double worst = 0.0;
        for (int t = 0; t < R; t++) {
            worst = fmax(worst, fmax(send[t], recv[t]));
            send[t] = recv[t] = 0.0;
        }
        pg->gather[g] =
            cx->cluster ? coll_seconds(cx, CZ_COLL_ALL_TO_ALL, R, worst, gbps, inter) : 0.0;
        /* Scatter: the reverse. A replicated matrix is whole on its host (no gather), which
         * sends the whole update (a member: its slice) to every other rank. */
        for (int k = 0; k < grp->ntasks; k++) {
            const cz_plan_param *p = &plan->params[grp->task_param[k]];
            int slot = grp->task_slot ? grp->task_slot[k] : 0;
            int w = cz_group_task_width(grp, k);
            double b = shard_bytes(cx, p) * task_share(&p->def, cz_group_task_block(grp, k)) / w;
            for (int j = slot; j < slot + w; j++)
                for (int t = 0; t < R; t++) {
                    if (t == j)
                        continue;
                    send[j] += b;
                    recv[t] += b;
                }
        }
        worst = 0.0;
        for (int t = 0; t < R; t++) {
            worst = fmax(worst, fmax(send[t], recv[t]));
            send[t] = recv[t] = 0.0;
        }
        pg->scatter[g] =
            cx->cluster ? coll_seconds(cx, CZ_COLL_ALL_TO_ALL, R, worst, gbps, inter) : 0.0;
        pg->comm_s += pg->gather[g] + pg->scatter[g];
    }
done:
    free(send);
    free(recv);
    free(grams_done);
    if (rc)
        prog_free(pg);
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
static void prog_run(const sim_prog *pg, int R, int pipelined, double *finish, double *busy,
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
                if (tl_coop && k->width > 1)
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

/* Gradient and parameter synchronization over DP for one stage's buckets: the sums, and the
 * last bucket's of each (the last the backward pass fills, holding the first layers, which the
 * forward pass needs first: what Megatron's overlaps leave exposed). */
typedef struct dp_sync {
    double grad_s, param_s;           /* every bucket, one after the other */
    double last_grad_s, last_param_s; /* the stage's last bucket */
} dp_sync;

static void sync_add(dp_sync *y, double grad, double param)
{
    y->grad_s += grad, y->param_s += param;
    y->last_grad_s = grad, y->last_param_s = param;
}

/* grad_b and param_b (NULL, or one value per dense bucket of the stage in the plan's order,
 * zeroed by the caller) receive each bucket's collectives, outside Megatron's own layout. */
static int dp_sync_seconds(const sim_ctx *cx, int stage, dp_sync *y, int64_t *owned, double *grad_b,
                           double *param_b, cz_error *err)
{
    const cz_plan *plan = cx->plan;
    memset(y, 0, sizeof *y);
    if (!cx->cluster || cx->D <= 1)
        return CZ_OK;
    double gbps = dp_gbps(cx, stage);
    int inter = dp_inter(cx, stage);
    if (cx->megatron_aug26) {
        /* Megatron lays out its own buckets (shard-aligned for the matrices, ZeRO-1 for the
         * rest), each an even reduce-scatter of its gradients and all-gather of its
         * parameters. */
        size_t nb = 0;
        int rc = cz__megatron_lw_stage(plan, stage, NULL, cx->lw_buckets, &nb, err);
        if (rc != CZ_OK)
            return rc;
        for (size_t b = 0; b < nb; b++) {
            double slice = (double)(cx->lw_buckets[b] / cx->D) * cx->elem_bytes;
            sync_add(y, coll_seconds(cx, CZ_COLL_REDUCE_SCATTER, cx->D, slice, gbps, inter),
                     coll_seconds(cx, CZ_COLL_ALL_GATHER, cx->D, slice, gbps, inter));
        }
        return CZ_OK;
    }
    int layerwise = plan->settings.dp == CZ_DP_LAYERWISE, k = -1;
    for (size_t b = 0; b < plan->nbuckets; b++) {
        const cz_plan_bucket *bk = &plan->buckets[b];
        if (bk->stage != stage || bk->expert) /* expert buffers: expert_sync_seconds */
            continue;
        k++;
        if (layerwise) {
            /* Whole parameters per rank break the equal-slice geometry: gradients are
             * all-reduced, and each rank's owned parameters are gathered (all-gatherv). */
            memset(owned, 0, sizeof *owned * (size_t)cx->D);
            for (size_t i = 0; i < plan->nparams; i++) {
                const cz_plan_param *p = &plan->params[i];
                if (cx->bucket_index[i] == (int)b && p->dp_owner >= 0 && p->dp_owner < cx->D)
                    /* Saturates: the plan's sizes are bounded one by one, not summed. */
                    if (__builtin_add_overflow(owned[p->dp_owner], p->numel, &owned[p->dp_owner]))
                        owned[p->dp_owner] = INT64_MAX;
            }
            double ar = coll_seconds(cx, CZ_COLL_ALL_REDUCE, cx->D,
                                     (double)bk->size * cx->elem_bytes, gbps, inter),
                   ag = uneven_seconds(cx, owned, gbps, inter);
            sync_add(y, ar, ag);
            if (grad_b)
                grad_b[k] = ar, param_b[k] = ag;
            continue;
        }
        for (int d = 0; d < cx->D; d++)
            owned[d] = bk->ranges ? bk->ranges[2 * d + 1] - bk->ranges[2 * d] : 0;
        double t = uneven_seconds(cx, owned, gbps, inter);
        sync_add(y, t, t);
        if (grad_b)
            grad_b[k] = t, param_b[k] = t;
    }
    return CZ_OK;
}

/* The options' Megatron modes and what they apply to: the mode, the GTP shards, the batch size
 * and the overlaps; refused where they mean nothing (docs/SIMULATOR.md). */
static int ctx_modes(sim_ctx *cx, const cz_plan *plan, const cz_cluster *c,
                     const cz_sim_options *opt, cz_error *err)
{
    cx->muon_tp = opt ? opt->muon_tp : CZ_MUON_TP_DUPLICATED;
    cx->gtp = opt ? opt->gtp : 1;
    cx->ns_batch = opt ? opt->muon_ns_batch_size : 1;
    cx->overlap_param = opt ? opt->overlap_param_gather : 0;
    cx->overlap_grad = opt ? opt->overlap_grad_reduce : 0;
    cx->dm = c && c->device.costs.on;
    if (!cz_muon_tp_mode_name(cx->muon_tp))
        return cz__error_set(err, CZ_EINVALID,
                             "Muon TP mode %d is unknown; use duplicated, blockwise, distributed "
                             "or layer_sharded",
                             (int)cx->muon_tp);
    if (cx->gtp > 1 && (plan->settings.tp != CZ_TP_SC || plan->tp % cx->gtp != 0))
        return cz__error_set(
            err, CZ_EUNSUPPORTED,
            "a GTP size of %d describes Megatron's GTP x TP domain for its Muon TP "
            "modes: it needs the sc TP strategy and must divide the TP size (got "
            "tp %s, TP size %d)",
            cx->gtp, cz_tp_strategy_name(plan->settings.tp), plan->tp);
    if (cx->muon_tp != CZ_MUON_TP_DUPLICATED &&
        (!c || plan->settings.tp != CZ_TP_SC || plan->settings.dp == CZ_DP_EVEN ||
         plan->settings.optimizer != CZ_OPTIM_MUON))
        return cz__error_set(err, CZ_EUNSUPPORTED,
                             "Megatron's %s TP mode is modelled for Muon plans with the sc TP "
                             "strategy, a DP strategy other than even, and a cluster (got "
                             "optimizer %s, dp %s, tp %s%s)",
                             cz_muon_tp_mode_name(cx->muon_tp),
                             cz_optimizer_name(plan->settings.optimizer),
                             cz_dp_strategy_name(plan->settings.dp),
                             cz_tp_strategy_name(plan->settings.tp), c ? "" : ", no cluster");
    /* Megatron's modes as Megatron runs them: per matrix in PyTorch, under the device model,
     * and always for layer sharding and GTP, which the flat model never had (docs/SIMULATOR.md,
     * "Megatron's TP modes for Muon"). The flat duplicated, blockwise and distributed rows keep
     * their earlier model. */
    cx->megatron = c && plan->settings.tp == CZ_TP_SC && plan->settings.dp != CZ_DP_EVEN &&
                   plan->settings.optimizer == CZ_OPTIM_MUON &&
                   (cx->dm || cx->muon_tp == CZ_MUON_TP_LAYER_SHARDED || cx->gtp > 1);
    return CZ_OK;
}

static int ctx_init(sim_ctx *cx, const cz_plan *plan, const cz_cluster *c,
                    const cz_sim_options *opt, cz_error *err)
{
    int rc;
    memset(cx, 0, sizeof *cx);
    cx->uneven = opt ? opt->uneven : CZ_SIM_UNEVEN_ROOTED;
    cx->plan = plan;
    cx->cluster = c;
    cx->R = plan->tp;
    cx->D = plan->dp;
    cx->P = plan->pp;
    cx->pipelined = plan->settings.tp != CZ_TP_SC;
    cx->megatron_aug26 = plan->settings.dp == CZ_DP_LAYERWISE &&
                         plan->settings.layerwise_order == CZ_LAYERWISE_MEGATRON_AUG26;
    cx->zero1_elementwise = cx->megatron_aug26;
    if ((rc = ctx_modes(cx, plan, c, opt, err)) != CZ_OK)
        return rc;
    if (cx->R < 1 || cx->D < 1 || cx->P < 1)
        return cz__error_set(err, CZ_EINVALID, "plan topology dp=%d tp=%d pp=%d: expected >= 1",
                             plan->dp, plan->tp, plan->pp);
    if (c) {
        if (c->dp != plan->dp || c->tp != plan->tp || c->pp != plan->pp)
            return cz__error_set(err, CZ_EMISMATCH,
                                 "plan topology dp=%d tp=%d pp=%d does not match cluster '%s' "
                                 "(dp=%d tp=%d pp=%d)",
                                 plan->dp, plan->tp, plan->pp, c->name ? c->name : "?", c->dp,
                                 c->tp, c->pp);
        if (cz_plan_has_experts(plan) &&
            (plan->ep != cz_cluster_ep(c) || plan->etp != cz_cluster_etp(c)))
            return cz__error_set(err, CZ_EMISMATCH,
                                 "plan expert groups ep=%d etp=%d do not match cluster '%s' (ep=%d "
                                 "etp=%d)",
                                 plan->ep, plan->etp, c->name ? c->name : "?", cz_cluster_ep(c),
                                 cz_cluster_etp(c));
        if (!(c->links.intra_node_gbps > 0) || !(c->links.inter_node_gbps > 0) ||
            c->gpus_per_node < 1)
            return cz__error_set(err, CZ_EINVALID,
                                 "cluster '%s': links.intra_node_gbps, links.inter_node_gbps and "
                                 "gpus_per_node must be positive to simulate",
                                 c->name ? c->name : "?");
        cx->elem_bytes = cz__dtype_bytes(plan->dtype);
        cx->lat_us = c->links.latency_us;
    }
    if (plan->settings.dp == CZ_DP_EVEN && cx->pipelined)
        return cz__error_set(err, CZ_EUNSUPPORTED,
                             "the even (ZeRO-1) partition fragments matrices and has no hosts; "
                             "it is simulated with the sc TP strategy only (got '%s')",
                             cz_tp_strategy_name(plan->settings.tp));
    size_t n = plan->nparams ? plan->nparams : 1;
    cx->sec = calloc(n, sizeof *cx->sec);
    cx->bucket_index = malloc(n * sizeof *cx->bucket_index);
    cx->lw_buckets = malloc((n + 1) * sizeof *cx->lw_buckets);
    int legacy_tp = cx->muon_tp != CZ_MUON_TP_DUPLICATED && !cx->megatron;
    if (legacy_tp)
        cx->tpw = calloc(n, sizeof *cx->tpw);
    if (!cx->sec || !cx->bucket_index || !cx->lw_buckets || (legacy_tp && !cx->tpw))
        return cz__error_set(err, CZ_ENOMEM, "out of memory simulating the plan");
    for (size_t i = 0; i < plan->nparams; i++) {
        const cz_plan_param *p = &plan->params[i];
        if (p->id != (int)i || p->stage < 0 || p->stage >= cx->P)
            return cz__error_set(err, CZ_EINVALID, "plan $.params[%zu]: id %d / stage %d invalid",
                                 i, p->id, p->stage);
        cx->bucket_index[i] = -1;
        /* Its bucket is of its own buffer: an expert's of its EP rank's, whose ranges are per
         * expert-DP rank (a bucket of the other kind would be read with the wrong rank count). */
        for (size_t b = 0; b < plan->nbuckets; b++) {
            const cz_plan_bucket *bk = &plan->buckets[b];
            if (bk->id == p->bucket && bk->stage == p->stage && bk->expert == p->expert &&
                (!p->expert || bk->ep_rank == p->ep_rank)) {
                cx->bucket_index[i] = (int)b;
                break;
            }
        }
        if (!c) {
            cx->sec[i] = p->cost;
        } else {
            /* An expert is split over its ETP group (cz_plan_param_tp). */
            cz_cluster pc = *c;
            pc.tp = cz_plan_param_tp(plan, p);
            if (cx->tpw) {
                cx->tpw[i] =
                    cz__cost_muon_tp(&p->def, &plan->settings, &pc, plan->dtype, cx->muon_tp);
                cx->sec[i] = cx->tpw[i].seconds;
            } else {
                cx->sec[i] = cz__cost_param_seconds(&p->def, &plan->settings, &pc, plan->dtype);
            }
        }
    }
    for (size_t b = 0; b < plan->nbuckets; b++) {
        const cz_plan_bucket *bk = &plan->buckets[b];
        for (int d = 0; bk->ranges && d < cz_plan_bucket_nranks(plan, bk); d++)
            if (bk->ranges[2 * d] < 0 || bk->ranges[2 * d + 1] < bk->ranges[2 * d] ||
                bk->ranges[2 * d + 1] > bk->size)
                return cz__error_set(err, CZ_EINVALID,
                                     "plan $.buckets[%zu].ranges[%d]: [%lld, %lld) is not inside "
                                     "[0, %lld)",
                                     b, d, (long long)bk->ranges[2 * d],
                                     (long long)bk->ranges[2 * d + 1], (long long)bk->size);
    }
    return CZ_OK;
}

static int build_rank(const sim_ctx *cx, sim_prog *pg, int s, int d, double *frag, cz_error *err);
static int expert_stage(const sim_ctx *dense, cz_sim_result *r, int s, const double *gpu_finish,
                        double *finish, double *busy, int64_t *owned, double *grad_s,
                        double *param_s, double *frag_max, double *local, int *crit_d, int *crit_t,
                        double *expert_part, cz_error *err);

/* ---- Megatron's modes as Megatron runs them (megatron_muon.c) ---- */

/* A collective of Megatron's on one group of DP rank d's domain (TP innermost, then GTP). */
static double mg_coll_seconds(const sim_ctx *cx, int stage, int d, const cz_mg_coll *k)
{
    static const cz_coll_kind kinds[] = {CZ_COLL_ALL_REDUCE, CZ_COLL_ALL_GATHER,
                                         CZ_COLL_REDUCE_SCATTER, CZ_COLL_ALL_TO_ALL};
    const cz_cluster *c = cx->cluster;
    int first = (stage * cx->D + d) * cx->R, tf = cx->R / cx->gtp;
    int spans = k->group == CZ_MG_TP ? cz__sim_group_spans_nodes(first, 1, tf, c->gpus_per_node)
                : k->group == CZ_MG_GTP
                    ? cz__sim_group_spans_nodes(first, tf, cx->gtp, c->gpus_per_node)
                    : tp_inter(cx, stage, d);
    double gbps = spans ? c->links.inter_node_gbps : c->links.intra_node_gbps;
    return k->count * coll_seconds(cx, kinds[k->op], k->n, k->bytes, gbps, spans);
}

/* Megatron's layer-sharded Newton-Schulz (_run_ns) of matrices ids[0 .. n) on one rank:
 * same-shape matrices, in the order they come, in batches of at most ns_batch. */
static double batched_torch_ns(const sim_ctx *cx, const int *ids, int n, int *done)
{
    const cz_plan *plan = cx->plan;
    double t = 0.0;
    memset(done, 0, (size_t)n * sizeof *done);
    for (int i = 0; i < n; i++) {
        if (done[i])
            continue;
        const cz_param_def *a = &plan->params[ids[i]].def;
        int count = 0;
        for (int j = i; j < n; j++) {
            const cz_param_def *b = &plan->params[ids[j]].def;
            if (!done[j] && b->shape[0] == a->shape[0] && b->shape[1] == a->shape[1])
                done[j] = 1, count++;
        }
        int64_t cols = a->ndim == 1 ? 1 : a->shape[1];
        for (int left = count; left > 0; left -= cx->ns_batch) {
            int batch = left < cx->ns_batch ? left : cx->ns_batch;
            t += cz__dm_torch_ns_seconds(cx->cluster, a->shape[0], cols, batch,
                                         plan->settings.ns_steps);
        }
    }
    return t;
}

/* Layer sharding (LayerShardedMuon.step, fused path): the routed matrices' shards go to their
 * homes in one all-to-all, the homes run their batches, one all-to-all scatters the results;
 * matrices sharded by nothing are computed by every rank, batched the same way. */
static int lsh_build(const sim_ctx *cx, sim_prog *pg, int stage, int d, const int *ids, int n,
                     const cz_megatron_work *w)
{
    const cz_cluster *c = cx->cluster;
    int R = cx->R, nr = 0, nl = 0, rc = CZ_ENOMEM;
    int *routed = malloc((size_t)(n + 1) * sizeof *routed);
    int *local = malloc((size_t)(n + 1) * sizeof *local), *home = malloc((n + 1) * sizeof *home);
    int *scratch = malloc((size_t)(n + 1) * sizeof *scratch);
    int *mine = malloc((size_t)(n + 1) * sizeof *mine);
    double *cost = malloc((size_t)(n + 1) * sizeof *cost), *bin = calloc((size_t)R, sizeof *bin);
    double *send = calloc((size_t)R, sizeof *send), *recv = calloc((size_t)R, sizeof *recv);
    if (!routed || !local || !home || !scratch || !mine || !cost || !bin || !send || !recv)
        goto done;
    double base = 0.0;
    for (int i = 0; i < n; i++) {
        base += w[i].param_ops_s;
        if (w[i].routed) {
            cost[nr] = w[i].lpt_cost;
            routed[nr++] = i;
        } else {
            local[nl++] = ids[i];
        }
    }
    if ((rc = cz__megatron_ns_homes(cost, nr, R, home, bin)) != CZ_OK)
        goto done;
    base += batched_torch_ns(cx, local, nl, scratch);
    for (int r = 0; r < nr; r++) {
        double sb = w[routed[r]].shard_bytes;
        for (int t = 0; t < R; t++)
            if (t != home[r])
                send[t] += sb;
        recv[home[r]] += (R - 1) * sb;
    }
    double worst = 0.0;
    for (int t = 0; t < R; t++) {
        worst = fmax(worst, fmax(send[t], recv[t]));
        /* Packing around the exchanges (layer_sharded_a2a.py, fused): one cat per peer and one
         * of all both ways, a matrix's assembly from its shards on its home and the narrowing
         * of its result per peer, the update shard taken out on every rank. */
        int nm = 0;
        double full = 0.0;
        for (int r = 0; r < nr; r++)
            if (home[r] == t) {
                mine[nm++] = ids[routed[r]];
                full += R * w[routed[r]].shard_bytes;
            }
        double ops = 2.0 * (R + 1) * cz__dm_torch_op_seconds(c, 0.0) +
                     cz__dm_torch_op_seconds(c, 4.0 * send[t]) +
                     nm * (R * cz__dm_torch_op_seconds(c, 0.0)) +
                     cz__dm_torch_op_seconds(c, 4.0 * full) + nr * cz__dm_torch_op_seconds(c, 0.0);
        pg->compute[t] = base + ops + batched_torch_ns(cx, mine, nm, scratch);
    }
    double gbps = tp_gbps(cx, stage, d);
    int inter = tp_inter(cx, stage, d);
    pg->gather[0] = coll_seconds(cx, CZ_COLL_ALL_TO_ALL, R, worst, gbps, inter);
    pg->scatter[0] = pg->gather[0];
    pg->comm_s = pg->gather[0] + pg->scatter[0];
    rc = CZ_OK;
done:
    free(routed);
    free(local);
    free(home);
    free(scratch);
    free(mine);
    free(cost);
    free(bin);
    free(send);
    free(recv);
    return rc;
}

/* DP rank d's Muon step under one of Megatron's modes, one group: duplicated, distributed and
 * blockwise run TensorParallelMuon's per-parameter loop on one stream (every collective on the
 * matrix's path, nothing overlapped), layer sharding its exchanges and homes. */
static int prog_build_megatron(const sim_ctx *cx, sim_prog *pg, int stage, int d, cz_error *err)
{
    const cz_plan *plan = cx->plan;
    int rc, n = 0;
    int *ids = NULL;
    cz_megatron_work *w = NULL;
    if ((rc = prog_alloc(pg, 1, cx->R)))
        return cz__error_set(err, rc, "out of memory simulating DP rank %d", d);
    prog_elementwise(cx, pg, stage, d);
    ids = malloc((plan->nparams + 1) * sizeof *ids);
    w = malloc((plan->nparams + 1) * sizeof *w);
    if (!ids || !w) {
        rc = cz__error_set(err, CZ_ENOMEM, "out of memory simulating DP rank %d", d);
        goto done;
    }
    for (size_t i = 0; i < plan->nparams; i++) {
        const cz_plan_param *p = &plan->params[i];
        int own = d; /* under expert groups: this side's matrices, by their expert-DP rank */
        if (p->stage != stage || p->def.kind != CZ_KIND_MATRIX || !in_side(cx, p, &own) ||
            p->dp_owner != own)
            continue;
        if ((rc = cz__megatron_muon_work(&p->def, &plan->settings, cx->cluster, cx->muon_tp,
                                         cx->gtp, &w[n], err)) != CZ_OK)
            goto done;
        ids[n++] = (int)i;
    }
    if (cx->muon_tp == CZ_MUON_TP_LAYER_SHARDED) {
        if ((rc = lsh_build(cx, pg, stage, d, ids, n, w)) != CZ_OK)
            rc = cz__error_set(err, rc, "out of memory simulating DP rank %d", d);
        goto done;
    }
    double comm = 0.0, compute = 0.0;
    for (int i = 0; i < n; i++) {
        compute += w[i].compute_s + w[i].param_ops_s;
        for (int k = 0; k < w[i].ncoll; k++)
            comm += mg_coll_seconds(cx, stage, d, &w[i].coll[k]);
    }
    for (int t = 0; t < cx->R; t++)
        pg->compute[t] = compute;
    pg->gather[0] = comm;
    pg->comm_s = comm;
done:
    free(ids);
    free(w);
    if (rc)
        prog_free(pg);
    return rc;
}

static int build_rank(const sim_ctx *cx, sim_prog *pg, int s, int d, double *frag, cz_error *err)
{
    *frag = 0.0;
    if (cx->plan->settings.dp == CZ_DP_EVEN) {
        if (prog_build_even(cx, pg, s, d, frag))
            return cz__error_set(err, CZ_ENOMEM, "out of memory simulating DP rank %d", d);
        return CZ_OK;
    }
    if (cx->megatron)
        return prog_build_megatron(cx, pg, s, d, err);
    return prog_build(cx, pg, s, d, err);
}

/* The most shards any GPU of the stage owns (for the step's host work, cz__dm_step_host_seconds):
 * its DP rank's whole parameters and, of fragmented ones, every piece. */
static int owned_shards(const sim_ctx *cx, int stage, int64_t *count)
{
    const cz_plan *plan = cx->plan;
    int64_t all = 0, most = 0;
    memset(count, 0, (size_t)cx->D * sizeof *count);
    for (size_t i = 0; i < plan->nparams; i++) {
        const cz_plan_param *p = &plan->params[i];
        if (p->stage != stage)
            continue;
        /* A GPU holds one EP rank's experts; EP ranks hold as many each (Megatron's rule), so
         * EP rank 0's stand for every GPU's. */
        if (p->expert && p->ep_rank != 0)
            continue;
        if (cz_plan_param_fragmented(plan, p))
            all++;
        else if (p->dp_owner >= 0 && p->dp_owner < cx->D)
            count[p->dp_owner]++;
    }
    for (int d = 0; d < cx->D; d++)
        most = count[d] > most ? count[d] : most;
    return (int)(all + most);
}

static int sim_iteration(const sim_ctx *cx, cz_sim_result *r, const cz_sim_options *o,
                         int64_t *owned, cz_error *err);

/* CZ_OK for NULL or valid options (of this build's version: cz_plan_simulate read the caller's
 * first); CZ_EINVALID for a value out of its range. Here, not in analysis_api.c, so that the
 * simulator calls nothing of the file that calls it. */
/* Where each version of cz_sim_options ends (cz__options_read): version 2 added the overlap
 * and Megatron fields, 3 the iteration, 4 deferred_updates. */
static const size_t sim_ends[] = {
    CZ__OPTIONS_END(cz_sim_options, muon_tp), CZ__OPTIONS_END(cz_sim_options, gtp),
    CZ__OPTIONS_END(cz_sim_options, gather_forward_order), sizeof(cz_sim_options)};
_Static_assert(sizeof sim_ends / sizeof *sim_ends == CZ_SIM_OPTIONS_VERSION,
               "a new cz_sim_options version needs its end here");

static int sim_options_check(const cz_sim_options *o, cz_error *err)
{
    if (!o)
        return CZ_OK;
    if (o->muon_ns_batch_size < 1 || o->gtp < 1)
        return cz__error_set(err, CZ_EINVALID,
                             "cz_sim_options: muon_ns_batch_size %d and gtp %d; both must be at "
                             "least 1",
                             o->muon_ns_batch_size, o->gtp);
    if ((o->overlap_param_gather != 0 && o->overlap_param_gather != 1) ||
        (o->overlap_grad_reduce != 0 && o->overlap_grad_reduce != 1))
        return cz__error_set(err, CZ_EINVALID,
                             "cz_sim_options: overlap_param_gather %d and overlap_grad_reduce %d; "
                             "each is 0 or 1",
                             o->overlap_param_gather, o->overlap_grad_reduce);
    if ((o->iteration != 0 && o->iteration != 1) ||
        (o->gather_forward_order != 0 && o->gather_forward_order != 1) ||
        (o->deferred_updates != 0 && o->deferred_updates != 1))
        return cz__error_set(err, CZ_EINVALID,
                             "cz_sim_options: iteration %d, gather_forward_order %d and "
                             "deferred_updates %d; each is 0 or 1",
                             o->iteration, o->gather_forward_order, o->deferred_updates);
    /* Bounded so that tokens x tokens x width stays far inside a double's exact range. */
    if (o->seq_len < 1 || o->seq_len > 10485760 || o->micro_batch_size < 1 ||
        o->micro_batch_size > 65536 || o->micro_batches < 1 || o->micro_batches > 65536)
        return cz__error_set(err, CZ_EINVALID,
                             "cz_sim_options: seq_len %d, micro_batch_size %d, micro_batches %d; "
                             "expected 1 .. 10485760, 1 .. 65536 and 1 .. 65536",
                             o->seq_len, o->micro_batch_size, o->micro_batches);
    if (!(o->pass_efficiency > 0.0 && o->pass_efficiency <= 1.0))
        return cz__error_set(err, CZ_EINVALID,
                             "cz_sim_options: pass_efficiency %g; expected a fraction of the GEMM "
                             "rate in (0, 1]",
                             o->pass_efficiency);
    return CZ_OK;
}

/* Stage s of cz_plan_simulate: every DP rank's program run, the stage's DP collectives, host
 * work and expert groups; the stage's step replaces r's figures when it is the longest yet.
 * finish and busy hold a TP (or ETP) group's GPUs, gpu_finish the stage's D x R GPUs, owned a
 * DP (or EDP) rank's shard counts. */
static int sim_stage(const sim_ctx *cx, sim_prog *pg, const cz_cluster *cluster, int s,
                     cz_sim_result *r, double *finish, double *busy, double *gpu_finish,
                     int64_t *owned, cz_error *err)
{
    int R = cx->R, D = cx->D, P = cx->P, rc;
    double frag_max = 0.0, local = 0.0, expert_part = 0.0;
    int crit_d = 0, crit_t = 0;
    dp_sync y;
    if ((rc = dp_sync_seconds(cx, s, &y, owned, NULL, NULL, err)))
        return rc;
    /* Megatron's overlaps hide all but one bucket's collective behind the backward and the
     * next forward pass (which the simulator does not model; they are assumed long enough to
     * hide the rest). */
    double grad_s = cx->overlap_grad ? y.last_grad_s : y.grad_s;
    double param_s = cx->overlap_param ? y.last_param_s : y.param_s;
    double host = cluster ? cz__dm_step_host_seconds(cluster, owned_shards(cx, s, owned), P * D * R,
                                                     cx->lat_us)
                          : 0.0;
    for (int d = 0; d < D; d++) {
        double frag;
        if ((rc = build_rank(cx, pg, s, d, &frag, err)))
            return rc;
        prog_run(pg, R, cx->pipelined, finish, busy, NULL, NULL, NULL, NULL, NULL, NULL, NULL);
        prog_free(pg);
        frag_max = fmax(frag_max, frag);
        for (int t = 0; t < R; t++) {
            r->gpu_busy[(s * D + d) * R + t] = busy[t];
            r->compute_s = fmax(r->compute_s, busy[t]);
            gpu_finish[d * R + t] = finish[t];
            if (finish[t] > local) {
                local = finish[t];
                crit_d = d;
                crit_t = t;
            }
        }
    }
    if (cz_plan_has_experts(cx->plan)) {
        /* The expert buffers' collectives are charged whole, overlaps or not (conservative:
         * docs/SIMULATOR.md, "Expert groups"). */
        double eg = 0.0, ep = 0.0;
        if ((rc = expert_stage(cx, r, s, gpu_finish, finish, busy, owned, &eg, &ep, &frag_max,
                               &local, &crit_d, &crit_t, &expert_part, err)) != CZ_OK)
            return rc;
        grad_s += eg;
        param_s += ep;
        y.grad_s += eg;
        y.param_s += ep;
    }
    double step = grad_s + frag_max + host + local + param_s;
    if (step > r->step_s) {
        r->step_s = step;
        r->grad_sync_s = grad_s;
        r->frag_gather_s = frag_max;
        r->host_s = host;
        r->local_s = local;
        r->param_sync_s = param_s;
        r->grad_sync_total_s = y.grad_s;
        r->param_sync_total_s = y.param_s;
        r->optimizer_s = frag_max + host + local + param_s;
        r->critical_stage = s;
        r->critical_dp = crit_d;
        r->critical_tp = crit_t;
        r->expert_s = expert_part;
    }
    return CZ_OK;
}

/* The timeline of the critical DP rank, rebuilt (cheap) rather than kept for every rank, and
 * the figures of r read off it: cooperative tasks, TP collectives, exposed communication. */
static int sim_timeline(const sim_ctx *cx, sim_prog *pg, cz_sim_result *r, double *finish,
                        double *busy, cz_error *err)
{
    int R = cx->R, D = cx->D, s = r->critical_stage, d = r->critical_dp, rc;
    double *coop_ar = NULL, *coop_comm = NULL, *coop_wait = NULL;
    double frag;
    if ((rc = build_rank(cx, pg, s, d, &frag, err)))
        return rc;
    r->tl_tp = R;
    r->tl_groups = pg->ngroups;
    size_t ng = pg->ngroups > 0 ? (size_t)pg->ngroups : 1;
    r->tl_elementwise = calloc((size_t)R, sizeof *r->tl_elementwise);
    r->tl_gather = calloc(ng, sizeof *r->tl_gather);
    r->tl_scatter = calloc(ng, sizeof *r->tl_scatter);
    r->tl_compute = calloc(ng * (size_t)R, sizeof *r->tl_compute);
    coop_ar = calloc((size_t)R, sizeof *coop_ar);
    coop_comm = calloc((size_t)R, sizeof *coop_comm);
    coop_wait = calloc((size_t)R, sizeof *coop_wait);
    r->tl_coop = calloc(pg->coop_tasks > 0 ? (size_t)pg->coop_tasks : 1, sizeof *r->tl_coop);
    if (!r->tl_elementwise || !r->tl_gather || !r->tl_scatter || !r->tl_compute || !coop_ar ||
        !coop_comm || !coop_wait || !r->tl_coop) {
        rc = cz__error_set(err, CZ_ENOMEM, "out of memory simulating the plan");
        goto done;
    }
    prog_run(pg, R, cx->pipelined, finish, busy, r->tl_gather, r->tl_scatter, r->tl_compute,
             coop_ar, coop_comm, coop_wait, r->tl_coop);
    r->tl_ncoop = cx->pipelined ? pg->coop_tasks : 0;
    for (int t = 0; t < R; t++)
        r->tl_elementwise[t] = pg->elem[t];
    r->coop_tasks = pg->coop_tasks;
    r->coop_allreduce_s = coop_ar[r->critical_tp];
    r->coop_wait_s = coop_wait[r->critical_tp];
    /* Collective time counts the cooperative all-reduces whole, hidden or not (comm_s). */
    r->tp_comm_s = pg->comm_s + coop_comm[r->critical_tp];
    r->comm_s = r->grad_sync_total_s + r->frag_gather_s + r->tp_comm_s + r->param_sync_total_s;
    double crit_busy = r->gpu_busy[(s * D + d) * R + r->critical_tp];
    r->exposed_comm_s = fmax(0.0, r->step_s - crit_busy);
done:
    free(coop_ar);
    free(coop_comm);
    free(coop_wait);
    return rc;
}

int cz_plan_simulate(cz_sim_result **out, const cz_plan *plan, const cz_cluster *cluster,
                     const cz_sim_options *opt, cz_error *err)
{
    sim_ctx cx;
    sim_prog pg = {0};
    cz_sim_result *r = NULL;
    double *finish = NULL, *busy = NULL;
    double *gpu_finish = NULL; /* with expert groups: each GPU of a stage, its dense part */
    int64_t *owned = NULL;
    int rc;
    *out = NULL;
    /* The caller's options of any version, read once: nothing below reads the caller's struct. */
    cz_sim_options o = CZ_SIM_OPTIONS_INIT; /* the macro: analysis_api.c calls this file */
    if (opt && (rc = cz__options_read(&o, opt, sim_ends, CZ_SIM_OPTIONS_VERSION, "cz_sim_options",
                                      err)) != CZ_OK)
        return rc;
    opt = opt ? &o : NULL;
    if ((rc = sim_options_check(opt, err)) != CZ_OK)
        return rc;
    if ((rc = ctx_init(&cx, plan, cluster, opt, err)))
        goto done;
    int R = cx.R, D = cx.D, P = cx.P;
    int most = plan->edp > D ? plan->edp : D, experts = cz_plan_has_experts(plan);
    r = calloc(1, sizeof *r);
    finish = calloc((size_t)(experts && plan->etp > R ? plan->etp : R), sizeof *finish);
    busy = calloc((size_t)(experts && plan->etp > R ? plan->etp : R), sizeof *busy);
    owned = calloc((size_t)most, sizeof *owned);
    gpu_finish = calloc((size_t)D * (size_t)R, sizeof *gpu_finish);
    if (!r || !finish || !busy || !owned || !gpu_finish) {
        rc = cz__error_set(err, CZ_ENOMEM, "out of memory simulating the plan");
        goto done;
    }
    r->in_seconds = cluster != NULL;
    r->pipelined = cx.pipelined;
    r->device_model = cx.dm;
    r->overlap_param_gather = cx.overlap_param;
    r->overlap_grad_reduce = cx.overlap_grad;
    r->ngpus = P * D * R;
    r->gpu_busy = calloc((size_t)r->ngpus, sizeof *r->gpu_busy);
    if (!r->gpu_busy) {
        rc = cz__error_set(err, CZ_ENOMEM, "out of memory simulating the plan");
        goto done;
    }
    r->step_s = -1.0;
    for (int s = 0; s < P; s++)
        if ((rc = sim_stage(&cx, &pg, cluster, s, r, finish, busy, gpu_finish, owned, err)))
            goto done;
    if ((rc = sim_timeline(&cx, &pg, r, finish, busy, err)) != CZ_OK)
        goto done;
    if (opt && opt->iteration && (rc = sim_iteration(&cx, r, opt, owned, err)) != CZ_OK)
        goto done;
    *out = r;
    r = NULL;
done:
    prog_free(&pg);
    cz_sim_result_free(r);
    free(finish);
    free(busy);
    free(gpu_finish);
    free(owned);
    free(cx.sec);
    free(cx.bucket_index);
    free(cx.lw_buckets);
    free(cx.tpw);
    return rc;
}

/* ---- expert groups ---------------------------------------------------------------------------
 * A plan with expert groups: after its DP rank's micro-groups a GPU runs its expert rank's,
 * whose first collectives wait for every GPU of the ETP group, so an expert rank starts when the
 * last of its GPUs finishes its dense part. The expert buffers are reduced and gathered over the
 * expert-DP groups, all EP ranks at once (their groups are disjoint): each adds its slowest EP
 * rank's collectives to the stage's. */

/* The links of stage s's expert-DP group of EP rank e: inter-node when any of its ETP lanes
 * spans nodes (rank order: ETP fastest, then EP, then expert-DP). */
static double expert_dp_gbps(const sim_ctx *cx, int stage, int e)
{
    const cz_cluster *c = cx->cluster;
    const cz_plan *plan = cx->plan;
    int per_stage = plan->dp * plan->tp;
    for (int t = 0; t < plan->etp; t++)
        if (cz__sim_group_spans_nodes(stage * per_stage + e * plan->etp + t, plan->etp * plan->ep,
                                      plan->edp, c->gpus_per_node))
            return c->links.inter_node_gbps;
    return c->links.intra_node_gbps;
}

/* The gradient and parameter synchronization of EP rank e's expert buffer on stage s, as
 * dp_sync_seconds does a dense buffer's. */
static int expert_sync(const sim_ctx *cx, int stage, int e, double *grad_s, double *param_s,
                       int64_t *owned, cz_error *err)
{
    const cz_plan *plan = cx->plan;
    int G = plan->edp;
    *grad_s = *param_s = 0.0;
    if (!cx->cluster || G <= 1)
        return CZ_OK;
    double gbps = expert_dp_gbps(cx, stage, e);
    if (cx->megatron_aug26) {
        size_t nb = 0;
        int rc = cz__megatron_lw_domain(plan, stage, e, NULL, cx->lw_buckets, &nb, err);
        for (size_t b = 0; rc == CZ_OK && b < nb; b++) {
            double t = cz__sim_collective_seconds(CZ_COLL_REDUCE_SCATTER, G,
                                                  (double)(cx->lw_buckets[b] / G) * cx->elem_bytes,
                                                  gbps, cx->lat_us);
            *grad_s += t;
            *param_s += t;
        }
        return rc;
    }
    for (size_t b = 0; b < plan->nbuckets; b++) {
        const cz_plan_bucket *bk = &plan->buckets[b];
        if (bk->stage != stage || !bk->expert || bk->ep_rank != e || !bk->ranges)
            continue;
        if (plan->settings.dp == CZ_DP_LAYERWISE) {
            memset(owned, 0, sizeof *owned * (size_t)G);
            for (size_t i = 0; i < plan->nparams; i++) {
                const cz_plan_param *p = &plan->params[i];
                if (cx->bucket_index[i] == (int)b && p->dp_owner >= 0 && p->dp_owner < G &&
                    __builtin_add_overflow(owned[p->dp_owner], p->numel, &owned[p->dp_owner]))
                    owned[p->dp_owner] = INT64_MAX;
            }
            *grad_s += cz__sim_collective_seconds(
                CZ_COLL_ALL_REDUCE, G, (double)bk->size * cx->elem_bytes, gbps, cx->lat_us);
            *param_s +=
                cz__sim_uneven_seconds(owned, G, cx->elem_bytes, gbps, cx->lat_us, cx->uneven);
            continue;
        }
        for (int d = 0; d < G; d++)
            owned[d] = bk->ranges[2 * d + 1] - bk->ranges[2 * d];
        double t = cz__sim_uneven_seconds(owned, G, cx->elem_bytes, gbps, cx->lat_us, cx->uneven);
        *grad_s += t;
        *param_s += t;
    }
    return CZ_OK;
}

static int expert_stage(const sim_ctx *dense, cz_sim_result *r, int s, const double *gpu_finish,
                        double *finish, double *busy, int64_t *owned, double *grad_s,
                        double *param_s, double *frag_max, double *local, int *crit_d, int *crit_t,
                        double *expert_part, cz_error *err)
{
    const cz_plan *plan = dense->plan;
    sim_ctx cx = *dense;
    cx.expert = 1;
    cx.R = plan->etp;
    cx.D = plan->ep * plan->edp;
    sim_prog pg = {0};
    int rc = CZ_OK, per_stage = plan->dp * plan->tp;
    double grad = 0.0, param = 0.0;
    for (int e = 0; e < plan->ep; e++) {
        double g, p;
        if ((rc = expert_sync(&cx, s, e, &g, &p, owned, err)) != CZ_OK)
            return rc;
        grad = fmax(grad, g);
        param = fmax(param, p);
    }
    *grad_s += grad;
    *param_s += param;
    for (int x = 0; x < cx.D; x++) {
        double frag, start = 0.0;
        if ((rc = build_rank(&cx, &pg, s, x, &frag, err)) != CZ_OK)
            return rc;
        prog_run(&pg, cx.R, cx.pipelined, finish, busy, NULL, NULL, NULL, NULL, NULL, NULL, NULL);
        prog_free(&pg);
        *frag_max = fmax(*frag_max, frag);
        for (int t = 0; t < cx.R; t++)
            start = fmax(start, gpu_finish[x * cx.R + t]);
        for (int t = 0; t < cx.R; t++) {
            int local_gpu = x * cx.R + t; /* the stage's GPU: dense rank local_gpu / tp */
            double *b = &r->gpu_busy[s * per_stage + local_gpu];
            *b += busy[t];
            r->compute_s = fmax(r->compute_s, *b);
            if (start + finish[t] > *local) {
                *local = start + finish[t];
                *crit_d = local_gpu / plan->tp;
                *crit_t = local_gpu % plan->tp;
                *expert_part = finish[t];
            }
        }
    }
    r->experts = 1;
    return CZ_OK;
}

/* ---- the iteration (docs/SIMULATOR.md, "The iteration") --------------------------------------
 * The forward and backward passes from each parameter's FLOPs, and the iteration without the
 * step overlapped (the passes, then step_s) and, for the plans canzona's executor runs bucket by
 * bucket, with it (cz__iter_overlap). */

/* Why the overlapped step is not modelled for this plan, or NULL when it is. */
static const char *iter_overlap_refusal(const sim_ctx *cx)
{
    if (cx->plan->settings.dp == CZ_DP_EVEN)
        return "the even (ZeRO-1) partition gathers matrix fragments over DP first";
    if (cx->megatron_aug26)
        return "Megatron's aug26 layer-wise layout synchronizes buckets of its own";
    if (cx->megatron || cx->tpw)
        return "Megatron's Muon TP modes run after the whole backward pass";
    return NULL;
}

/* Fills one DP rank of stage s for cz__iter_overlap from its program: per micro-group the
 * slowest slot's compute, the last bucket (local index, map) of its inputs and the buckets it
 * has inputs in (*touches, ngroups x nb), per bucket its elementwise updates. */
static int iter_rank(const sim_ctx *cx, int s, int d, const int *map, int nb, cz_iter_rank *rk,
                     cz_iter_group **groups, unsigned char **touches, double *elem, cz_error *err)
{
    const cz_plan *plan = cx->plan;
    sim_prog pg = {0};
    double frag;
    int rc, R = cx->R;
    if ((rc = build_rank(cx, &pg, s, d, &frag, err)) != CZ_OK)
        return rc;
    const cz_rank_schedule *sch = find_schedule(cx, s, d);
    size_t ng = pg.ngroups > 0 ? (size_t)pg.ngroups : 1;
    *groups = calloc(ng, sizeof **groups);
    *touches = calloc(ng * (size_t)(nb > 0 ? nb : 1), 1);
    if (!*groups || !*touches) {
        rc = cz__error_set(err, CZ_ENOMEM, "out of memory simulating the iteration");
        goto done;
    }
    for (int k = 0; k < nb; k++)
        elem[k] = 0.0;
    for (int g = 0; g < pg.ngroups; g++) {
        cz_iter_group *ig = &(*groups)[g];
        double *slot = pg.scratch;
        for (int t = 0; t < R; t++)
            slot[t] = cx->pipelined ? 0.0 : pg.compute[(size_t)g * R + t];
        for (int i = cx->pipelined ? pg.first[g] : 0; cx->pipelined && i < pg.first[g + 1]; i++)
            for (int x = pg.tasks[i].slot; x < pg.tasks[i].slot + pg.tasks[i].width; x++)
                slot[x] += pg.tasks[i].compute + pg.tasks[i].allreduce;
        ig->gather_s = pg.gather[g];
        ig->scatter_s = pg.scatter[g];
        for (int t = 0; t < R; t++)
            ig->compute_s = fmax(ig->compute_s, slot[t]);
        ig->bucket = 0;
        const cz_plan_group *grp = &sch->groups[g];
        for (int k = 0; k < grp->ntasks; k++) {
            int bi = cx->bucket_index[grp->task_param[k]];
            int b = bi >= 0 ? map[bi] : -1;
            if (b < 0)
                continue;
            ig->bucket = b > ig->bucket ? b : ig->bucket;
            (*touches)[(size_t)g * (size_t)nb + (size_t)b] = 1;
        }
    }
    /* The rank's elementwise updates, bucket by bucket (prog_elementwise's shares). */
    for (size_t i = 0; i < plan->nparams; i++) {
        const cz_plan_param *p = &plan->params[i];
        int bi = cx->bucket_index[i], b = bi >= 0 ? map[bi] : -1;
        if (p->def.kind != CZ_KIND_ELEMENTWISE || p->stage != s || p->expert || b < 0)
            continue;
        double share = cx->sec[i] / R;
        if (cz_plan_param_fragmented(plan, p)) {
            if (p->numel > 0)
                elem[b] += share * (double)param_overlap(cx, p, d) / (double)p->numel;
        } else if (p->dp_owner == d) {
            elem[b] += share;
        }
    }
    *rk = (cz_iter_rank){pg.ngroups, *groups, elem, *touches};
done:
    prog_free(&pg);
    return rc;
}

static int sim_iteration(const sim_ctx *cx, cz_sim_result *r, const cz_sim_options *o,
                         int64_t *owned, cz_error *err)
{
    const cz_plan *plan = cx->plan;
    const cz_cluster *c = cx->cluster;
    int D = cx->D, rc = CZ_OK;
    if (!c)
        return cz__error_set(err, CZ_EINVALID,
                             "the iteration needs a cluster: its GEMM rate times the forward and "
                             "backward passes");
    if (cz_plan_has_experts(plan))
        return cz__error_set(err, CZ_EUNSUPPORTED,
                             "the iteration's compute model sends every token through every "
                             "matrix: it is for dense models, and this plan has expert groups");
    double tflops = cx->dm && c->device.costs.gemm_tflops[CZ_GEMM_BF16] > 0.0
                        ? c->device.costs.gemm_tflops[CZ_GEMM_BF16]
                        : c->device.matmul_tflops;
    r->iteration = 1;
    r->seq_len = o->seq_len;
    r->micro_batch_size = o->micro_batch_size;
    r->micro_batches = o->micro_batches;
    r->pass_efficiency = o->pass_efficiency;
    r->gather_forward_order = o->gather_forward_order;
    r->deferred_updates = o->deferred_updates;
    r->pass_tflops = tflops * o->pass_efficiency;
    if (!(r->pass_tflops > 0.0))
        return cz__error_set(err, CZ_EINVALID,
                             "cluster '%s': device.matmul_tflops must be positive to time the "
                             "forward and backward passes",
                             c->name ? c->name : "?");
    const char *refusal = iter_overlap_refusal(cx);
    r->iter_overlap = refusal == NULL;
    snprintf(r->iter_note, sizeof r->iter_note, "%s", refusal ? refusal : "");
    size_t nbk = plan->nbuckets ? plan->nbuckets : 1;
    int *map = malloc(nbk * sizeof *map);
    double *v = calloc(4 * nbk, sizeof *v); /* per bucket: forward, backward, RS, AG */
    double *elem = calloc((size_t)D * nbk, sizeof *elem);
    cz_iter_rank *ranks = calloc((size_t)D, sizeof *ranks);
    cz_iter_group **groups = calloc((size_t)D, sizeof *groups);
    unsigned char **touches = calloc((size_t)D, sizeof *touches);
    if (!map || !v || !elem || !ranks || !groups || !touches) {
        rc = cz__error_set(err, CZ_ENOMEM, "out of memory simulating the iteration");
        goto done;
    }
    double worst_passes = -1.0, worst_iter = -1.0;
    for (int s = 0; s < cx->P; s++) {
        int nb = 0;
        for (size_t b = 0; b < plan->nbuckets; b++)
            map[b] = plan->buckets[b].stage == s && !plan->buckets[b].expert ? nb++ : -1;
        double *fwd = v, *bwd = v + nbk, *rs = v + 2 * nbk, *ag = v + 3 * nbk;
        memset(v, 0, 4 * nbk * sizeof *v);
        for (size_t i = 0; i < plan->nparams; i++) {
            const cz_plan_param *p = &plan->params[i];
            int bi = cx->bucket_index[i], b = bi >= 0 ? map[bi] : -1;
            if (p->stage != s || b < 0)
                continue;
            double f =
                cz__iter_forward_flops(&p->def, p->numel, cx->R, o->seq_len, o->micro_batch_size) /
                (r->pass_tflops * 1e12);
            fwd[b] += f;
            bwd[b] += 2.0 * f; /* the input and the weight gradients: two matmuls per one */
        }
        double F = 0.0, B = 0.0;
        for (int b = 0; b < nb; b++)
            F += fwd[b], B += bwd[b];
        double passes = o->micro_batches * (F + B);
        if (passes > worst_passes) {
            worst_passes = passes;
            r->fwd_s = o->micro_batches * F;
            r->bwd_s = o->micro_batches * B;
        }
        if (!r->iter_overlap)
            continue;
        dp_sync y;
        if ((rc = dp_sync_seconds(cx, s, &y, owned, rs, ag, err)) != CZ_OK)
            goto done;
        for (int d = 0; d < D; d++)
            if ((rc = iter_rank(cx, s, d, map, nb, &ranks[d], &groups[d], &touches[d],
                                elem + (size_t)d * nbk, err)) != CZ_OK)
                goto done;
        /* The passes first: the executor's optimizer streams at low priority. */
        cz_iter_model m = {
            nb, o->micro_batches,        cx->pipelined,      D, fwd, bwd, rs, ag, ranks,
            1,  o->gather_forward_order, o->deferred_updates};
        cz_iter_timeline tl;
        if ((rc = cz__iter_overlap(&m, &tl, err)) != CZ_OK)
            goto done;
        for (int d = 0; d < D; d++) {
            free(groups[d]);
            free(touches[d]);
            groups[d] = NULL;
            touches[d] = NULL;
        }
        if (tl.iter_s > worst_iter) {
            worst_iter = tl.iter_s;
            r->iter_overlap_s = tl.iter_s;
            r->bwd_delay_s = tl.bwd_delay_s;
            r->first_wait_s = tl.first_wait_s;
            r->dp_bound_s = tl.dp_bound_s;
        }
    }
    /* Without overlap: the passes, then the whole step (the worst stage's of each). */
    r->iter_s = r->fwd_s + r->bwd_s + r->step_s;
done:
    for (int d = 0; groups && touches && d < D; d++) {
        free(groups[d]);
        free(touches[d]);
    }
    free(groups);
    free(touches);
    free(ranks);
    free(elem);
    free(v);
    free(map);
    return rc;
}
