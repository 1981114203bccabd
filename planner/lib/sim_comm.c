/*
 * The simulator's communication times (docs/SIMULATOR.md): alpha-beta collectives and the
 * uneven DP collective, which links a TP or DP group uses, a collective as the device model
 * times it, and the DP synchronization of a stage's buckets.
 */
#include "cz_sim.h"

#include <math.h>
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

double cz__sim_link_gbps(const cz_cluster *c, int spans_nodes)
{
    return !c ? 0.0 : spans_nodes ? c->links.inter_node_gbps : c->links.intra_node_gbps;
}

double cz__sim_tp_gbps(const sim_ctx *cx, int stage, int d)
{
    const cz_cluster *c = cx->cluster;
    int first = (stage * cx->D + d) * cx->R;
    return cz__sim_link_gbps(c, cz__sim_group_spans_nodes(first, 1, cx->R, c->gpus_per_node));
}

double cz__sim_dp_gbps(const sim_ctx *cx, int stage)
{
    const cz_cluster *c = cx->cluster;
    for (int t = 0; t < cx->R; t++)
        if (cz__sim_group_spans_nodes(stage * cx->D * cx->R + t, cx->R, cx->D, c->gpus_per_node))
            return c->links.inter_node_gbps;
    return c->links.intra_node_gbps;
}

int cz__sim_tp_inter(const sim_ctx *cx, int stage, int d)
{
    return cz__sim_group_spans_nodes((stage * cx->D + d) * cx->R, 1, cx->R,
                                     cx->cluster->gpus_per_node);
}

int cz__sim_dp_inter(const sim_ctx *cx, int stage)
{
    return cz__sim_dp_gbps(cx, stage) == cx->cluster->links.inter_node_gbps &&
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

double cz__sim_coll_seconds(const sim_ctx *cx, cz_coll_kind kind, int n, double bytes, double gbps,
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

/* An uneven DP collective (cz__sim_uneven_seconds) of eb bytes per element with the device
 * model's call. */
static double uneven_seconds(const sim_ctx *cx, const int64_t *len, double eb, double gbps,
                             int inter)
{
    if (!cx->dm)
        return cz__sim_uneven_seconds(len, cx->D, eb, gbps, cx->lat_us, cx->uneven);
    if (cx->uneven == CZ_SIM_UNEVEN_PADDED) {
        double most = 0;
        for (int d = 0; d < cx->D; d++)
            most = (double)len[d] > most ? (double)len[d] : most;
        return cz__sim_coll_seconds(cx, CZ_COLL_REDUCE_SCATTER, cx->D, most * eb, gbps, inter);
    }
    double t = cz__sim_uneven_seconds(len, cx->D, eb, gbps, cx->lat_us, cx->uneven);
    return t > 0 ? t + cz__dm_call_seconds(cx->cluster) : t;
}

static void sync_add(dp_sync *y, double grad, double param)
{
    y->grad_s += grad, y->param_s += param;
    y->last_grad_s = grad, y->last_param_s = param;
}

/* grad_b and param_b (NULL, or one value per dense bucket of the stage in the plan's order,
 * zeroed by the caller) receive each bucket's collectives, outside Megatron's own layout. */
int cz__sim_dp_sync_seconds(const sim_ctx *cx, int stage, dp_sync *y, int64_t *owned,
                            double *grad_b, double *param_b, cz_error *err)
{
    const cz_plan *plan = cx->plan;
    memset(y, 0, sizeof *y);
    if (!cx->cluster || cx->D <= 1)
        return CZ_OK;
    double gbps = cz__sim_dp_gbps(cx, stage);
    int inter = cz__sim_dp_inter(cx, stage);
    if (cx->megatron_aug26) {
        /* Megatron lays out its own buckets (shard-aligned for the matrices, ZeRO-1 for the
         * rest), each an even reduce-scatter of its gradients and all-gather of its
         * parameters. */
        size_t nb = 0;
        int rc = cz__megatron_lw_stage(plan, stage, NULL, cx->lw_buckets, &nb, err);
        if (rc != CZ_OK)
            return rc;
        for (size_t b = 0; b < nb; b++) {
            double slice = (double)(cx->lw_buckets[b] / cx->D);
            sync_add(y,
                     cz__sim_coll_seconds(cx, CZ_COLL_REDUCE_SCATTER, cx->D, slice * cx->grad_bytes,
                                          gbps, inter),
                     cz__sim_coll_seconds(cx, CZ_COLL_ALL_GATHER, cx->D, slice * cx->param_bytes,
                                          gbps, inter));
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
            double ar = cz__sim_coll_seconds(cx, CZ_COLL_ALL_REDUCE, cx->D,
                                             (double)bk->size * cx->grad_bytes, gbps, inter),
                   ag = uneven_seconds(cx, owned, cx->param_bytes, gbps, inter);
            sync_add(y, ar, ag);
            if (grad_b)
                grad_b[k] = ar, param_b[k] = ag;
            continue;
        }
        for (int d = 0; d < cx->D; d++)
            owned[d] = bk->ranges ? bk->ranges[2 * d + 1] - bk->ranges[2 * d] : 0;
        double g = uneven_seconds(cx, owned, cx->grad_bytes, gbps, inter);
        double t = cx->param_bytes == cx->grad_bytes
                       ? g
                       : uneven_seconds(cx, owned, cx->param_bytes, gbps, inter);
        sync_add(y, g, t);
        if (grad_b)
            grad_b[k] = g, param_b[k] = t;
    }
    return CZ_OK;
}
