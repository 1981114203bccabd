/*
 * The simulated step of a fully sharded plan (docs/SIMULATOR.md, "Fully sharded"), and of the
 * baseline such a job runs without canzona: FSDP2 with torch.optim.Muon by hand, every matrix's
 * gradient all-gathered whole on every GPU and orthogonalized there.
 *
 * Per stage (the stages run side by side; the step is the slowest), with G = dp * tp GPUs in the
 * stage and the alpha-beta collectives of sim_comm.c on the cluster's links (a group that
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
 * HSDP (settings.replicate R > 1, the DP ranks R replicas of S shard ranks): grad adds the job's
 * all-reduce of the shards over the replicas; the owners gather from their own replica (the
 * gradients are the same on every replica). Redundant, every replica runs the schedule over its
 * own S * tp GPUs; partitioned, the schedule spans all dp * tp GPUs, so the owners compute R times
 * less each, and each update's shards go to every replica (R times the scatter's bytes, over an
 * all-to-all of the whole stage).
 *
 * The baseline's update: the elementwise updates, one all-gather of every matrix over the shard
 * group (each GPU receives every matrix but its own piece), then every matrix's step on every
 * GPU, without overlap (full_tensor() blocks); the rest as above. Shard bytes are the job's dtype
 * both ways.
 */
#include "cz_analysis.h"

#include <stdlib.h>

/* A GPU's piece of parameter q: DP rank r's rows of its TP-local shard (its shard rank's,
 * r modulo the shard size: every HSDP replica holds the same pieces). */
static double piece(const cz_plan *p, const cz_plan_param *q, int r)
{
    int64_t rows = q->local_shape[0];
    int shard = cz_plan_fsdp_shard(p);
    if (rows <= 0)
        return 0.0;
    return (double)cz__fsdp_rows(rows, shard, r % shard) * ((double)q->numel / (double)rows);
}

typedef struct stage_sim {
    double grad, elem, gather, compute, scatter, update, param, base_gather, base_compute;
    double base_update, most_recv;
} stage_sim;

/* The exchanges' span: slots is the schedule's (cz_plan_fsdp_slots), rep the GPUs of one
 * replica (S * tp). An owner gathers its matrix from its own replica's GPUs (the gradients are
 * the same on every replica); its update goes back to the GPUs of its replica or, partitioned,
 * of every replica. */
typedef struct fsdp_span {
    int gpus, slots, rep, partitioned;
} fsdp_span;

static double larger(double a, double b)
{
    return a > b ? a : b;
}

/* One micro-group's two all-to-alls, in elements: the largest amount one GPU sends or
 * receives in the gather (*gather) and in the scatter (*scatter). send and recv hold one value
 * per GPU of the stage. Redundant HSDP replicas run the same exchange side by side, so one
 * replica is counted. */
static void group_exchange(const cz_plan *p, const fsdp_span *sp, const cz_plan_group *gr,
                           double *send, double *recv, double *gather, double *scatter)
{
    int n = sp->partitioned ? sp->gpus : sp->rep;
    for (int pass = 0; pass < 2; pass++) {
        for (int k = 0; k < n; k++)
            send[k] = recv[k] = 0.0;
        for (int t = 0; t < gr->ntasks; t++) {
            const cz_plan_param *q = &p->params[gr->task_param[t]];
            int o = gr->task_slot[t], first = o - o % sp->rep;
            /* pass 0, the gather: the owner's replica sends; pass 1, the scatter: the owner
             * sends to its replica, or to every replica when partitioned. */
            int lo = pass == 0 || !sp->partitioned ? first : 0;
            int hi = pass == 0 || !sp->partitioned ? first + sp->rep : sp->gpus;
            for (int k = lo; k < hi && k < n; k++) {
                if (k == o)
                    continue;
                double e = piece(p, q, k / p->tp);
                send[pass == 0 ? k : o] += e;
                recv[pass == 0 ? o : k] += e;
            }
        }
        double most = 0.0;
        for (int k = 0; k < n; k++)
            most = larger(most, larger(send[k], recv[k]));
        *(pass == 0 ? gather : scatter) = most;
    }
}

static int stage_run(const cz_plan *p, const cz_cluster *c, int s, const double *sec, stage_sim *o,
                     cz_error *err)
{
    int G = p->dp * p->tp, rc = CZ_OK, gpn = p->gpus_per_node > 0 ? p->gpus_per_node : G;
    int R = cz_plan_fsdp_replicas(p), S = cz_plan_fsdp_shard(p);
    fsdp_span sp = {G, cz_plan_fsdp_slots(p), S * p->tp, 0};
    sp.partitioned = sp.slots > sp.rep;
    double lat = c ? c->links.latency_us : 0.0, eb = cz__dtype_bytes(p->dtype);
    /* The gradients on the wire in the job's dtype, as the ZeRO-1 rows' (the executor's bf16 wire;
     * FSDP2's reduce_dtype fp32, torchtitan's default, would double grad_s). */
    double gb = eb;
    /* The stage's G consecutive ranks, TP fastest: a replica is S * tp consecutive ones, its
     * shard ranks stride TP, and a shard rank's replicas stride S * tp. The exchanges span one
     * replica (redundant) or the stage (partitioned). */
    int first = s * G;
    double a2a_gbps =
        cz__sim_link_gbps(c, cz__sim_group_spans_nodes(first, 1, sp.partitioned ? G : sp.rep, gpn));
    double dp_gbps = cz__sim_link_gbps(c, cz__sim_group_spans_nodes(first, p->tp, S, gpn));
    double rep_gbps = cz__sim_link_gbps(c, cz__sim_group_spans_nodes(first, sp.rep, R, gpn));
    const cz_rank_schedule *rs = &p->schedules[s];
    double *send = calloc((size_t)G + 1, sizeof *send), *recv = calloc((size_t)G + 1, sizeof *recv);
    double *ew = calloc((size_t)G + 1, sizeof *ew), *busy = calloc((size_t)G + 1, sizeof *busy);
    double *gather = calloc((size_t)rs->ngroups + 1, sizeof *gather);
    double *scatter = calloc((size_t)rs->ngroups + 1, sizeof *scatter);
    double *work = calloc((size_t)rs->ngroups + 1, sizeof *work);
    if (!send || !recv || !ew || !busy || !gather || !scatter || !work) {
        rc = cz__error_set(err, CZ_ENOMEM, "out of memory simulating the fully sharded step");
        goto done;
    }
    double slice = 0.0, whole_piece = 0.0, all_sec = 0.0;
    for (size_t i = 0; i < p->nparams; i++) {
        const cz_plan_param *q = &p->params[i];
        if (q->stage != s)
            continue;
        /* FSDP2 pads each rank's shard to ceil(rows / S) rows for its collectives. */
        slice += (double)q->shard_rows * ((double)q->numel / (double)q->local_shape[0]);
        if (q->def.kind == CZ_KIND_MATRIX) {
            whole_piece += piece(p, q, 0);
            all_sec += sec[i];
            continue;
        }
        for (int k = 0; k < G; k++)
            ew[k] += piece(p, q, k / p->tp) / (double)q->numel * sec[i] / p->tp;
    }
    /* The job's: FSDP2's reduce-scatter over the shard ranks, then (HSDP) the all-reduce of the
     * shards over the replicas; the parameter all-gather over the shard ranks. */
    if (c) {
        o->grad = cz__sim_collective_seconds(CZ_COLL_REDUCE_SCATTER, S, slice * gb, dp_gbps, lat) +
                  cz__sim_collective_seconds(CZ_COLL_ALL_REDUCE, R, slice * gb, rep_gbps, lat);
        o->param = cz__sim_collective_seconds(CZ_COLL_ALL_GATHER, S, slice * eb, dp_gbps, lat);
    }
    for (int k = 0; k < G; k++)
        o->elem = larger(o->elem, ew[k]);
    /* The pipeline: compute stream from the elementwise work, one communication stream. */
    double comm = 0.0, compute_end = o->elem, prev_gather_end = 0.0;
    int n = sp.partitioned ? G : sp.rep;
    for (int g = 0; g < rs->ngroups; g++) {
        const cz_plan_group *gr = &rs->groups[g];
        double in = 0.0, out = 0.0;
        group_exchange(p, &sp, gr, send, recv, &in, &out);
        o->most_recv = larger(o->most_recv, larger(in, out));
        if (c) {
            gather[g] = cz__sim_collective_seconds(CZ_COLL_ALL_TO_ALL, n, in * eb, a2a_gbps, lat);
            scatter[g] = cz__sim_collective_seconds(CZ_COLL_ALL_TO_ALL, n, out * eb, a2a_gbps, lat);
        }
        for (int k = 0; k < sp.slots; k++)
            busy[k] = 0.0;
        for (int t = 0; t < gr->ntasks; t++)
            busy[gr->task_slot[t]] += sec[gr->task_param[t]];
        for (int k = 0; k < sp.slots; k++)
            work[g] = larger(work[g], busy[k]);
        o->gather += gather[g];
        o->scatter += scatter[g];
        o->compute += work[g];
    }
    if (rs->ngroups > 0)
        prev_gather_end = comm = gather[0];
    for (int g = 0; g < rs->ngroups; g++) {
        double start = larger(compute_end, prev_gather_end);
        compute_end = start + work[g];
        if (g + 1 < rs->ngroups) /* prefetched once group g may start */
            prev_gather_end = comm = larger(comm, start) + gather[g + 1];
        comm = larger(comm, compute_end) + scatter[g];
    }
    o->update = larger(comm, compute_end);
    /* The baseline: every matrix whole on every GPU (a ring all-gather of the largest pieces
     * over each replica's shard group). */
    o->base_gather =
        c ? cz__sim_collective_seconds(
                CZ_COLL_ALL_GATHER, sp.rep, whole_piece * eb,
                cz__sim_link_gbps(c, cz__sim_group_spans_nodes(first, 1, sp.rep, gpn)), lat)
          : 0.0;
    o->base_compute = all_sec;
    o->base_update = o->elem + o->base_gather + o->base_compute;
done:
    free(send);
    free(recv);
    free(ew);
    free(busy);
    free(gather);
    free(scatter);
    free(work);
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
