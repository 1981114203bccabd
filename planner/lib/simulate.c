/*
 * Event model of one optimizer step of a plan: alpha-beta collectives, one compute stream and
 * one communication stream per GPU. The assumptions and formulas are written down in
 * docs/SIMULATOR.md; keep the two in step.
 *
 * This file drives it (the context, each stage, the critical rank's timeline, cz_plan_simulate);
 * the parts are sim_comm.c (communication times), sim_program.c (a TP group's program),
 * sim_megatron.c (Megatron's modes, the choice of a rank's program), sim_experts.c (expert
 * groups) and sim_iteration.c (the iteration), with cz_sim.h between them.
 */
#include "cz_sim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

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
        /* The DP exchanges as the executor runs them (wire.c): the plan's dtype, the
         * gradients in fp32 with grad_reduce_in_fp32. Its micro-group exchanges are fp32 in
         * every job (pipeline.c; docs/EXECUTOR.md, "Micro-group exchanges stay fp32"), and so
         * are Megatron's TP gathers, of its fp32 main gradients. */
        cx->elem_bytes = 4.0;
        cx->param_bytes = cz__dtype_bytes(plan->dtype);
        cx->grad_bytes = opt && opt->grad_reduce_in_fp32 ? 4.0 : cx->param_bytes;
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

/* CZ_OK for NULL or valid options (of this build's version: cz_plan_simulate read the caller's
 * first); CZ_EINVALID for a value out of its range. Here, not in analysis_api.c, so that the
 * simulator calls nothing of the file that calls it. */
/* Where each version of cz_sim_options ends (cz__options_read): version 2 added the overlap
 * and Megatron fields, 3 the iteration, 4 deferred_updates, 5 grad_reduce_in_fp32. */
static const size_t sim_ends[] = {
    CZ__OPTIONS_END(cz_sim_options, muon_tp), CZ__OPTIONS_END(cz_sim_options, gtp),
    CZ__OPTIONS_END(cz_sim_options, gather_forward_order),
    CZ__OPTIONS_END(cz_sim_options, deferred_updates), sizeof(cz_sim_options)};
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
    if (o->grad_reduce_in_fp32 != 0 && o->grad_reduce_in_fp32 != 1)
        return cz__error_set(err, CZ_EINVALID, "cz_sim_options: grad_reduce_in_fp32 %d; 0 or 1",
                             o->grad_reduce_in_fp32);
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
    if ((rc = cz__sim_dp_sync_seconds(cx, s, &y, owned, NULL, NULL, err)))
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
        if ((rc = cz__sim_build_rank(cx, pg, s, d, &frag, err)))
            return rc;
        cz__sim_prog_run(pg, R, cx->pipelined, finish, busy, NULL, NULL, NULL, NULL, NULL, NULL,
                         NULL);
        cz__sim_prog_sent_most(pg, R, &r->tp_sync_bytes);
        cz__sim_prog_free(pg);
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
        if ((rc = cz__sim_expert_stage(cx, r, s, gpu_finish, finish, busy, owned, &eg, &ep,
                                       &frag_max, &local, &crit_d, &crit_t, &expert_part, err)) !=
            CZ_OK)
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

/* What the executor's DP exchanges post per step (wire.c, cz_executor_wire): each GPU
 * reduce-scatters and all-gathers every bucket it holds, whole (every rank's range), its stage's
 * dense buckets and its EP rank's expert ones; the most over the GPUs, in the exchanges'
 * dtypes. Independent of the cluster: bytes, not time. */
static void wire_bytes(const cz_plan *plan, const cz_sim_options *o, cz_sim_result *r)
{
    int bf16 = cz__dtype_bytes(plan->dtype) == 2;
    r->param_wire = plan->dtype;
    r->grad_wire = bf16 && o && o->grad_reduce_in_fp32 ? CZ_DTYPE_FP32 : plan->dtype;
    int ep = cz_plan_has_experts(plan) ? plan->ep : 1;
    int64_t most = 0;
    for (int s = 0; s < plan->pp; s++)
        for (int e = 0; e < ep; e++) {
            int64_t n = 0;
            for (size_t b = 0; b < plan->nbuckets; b++) {
                const cz_plan_bucket *bk = &plan->buckets[b];
                if (bk->stage == s && (!bk->expert || bk->ep_rank == e))
                    n = cz__i64_sat_add(n, bk->size); /* sizes as read, unchecked */
            }
            most = n > most ? n : most;
        }
    r->grad_sync_bytes = cz__i64_sat_mul(most, cz__dtype_bytes(r->grad_wire));
    r->param_sync_bytes = cz__i64_sat_mul(most, cz__dtype_bytes(r->param_wire));
}

/* The timeline of the critical DP rank, rebuilt (cheap) rather than kept for every rank, and
 * the figures of r read off it: cooperative tasks, TP collectives, exposed communication. */
static int sim_timeline(const sim_ctx *cx, sim_prog *pg, cz_sim_result *r, double *finish,
                        double *busy, cz_error *err)
{
    int R = cx->R, D = cx->D, s = r->critical_stage, d = r->critical_dp, rc;
    double *coop_ar = NULL, *coop_comm = NULL, *coop_wait = NULL;
    double frag;
    if ((rc = cz__sim_build_rank(cx, pg, s, d, &frag, err)))
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
    cz__sim_prog_run(pg, R, cx->pipelined, finish, busy, r->tl_gather, r->tl_scatter, r->tl_compute,
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
    /* A fully sharded plan's step has another shape (no buckets, exchanges over the shard
     * group): sim_fsdp.c simulates it, and canzona simulate calls that. */
    if (plan && cz_plan_is_fsdp(plan))
        return cz__error_set(err, CZ_EUNSUPPORTED,
                             "plan layout fsdp: this simulation is of bucketed (ZeRO-1) plans; a "
                             "fully sharded plan's step is canzona simulate --plan's fsdp table "
                             "(docs/SIMULATOR.md, \"Fully sharded\")");
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
    r->etp_sync_bytes = experts ? 0 : -1;
    wire_bytes(plan, opt, r);
    for (int s = 0; s < P; s++)
        if ((rc = sim_stage(&cx, &pg, cluster, s, r, finish, busy, gpu_finish, owned, err)))
            goto done;
    if ((rc = sim_timeline(&cx, &pg, r, finish, busy, err)) != CZ_OK)
        goto done;
    if (opt && opt->iteration && (rc = cz__sim_iteration(&cx, r, opt, owned, err)) != CZ_OK)
        goto done;
    *out = r;
    r = NULL;
done:
    cz__sim_prog_free(&pg);
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
