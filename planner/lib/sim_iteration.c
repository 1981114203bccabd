/*
 * The simulator's iteration (docs/SIMULATOR.md, "The iteration"; its event graph is
 * iteration.c's cz__iter_overlap).
 *
 * The forward and backward passes from each parameter's FLOPs, and the iteration without the
 * step overlapped (the passes, then step_s) and, for the plans canzona's executor runs bucket by
 * bucket, with it (cz__iter_overlap).
 */
#include "cz_sim.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    if ((rc = cz__sim_build_rank(cx, &pg, s, d, &frag, err)) != CZ_OK)
        return rc;
    const cz_rank_schedule *sch = cz__sim_find_schedule(cx, s, d);
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
    /* The rank's elementwise updates, bucket by bucket (cz__sim_prog_elementwise's shares). */
    for (size_t i = 0; i < plan->nparams; i++) {
        const cz_plan_param *p = &plan->params[i];
        int bi = cx->bucket_index[i], b = bi >= 0 ? map[bi] : -1;
        if (p->def.kind != CZ_KIND_ELEMENTWISE || p->stage != s || p->expert || b < 0)
            continue;
        double share = cx->sec[i] / R;
        if (cz_plan_param_fragmented(plan, p)) {
            if (p->numel > 0)
                elem[b] += share * (double)cz__sim_param_overlap(cx, p, d) / (double)p->numel;
        } else if (p->dp_owner == d) {
            elem[b] += share;
        }
    }
    *rk = (cz_iter_rank){pg.ngroups, *groups, elem, *touches};
done:
    cz__sim_prog_free(&pg);
    return rc;
}

int cz__sim_iteration(const sim_ctx *cx, cz_sim_result *r, const cz_sim_options *o, int64_t *owned,
                      cz_error *err)
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
        if ((rc = cz__sim_dp_sync_seconds(cx, s, &y, owned, rs, ag, err)) != CZ_OK)
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
