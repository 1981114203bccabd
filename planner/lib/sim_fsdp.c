/*
 * The simulated step of a fully sharded plan (docs/SIMULATOR.md, "Fully sharded"), and of the
 * baseline such a job runs without canzona: FSDP2 with torch.optim.Muon by hand, every matrix's
 * gradient all-gathered whole on every GPU and orthogonalized there.
 *
 * Per stage (the stages run side by side; the step is the slowest), with G = dp * tp GPUs in the
 * shard group and the alpha-beta collectives of sim_comm.c on the cluster's links (a group that
 * spans nodes at the inter-node rate; the device model's fixed costs are not charged here):
 *
 *   grad     FSDP2's reduce-scatter of the gradients over the DP ranks (the job's, not the
 *            plan's: the same bytes ZeRO-1's reduce-scatter moves, torch.chunk's padding to
 *            ceil(rows / dp) rows per rank included), one ring per TP rank;
 *   update   the elementwise updates of the busiest GPU, on its compute stream first; then per
 *            micro-group one all-to-all(v) of the gradient shards to their owners (the largest
 *            amount one GPU sends or receives), the owners' whole-matrix steps (the busiest
 *            owner's), one all-to-all(v) of the update shards back; on one communication stream
 *            in the order gather(g + 1), scatter(g), so that group g + 1's gather runs while
 *            group g computes (the TP pipeline's order);
 *   param    FSDP2's all-gather of the parameters for the next forward pass (ring over DP);
 *   opt      update + param (from synchronized gradients to gathered parameters, as canzona
 *            simulate's ZeRO-1 rows count it); step = grad + opt.
 *
 * The baseline's update: the elementwise updates, one all-gather of every matrix over the shard
 * group (each GPU receives every matrix but its own piece), then every matrix's step on every
 * GPU, without overlap (full_tensor() blocks); the rest as above. Shard bytes are the job's dtype
 * both ways.
 */
#include "cz_analysis.h"

#include <stdlib.h>

/* A GPU's piece of parameter q: DP rank r's rows of its TP-local shard. */
static double piece(const cz_plan *p, const cz_plan_param *q, int r)
{
    int64_t rows = q->local_shape[0];
    if (rows <= 0)
        return 0.0;
    return (double)cz__fsdp_rows(rows, p->dp, r) * ((double)q->numel / (double)rows);
}

typedef struct stage_sim {
    double grad, elem, gather, compute, scatter, update, param, base_gather, base_compute;
    double base_update, most_recv;
} stage_sim;

static double larger(double a, double b)
{
    return a > b ? a : b;
}

/* One micro-group's all-to-all: the largest amount one GPU sends or receives, in elements. */
static double group_exchange(const cz_plan *p, const cz_plan_group *gr, double *send, double *recv)
{
    int G = p->dp * p->tp;
    for (int k = 0; k < G; k++)
        send[k] = recv[k] = 0.0;
    for (int t = 0; t < gr->ntasks; t++) {
        const cz_plan_param *q = &p->params[gr->task_param[t]];
        int o = gr->task_slot[t];
        for (int k = 0; k < G; k++) {
            double e = piece(p, q, k / p->tp);
            if (k == o)
                continue;
            send[k] += e;
            recv[o] += e;
        }
    }
    double most = 0.0;
    for (int k = 0; k < G; k++)
        most = larger(most, larger(send[k], recv[k]));
    return most;
}

static int stage_run(const cz_plan *p, const cz_cluster *c, int s, const double *sec, stage_sim *o,
                     cz_error *err)
{
    int G = p->dp * p->tp, rc = CZ_OK, gpn = p->gpus_per_node > 0 ? p->gpus_per_node : G;
    double lat = c ? c->links.latency_us : 0.0, eb = cz__dtype_bytes(p->dtype);
    /* The gradients on the wire in the job's dtype, as the ZeRO-1 rows' (the executor's bf16 wire;
     * FSDP2's reduce_dtype fp32, torchtitan's default, would double grad_s). */
    double gb = eb;
    /* The shard group is the stage's G consecutive ranks (TP fastest); a DP group strides TP. */
    int a2a_inter = cz__sim_group_spans_nodes(s * G, 1, G, gpn);
    int dp_inter = cz__sim_group_spans_nodes(s * G, p->tp, p->dp, gpn);
    double a2a_gbps = !c ? 0.0 : a2a_inter ? c->links.inter_node_gbps : c->links.intra_node_gbps;
    double dp_gbps = !c ? 0.0 : dp_inter ? c->links.inter_node_gbps : c->links.intra_node_gbps;
    const cz_rank_schedule *rs = &p->schedules[s];
    double *send = calloc((size_t)G + 1, sizeof *send), *recv = calloc((size_t)G + 1, sizeof *recv);
    double *ew = calloc((size_t)G + 1, sizeof *ew), *busy = calloc((size_t)G + 1, sizeof *busy);
    if (!send || !recv || !ew || !busy) {
        rc = cz__error_set(err, CZ_ENOMEM, "out of memory simulating the fully sharded step");
        goto done;
    }
    double slice = 0.0, whole_piece = 0.0, all_sec = 0.0;
    for (size_t i = 0; i < p->nparams; i++) {
        const cz_plan_param *q = &p->params[i];
        if (q->stage != s)
            continue;
        /* FSDP2 pads each rank's shard to ceil(rows / dp) rows for its collectives. */
        slice += (double)q->shard_rows * ((double)q->numel / (double)q->local_shape[0]);
        if (q->def.kind == CZ_KIND_MATRIX) {
            whole_piece += piece(p, q, 0);
            all_sec += sec[i];
            continue;
        }
        for (int k = 0; k < G; k++)
            ew[k] += piece(p, q, k / p->tp) / (double)q->numel * sec[i] / p->tp;
    }
    o->grad =
        c ? cz__sim_collective_seconds(CZ_COLL_REDUCE_SCATTER, p->dp, slice * gb, dp_gbps, lat)
          : 0.0;
    o->param =
        c ? cz__sim_collective_seconds(CZ_COLL_ALL_GATHER, p->dp, slice * eb, dp_gbps, lat) : 0.0;
    for (int k = 0; k < G; k++)
        o->elem = larger(o->elem, ew[k]);
    /* The pipeline: compute stream from the elementwise work, one communication stream. */
    double comm = 0.0, compute_end = o->elem, prev_gather_end = 0.0;
    double *gather = calloc((size_t)rs->ngroups + 1, sizeof *gather);
    double *work = calloc((size_t)rs->ngroups + 1, sizeof *work);
    if (!gather || !work) {
        free(gather);
        free(work);
        rc = cz__error_set(err, CZ_ENOMEM, "out of memory simulating the fully sharded step");
        goto done;
    }
    for (int g = 0; g < rs->ngroups; g++) {
        const cz_plan_group *gr = &rs->groups[g];
        double most = group_exchange(p, gr, send, recv);
        o->most_recv = larger(o->most_recv, most);
        gather[g] =
            c ? cz__sim_collective_seconds(CZ_COLL_ALL_TO_ALL, G, most * eb, a2a_gbps, lat) : 0.0;
        for (int k = 0; k < G; k++)
            busy[k] = 0.0;
        for (int t = 0; t < gr->ntasks; t++)
            busy[gr->task_slot[t]] += sec[gr->task_param[t]];
        for (int k = 0; k < G; k++)
            work[g] = larger(work[g], busy[k]);
        o->gather += gather[g];
        o->scatter += gather[g]; /* the update shards go back the way the gradients came */
        o->compute += work[g];
    }
    if (rs->ngroups > 0)
        prev_gather_end = comm = gather[0];
    for (int g = 0; g < rs->ngroups; g++) {
        double start = larger(compute_end, prev_gather_end);
        compute_end = start + work[g];
        if (g + 1 < rs->ngroups) /* prefetched once group g may start */
            prev_gather_end = comm = larger(comm, start) + gather[g + 1];
        comm = larger(comm, compute_end) + gather[g];
    }
    o->update = larger(comm, compute_end);
    free(gather);
    free(work);
    /* The baseline: every matrix whole on every GPU (a ring all-gather of the largest pieces). */
    o->base_gather =
        c ? cz__sim_collective_seconds(CZ_COLL_ALL_GATHER, G, whole_piece * eb, a2a_gbps, lat)
          : 0.0;
    o->base_compute = all_sec;
    o->base_update = o->elem + o->base_gather + o->base_compute;
done:
    free(send);
    free(recv);
    free(ew);
    free(busy);
    return rc;
}

int cz__fsdp_simulate(const cz_plan *plan, const cz_cluster *c, cz_fsdp_sim *out, cz_error *err)
{
    *out = (cz_fsdp_sim){0};
    if (!cz_plan_is_fsdp(plan) || plan->nschedules != (size_t)plan->pp)
        return cz__error_set(err, CZ_EINVALID, "not a fully sharded plan (settings.layout fsdp)");
    if (c && (c->dp != plan->dp || c->tp != plan->tp || c->pp != plan->pp))
        return cz__error_set(err, CZ_EMISMATCH,
                             "the plan is for DP %d x TP %d x PP %d, the cluster %s has DP %d x TP "
                             "%d x PP %d",
                             plan->dp, plan->tp, plan->pp, c->name ? c->name : "?", c->dp, c->tp,
                             c->pp);
    double *sec = calloc(plan->nparams + 1, sizeof *sec);
    if (!sec)
        return cz__error_set(err, CZ_ENOMEM, "out of memory simulating the fully sharded step");
    for (size_t i = 0; i < plan->nparams; i++)
        sec[i] = c ? cz__cost_param_seconds(&plan->params[i].def, &plan->settings, c, plan->dtype)
                   : plan->params[i].cost;
    int rc = CZ_OK;
    for (int s = 0; s < plan->pp && rc == CZ_OK; s++) {
        stage_sim st = {0};
        if ((rc = stage_run(plan, c, s, sec, &st, err)) != CZ_OK)
            break;
        double opt = st.update + st.param, step = st.grad + opt;
        if (step > out->step_s) {
            out->grad_s = st.grad;
            out->elem_s = st.elem;
            out->gather_s = st.gather;
            out->compute_s = st.compute;
            out->scatter_s = st.scatter;
            out->update_s = st.update;
            out->param_s = st.param;
            out->opt_s = opt;
            out->step_s = step;
            out->a2a_bytes = st.most_recv * cz__dtype_bytes(plan->dtype);
            out->groups = plan->schedules[s].ngroups;
            out->critical_stage = s;
        }
        double base_step = st.grad + st.base_update + st.param;
        if (base_step > out->base_step_s) {
            out->base_gather_s = st.base_gather;
            out->base_compute_s = st.base_compute;
            out->base_opt_s = st.base_update + st.param;
            out->base_step_s = base_step;
        }
    }
    free(sec);
    return rc;
}
