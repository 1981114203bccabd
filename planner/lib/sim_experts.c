/*
 * The simulator's expert groups (docs/SIMULATOR.md, "Expert groups").
 *
 * A plan with expert groups: after its DP rank's micro-groups a GPU runs its expert rank's,
 * whose first collectives wait for every GPU of the ETP group, so an expert rank starts when the
 * last of its GPUs finishes its dense part. The expert buffers are reduced and gathered over the
 * expert-DP groups, all EP ranks at once (their groups are disjoint): each adds its slowest EP
 * rank's collectives to the stage's.
 */
#include "cz_sim.h"

#include <math.h>
#include <string.h>

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
 * cz__sim_dp_sync_seconds does a dense buffer's. */
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
            double slice = (double)(cx->lw_buckets[b] / G);
            *grad_s += cz__sim_collective_seconds(CZ_COLL_REDUCE_SCATTER, G, slice * cx->grad_bytes,
                                                  gbps, cx->lat_us);
            *param_s += cz__sim_collective_seconds(CZ_COLL_REDUCE_SCATTER, G,
                                                   slice * cx->param_bytes, gbps, cx->lat_us);
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
                CZ_COLL_ALL_REDUCE, G, (double)bk->size * cx->grad_bytes, gbps, cx->lat_us);
            *param_s +=
                cz__sim_uneven_seconds(owned, G, cx->param_bytes, gbps, cx->lat_us, cx->uneven);
            continue;
        }
        for (int d = 0; d < G; d++)
            owned[d] = bk->ranges[2 * d + 1] - bk->ranges[2 * d];
        *grad_s += cz__sim_uneven_seconds(owned, G, cx->grad_bytes, gbps, cx->lat_us, cx->uneven);
        *param_s += cz__sim_uneven_seconds(owned, G, cx->param_bytes, gbps, cx->lat_us, cx->uneven);
    }
    return CZ_OK;
}

int cz__sim_expert_stage(const sim_ctx *dense, cz_sim_result *r, int s, const double *gpu_finish,
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
        if ((rc = cz__sim_build_rank(&cx, &pg, s, x, &frag, err)) != CZ_OK)
            return rc;
        cz__sim_prog_run(&pg, cx.R, cx.pipelined, finish, busy, NULL, NULL, NULL, NULL, NULL, NULL,
                         NULL);
        cz__sim_prog_sent_most(&pg, cx.R, &r->etp_sync_bytes);
        cz__sim_prog_free(&pg);
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
