/*
 * Megatron's modes as Megatron runs them (megatron_muon.c; docs/SIMULATOR.md, "Megatron's TP
 * modes for Muon"): the program of a DP rank under one of Megatron's Muon TP modes, and the
 * choice of a rank's program (cz__sim_build_rank: the even baseline's, Megatron's or
 * canzona's).
 */
#include "cz_sim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

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
                    : cz__sim_tp_inter(cx, stage, d);
    double gbps = cz__sim_link_gbps(c, spans);
    return k->count * cz__sim_coll_seconds(cx, kinds[k->op], k->n, k->bytes, gbps, spans);
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
    double gbps = cz__sim_tp_gbps(cx, stage, d);
    int inter = cz__sim_tp_inter(cx, stage, d);
    pg->gather[0] = cz__sim_coll_seconds(cx, CZ_COLL_ALL_TO_ALL, R, worst, gbps, inter);
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
    if ((rc = cz__sim_prog_alloc(pg, 1, cx->R)))
        return cz__error_set(err, rc, "out of memory simulating DP rank %d", d);
    cz__sim_prog_elementwise(cx, pg, stage, d);
    ids = malloc((plan->nparams + 1) * sizeof *ids);
    w = malloc((plan->nparams + 1) * sizeof *w);
    if (!ids || !w) {
        rc = cz__error_set(err, CZ_ENOMEM, "out of memory simulating DP rank %d", d);
        goto done;
    }
    for (size_t i = 0; i < plan->nparams; i++) {
        const cz_plan_param *p = &plan->params[i];
        int own = d; /* under expert groups: this side's matrices, by their expert-DP rank */
        if (p->stage != stage || p->def.kind != CZ_KIND_MATRIX || !cz__sim_in_side(cx, p, &own) ||
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
        cz__sim_prog_free(pg);
    return rc;
}

/* Here, above both builders it picks between, so that the programs' files call one way. */
int cz__sim_build_rank(const sim_ctx *cx, sim_prog *pg, int s, int d, double *frag, cz_error *err)
{
    *frag = 0.0;
    if (cx->plan->settings.dp == CZ_DP_EVEN) {
        if (cz__sim_prog_build_even(cx, pg, s, d, frag))
            return cz__error_set(err, CZ_ENOMEM, "out of memory simulating DP rank %d", d);
        return CZ_OK;
    }
    if (cx->megatron)
        return prog_build_megatron(cx, pg, s, d, err);
    return cz__sim_prog_build(cx, pg, s, d, err);
}
