/*
 * Plan construction: settings validation, the plan's parameter table (local shapes, TP
 * divisibility, pipeline stages, costs) and the pipeline buckets -> DP partition -> TP
 * micro-groups -> metrics; the choice among the variants a strategy tries (alpha's loads and
 * effective-load variants, the joint strategy's passes over the dense and expert buffers and
 * its comparison with alpha's plan).
 */
#include "cz_types.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *or_unknown(const char *s)
{
    return s ? s : "(in memory)";
}

static int settings_check(const cz_settings *s, cz_error *err)
{
    if (!s)
        return cz__error_set(err, CZ_EINVALID, "no planning settings given");
    /* cz_settings has had only version 1 (every field was added under it), so every struct
     * accepted has this build's layout: nothing to convert. */
    int rc = cz__options_version_check(s->version, CZ_SETTINGS_VERSION, "cz_settings", NULL, err);
    if (rc != CZ_OK)
        return rc;
    if (!cz_optimizer_name(s->optimizer))
        return cz__error_set(err, CZ_EINVALID,
                             "optimizer %d is unknown; use muon, soap, shampoo or adamw",
                             (int)s->optimizer);
    if (!cz_unit_name(s->unit))
        return cz__error_set(err, CZ_EINVALID, "cost unit %d is unknown; use numel, flops or time",
                             (int)s->unit);
    if (!cz_dp_strategy_name(s->dp))
        return cz__error_set(err, CZ_EINVALID,
                             "DP strategy %d is unknown; use joint, alpha, tpaware, anchored, "
                             "even or layerwise",
                             (int)s->dp);
    if (!cz_tp_strategy_name(s->tp))
        return cz__error_set(err, CZ_EINVALID,
                             "TP strategy %d is unknown; use sc, none, single, slot or rollback",
                             (int)s->tp);
    if (!cz_layerwise_order_name(s->layerwise_order))
        return cz__error_set(
            err, CZ_EINVALID,
            "layerwise order %d is unknown; use megatron, megatron-aug26, pingpong or lpt",
            (int)s->layerwise_order);
    if (!cz_solver_name(s->solver))
        return cz__error_set(err, CZ_EINVALID, "solver %d is unknown; use greedy or ilp",
                             (int)s->solver);
    if (!cz_layout_name(s->layout))
        return cz__error_set(err, CZ_EINVALID,
                             "buffer layout %d is unknown; use unified, split or fsdp",
                             (int)s->layout);
    /* The fully sharded layout has no buckets for a DP strategy to cut: owners are chosen over
     * the whole shard group by the rollback scheduler (fsdp_plan.c), whole matrices only. */
    if (s->layout == CZ_LAYOUT_FSDP && (s->dp != CZ_DP_JOINT || s->solver != CZ_SOLVER_GREEDY ||
                                        s->tp != CZ_TP_ROLLBACK || s->split_blocks || s->coop))
        return cz__error_set(err, CZ_EUNSUPPORTED,
                             "--layout fsdp chooses every matrix's owner over the whole shard "
                             "group with greedy rollback and whole matrices; got --dp %s, --tp %s, "
                             "--solver %s%s%s (leave them at their defaults)",
                             cz_dp_strategy_name(s->dp), cz_tp_strategy_name(s->tp),
                             cz_solver_name(s->solver), s->split_blocks ? ", --split-blocks" : "",
                             s->coop ? ", --coop" : "");
    /* tpaware and the exact DP solver move cut points in every bucket and need whole
     * parameters; even and layerwise are baselines of the unified buffer. */
    if (s->layout == CZ_LAYOUT_SPLIT &&
        ((s->dp != CZ_DP_ALPHA && s->dp != CZ_DP_ANCHORED && s->dp != CZ_DP_JOINT) ||
         s->solver != CZ_SOLVER_GREEDY))
        return cz__error_set(err, CZ_EUNSUPPORTED,
                             "the split buffer layout partitions its matrix buffer with the "
                             "greedy joint, alpha or anchored DP strategy; got dp %s with the %s "
                             "solver (use --layout unified for it)",
                             cz_dp_strategy_name(s->dp), cz_solver_name(s->solver));
    if (s->replicate < 1)
        return cz__error_set(err, CZ_EINVALID, "replicate must be >= 1 (1: no HSDP), got %d",
                             s->replicate);
    if (s->replicate > 1 && s->layout != CZ_LAYOUT_FSDP)
        return cz__error_set(err, CZ_EUNSUPPORTED,
                             "an HSDP replicate size (%d) applies to --layout fsdp only; got "
                             "--layout %s",
                             s->replicate, cz_layout_name(s->layout));
    if (!cz_hsdp_compute_name(s->hsdp))
        return cz__error_set(err, CZ_EINVALID,
                             "HSDP compute mode %d is unknown; use redundant or partitioned",
                             (int)s->hsdp);
    if (s->split_blocks != 0 && s->split_blocks != 1)
        return cz__error_set(err, CZ_EINVALID, "split_blocks must be 0 or 1, got %d",
                             s->split_blocks);
    if (s->coop != 0 && s->coop != CZ_COOP_AUTO && (s->coop < 2 || s->coop > CZ_COOP_MAX))
        return cz__error_set(err, CZ_EINVALID,
                             "coop must be 0 (off), CZ_COOP_AUTO or a width from 2 to %d, got %d",
                             CZ_COOP_MAX, s->coop);
    /* The executor runs block and cooperative tasks for Muon only (SOAP's and Shampoo's state
     * is laid out per whole matrix), and only the greedy micro-group scheduler places them. */
    if ((s->split_blocks || s->coop) && s->optimizer != CZ_OPTIM_MUON)
        return cz__error_set(err, CZ_EUNSUPPORTED,
                             "--split-blocks and --coop apply to Muon only; got optimizer %s",
                             cz_optimizer_name(s->optimizer));
    if ((s->split_blocks || s->coop) && s->solver != CZ_SOLVER_GREEDY)
        return cz__error_set(
            err, CZ_EUNSUPPORTED,
            "--split-blocks and --coop need the greedy solver; the ILP micro-group "
            "model places whole matrices on single slots");
    if (s->coop && s->tp != CZ_TP_ROLLBACK)
        return cz__error_set(err, CZ_EUNSUPPORTED,
                             "--coop needs --tp rollback (cooperative tasks are placed by greedy "
                             "rollback); got --tp %s",
                             cz_tp_strategy_name(s->tp));
    if (s->coop && s->unit == CZ_UNIT_NUMEL)
        return cz__error_set(err, CZ_EUNSUPPORTED,
                             "--coop needs the time or flops cost unit: weighing a split against "
                             "its all-reduces needs a measure of communication, which element "
                             "counts lack");
    if (!(s->alpha >= 0.0 && s->alpha <= 1.0))
        return cz__error_set(err, CZ_EINVALID, "alpha must lie in [0, 1], got %g", s->alpha);
    if (s->alpha_numel_loads != 0 && s->alpha_numel_loads != 1)
        return cz__error_set(err, CZ_EINVALID, "alpha_numel_loads must be 0 or 1, got %d",
                             s->alpha_numel_loads);
    if (!(s->capacity >= 0.0) || isinf(s->capacity))
        return cz__error_set(err, CZ_EINVALID,
                             "capacity must be a finite number >= 0 (0 = automatic), got %g",
                             s->capacity);
    if (!(s->time_limit_s > 0.0))
        return cz__error_set(err, CZ_EINVALID, "time limit must be > 0 seconds, got %g",
                             s->time_limit_s);
    if (!(s->tpaware_time_limit_s > 0.0))
        return cz__error_set(err, CZ_EINVALID, "tpaware time limit must be > 0 seconds, got %g",
                             s->tpaware_time_limit_s);
    if (s->ns_steps < 1)
        return cz__error_set(err, CZ_EINVALID, "Newton-Schulz steps must be >= 1, got %d",
                             s->ns_steps);
    /* A table prices exactly its rows: a different ns_steps would cost iterations that the
     * executor refuses to run. */
    cz_ns_coeffs k;
    if ((rc = cz__ns_coeffs_parse(s->ns_coeffs, &k, err)) != CZ_OK ||
        (rc = cz__ns_coeffs_check_steps(&k, s->ns_steps, s->ns_coeffs, err)) != CZ_OK)
        return rc;
    if (s->max_precond_dim < 1)
        return cz__error_set(err, CZ_EINVALID, "max_precond_dim must be >= 1, got %d",
                             s->max_precond_dim);
    if (s->precondition_frequency < 1)
        return cz__error_set(err, CZ_EINVALID, "precondition_frequency must be >= 1, got %d",
                             s->precondition_frequency);
    return CZ_OK;
}

static int cluster_check(const cz_cluster *c, cz_error *err)
{
    if (c->dp < 1 || c->tp < 1 || c->pp < 1)
        return cz__error_set(err, CZ_EINVALID, "%s: dp, tp and pp must be >= 1, got %d, %d, %d",
                             or_unknown(c->source), c->dp, c->tp, c->pp);
    if (c->bucket_size < 0 || c->bucket_align < 0)
        return cz__error_set(
            err, CZ_EINVALID, "%s: bucket size and align must be >= 0, got %lld and %lld",
            or_unknown(c->source), (long long)c->bucket_size, (long long)c->bucket_align);
    /* Seconds are the time unit and the predicted step time: both need the device's rates. */
    if (!(c->device.matmul_tflops > 0.0) || !(c->device.mem_gbps > 0.0))
        return cz__error_set(err, CZ_EINVALID,
                             "%s: $.device.matmul_tflops and $.device.mem_gbps must be > 0, got %g "
                             "and %g",
                             or_unknown(c->source), c->device.matmul_tflops, c->device.mem_gbps);
    return CZ_OK;
}

/* Layer l's pipeline stage: layers split contiguously and as evenly as possible, the first
 * (nlayers % pp) stages taking one extra layer. */
static int stage_of_layer(int layer, int nlayers, int pp)
{
    int base = nlayers / pp, extra = nlayers % pp;
    int big = extra * (base + 1);
    if (layer < big)
        return layer / (base + 1);
    return extra + (layer - big) / base;
}

/* Copies model parameter d into the plan. tp is the size of the group that splits it (TP, or
 * ETP for an expert of a plan with expert groups) and c the cluster its cost is computed on (the
 * cluster, or a copy whose TP size is that ETP: a replicated parameter's elementwise work is
 * repeated on every rank of its own group). */
static int param_copy(cz_plan_param *q, const cz_param_def *d, int id, const cz_model *m,
                      const cz_cluster *c, int tp, const cz_settings *s, cz_error *err)
{
    const char *group = tp == c->tp ? "tp" : "etp";
    q->id = id;
    /* The model's parameter, with the plan's own copies of the name and block sizes (these
     * below), a 1-D shape's second side set to 1, and the kind the optimizer gives it. */
    q->def = *d;
    q->def.block_sizes = NULL;
    q->def.name = cz__strdup(d->name ? d->name : "");
    if (!q->def.name)
        return cz__error_set(err, CZ_ENOMEM, "out of memory copying parameter names");
    q->def.shape[1] = d->ndim == 1 ? 1 : d->shape[1];
    /* Under AdamW every parameter, 2-D ones too, is elementwise work. */
    q->def.kind = s->optimizer == CZ_OPTIM_ADAMW ? CZ_KIND_ELEMENTWISE : d->kind;
    q->def.nblocks = d->nblocks > 0 ? d->nblocks : 0;
    q->dp_owner = -1;
    q->bucket = -1;
    const char *mfile = or_unknown(m->source), *cfile = or_unknown(c->source);
    if (q->def.shape[0] < 1 || q->def.shape[1] < 1)
        return cz__error_set(err, CZ_EINVALID,
                             "%s: parameter '%s' ($.params expanded index %d) has an empty shape "
                             "[%lld, %lld]",
                             mfile, q->def.name, id, (long long)q->def.shape[0],
                             (long long)q->def.shape[1]);
    if (q->def.tp_dim < -1 || q->def.tp_dim > 1 || (q->def.tp_dim == 1 && q->def.ndim == 1))
        return cz__error_set(err, CZ_EINVALID,
                             "%s: parameter '%s' has tp_dim %d; expected null, 0 or (for 2-D) 1",
                             mfile, q->def.name, q->def.tp_dim);
    q->local_shape[0] = q->def.shape[0];
    q->local_shape[1] = q->def.shape[1];
    if (q->def.tp_dim >= 0) {
        int64_t size = q->def.shape[q->def.tp_dim];
        if (size % tp != 0)
            return cz__error_set(err, CZ_EINVALID,
                                 "%s: parameter '%s' splits dimension %d (size %lld) across %s = "
                                 "%d of %s, which does not divide it (Megatron-Core's column- and "
                                 "row-parallel layers and vocab-parallel embedding need an exact "
                                 "split); change tp_dim or %s",
                                 mfile, q->def.name, q->def.tp_dim, (long long)size, group, tp,
                                 cfile, group);
        q->local_shape[q->def.tp_dim] = size / tp;
    }
    if (q->def.nblocks > 0) {
        /* Models built in memory skip the loader's limit: hold them to it here. */
        if (q->def.nblocks > CZ_MAX_BLOCKS)
            return cz__error_set(err, CZ_EUNSUPPORTED, "%s: " CZ_BLOCKS_LIMIT_FMT, mfile,
                                 q->def.name, q->def.nblocks, CZ_MAX_BLOCKS);
        if (!d->block_sizes || (d->block_dim != 0 && d->block_dim != 1))
            return cz__error_set(err, CZ_EINVALID,
                                 "%s: parameter '%s' has %d blocks but no valid block dim", mfile,
                                 q->def.name, q->def.nblocks);
        q->def.block_sizes = malloc((size_t)q->def.nblocks * sizeof *q->def.block_sizes);
        if (!q->def.block_sizes)
            return cz__error_set(err, CZ_ENOMEM, "out of memory copying block sizes");
        memcpy(q->def.block_sizes, d->block_sizes,
               (size_t)q->def.nblocks * sizeof *q->def.block_sizes);
        int64_t sum = 0;
        for (int b = 0; b < q->def.nblocks; b++) {
            if (q->def.block_sizes[b] < 1)
                return cz__error_set(err, CZ_EINVALID,
                                     "%s: parameter '%s' block %d has size %lld; expected >= 1",
                                     mfile, q->def.name, b, (long long)q->def.block_sizes[b]);
            sum += q->def.block_sizes[b];
            if (q->def.block_dim == q->def.tp_dim && q->def.block_sizes[b] % tp != 0)
                return cz__error_set(err, CZ_EINVALID,
                                     "%s: parameter '%s' block %d (size %lld along dimension %d, "
                                     "the TP split dimension) is not divisible by %s = %d of %s; "
                                     "every TP rank must hold an equal part of each block",
                                     mfile, q->def.name, b, (long long)q->def.block_sizes[b],
                                     q->def.block_dim, group, tp, cfile);
        }
        if (sum != q->def.shape[q->def.block_dim])
            return cz__error_set(err, CZ_EINVALID,
                                 "%s: parameter '%s' blocks sum to %lld but dimension %d has size "
                                 "%lld",
                                 mfile, q->def.name, (long long)sum, q->def.block_dim,
                                 (long long)q->def.shape[q->def.block_dim]);
    } else {
        q->def.block_dim = -1;
    }
    char why[512];
    if (cz__heads_problem(&q->def, tp, why, sizeof why))
        return cz__error_set(err, CZ_EINVALID, "%s: parameter %s (%s = %d of %s)", mfile, why,
                             group, tp, cfile);
    q->numel = q->local_shape[0] * q->local_shape[1];
    q->cost = cz__cost_param(d, s, c, m->dtype);
    return CZ_OK;
}

static int stages_assign(cz_plan *plan, const cz_model *m, const cz_cluster *c, cz_error *err)
{
    size_t n = plan->nparams;
    if (c->pp == 1) {
        for (size_t i = 0; i < n; i++)
            plan->params[i].stage = 0;
        return CZ_OK;
    }
    if (c->pp > m->nlayers)
        return cz__error_set(err, CZ_EINVALID,
                             "%s has pp = %d pipeline stages but model %s has only %d layers "
                             "(repeat iterations); use pp <= %d",
                             or_unknown(c->source), c->pp, or_unknown(m->source), m->nlayers,
                             m->nlayers);
    /* Parameters outside any layer follow the layer before them (the first stage when none). */
    int cur = 0;
    for (size_t i = 0; i < n; i++) {
        cz_plan_param *p = &plan->params[i];
        if (p->def.layer >= m->nlayers)
            return cz__error_set(err, CZ_EINVALID,
                                 "%s: parameter '%s' comes from layer %d but the model has %d",
                                 or_unknown(m->source), p->def.name, p->def.layer, m->nlayers);
        if (p->def.layer >= 0)
            cur = stage_of_layer(p->def.layer, m->nlayers, c->pp);
        p->stage = cur;
    }
    /* Parameters after the last layer (final norm, output layer) belong to the last stage. */
    for (size_t i = n; i-- > 0;) {
        if (plan->params[i].def.layer >= 0)
            break;
        plan->params[i].stage = c->pp - 1;
    }
    return CZ_OK;
}

/* Megatron-Core's expert topology (megatron_experts.c): the routed experts get buffers of their
 * own, reduced over the expert-data-parallel group, when EP > 1 or ETP != TP; then expert e of a
 * layer's E lives on EP rank e / (E / EP). With EP 1 and ETP = TP they are dense parameters, and
 * the plan is what it was before expert parallelism existed. Marks plan->params[i].expert and
 * ep_rank and sets plan->ep, etp and edp. */
static int experts_assign(cz_plan *plan, const cz_model *m, const cz_cluster *c, cz_error *err)
{
    int ep = cz_cluster_ep(c), etp = cz_cluster_etp(c), rc = CZ_OK;
    if (ep == 1 && etp == c->tp)
        return CZ_OK;
    int *experts = malloc((m->nparams + 1) * sizeof *experts);
    int *index = malloc((m->nparams + 1) * sizeof *index);
    if (!experts || !index) {
        rc = cz__error_set(err, CZ_ENOMEM, "out of memory counting experts");
        goto done;
    }
    if ((rc = cz__model_experts(m, experts, index, err)) != CZ_OK)
        goto done;
    int any = 0;
    for (size_t i = 0; i < m->nparams; i++) {
        if (!experts[i])
            continue;
        if (experts[i] % ep != 0) {
            rc = cz__error_set(err, CZ_EINVALID,
                               "%s: '%s' is one of %d experts, which EP %d does not divide",
                               or_unknown(m->source), m->params[i].name, experts[i], ep);
            goto done;
        }
        plan->params[i].expert = 1;
        plan->params[i].ep_rank = index[i] / (experts[i] / ep);
        any = 1;
    }
    if (any) {
        plan->ep = ep;
        plan->etp = etp;
        plan->edp = cz_grid_edp(&(cz_grid){c->tp, c->dp, c->pp, ep, etp});
        CZ_ASSERT_GOTO(plan->edp > 0, err, rc, done);
    }
done:
    free(experts);
    free(index);
    return rc;
}

int cz__plan_init(cz_plan **out, const cz_model *m, const cz_cluster *c, const cz_settings *s,
                  cz_error *err)
{
    int rc = CZ_OK;
    cz_plan *plan = NULL;
    *out = NULL;
    if (!m || !c)
        return cz__error_set(err, CZ_EINVALID, "a model and a cluster are needed to plan");
    if ((rc = settings_check(s, err)) != CZ_OK || (rc = cluster_check(c, err)) != CZ_OK)
        return rc;
    if (s->coop > 1 && c->tp % s->coop != 0)
        return cz__error_set(err, CZ_EINVALID,
                             "--coop %d: the width must divide the TP size, and %s has tp %d",
                             s->coop, or_unknown(c->source), c->tp);
    plan = calloc(1, sizeof *plan);
    if (!plan)
        return cz__error_set(err, CZ_ENOMEM, "out of memory allocating a plan");
    plan->generator = cz__strdup("canzona");
    plan->generator_version = cz__strdup(CZ_VERSION);
    plan->model_name = cz__strdup(m->name ? m->name : "");
    plan->model_sha256 = cz__strdup(m->sha256);
    plan->cluster_name = cz__strdup(c->name ? c->name : "");
    plan->cluster_sha256 = cz__strdup(c->sha256);
    if (!plan->generator || !plan->generator_version || !plan->model_name || !plan->model_sha256 ||
        !plan->cluster_name || !plan->cluster_sha256) {
        rc = cz__error_set(err, CZ_ENOMEM, "out of memory filling the plan header");
        goto done;
    }
    if (c->calibration) {
        const cz_calibration *cal = c->calibration;
        plan->calibration_device = cz__strdup(cal->device_name ? cal->device_name : "");
        plan->calibration_measured_at = cz__strdup(cal->measured_at ? cal->measured_at : "");
        plan->calibration_sha256 = cz__strdup(cal->sha256);
        if (!plan->calibration_device || !plan->calibration_measured_at ||
            !plan->calibration_sha256) {
            rc = cz__error_set(err, CZ_ENOMEM, "out of memory filling the plan header");
            goto done;
        }
    }
    plan->dtype = m->dtype;
    plan->settings = *s;
    plan->dp = c->dp;
    plan->tp = c->tp;
    plan->pp = c->pp;
    plan->gpus_per_node = c->gpus_per_node;
    if (c->bucket_size > 0) {
        plan->bucket_size = c->bucket_size;
    } else {
        int64_t by_dp = (int64_t)1000000 * c->dp;
        plan->bucket_size = by_dp > 40000000 ? by_dp : 40000000;
    }
    plan->bucket_align = c->bucket_align > 0 ? c->bucket_align : 64;
    if (m->nparams == 0) {
        rc = cz__error_set(err, CZ_EINVALID, "%s: the model has no parameters",
                           or_unknown(m->source));
        goto done;
    }
    plan->params = calloc(m->nparams, sizeof *plan->params);
    if (!plan->params) {
        rc = cz__error_set(err, CZ_ENOMEM, "out of memory allocating %zu parameters", m->nparams);
        goto done;
    }
    plan->nparams = m->nparams;
    if ((rc = experts_assign(plan, m, c, err)) != CZ_OK)
        goto done;
    /* tpaware's moves and the exact DP model walk the dense buffer's DP ranges; the expert
     * buffers' expert-DP ranges are not in them yet. */
    if (cz_plan_has_experts(plan) && (s->dp == CZ_DP_TPAWARE || s->solver == CZ_SOLVER_ILP)) {
        rc = cz__error_set(err, CZ_EUNSUPPORTED,
                           "%s with expert groups (EP %d, ETP %d: the experts in buffers of their "
                           "own) is not supported; use --dp alpha (or anchored, even, layerwise) "
                           "with the greedy solver",
                           s->dp == CZ_DP_TPAWARE ? "--dp tpaware" : "--solver ilp", plan->ep,
                           plan->etp);
        goto done;
    }
    cz_cluster ec = *c; /* the experts' costs: their replicated work is repeated over ETP */
    ec.tp = plan->etp > 0 ? plan->etp : c->tp;
    for (size_t i = 0; i < m->nparams; i++) {
        cz_plan_param *q = &plan->params[i];
        int expert = q->expert, ep_rank = q->ep_rank;
        if ((rc = param_copy(q, &m->params[i], (int)i, m, expert ? &ec : c, expert ? ec.tp : c->tp,
                             s, err)) != CZ_OK)
            goto done;
        q->expert = expert;
        q->ep_rank = ep_rank;
    }
    if ((rc = stages_assign(plan, m, c, err)) != CZ_OK)
        goto done;
    rc = cz__task_table_build(plan, c, err);
done:
    if (rc != CZ_OK)
        cz_plan_free(plan);
    else
        *out = plan;
    return rc;
}

/* The variants of alpha cz_plan_build tries under block and cooperative tasks. */
typedef enum {
    ALPHA_PLAIN,     /* alpha on each parameter's cost (or elements) */
    ALPHA_EFFECTIVE, /* on the slot time each parameter needs at the split lower bound
                        (cz__task_weigh), cuts by the greedy fill */
    ALPHA_WATER,     /* the same loads, cuts by water-filling where that is no worse */
    ALPHA_SLOT_FILL  /* the slot-fill partition (dp_fill.c) */
} alpha_variant;

/* Every parameter's owner and every bucket's ranges, to undo a pass that did not pay. */
typedef struct cuts_saved {
    int *owner;
    int64_t *ranges;
} cuts_saved;

static size_t ranges_count(const cz_plan *plan)
{
    size_t n = 0;
    for (size_t b = 0; b < plan->nbuckets; b++)
        n += 2 * (size_t)cz_plan_bucket_nranks(plan, &plan->buckets[b]);
    return n;
}

static void cuts_copy(cz_plan *plan, cuts_saved *s, bool restore)
{
    size_t k = 0;
    for (size_t i = 0; i < plan->nparams; i++) {
        if (restore)
            plan->params[i].dp_owner = s->owner[i];
        else
            s->owner[i] = plan->params[i].dp_owner;
    }
    for (size_t b = 0; b < plan->nbuckets; b++) {
        cz_plan_bucket *bk = &plan->buckets[b];
        for (int r = 0; r < 2 * cz_plan_bucket_nranks(plan, bk); r++, k++) {
            if (restore)
                bk->ranges[r] = s->ranges[k];
            else
                s->ranges[k] = bk->ranges[r];
        }
    }
}

/* One later pass of the joint strategy: deals one side again (side 1: the dense buffers, 2: the
 * expert buffers) with every rank's fill starting from the other side's makespan on its
 * busiest GPU, then schedules; kept when the busiest GPU gets shorter, else undone. */
static int joint_pass(cz_plan *plan, const cz_cluster *cluster, int side, cuts_saved *saved,
                      cz_error *err)
{
    int rc;
    size_t ngpus = (size_t)plan->pp * (size_t)plan->dp * (size_t)plan->tp;
    double before = plan->metrics.tp_makespan;
    for (size_t g = 0; g < ngpus; g++)
        plan->tasks.dp_base[g] =
            side == 2 ? plan->metrics.rank_makespan[g / (size_t)plan->tp]
                      : plan->metrics.expert_rank_makespan[cz_plan_gpu_expert_rank(plan, g, NULL)];
    plan->tasks.dp_side = side;
    cuts_copy(plan, saved, false);
    if ((rc = cz__dp_partition(plan, err)) != CZ_OK ||
        (rc = cz__tp_schedule_build(plan, err)) != CZ_OK ||
        (rc = cz__plan_metrics_compute(plan, cluster, err)) != CZ_OK)
        return rc;
    if (plan->metrics.tp_makespan < before * (1 - 1e-12))
        return CZ_OK;
    cuts_copy(plan, saved, true);
    if ((rc = cz__tp_schedule_build(plan, err)) != CZ_OK)
        return rc;
    return cz__plan_metrics_compute(plan, cluster, err);
}

/* Runs the passes of the given sides one after another. */
static int joint_sequence(cz_plan *plan, const cz_cluster *cluster, const int *sides, size_t n,
                          cuts_saved *saved, cz_error *err)
{
    for (size_t k = 0; k < n; k++) {
        int rc = joint_pass(plan, cluster, sides[k], saved, err);
        if (rc != CZ_OK)
            return rc;
    }
    return CZ_OK;
}

/* Puts back the cuts in saved and schedules them again. */
static int cuts_restore(cz_plan *plan, const cz_cluster *cluster, cuts_saved *saved, cz_error *err)
{
    int rc;
    cuts_copy(plan, saved, true);
    if ((rc = cz__tp_schedule_build(plan, err)) != CZ_OK)
        return rc;
    return cz__plan_metrics_compute(plan, cluster, err);
}

/* The joint strategy with expert groups. A GPU runs its DP rank's dense micro-groups and its
 * expert rank's (metrics.c), so the two sides' cuts must be chosen for each other: an expert
 * rank whose GPUs carry a long dense makespan should take fewer experts (DeepSeek-V3 on 512
 * GPUs), and where every expert rank is full (Mixtral-8x7B on 256 GPUs: one fc1 and one fc2
 * for each) the dense matrices must be spread over the GPUs rather than packed onto the first
 * ranks. The first pass dealt both sides alone. From there two sequences of passes run, each
 * pass kept only where it shortens the busiest GPU: the experts over the dense makespans, then
 * the dense buffers over the expert makespans, then the experts again; and the dense buffers
 * first, then the experts, the dense buffers and the experts. Which order wins depends on the
 * side that binds (a pass that empties the expert ranks under the densest GPUs can leave the
 * dense side no room to spread), so the shorter result is kept (ties: the first sequence). */
static int joint_passes(cz_plan *plan, const cz_cluster *cluster, cz_error *err)
{
    static const int first[] = {2, 1, 2}, second[] = {1, 2, 1, 2};
    int rc = CZ_OK;
    size_t ngpus = (size_t)plan->pp * (size_t)plan->dp * (size_t)plan->tp;
    size_t nranges = ranges_count(plan) + 1;
    cuts_saved saved = {malloc((plan->nparams + 1) * sizeof *saved.owner),
                        malloc(nranges * sizeof *saved.ranges)};
    cuts_saved start = {malloc((plan->nparams + 1) * sizeof *start.owner),
                        malloc(nranges * sizeof *start.ranges)};
    cuts_saved best = {malloc((plan->nparams + 1) * sizeof *best.owner),
                       malloc(nranges * sizeof *best.ranges)};
    plan->tasks.dp_base = malloc((ngpus + 1) * sizeof *plan->tasks.dp_base);
    if (!saved.owner || !saved.ranges || !start.owner || !start.ranges || !best.owner ||
        !best.ranges || !plan->tasks.dp_base) {
        rc = cz__error_set(err, CZ_ENOMEM, "out of memory in the joint DP partition");
        goto done;
    }
    cuts_copy(plan, &start, false);
    if ((rc = joint_sequence(plan, cluster, first, sizeof first / sizeof *first, &saved, err)) !=
        CZ_OK)
        goto done;
    double shortest = plan->metrics.tp_makespan;
    cuts_copy(plan, &best, false);
    if ((rc = cuts_restore(plan, cluster, &start, err)) != CZ_OK ||
        (rc = joint_sequence(plan, cluster, second, sizeof second / sizeof *second, &saved, err)) !=
            CZ_OK)
        goto done;
    if (!(plan->metrics.tp_makespan < shortest * (1 - 1e-12)))
        rc = cuts_restore(plan, cluster, &best, err);
done:
    free(plan->tasks.dp_base);
    plan->tasks.dp_base = NULL;
    plan->tasks.dp_side = 0;
    free(saved.owner);
    free(saved.ranges);
    free(start.owner);
    free(start.ranges);
    free(best.owner);
    free(best.ranges);
    return rc;
}

/* One greedy plan: buckets, DP partition (alpha as the variant says), TP schedule, metrics. */
static int plan_solve(cz_plan **out, const cz_model *model, const cz_cluster *cluster,
                      const cz_settings *settings, alpha_variant variant, cz_error *err)
{
    int rc;
    cz_plan *plan = NULL;
    *out = NULL;
    if ((rc = cz__plan_init(&plan, model, cluster, settings, err)) != CZ_OK)
        goto done;
    if ((variant == ALPHA_EFFECTIVE || variant == ALPHA_WATER) &&
        (rc = cz__task_weigh(plan, 1.0, err)) != CZ_OK)
        goto done;
    plan->tasks.dp_water = variant == ALPHA_WATER;
    plan->tasks.dp_fill = variant == ALPHA_SLOT_FILL;
    if ((rc = cz__buckets_layout(plan, err)) != CZ_OK)
        goto done;
    if ((rc = cz__dp_partition(plan, err)) != CZ_OK)
        goto done;
    if ((rc = cz__tp_schedule_build(plan, err)) != CZ_OK)
        goto done;
    if ((rc = cz__plan_metrics_compute(plan, cluster, err)) != CZ_OK)
        goto done;
    if (settings->dp == CZ_DP_JOINT && cz_plan_has_experts(plan))
        rc = joint_passes(plan, cluster, err);
done:
    if (rc != CZ_OK)
        cz_plan_free(plan);
    else
        *out = plan;
    return rc;
}

/* The fully sharded plan: the parameter table, then owners and micro-groups over each stage's
 * shard group (fsdp_plan.c), then its metrics. */
static int fsdp_solve(cz_plan **out, const cz_model *model, const cz_cluster *cluster,
                      const cz_settings *settings, cz_error *err)
{
    int rc;
    cz_plan *plan = NULL;
    *out = NULL;
    if (cluster->dp % settings->replicate != 0) {
        rc = cz__error_set(err, CZ_EINVALID,
                           "HSDP: the cluster's DP size %d is not a multiple of the replicate "
                           "size %d (DP = replicas x shard ranks)",
                           cluster->dp, settings->replicate);
        goto done;
    }
    if ((rc = cz__plan_init(&plan, model, cluster, settings, err)) != CZ_OK)
        goto done;
    if (cz_plan_has_experts(plan)) {
        rc = cz__error_set(err, CZ_EUNSUPPORTED,
                           "--layout fsdp with expert groups (EP %d, ETP %d) is not supported; "
                           "plan the model with EP 1 and ETP = TP, or use --layout unified",
                           plan->ep, plan->etp);
        goto done;
    }
    if ((rc = cz__fsdp_schedule_build(plan, err)) != CZ_OK ||
        (rc = cz__plan_metrics_compute(plan, cluster, err)) != CZ_OK)
        goto done;
done:
    if (rc != CZ_OK)
        cz_plan_free(plan);
    else
        *out = plan;
    return rc;
}

/* The fully sharded plan, with HSDP's --hsdp-compute auto resolved: both modes planned and
 * simulated on the cluster (sim_fsdp.c), the one with the shorter optimizer step (update +
 * parameter all-gather; the job's gradient traffic is the same in both) kept, redundant on a
 * tie; the plan records the mode kept. */
static int fsdp_solve_hsdp(cz_plan **out, const cz_model *model, const cz_cluster *cluster,
                           const cz_settings *settings, cz_error *err)
{
    if (settings->replicate <= 1 || settings->hsdp != CZ_HSDP_AUTO) {
        cz_settings s = *settings;
        if (s.replicate <= 1)
            s.hsdp = CZ_HSDP_REDUNDANT; /* no replicas: nothing to choose */
        return fsdp_solve(out, model, cluster, &s, err);
    }
    cz_plan *mode[2] = {NULL, NULL};
    cz_fsdp_sim sim[2];
    int rc = CZ_OK;
    *out = NULL;
    for (int k = 0; k < 2 && rc == CZ_OK; k++) {
        cz_settings s = *settings;
        s.hsdp = k == 0 ? CZ_HSDP_REDUNDANT : CZ_HSDP_PARTITIONED;
        if ((rc = fsdp_solve(&mode[k], model, cluster, &s, err)) == CZ_OK)
            rc = cz__fsdp_simulate(mode[k], cluster, &sim[k], err);
    }
    if (rc == CZ_OK) {
        int keep = sim[1].opt_s < sim[0].opt_s;
        *out = mode[keep];
        mode[keep] = NULL;
    }
    cz_plan_free(mode[0]);
    cz_plan_free(mode[1]);
    return rc;
}

/* True when plan b is strictly better than a: no worse DP balance, and better balance or a
 * shorter makespan. The relative slack keeps rounding noise from deciding. */
static bool plan_better(const cz_plan *b, const cz_plan *a)
{
    const double eps = 1e-12;
    double bi = b->metrics.dp_imbalance, ai = a->metrics.dp_imbalance;
    if (bi > ai * (1 + eps))
        return false;
    return bi < ai * (1 - eps) || b->metrics.tp_makespan < a->metrics.tp_makespan * (1 - eps);
}

/* The plan's own canonical copy of its Newton-Schulz coefficients (the caller's string is only
 * borrowed); none for jordan, the default, so that such plans are what earlier versions wrote. */
static int keep_ns_coeffs(cz_plan *plan, cz_error *err)
{
    cz_ns_coeffs k;
    char text[CZ_NS_TEXT_MAX];
    int rc = cz__ns_coeffs_parse(plan->settings.ns_coeffs, &k, err);
    plan->settings.ns_coeffs = NULL;
    if (rc != CZ_OK || (k.name && strcmp(k.name, "jordan") == 0))
        return rc;
    cz__ns_coeffs_format(&k, text);
    if (!(plan->ns_coeffs = cz__strdup(text)))
        return cz__error_set(err, CZ_ENOMEM, "out of memory for the plan's settings");
    plan->settings.ns_coeffs = plan->ns_coeffs;
    return CZ_OK;
}

/* Keeps *cand in place of *plan when its busiest GPU is shorter (with the settings asked for),
 * frees the other and clears *cand. */
static void keep_shorter(cz_plan **plan, cz_plan **cand, const cz_settings *settings)
{
    if ((*cand)->metrics.tp_makespan < (*plan)->metrics.tp_makespan * (1 - 1e-12)) {
        cz_plan_free(*plan);
        *plan = *cand;
        (*plan)->settings = *settings;
    } else {
        cz_plan_free(*cand);
    }
    *cand = NULL;
}

/* What every plan gets last: its planning time (since t0), no callback, its own coefficients. */
static int plan_finish(cz_plan *plan, double t0, cz_error *err)
{
    plan->plan_seconds = cz__clock_seconds() - t0;
    /* The callback belongs to this call, not to the plan: a plan outlives its caller's payload. */
    plan->settings.progress = NULL;
    plan->settings.progress_payload = NULL;
    return keep_ns_coeffs(plan, err);
}

int cz_plan_build(cz_plan **out, const cz_model *model, const cz_cluster *cluster,
                  const cz_settings *settings, cz_error *err)
{
    const cz_settings *user = settings;
    int rc;
    cz_plan *plan = NULL, *numel = NULL;
    if (!out)
        return cz__error_set(err, CZ_EINVALID, "cz_plan_build: no output pointer given");
    *out = NULL;
    double t0 = cz__clock_seconds();
    if ((rc = settings_check(settings, err)) != CZ_OK)
        return rc;
    if (model && cluster &&
        ((rc = cz__model_check_megatron(model, cluster->tp, cluster->source, err)) != CZ_OK ||
         (rc = cz__model_check_experts(model, cluster, err)) != CZ_OK))
        return rc;
    if (settings->layout == CZ_LAYOUT_FSDP) {
        if ((rc = fsdp_solve_hsdp(&plan, model, cluster, settings, err)) == CZ_OK)
            rc = plan_finish(plan, t0, err);
        goto done;
    }
    /* The search runs on the plan alpha made (its settings say alpha): refused up front. */
    if (settings->dp == CZ_DP_TPAWARE && model && cluster) {
        cz_plan *probe = NULL;
        if ((rc = cz__plan_init(&probe, model, cluster, settings, err)) != CZ_OK)
            return rc;
        cz_plan_free(probe);
    }
    /* tpaware refines alpha's result: it starts from the alpha plan chosen below (cost or
     * element loads), so that it is never worse than alpha. */
    cz_settings eff = *settings;
    if (eff.dp == CZ_DP_TPAWARE)
        eff.dp = CZ_DP_ALPHA;
    settings = &eff;
    if ((rc = plan_solve(&plan, model, cluster, settings, ALPHA_PLAIN, err)) != CZ_OK)
        goto done;
    /* The joint cut is a greedy fill at the least target it reaches; where alpha's plan (as
     * --dp alpha builds it: cost loads, element-load cuts where better) happens to give a
     * shorter busiest GPU, the plan keeps alpha's cuts and schedule, so the default is never
     * worse than the paper's partition. */
    if (settings->dp == CZ_DP_JOINT) {
        cz_settings alt = *settings;
        alt.dp = CZ_DP_ALPHA;
        alt.solver = CZ_SOLVER_GREEDY; /* the exact solvers run once, below */
        alt.progress = NULL;
        if ((rc = cz_plan_build(&numel, model, cluster, &alt, err)) != CZ_OK)
            goto done;
        keep_shorter(&plan, &numel, settings);
    }
    /* Alpha's cut placement is a greedy heuristic: with a few very large matrices, the cuts it
     * derives from element counts can happen to balance the cost better than the cuts derived
     * from the cost itself. Counting in the cost unit keeps whichever is better, the same way
     * the reference keeps anchored when alpha loses, so it is never worse than element loads. */
    if (settings->dp == CZ_DP_ALPHA && !settings->alpha_numel_loads) {
        cz_settings alt = *settings;
        alt.alpha_numel_loads = 1;
        if ((rc = plan_solve(&numel, model, cluster, &alt, ALPHA_PLAIN, err)) != CZ_OK)
            goto done;
        if (plan_better(numel, plan)) {
            cz_plan_free(plan);
            plan = numel;
            numel = NULL;
            plan->settings = *settings;
            plan->dp_numel_cuts = 1;
        }
        cz_plan_free(numel);
        numel = NULL;
    }
    /* With block or cooperative tasks the cost a DP rank carries is not what its TP makespan
     * follows: a rank dealt five tasks of 8 ms for eight slots ends at 8 ms, one dealt four
     * splits them all in two; a rank dealt nine blocks for eight slots pays one twice. The
     * effective-load variants balance the slot time every parameter needs at the split lower
     * bound (splits and their all-reduces included), with cuts that minimize the largest rank
     * load bucket by bucket, placed by a greedy fill or by water-filling (dp_partition.c); the
     * slot-fill variant deals parameters onto a model of each rank's slots (dp_fill.c), which
     * sees what summed loads cannot: the gaps a split strands. Each is kept when it gives a
     * shorter makespan. tpaware starts from whichever is kept. */
    if (settings->dp == CZ_DP_ALPHA && !settings->alpha_numel_loads &&
        (settings->split_blocks || (settings->coop != 0 && plan->tasks.nwidths > 1))) {
        static const alpha_variant variants[] = {ALPHA_EFFECTIVE, ALPHA_WATER, ALPHA_SLOT_FILL};
        for (size_t v = 0; v < sizeof variants / sizeof *variants; v++) {
            if ((rc = plan_solve(&numel, model, cluster, settings, variants[v], err)) != CZ_OK)
                goto done;
            keep_shorter(&plan, &numel, settings);
        }
    }
    settings = user;
    plan->settings = *settings;
    if (settings->dp == CZ_DP_TPAWARE) {
        if ((rc = cz__dp_partition_tpaware(plan, err)) != CZ_OK ||
            (rc = cz__plan_metrics_compute(plan, cluster, err)) != CZ_OK)
            goto done;
    }
    /* The exact solvers start from the best greedy plan, once (not once per alpha variant). */
    if (settings->solver == CZ_SOLVER_ILP) {
        if ((rc = cz__dp_partition_ilp(plan, err)) != CZ_OK ||
            (rc = cz__tp_schedule_build(plan, err)) != CZ_OK ||
            (rc = cz__microgroups_ilp(plan, err)) != CZ_OK ||
            (rc = cz__plan_metrics_compute(plan, cluster, err)) != CZ_OK)
            goto done;
    }
    rc = plan_finish(plan, t0, err);
done:
    cz_plan_free(numel);
    if (rc != CZ_OK)
        cz_plan_free(plan);
    else
        *out = plan;
    return rc;
}
