/* Executor life cycle: create (checks, communicators, failure agreement, state), bind, free.
 * The backends and optimizers are opened through their seams' dispatch (comm.c, compute.c,
 * optimizer.c): nothing here knows one by name. */
#include "alloc.h"
#include "binding.h"
#include "bucket_step.h"
#include "canzona_exec.h"
#include "comm.h"
#include "config.h"
#include "compute.h"
#include "cz_format.h"
#include "executor_impl.h"
#include "fsdp_shard.h"
#include "memory_model.h"
#include "optimizer.h"
#include "qk_clip.h"
#include "shard.h"
#include "wire.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

size_t cz_executor_buffer_numel(const cz_executor *ex)
{
    return ex ? ex->buffer_numel : 0;
}

int cz_executor_dp_rank(const cz_executor *ex)
{
    return ex ? ex->grid.dp_rank : -1;
}

int cz_executor_tp_rank(const cz_executor *ex)
{
    return ex ? ex->grid.tp_rank : -1;
}

int cz_executor_pp_rank(const cz_executor *ex)
{
    return ex ? ex->grid.stage : -1;
}

double cz_executor_grad_norm(const cz_executor *ex)
{
    return ex ? ex->clip.grad_norm : NAN;
}

const char *cz_exec_mem_kind_name(int kind)
{
    static const char *const NAMES[CZ_EXEC_MEM_NKINDS] = {
        [CZ_EXEC_MEM_PARAMS] = "params",
        [CZ_EXEC_MEM_GRADS] = "grads",
        [CZ_EXEC_MEM_STATE] = "state",
        [CZ_EXEC_MEM_DP] = "dp",
        [CZ_EXEC_MEM_EXCHANGE] = "exchange",
        [CZ_EXEC_MEM_FULL] = "full",
        [CZ_EXEC_MEM_NS] = "ns",
        [CZ_EXEC_MEM_SOLVER] = "solver",
        [CZ_EXEC_MEM_INDEX] = "index",
        [CZ_EXEC_MEM_OTHER] = "other",
    };
    return kind >= 0 && kind < CZ_EXEC_MEM_NKINDS ? NAMES[kind] : "?";
}

_Static_assert(CZ_EXEC_MEM_NKINDS <= CZ_EXEC_MEM_MAX_KINDS,
               "cz_exec_mem_usage has room for CZ_EXEC_MEM_MAX_KINDS kinds");

void cz__exec_mem_usage_of(const int64_t *bytes, cz_exec_mem_usage *out)
{
    memset(out, 0, sizeof *out);
    out->nkinds = CZ_EXEC_MEM_NKINDS;
    for (int k = 0; k < CZ_EXEC_MEM_NKINDS; k++) {
        out->bytes[k] = bytes[k];
        bool model = k == CZ_EXEC_MEM_PARAMS || k == CZ_EXEC_MEM_GRADS || k == CZ_EXEC_MEM_STATE;
        *(model ? &out->model_states : &out->beyond) += bytes[k];
    }
}

void cz_executor_memory_usage(const cz_executor *ex, cz_exec_mem_usage *out)
{
    static const int64_t NONE[CZ_EXEC_MEM_NKINDS];
    if (out)
        cz__exec_mem_usage_of(ex ? ex->compute.mem : NONE, out);
}

/* Here rather than in qk_clip.c: the step calls QK-clip, and the bucket-wise step calls the
 * step, so QK-clip asks the bucket-wise step nothing itself. */
int cz_executor_set_qk_clip(cz_executor *ex, const cz_qk_clip_spec *spec, cz_error *err)
{
    if (!ex)
        return cz__error_set(err, CZ_EINVALID, "set_qk_clip: executor is NULL");
    if (spec && cz_plan_is_fsdp(ex->plan))
        return cz__error_set(err, CZ_EUNSUPPORTED,
                             "set_qk_clip: QK-clip is not implemented for a fully sharded (fsdp) "
                             "plan (its heads' rows are cut by FSDP2's shards)");
    if (spec && cz__bucket_step_early(ex))
        return cz__error_set(err, CZ_EUNSUPPORTED,
                             "set_qk_clip: early updates are on: their parameter all-gathers "
                             "leave before the step has agreed on the maxima; turn them off "
                             "(cz_executor_set_early_updates) to clip");
    return cz__qk_clip_set(ex, spec, err);
}

void cz_executor_timings(const cz_executor *ex, cz_exec_timings *out)
{
    if (!ex || !out)
        return;
    *out = ex->last;
}

static float *falloc(cz_executor *ex, cz_exec_mem_kind kind, int64_t n)
{
    return cz__compute_alloc(&ex->compute, kind, (size_t)(n > 0 ? n : 1) * sizeof(float));
}

/* The executor's own tables (per parameter) and events, and the reduce-scatter's scratch (the
 * largest range of a bucket that goes on the wire; none when none does, at DP 1). */
static int alloc_tables(cz_executor *ex, cz_error *err)
{
    const cz_plan *plan = ex->plan;
    cz_compute *c = &ex->compute;
    size_t n = plan->nparams ? plan->nparams : 1;
    int64_t maxrange = 1;
    bool wire = false;
    ex->own.ids = cz__exec_calloc(n, sizeof *ex->own.ids);
    ex->own.piece_lo = cz__exec_calloc(n, sizeof *ex->own.piece_lo);
    ex->own.piece_len = cz__exec_calloc(n, sizeof *ex->own.piece_len);
    ex->held.param_off = cz__exec_calloc(n, sizeof *ex->held.param_off);
    ex->held.param_numel = cz__exec_calloc(n, sizeof *ex->held.param_numel);
    ex->own.stats = cz__compute_alloc(c, CZ_EXEC_MEM_OTHER, n * sizeof *ex->own.stats);
    ex->own.stats_host = cz__exec_calloc(n, sizeof *ex->own.stats_host);
    ex->held.params = cz__exec_calloc(n, sizeof *ex->held.params);
    ex->held.buckets = cz__exec_calloc(plan->nbuckets + 1, sizeof *ex->held.buckets);
    ex->ev_grads = c->ops->event_create(c);
    ex->ev_params = c->ops->event_create(c);
    if (!ex->ev_grads || !ex->ev_params)
        return cz__error_set(err, CZ_ENOMEM, "out of memory for compute events");
    if (!ex->own.ids || !ex->own.piece_lo || !ex->own.piece_len || !ex->held.param_off ||
        !ex->held.param_numel || !ex->own.stats || !ex->own.stats_host || !ex->held.params ||
        !ex->held.buckets)
        return cz__error_set(err, CZ_ENOMEM, "out of memory for the executor's tables");
    /* The stage's dense buckets first; the expert buckets of this rank's EP rank after them
     * (their offsets are within the expert buffer, which starts at expert_base). Another stage's
     * or EP rank's buckets are bound by its ranks. */
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1)
            ex->grid.expert_base = (int64_t)ex->buffer_numel;
        for (size_t b = 0; b < plan->nbuckets; b++) {
            const cz_plan_bucket *bk = &plan->buckets[b];
            if (!cz__exec_holds_bucket(ex, bk) || bk->expert != pass)
                continue;
            cz_bucket_plane bp = cz__wire_bucket_plane(ex, bk);
            int d = bk->expert ? ex->grid.edp_rank : ex->grid.dp_rank;
            ex->buffer_numel += (size_t)bk->size;
            if (!cz__wire_exchanged(&bp))
                continue;
            wire = true;
            if (bk->ranges[2 * d + 1] - bk->ranges[2 * d] > maxrange)
                maxrange = bk->ranges[2 * d + 1] - bk->ranges[2 * d];
        }
    }
    for (size_t b = 0; b < plan->nbuckets; b++)
        if (cz__exec_holds_bucket(ex, &plan->buckets[b]))
            ex->held.buckets[ex->held.nbuckets++] = (int)b;
    for (size_t i = 0; i < plan->nparams; i++)
        if (cz__exec_holds(ex, &plan->params[i]))
            ex->held.params[ex->held.nparams++] = (int)i;
    /* A fully sharded plan has no buckets: this rank's buffer is its FSDP2 shards of its
     * stage's parameters, in plan order, unpadded (docs/EXECUTOR.md, "The fully sharded step"). */
    for (int k = 0; cz_plan_is_fsdp(plan) && k < ex->held.nparams; k++) {
        int i = ex->held.params[k];
        ex->held.param_off[i] = (int64_t)ex->buffer_numel;
        ex->held.param_numel[i] = cz__fsdp_shard_numel(plan, &plan->params[i], ex->grid.dp_rank);
        ex->buffer_numel += (size_t)ex->held.param_numel[i];
    }
    if (!wire)
        return CZ_OK;
    ex->scratch = falloc(ex, CZ_EXEC_MEM_DP, maxrange);
    if (!ex->scratch)
        return cz__error_set(err, CZ_ENOMEM, "out of memory for a %lld-element scratch buffer",
                             (long long)maxrange);
    return CZ_OK;
}

/* A fully sharded plan's: this rank's shard of every parameter of its stage (alloc_tables laid
 * them out) is its own to update with the elementwise optimizer, or to apply its matrix's update
 * to, and its gradient's statistics are this rank's share of the norm (the shards are
 * disjoint: each element counted once). */
static int own_shards(cz_executor *ex, cz_error *err)
{
    const cz_plan *plan = ex->plan;
    int rc;
    for (int k = 0; k < ex->held.nparams; k++) {
        int i = ex->held.params[k];
        const cz_plan_param *p = &plan->params[i];
        ex->own.piece_lo[i] = 0;
        ex->own.piece_len[i] = ex->held.param_numel[i];
        ex->own.ids[ex->own.n++] = i;
        cz_optim *o = p->def.kind == CZ_KIND_MATRIX ? &ex->matrix_opt : &ex->elem_opt;
        /* The piece's place in the parameter: its FSDP2 rows' first element (cz__param_piece,
         * which the checkpoints place it by). */
        int64_t lo;
        cz__param_piece(plan, p, ex->grid.dp_rank, &lo);
        cz_opt_shard s = {p, ex->held.param_off[i], lo, ex->held.param_numel[i]};
        if (o->ops->shard_add && (rc = o->ops->shard_add(o, &s, err)) != CZ_OK)
            return rc;
    }
    return CZ_OK;
}

/* Where every parameter lies in the flat buffers, and the pieces this rank updates: each one
 * goes to the optimizer of its kind, which allocates its state for it. */
static int own_params(cz_executor *ex, cz_error *err)
{
    const cz_plan *plan = ex->plan;
    int rc;
    if (cz_plan_is_fsdp(plan))
        return own_shards(ex, err);
    for (size_t i = 0; i < plan->nparams; i++) {
        const cz_plan_param *p = &plan->params[i];
        /* The plan check found every parameter's bucket. */
        int b = cz__bucket_index(plan, p->bucket);
        CZ_ASSERT(b >= 0 && p->id == (int)i, err);
        if (!cz__exec_holds(ex, p))
            continue; /* updated by the ranks of its own stage (and EP rank) */
        /* A routed expert is owned within its expert-DP group, by expert-DP rank dp_owner. */
        bool expert = ex->grid.experts && p->expert;
        int d = expert ? ex->grid.edp_rank : ex->grid.dp_rank;
        ex->held.param_off[i] =
            (expert ? ex->grid.expert_base : 0) + plan->buckets[b].offset + p->offset;
        ex->held.param_numel[i] = p->numel;
        ex->own.piece_len[i] = cz__param_piece(plan, p, d, &ex->own.piece_lo[i]);
        if (ex->own.piece_len[i] == 0 && p->dp_owner != d)
            continue;
        ex->own.ids[ex->own.n++] = (int)i;
        cz_optim *o = p->def.kind == CZ_KIND_MATRIX ? &ex->matrix_opt : &ex->elem_opt;
        cz_opt_shard s = {p, ex->held.param_off[i] + ex->own.piece_lo[i], ex->own.piece_lo[i],
                          ex->own.piece_len[i]};
        if (o->ops->shard_add && (rc = o->ops->shard_add(o, &s, err)) != CZ_OK)
            return rc;
    }
    return CZ_OK;
}

/* Local state: tables, the optimizers' state of the pieces this rank updates, the pipeline
 * (whose groups hand the matrix optimizer its parts), then the optimizers' work. Everything a
 * step uses is allocated here (or at bind), never in a step. */
static int alloc_state(cz_executor *ex, cz_error *err)
{
    int rc;
    if ((rc = alloc_tables(ex, err)) != CZ_OK || (rc = cz__binding_init(ex, err)) != CZ_OK ||
        (rc = cz__exec_rates_init(ex, err)) != CZ_OK || (rc = own_params(ex, err)) != CZ_OK ||
        (rc = cz__exec_pipeline_init(ex, err)) != CZ_OK || (rc = cz__wire_init(ex, err)) != CZ_OK)
        return rc;
    if ((rc = ex->matrix_opt.ops->work_create(&ex->matrix_opt, err)) != CZ_OK)
        return rc;
    return ex->elem_opt.ops->work_create(&ex->elem_opt, err);
}

/* Memory space, stream and dtype: what the backend can take. */
static int check_space(cz_executor *ex, const cz_exec_config *cfg, const cz_plan *plan,
                       cz_error *err)
{
    bool host = ex->compute.ops->caps & CZ_COMPUTE_CAP_HOST_MEMORY;
    if (cfg->memory != CZ_EXEC_MEMORY_HOST && cfg->memory != CZ_EXEC_MEMORY_DEVICE)
        return cz__error_set(err, CZ_EINVALID, "memory = %d; expected host (0) or device (1)",
                             (int)cfg->memory);
    if (host && cfg->memory != CZ_EXEC_MEMORY_HOST)
        return cz__error_set(err, CZ_EUNSUPPORTED,
                             "compute backend '%s' works on host memory; memory = device is not "
                             "available",
                             ex->compute.ops->name);
    if (host && cfg->stream)
        return cz__error_set(err, CZ_EUNSUPPORTED,
                             "compute backend '%s' runs on the calling thread and takes no stream "
                             "(pass NULL)",
                             ex->compute.ops->name);
    int d = cfg->dtype < 0 ? (plan ? (int)plan->dtype : CZ_DTYPE_FP32) : cfg->dtype;
    if (d != CZ_DTYPE_FP32 && d != CZ_DTYPE_BF16)
        return cz__error_set(err, CZ_EUNSUPPORTED,
                             "parameter dtype %s%s: the executor takes fp32 or bf16",
                             d >= 0 && d <= CZ_DTYPE_FP32 ? cz_dtype_name((cz_dtype)d) : "?",
                             cfg->dtype < 0 ? " (the plan's)" : "");
    ex->bind.dtype = (cz_dtype)d;
    return CZ_OK;
}

/* Every rank learns whether any rank failed. Returns the agreed code: my own when I failed,
 * CZ_EMISMATCH naming the lowest failing rank otherwise. order (NULL: none): whether this
 * rank's place is its world rank's, set to whether every rank's is. */
static int agree(cz_executor *ex, int rc, uint64_t fp, bool *order, const char *stage,
                 cz_error *err)
{
    int64_t v[4] = {rc ? ex->ctrl.rank : INT64_MAX, (int64_t)(fp >> 1), -(int64_t)(fp >> 1),
                    order ? *order : 1};
    cz_error tmp;
    int crc = ex->ctrl.ops->allreduce_min_i64(&ex->ctrl, v, 4, &tmp);
    if (order)
        *order = !crc && v[3] == 1;
    if (crc) {
        if (!rc && err)
            *err = tmp;
        return rc ? rc : crc;
    }
    if (rc)
        return rc;
    if (v[0] != INT64_MAX)
        return cz__error_set(err, CZ_EMISMATCH,
                             "rank %lld failed %s (see its message); this rank's own checks passed",
                             (long long)v[0], stage);
    if (fp && v[1] != -v[2])
        return cz__error_set(err, CZ_EMISMATCH,
                             "the ranks were given different plans (plan fingerprints differ); "
                             "every rank must run the same plan file");
    return CZ_OK;
}

/* The compute backend the configuration names, with what the data plane needs of it. */
static int open_compute(cz_executor *ex, const cz_exec_config *cfg, cz_error *err)
{
    cz_compute_want want = {
        .name = cfg->backend,
        .stream = cfg->stream,
        .memory = cfg->memory,
        .dtype = cfg->dtype >= 0 ? cfg->dtype : (int)ex->plan->dtype,
        .plane = cz__comm_name(ex->comm),
        .host_plane = cz__comm_host_driven(ex->comm),
    };
    return cz__compute_open_for(&ex->compute, &want, &ex->bind.host_staged, err);
}

/* The plan's grid against the world's, and this process's place in it: world rank =
 * (stage * dp + dp_rank) * tp + tp_rank, Megatron-Core's order (TP fastest, PP slowest). */
static int check_grid(cz_executor *ex, const cz_exec_config *cfg, cz_error *err)
{
    const cz_plan *plan = ex->plan;
    ex->grid.dp = plan->dp;
    ex->grid.tp = plan->tp;
    ex->grid.pp = plan->pp;
    ex->grid.sc = plan->settings.tp == CZ_TP_SC;
    int per_stage = ex->grid.dp * ex->grid.tp;
    if (ex->planes.world.size != per_stage * ex->grid.pp)
        return cz__error_set(err, CZ_EMISMATCH,
                             "the world communicator has %d ranks but the plan needs dp*tp*pp = "
                             "%d*%d*%d = %d",
                             ex->planes.world.size, ex->grid.dp, ex->grid.tp, ex->grid.pp,
                             per_stage * ex->grid.pp);
    /* The stage always comes from the world rank: a job hands in dp_rank and tp_rank within
     * its stage, and its world communicator orders the stages (PP outermost). */
    ex->grid.stage = ex->planes.world.rank / per_stage;
    ex->grid.dp_rank =
        cfg->dp_rank >= 0 ? cfg->dp_rank : ex->planes.world.rank % per_stage / ex->grid.tp;
    ex->grid.tp_rank = cfg->tp_rank >= 0 ? cfg->tp_rank : ex->planes.world.rank % ex->grid.tp;
    if (ex->grid.dp_rank >= ex->grid.dp || ex->grid.tp_rank >= ex->grid.tp)
        return cz__error_set(err, CZ_EMISMATCH,
                             "rank (dp %d, tp %d) is out of range for the plan's dp = %d, tp = %d",
                             ex->grid.dp_rank, ex->grid.tp_rank, ex->grid.dp, ex->grid.tp);
    ex->grid.world_order = ex->grid.dp_rank == ex->planes.world.rank % per_stage / ex->grid.tp &&
                           ex->grid.tp_rank == ex->planes.world.rank % ex->grid.tp;
    if (cz_plan_has_experts(plan)) {
        /* Megatron-Core's expert grid over the same ranks of the stage (order tp-cp-ep-dp-pp:
         * ETP fastest, then EP, then expert-DP; the structural check found ETP x EP x eDP =
         * TP x DP). */
        int local = ex->grid.dp_rank * ex->grid.tp + ex->grid.tp_rank;
        ex->grid.experts = true;
        ex->grid.ep = plan->ep;
        ex->grid.etp = plan->etp;
        ex->grid.edp = plan->edp;
        ex->grid.etp_rank = local % ex->grid.etp;
        ex->grid.ep_rank = local / ex->grid.etp % ex->grid.ep;
        ex->grid.edp_rank = local / (ex->grid.etp * ex->grid.ep);
    }
    return CZ_OK;
}

/* What the fully sharded step (docs/EXECUTOR.md, "The fully sharded step") runs today: one
 * stage (at any TP: 2-D TP x FSDP shards), the planes whose exchanges are tested for it (comm.h),
 * Muon without NorMuon or SOAP (optimizer.h). Each refusal says what to change. */
static int check_fsdp(const cz_executor *ex, const cz_exec_config *cfg, const cz_plan *plan,
                      cz_error *err)
{
    const char *plane = cz__comm_name(ex->comm);
    /* HSDP: the shards are over one replica's ranks and the owners per replica (or over all
     * of them); the step's row geometry is plain FSDP's. */
    if (cz_plan_fsdp_replicas(plan) > 1)
        return cz__error_set(err, CZ_EUNSUPPORTED,
                             "plan layout fsdp with HSDP (settings.replicate = %d): the fully "
                             "sharded step runs plain FSDP only; plan the job without "
                             "--replicate-size, or with --layout unified",
                             cz_plan_fsdp_replicas(plan));
    if (plan->pp != 1)
        return cz__error_set(err, CZ_EUNSUPPORTED,
                             "plan layout fsdp at pp = %d: the fully sharded step runs one "
                             "pipeline stage only; plan the job at pp 1, or with --layout "
                             "unified",
                             plan->pp);
    if (!cz__comm_runs_fsdp(ex->comm))
        return cz__error_set(err, CZ_EUNSUPPORTED,
                             "plan layout fsdp on the '%s' comm plane: the fully sharded step "
                             "runs on the mpi, self and callbacks planes only (its owners' "
                             "exchanges are not tested on '%s' yet); use comm = \"mpi\" or "
                             "the callbacks",
                             plane, plane);
    return cz__optimizer_fsdp_check(plan, cfg, err);
}

/* The checks each rank makes alone, before the ranks agree: the plan and the configuration,
 * the compute backend, the optimizers' settings, the grid. */
static int check_local(cz_executor *ex, const cz_exec_config *cfg, cz_error *err)
{
    const cz_plan *plan = ex->plan;
    int rc;
    if (!plan)
        return cz__error_set(err, CZ_EINVALID, "no plan given");
    /* First, before anything reads what such a plan has not (buckets, per-DP-rank schedules). */
    if (cz_plan_is_fsdp(plan) && (rc = check_fsdp(ex, cfg, plan, err)) != CZ_OK)
        return rc;
    if ((rc = open_compute(ex, cfg, err)) != CZ_OK ||
        (rc = check_space(ex, cfg, plan, err)) != CZ_OK ||
        (rc = cz__optimizer_open(&ex->elem_opt, CZ_KIND_ELEMENTWISE, plan, &ex->compute, cfg,
                                 err)) != CZ_OK ||
        (rc = cz__exec_plan_check(plan, err)) != CZ_OK ||
        (rc = cz__optimizer_open(&ex->matrix_opt, CZ_KIND_MATRIX, plan, &ex->compute, cfg, err)) !=
            CZ_OK)
        return rc;
    return check_grid(ex, cfg, err);
}

/* The planes this rank belongs to, by their members' places in the stage (check_grid's order:
 * local = dp_rank * tp + tp_rank = (edp_rank * ep + ep_rank) * etp + etp_rank). */
typedef enum grid_plane { PLANE_DP, PLANE_TP, PLANE_EDP, PLANE_ETP, PLANE_SHARD } grid_plane;

/* Plane `which`'s members as world ranks, in the plane's order (its split key), when every rank
 * is at its world rank's place (grid.world_order, agreed), so that every member computes the
 * same list alone; NULL otherwise (the backend splits by color and key instead), and *fail
 * set when out of memory. */
static int *plane_members(const cz_executor *ex, grid_plane which, int *n, int *fail)
{
    const cz_exec_grid *g = &ex->grid;
    *n = 0;
    if (!g->world_order)
        return NULL;
    int count = which == PLANE_DP      ? g->dp
                : which == PLANE_TP    ? g->tp
                : which == PLANE_EDP   ? g->edp
                : which == PLANE_SHARD ? g->dp * g->tp
                                       : g->etp;
    int *m = cz__exec_calloc((size_t)count, sizeof *m);
    if (!m) {
        *fail = 1;
        return NULL;
    }
    int base = g->stage * g->dp * g->tp;
    for (int i = 0; i < count; i++)
        m[i] = base + (which == PLANE_DP      ? i * g->tp + g->tp_rank
                       : which == PLANE_TP    ? g->dp_rank * g->tp + i
                       : which == PLANE_SHARD ? i
                       : which == PLANE_EDP   ? (i * g->ep + g->ep_rank) * g->etp + g->etp_rank
                                              : (g->edp_rank * g->ep + g->ep_rank) * g->etp + i);
    *n = count;
    return m;
}

/* Plane `which` of this rank: the job's group where it handed one in, else the members the
 * layout names (no collective where the backend can open a plane from them), else a split of
 * the world by color and key. */
static int open_plane_of(cz_executor *ex, const cz_exec_config *cfg, grid_plane which,
                         cz_comm_group group, int color, int key, cz_plane *out, cz_error *err)
{
    int n = 0, fail = 0;
    int *m = plane_members(ex, which, &n, &fail);
    int rc = fail ? cz__error_set(err, CZ_ENOMEM, "out of memory for a plane's members")
                  : cz__comm_subplane_known(ex->comm, cfg, &ex->ctrl, &ex->planes.world, group,
                                            color, key, m, n, out, err);
    cz__exec_free(m);
    return rc;
}

/* The DP plane, then the TP plane, of this rank's stage (the stages never share one: the colors
 * differ per stage). */
static int open_subplanes(cz_executor *ex, const cz_exec_config *cfg, cz_error *err)
{
    int rc;
    if ((rc = open_plane_of(ex, cfg, PLANE_DP, CZ_COMM_DP,
                            ex->grid.stage * ex->grid.tp + ex->grid.tp_rank, ex->grid.dp_rank,
                            &ex->planes.dp, err)) != CZ_OK)
        return rc;
    if ((rc = open_plane_of(ex, cfg, PLANE_TP, CZ_COMM_TP,
                            ex->grid.stage * ex->grid.dp + ex->grid.dp_rank, ex->grid.tp_rank,
                            &ex->planes.tp, err)) != CZ_OK)
        return rc;
    /* A fully sharded plan's owners span the stage's shard group: at TP above 1 a plane of
     * its own, every GPU of the stage ordered dp_rank * tp + tp_rank (at TP 1 the DP plane). */
    if (!cz_plan_is_fsdp(ex->plan) || ex->grid.tp == 1)
        return CZ_OK;
    return open_plane_of(ex, cfg, PLANE_SHARD, CZ_COMM_WORLD, ex->grid.stage,
                         ex->grid.dp_rank * ex->grid.tp + ex->grid.tp_rank, &ex->planes.shard, err);
}

/* The expert-DP plane (the ranks of one stage with equal EP and ETP rank, ordered by expert-DP
 * rank: what an expert buffer is reduced over), then the ETP plane (equal expert-DP and EP rank,
 * ordered by ETP rank: what an expert rank's micro-groups run over), split from the world
 * (collective: no job hands these in). */
static int open_expert_planes(cz_executor *ex, const cz_exec_config *cfg, cz_error *err)
{
    int rc;
    if ((rc = open_plane_of(ex, cfg, PLANE_EDP, CZ_COMM_WORLD,
                            (ex->grid.stage * ex->grid.ep + ex->grid.ep_rank) * ex->grid.etp +
                                ex->grid.etp_rank,
                            ex->grid.edp_rank, &ex->planes.edp, err)) != CZ_OK)
        return rc;
    return open_plane_of(ex, cfg, PLANE_ETP, CZ_COMM_WORLD,
                         (ex->grid.stage * ex->grid.edp + ex->grid.edp_rank) * ex->grid.ep +
                             ex->grid.ep_rank,
                         ex->grid.etp_rank, &ex->planes.etp, err);
}

/* A slice holds one rank's schedules: a job that places this process elsewhere in the grid
 * (dp_rank, tp_rank given) than the world rank the slice was read for needs its own part. */
static int slice_mismatch(const cz_executor *ex, cz_error *err)
{
    const cz_plan_slice *sl = &ex->plan->slice;
    CZ_ASSERT(sl->on, err);
    return cz__error_set(err, CZ_EMISMATCH,
                         "the split plan's part read for world rank %d is of stage %d, DP rank %d "
                         "(EP rank %d, expert-DP rank %d); this process is stage %d, DP rank %d "
                         "(EP rank %d, expert-DP rank %d): leave dp_rank and tp_rank at -1 with a "
                         "split plan folder, or give a plan file",
                         sl->world_rank, sl->stage, sl->dp_rank, sl->ep_rank, sl->edp_rank,
                         ex->grid.stage, ex->grid.dp_rank, ex->grid.ep_rank, ex->grid.edp_rank);
}

/* The expert planes and this rank's expert schedule. */
static int setup_experts(cz_executor *ex, const cz_exec_config *cfg, cz_error *err)
{
    const cz_plan *plan = ex->plan;
    int rc = open_expert_planes(ex, cfg, err);
    ex->planes.edp.label = "expert-DP";
    ex->planes.etp.label = "ETP";
    if (rc != CZ_OK)
        return rc;
    CZ_ASSERT(ex->planes.edp.size == ex->grid.edp && ex->planes.edp.rank == ex->grid.edp_rank &&
                  ex->planes.etp.size == ex->grid.etp && ex->planes.etp.rank == ex->grid.etp_rank,
              err);
    ex->expert_schedule =
        cz_plan_expert_schedule(plan, ex->grid.stage, ex->grid.ep_rank, ex->grid.edp_rank);
    if (!ex->expert_schedule)
        return slice_mismatch(ex, err);
    CZ_ASSERT(ex->expert_schedule->stage == ex->grid.stage &&
                  ex->expert_schedule->ep_rank == ex->grid.ep_rank &&
                  ex->expert_schedule->dp_rank == ex->grid.edp_rank,
              err);
    /* The expert-DP plane's padded-collective scratch (nccl), sized from every bucket. */
    return cz__comm_reserve(ex->comm, &ex->planes.edp, plan, err);
}

/* The DP and TP planes, what the planes need for the plan, and the local state. */
static int setup(cz_executor *ex, const cz_exec_config *cfg, cz_error *err)
{
    int rc;
    ex->planes.world.compute = &ex->compute; /* the planes wait on its events */
    ex->planes.world.label = "world";
    /* Within a stage, DP joins equal tp_rank ordered by dp_rank, TP equal dp_rank ordered by
     * tp_rank, unless the job handed in a communicator (comm.c); the stages never share a
     * plane (the colors below differ per stage). A failed (or timed-out) split goes on to the
     * agreement after this, so that every rank returns an error: a rank that left here would
     * keep its peers waiting in it. */
    rc = open_subplanes(ex, cfg, err);
    ex->planes.dp.label = "DP";
    ex->planes.tp.label = "TP";
    ex->planes.shard.label = "shard group";
    if (rc != CZ_OK)
        return rc;
    if (ex->planes.dp.size != ex->grid.dp || ex->planes.dp.rank != ex->grid.dp_rank)
        return cz__error_set(err, CZ_EMISMATCH,
                             "the DP communicator has %d ranks and this process is its rank %d; "
                             "the plan needs dp = %d and this process is dp rank %d",
                             ex->planes.dp.size, ex->planes.dp.rank, ex->grid.dp, ex->grid.dp_rank);
    if (ex->planes.tp.size != ex->grid.tp || ex->planes.tp.rank != ex->grid.tp_rank)
        return cz__error_set(err, CZ_EMISMATCH,
                             "the TP communicator has %d ranks and this process is its rank %d; "
                             "the plan needs tp = %d and this process is tp rank %d",
                             ex->planes.tp.size, ex->planes.tp.rank, ex->grid.tp, ex->grid.tp_rank);
    if (ex->planes.shard.ops &&
        (ex->planes.shard.size != ex->grid.dp * ex->grid.tp ||
         ex->planes.shard.rank != ex->grid.dp_rank * ex->grid.tp + ex->grid.tp_rank))
        return cz__error_set(err, CZ_EMISMATCH,
                             "the shard group's plane has %d ranks and this process is its rank "
                             "%d; the plan needs dp * tp = %d and this process is dp rank %d, tp "
                             "rank %d (dp_rank * tp + tp_rank)",
                             ex->planes.shard.size, ex->planes.shard.rank,
                             ex->grid.dp * ex->grid.tp, ex->grid.dp_rank, ex->grid.tp_rank);
    if (ex->grid.experts && (rc = setup_experts(ex, cfg, err)) != CZ_OK)
        return rc;
    if ((rc = cz__comm_reserve(ex->comm, &ex->planes.dp, ex->plan, err)) != CZ_OK)
        return rc;
    /* A fully sharded plan has one per stage, over the shard group (the plan check counted
     * them); the other layouts one per (stage, DP rank) (a slice has its rank's). */
    if (cz_plan_is_fsdp(ex->plan)) {
        CZ_ASSERT((size_t)ex->grid.stage < ex->plan->nschedules, err);
        ex->schedule = &ex->plan->schedules[ex->grid.stage];
        return alloc_state(ex, err);
    }
    ex->schedule = cz_plan_rank_schedule(ex->plan, ex->grid.stage, ex->grid.dp_rank);
    if (!ex->schedule)
        return slice_mismatch(ex, err);
    CZ_ASSERT(ex->schedule->stage == ex->grid.stage && ex->schedule->dp_rank == ex->grid.dp_rank,
              err);
    return alloc_state(ex, err);
}

int cz_executor_create_from_plan(cz_executor **out, const cz_plan *plan, const cz_exec_config *cfg,
                                 cz_error *err)
{
    return cz__executor_create_impl(out, plan, NULL, NULL, cfg, err);
}

int cz__executor_create_impl(cz_executor **out, const cz_plan *plan, const char *path,
                             cz__plan_load_fn load, const cz_exec_config *cfg, cz_error *err)
{
    cz_error ignored;
    cz_executor *ex = NULL;
    int rc, pre_rc = CZ_OK;
    *out = NULL;
    if (!(ex = cz__exec_calloc(1, sizeof *ex)))
        return cz__error_set(err, CZ_ENOMEM, "out of memory for the executor");
    ex->plan = plan;
    /* The caller's config of any version, read once into this version's layout: everything
     * after this reads ex->cfg, never the caller's struct. A version refused is reported as a
     * failed check, after the communicator opens (with the fields every version has), so that
     * every rank returns the error. */
    int vrc = cz__exec_config_read(&ex->cfg, cfg, pre_rc ? &ignored : err);
    pre_rc = pre_rc ? pre_rc : vrc;
    cfg = &ex->cfg;
    ex->grid.dp_rank = ex->grid.tp_rank = -1;
    ex->clip.grad_norm = NAN;
    /* Every wait of the planes names what this executor is doing in its report of a stall. */
    ex->phase = (cz_phase){"creating the executor", -1};
    ex->ctrl.phase = &ex->phase;

    /* The communicator comes first: without it the ranks cannot agree on failure. A failure
     * before it (pre_rc: the configuration's version) is the one to report, code and message. */
    if ((rc = cz__comm_open(cfg, &ex->ctrl, &ex->planes.world, &ex->comm,
                            pre_rc ? &ignored : err)) != CZ_OK) {
        rc = pre_rc ? pre_rc : rc;
        goto done;
    }
    /* Then the plan, for this world rank (a split plan folder holds one part per rank). A rank
     * whose plan does not load goes on to the agreement with its code: a rank that returned
     * here would leave the others waiting in it. */
    if (!plan && !pre_rc) {
        pre_rc = path   ? load(&ex->owned_plan, path, ex->planes.world.rank, err)
                 : load ? cz__error_set(err, CZ_EINVALID, "no plan path given")
                        : cz__error_set(err, CZ_EINVALID, "no plan given");
        ex->plan = ex->owned_plan;
    }
    /* Every check's failure is shared with every rank, and so is the plan's fingerprint. */
    rc = pre_rc ? pre_rc : check_local(ex, cfg, err);
    if ((rc = agree(ex, rc, rc ? 0 : cz__exec_plan_fingerprint(ex->plan), &ex->grid.world_order,
                    "the plan checks", err)) != CZ_OK)
        goto done;
    rc = setup(ex, cfg, err);
    if ((rc = agree(ex, rc, 0, NULL, "to set up its communicators or state", err)) != CZ_OK)
        goto done;
    *out = ex;
    ex = NULL;
done:
    cz_executor_free(ex);
    return rc;
}

/* Releases backend memory (NULL allowed). */
static void brelease(cz_executor *ex, void *p)
{
    if (p)
        ex->compute.ops->release(&ex->compute, p);
}

void cz_executor_free(cz_executor *ex)
{
    if (!ex)
        return;
    if (ex->compute.ops) {
        /* First: a request still in flight (a bucket's collective never waited for) completes
         * before the buffers it reads and writes are released (bucket_step.h). */
        cz__bucket_step_free(ex);
        cz__exec_pipeline_free(ex);
        cz__optimizer_close(&ex->matrix_opt);
        cz__optimizer_close(&ex->elem_opt);
        brelease(ex, ex->scratch);
        brelease(ex, ex->own.stats);
        if (ex->ev_grads)
            ex->compute.ops->event_free(&ex->compute, ex->ev_grads);
        if (ex->ev_params)
            ex->compute.ops->event_free(&ex->compute, ex->ev_params);
    }
    cz__qk_clip_free(ex);
    cz__exec_free(ex->own.ids);
    cz__exec_free(ex->own.piece_lo);
    cz__exec_free(ex->own.piece_len);
    cz__exec_free(ex->held.param_off);
    cz__exec_free(ex->held.param_numel);
    cz__exec_free(ex->rates.param);
    cz__exec_free(ex->own.stats_host);
    cz__wire_free(ex);
    cz__binding_free(ex);
    cz__exec_free(ex->held.params);
    cz__exec_free(ex->held.buckets);
    cz__plane_close(&ex->planes.shard);
    cz__plane_close(&ex->planes.etp);
    cz__plane_close(&ex->planes.edp);
    cz__plane_close(&ex->planes.tp);
    cz__plane_close(&ex->planes.dp);
    cz__plane_close(&ex->planes.world);
    cz__ctrl_close(&ex->ctrl);
    cz__compute_close(&ex->compute);
    cz_plan_free(ex->owned_plan);
    cz__exec_free(ex);
}
