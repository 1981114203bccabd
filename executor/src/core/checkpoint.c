/*
 * Optimizer-state checkpoints, the cross-rank transfer: every parameter's optimizer state as
 * full, unsharded fp32 tensors in one file (checkpoint_file.c: the safetensors container, its
 * keys and metadata), so that a checkpoint saved under one plan loads under any plan of the
 * same model (another DP/TP shape or strategy). This file decides which rank keeps which
 * tensor and moves them between the ranks and the file on rank 0.
 *
 * Saving gathers every tensor on world rank 0 over the data plane (a matrix's Muon momentum
 * part by part from the ranks that hold its parts — the whole matrix, its blocks, or a
 * cooperative task's slices, cz__task_parts — a Shampoo or SOAP state from the lowest rank
 * that hosts it, an elementwise parameter's moments from the TP ranks of its owning DP rank,
 * unpacked into the full tensor) and rank 0 writes the file atomically (temporary file
 * in the same folder, synced, renamed over the old one), so a crash mid-write leaves the
 * previous checkpoint whole. Loading reads the file on rank 0, checks every tensor against the
 * plan and sends each full tensor to the TP ranks of its owning DP rank, which keep what they
 * hold (a momentum part: its rectangle of the full tensor). So a checkpoint saved under a plan
 * of whole-matrix tasks loads under one of block or cooperative tasks, and back. Both are
 * collective; every rank returns the same verdict. Rank 0 holds the whole file in memory while
 * writing or reading it.
 *
 * State is backend memory (device memory on a GPU backend): it is touched only through the
 * backend's download and upload and the data plane, which moves backend memory (a bounce
 * buffer per rank). The cpu backend runs the same path, so the CPU tests cover it.
 */
#include "canzona_exec.h"
#include "checkpoint_file.h"
#include "comm.h"
#include "compute.h"
#include "cz_format.h"
#include "executor_impl.h"
#include "optimizer.h"
#include "shard.h"

#include <stdlib.h>
#include <string.h>

/* The optimizer that updates parameter p. */
static cz_optim *opt_of(cz_executor *ex, const cz_plan_param *p)
{
    return p->def.kind == CZ_KIND_MATRIX ? &ex->matrix_opt : &ex->elem_opt;
}

static ck_entry entry_of(int param, cz_optim *o, int64_t k, const cz_state_tensor *t)
{
    ck_entry e = {.param = param,
                  .opt = o,
                  .k = k,
                  .place = t->place,
                  .ndim = t->ndim,
                  .shape = {t->rows, t->cols},
                  .n = t->rows * t->cols,
                  .values = t->values,
                  .plus_addend = t->plus_addend,
                  .r0 = t->r0,
                  .c0 = t->c0};
    memcpy(e.suffix, t->suffix, sizeof e.suffix);
    return e;
}

/* Every tensor of the optimizers' state, in parameter order: a list every rank builds from
 * the plan and the settings alone. */
static int entries_build(cz_executor *ex, ck_entry **out, size_t *count, cz_error *err)
{
    const cz_plan *plan = ex->plan;
    size_t n = 0, at = 0;
    int64_t most = 0;
    for (size_t i = 0; i < plan->nparams; i++) {
        cz_optim *o = opt_of(ex, &plan->params[i]);
        int64_t m = o->ops->state_tensors(o, &plan->params[i], NULL, 0);
        n += (size_t)m;
        most = m > most ? m : most;
    }
    ck_entry *e = calloc(n ? n : 1, sizeof *e);
    cz_state_tensor *t = calloc((size_t)(most ? most : 1), sizeof *t);
    if (!e || !t) {
        free(e);
        free(t);
        return cz__error_set(err, CZ_ENOMEM, "out of memory listing the optimizer state's tensors");
    }
    for (size_t i = 0; i < plan->nparams; i++) {
        cz_optim *o = opt_of(ex, &plan->params[i]);
        int64_t m = o->ops->state_tensors(o, &plan->params[i], t, most);
        for (int64_t k = 0; k < m; k++)
            e[at++] = entry_of((int)i, o, k, &t[k]);
    }
    free(t);
    CZ_ASSERT(at == n, err);
    *out = e;
    *count = n;
    return CZ_OK;
}

/* This rank's backend buffer of a HOSTED tensor or of its SHARDED piece; NULL where this rank
 * keeps none of it (and for PARTS tensors, kept by part: part_buffer). */
static float *entry_buffer(const ck_entry *e)
{
    if (e->place == CZ_STATE_PARTS)
        return NULL;
    return e->opt->ops->state_buffer(e->opt, e->param, e->k, NULL);
}

/* This rank's buffer of the part at `part` of a PARTS tensor; NULL where it keeps none. */
static float *part_buffer(const ck_entry *e, const cz_block *part)
{
    return e->opt->ops->state_buffer(e->opt, e->param, e->k, part);
}

/* The rectangle of PARTS tensor e that the part at `part` keeps (state_rect; the part itself
 * for a tensor laid out as the parameter). */
static cz_block part_rect(const ck_entry *e, const cz_block *part)
{
    cz_block r = *part;
    if (e->opt->ops->state_rect)
        e->opt->ops->state_rect(e->opt, e->param, e->k, part, &r);
    return r;
}

/* This rank's addend of parameter `param` (plus_addend tensors); NULL where it keeps none. */
static float *addend_of(cz_optim *o, int param)
{
    return o->ops->state_addend ? o->ops->state_addend(o, param) : NULL;
}

/* The schedule of p's owner: its DP rank's, or for a routed expert its expert rank's. */
static const cz_rank_schedule *owner_schedule(const cz_plan *plan, const cz_plan_param *p)
{
    if (cz_plan_has_experts(plan) && p->expert)
        return &plan->expert_schedules[cz_plan_expert_rank(plan, p->stage, p->ep_rank,
                                                           p->dp_owner)];
    /* A fully sharded plan has one per stage, over its shard group. */
    if (cz_plan_is_fsdp(plan))
        return &plan->schedules[p->stage];
    /* Schedules are stage-major: one per (stage, DP rank). */
    return &plan->schedules[(size_t)p->stage * (size_t)plan->dp + (size_t)p->dp_owner];
}

/* The parts of matrix parameter i's tasks, from the plan alone (its owning DP rank's schedule),
 * so that every rank lists the same: *out (malloc'ed) and their count. */
static int task_parts(const cz_executor *ex, int i, cz_exec_part **out, int *count, cz_error *err)
{
    const cz_plan *plan = ex->plan;
    const cz_plan_param *p = &plan->params[i];
    const cz_rank_schedule *rs = owner_schedule(plan, p);
    int n = 0, cap = 0;
    for (int g = 0; g < rs->ngroups; g++)
        for (int t = 0; t < rs->groups[g].ntasks; t++)
            if (rs->groups[g].task_param[t] == i)
                cap += cz_group_task_width(&rs->groups[g], t);
    cz_exec_part *v = calloc((size_t)cap + 1, sizeof *v);
    if (!v)
        return cz__error_set(err, CZ_ENOMEM, "checkpoint: out of memory");
    for (int g = 0; g < rs->ngroups; g++)
        for (int t = 0; t < rs->groups[g].ntasks; t++)
            if (rs->groups[g].task_param[t] == i)
                n += cz__task_parts(plan, &rs->groups[g], t, v + n, cap - n);
    *out = v;
    *count = n;
    return CZ_OK;
}

/* A parameter's places: a dense one is owned by DP rank d of its stage and split over the TP
 * ranks t; a routed expert of a plan with expert groups by expert-DP rank d of its EP rank's
 * group and split over its ETP ranks t. The grid (grid_build) is indexed by the stage's local
 * rank, dp_rank * tp + tp_rank = (edp_rank * ep + ep_rank) * etp + etp_rank (Megatron-Core's
 * order), so both kinds of place index it. */
static bool expert_of(const cz_executor *ex, const cz_plan_param *p)
{
    return ex->grid.experts && p->expert;
}

static int owners_of(const cz_executor *ex, const cz_plan_param *p) /* DP or expert-DP size */
{
    return expert_of(ex, p) ? ex->grid.edp : ex->grid.dp;
}

static int split_of(const cz_executor *ex, const cz_plan_param *p) /* TP or ETP size */
{
    return expert_of(ex, p) ? ex->grid.etp : ex->grid.tp;
}

/* The grid index of p's place (owner rank d, split rank t). */
static size_t place(const cz_executor *ex, const cz_plan_param *p, int d, int t)
{
    size_t stage = (size_t)p->stage * (size_t)ex->grid.dp * (size_t)ex->grid.tp;
    if (expert_of(ex, p))
        return stage +
               ((size_t)d * (size_t)ex->grid.ep + (size_t)p->ep_rank) * (size_t)ex->grid.etp +
               (size_t)t;
    return stage + (size_t)d * (size_t)ex->grid.tp + (size_t)t;
}

/* This rank's owner and split rank for p (-1 when it is not of p's stage and EP rank). */
static int my_owner(const cz_executor *ex, const cz_plan_param *p)
{
    return !cz__exec_holds(ex, p) ? -1 : expert_of(ex, p) ? ex->grid.edp_rank : ex->grid.dp_rank;
}

static int my_split(const cz_executor *ex, const cz_plan_param *p)
{
    return expert_of(ex, p) ? ex->grid.etp_rank : ex->grid.tp_rank;
}

/* True when this rank holds part x of matrix p (under sc every TP rank holds every part; slot
 * 0 names them). */
static bool holds_part(const cz_executor *ex, const cz_plan_param *p, const cz_exec_part *x)
{
    /* A fully sharded plan's part is the whole matrix, on its owner: slot dp_owner * tp + t is
     * GPU t of the owner's DP rank. */
    if (cz_plan_is_fsdp(ex->plan))
        return my_owner(ex, p) == p->dp_owner && my_split(ex, p) == x->slot % ex->grid.tp;
    return my_owner(ex, p) == p->dp_owner && (ex->grid.sc || my_split(ex, p) == x->slot);
}

/* Copies the rectangle r of a full row-major matrix with ld columns between the matrix and a
 * contiguous r->rows x r->cols buffer: into the matrix (dst) from the buffer (src) when
 * to_full, else into the buffer (dst) from the matrix (src). */
static void rect_copy(float *dst, const float *src, int64_t ld, const cz_block *r, int to_full)
{
    for (int64_t i = 0; i < r->rows; i++) {
        int64_t f = (r->r0 + i) * ld + r->c0, q = i * r->cols;
        memcpy(dst + (to_full ? f : q), src + (to_full ? q : f), (size_t)r->cols * sizeof(float));
    }
}

/* Every rank learns whether any rank failed: my own code when I failed, else CZ_EMISMATCH
 * naming the lowest failing rank. */
static int agree(cz_executor *ex, int rc, const char *what, cz_error *err)
{
    int64_t v = rc ? ex->ctrl.rank : INT64_MAX;
    cz_error tmp;
    int crc = ex->ctrl.ops->allreduce_min_i64(&ex->ctrl, &v, 1, &tmp);
    if (crc) {
        if (!rc && err)
            *err = tmp;
        return rc ? rc : crc;
    }
    if (rc)
        return rc;
    if (v != INT64_MAX)
        return cz__error_set(err, CZ_EMISMATCH, "rank %lld failed to %s (see its message)",
                             (long long)v, what);
    return CZ_OK;
}

/* One point-to-point transfer of n floats of backend memory from world rank src to world rank
 * dst (src != dst). Ranks that are neither do nothing. */
static int transfer(cz_executor *ex, cz_comm_req *req, const float *send, float *recv, int64_t n,
                    int src, int dst, cz_error *err)
{
    int me = ex->planes.world.rank;
    if (me != src && me != dst)
        return CZ_OK;
    const cz_plane_ops *o = ex->planes.world.ops;
    int rc = o->group_start(&ex->planes.world, req, NULL, err);
    if (rc)
        return rc;
    if (me == src)
        o->send(&ex->planes.world, req, send, (size_t)n, CZ_DTYPE_FP32, dst);
    else
        o->recv(&ex->planes.world, req, recv, (size_t)n, CZ_DTYPE_FP32, src);
    if ((rc = o->group_end(&ex->planes.world, req, err)) != CZ_OK)
        return rc;
    return o->wait(&ex->planes.world, req, err);
}

/* World rank of every (stage, dp_rank, tp_rank) place: the job may hand in communicators whose
 * order within a stage is not dp_rank * tp + tp_rank. grid has pp * dp * tp entries (place). */
static int grid_build(cz_executor *ex, int64_t *grid, cz_error *err)
{
    int n = ex->grid.pp * ex->grid.dp * ex->grid.tp;
    for (int i = 0; i < n; i++)
        grid[i] = INT64_MAX;
    grid[(size_t)ex->grid.stage * (size_t)ex->grid.dp * (size_t)ex->grid.tp +
         (size_t)ex->grid.dp_rank * (size_t)ex->grid.tp + (size_t)ex->grid.tp_rank] =
        ex->planes.world.rank;
    return ex->ctrl.ops->allreduce_min_i64(&ex->ctrl, grid, n, err);
}

/* Checks shared by save and load: no step in flight, a backend that can stage its memory
 * through the host. */
static int check_usable(cz_executor *ex, const char *what, cz_error *err)
{
    if (ex->async.active)
        return cz__error_set(err, CZ_EINVALID,
                             "%s: a step started with cz_executor_step_async was not waited for",
                             what);
    /* A checkpoint lists every parameter of the plan with its owner's schedule; a rank of a
     * split plan holds its part only (refused here, before the ranks agree). */
    if (ex->plan->slice.on)
        return cz__error_set(err, CZ_EUNSUPPORTED,
                             "%s: checkpoints need the whole plan, and this executor was created "
                             "from a split plan folder; create it from the plan file (canzona "
                             "plan --split keeps it as DIR/plan.json)",
                             what);
    if (!ex->compute.ops->upload)
        return cz__error_set(err, CZ_EUNSUPPORTED,
                             "%s: the %s backend has no upload operation; checkpoints stage the "
                             "optimizer state through host memory and need it",
                             what, ex->compute.ops->name);
    return CZ_OK;
}

/* Largest tensor and largest local shard (floats) of the list. */
static void max_sizes(const cz_plan *plan, const ck_entry *e, size_t n, int64_t *full,
                      int64_t *local)
{
    *full = *local = 1;
    for (size_t i = 0; i < n; i++) {
        if (e[i].n > *full)
            *full = e[i].n;
        if (plan->params[e[i].param].numel > *local)
            *local = plan->params[e[i].param].numel;
    }
}

/* The per-rank buffers of a save or a load: a backend bounce buffer for the data plane and
 * host buffers for a whole tensor and a shard. */
typedef struct ck_bufs {
    float *dev, *host, *shard, *part;
    float *addend; /* a whole matrix's addend (plus_addend tensors) */
    int addend_of; /* the parameter it holds, -1 none */
    cz_comm_req *req;
} ck_bufs;

/* Elements of the largest parameter with a plus_addend tensor (whole); 0 when none has. */
static int64_t max_addend(const cz_plan *plan, const ck_entry *e, size_t n)
{
    int64_t most = 0;
    for (size_t i = 0; i < n; i++) {
        const cz_plan_param *p = &plan->params[e[i].param];
        int64_t whole = p->def.shape[0] * (p->def.ndim == 1 ? 1 : p->def.shape[1]);
        if (e[i].plus_addend && whole > most)
            most = whole;
    }
    return most;
}

static int bufs_open(cz_executor *ex, ck_bufs *b, int64_t full, int64_t local, int64_t addend,
                     cz_error *err)
{
    *b = (ck_bufs){.addend_of = -1};
    b->dev = cz__compute_alloc(&ex->compute, CZ_EXEC_MEM_OTHER, (size_t)full * sizeof(float));
    b->host = malloc((size_t)full * sizeof(float));
    b->shard = malloc((size_t)local * sizeof(float));
    b->part = malloc((size_t)full * sizeof(float));
    b->req = ex->planes.world.ops->req_create(&ex->planes.world);
    if (addend)
        b->addend = malloc((size_t)addend * sizeof(float));
    if (!b->dev || !b->host || !b->shard || !b->part || !b->req || (addend && !b->addend))
        return cz__error_set(err, CZ_ENOMEM,
                             "out of memory for the checkpoint's buffers (%lld floats)",
                             (long long)full);
    return CZ_OK;
}

static void bufs_close(cz_executor *ex, ck_bufs *b)
{
    if (b->dev)
        ex->compute.ops->release(&ex->compute, b->dev);
    if (b->req)
        ex->planes.world.ops->req_free(&ex->planes.world, b->req);
    free(b->host);
    free(b->shard);
    free(b->part);
    free(b->addend);
}

/* ---- save ---- */

/* Brings n floats of backend memory at `state` on world rank src (where src keeps them) into
 * host memory at `host` on rank 0: a download there, or over the data plane into rank 0's
 * bounce buffer first. */
static int fetch(cz_executor *ex, ck_bufs *b, const float *state, int64_t n, int src, void *host,
                 cz_error *err)
{
    cz_compute *c = &ex->compute;
    size_t bytes = (size_t)n * sizeof(float);
    if (src == 0)
        return ex->planes.world.rank == 0 ? c->ops->download(c, host, state, bytes, err) : CZ_OK;
    int rc;
    if ((rc = transfer(ex, b->req, state, b->dev, n, src, 0, err)) != CZ_OK ||
        ex->planes.world.rank != 0)
        return rc;
    return c->ops->download(c, host, b->dev, bytes, err);
}

/* Brings a PARTS tensor of matrix parameter e->param into dst (rank 0's host copy of the full
 * tensor) part by part from the ranks that hold the parts. */
static int save_parts(cz_executor *ex, ck_bufs *b, const ck_entry *e, const int64_t *grid,
                      float *dst, cz_error *err)
{
    const cz_plan_param *p = &ex->plan->params[e->param];
    cz_exec_part *v = NULL;
    int n = 0, rc;
    if ((rc = task_parts(ex, e->param, &v, &n, err)) != CZ_OK)
        goto done;
    for (int k = 0; k < n; k++) {
        /* A part's slot is its TP rank; a fully sharded plan's, the owner GPU of the shard
         * group (dp_owner * tp + its TP rank). */
        int t = ex->grid.sc ? 0 : v[k].slot % ex->grid.tp;
        int src = (int)grid[place(ex, p, p->dp_owner, t)];
        const float *buf = ex->planes.world.rank == src ? part_buffer(e, &v[k].part) : NULL;
        cz_block r = part_rect(e, &v[k].part);
        if ((rc = fetch(ex, b, buf, r.rows * r.cols, src, b->part, err)) != CZ_OK)
            goto done;
        if (ex->planes.world.rank == 0)
            rect_copy(dst, b->part, e->shape[1], &r, 1);
    }
done:
    free(v);
    return rc;
}

/* A plus_addend tensor as the file holds it (Distributed Shampoo's momentum): the host's part
 * (in dst, rank 0's copy of the tile) plus the optimizer's addend that the ranks keep beside
 * their shards of the matrix, gathered whole once per matrix. */
static int add_addend(cz_executor *ex, ck_bufs *b, const ck_entry *e, const int64_t *grid,
                      float *dst, cz_error *err)
{
    const cz_plan_param *p = &ex->plan->params[e->param];
    bool root = ex->planes.world.rank == 0;
    int rc;
    for (int t = 0; t < split_of(ex, p) && b->addend_of != e->param; t++) {
        int src = (int)grid[place(ex, p, p->dp_owner, t)];
        if ((rc = fetch(ex, b, ex->planes.world.rank == src ? addend_of(e->opt, e->param) : NULL,
                        p->numel, src, root ? b->shard : NULL, err)) != CZ_OK)
            return rc;
        if (root)
            cz__shard_unpack(p, split_of(ex, p), t, b->shard, b->addend);
    }
    b->addend_of = e->param;
    int64_t ld = p->def.shape[1];
    /* A zero part is not added: -0 + 0 would be +0, and a checkpoint just loaded (whose
     * addend restarts at zero) must save the bytes it was read from. */
    for (int64_t r = 0; root && r < e->shape[0]; r++)
        for (int64_t c = 0; c < e->shape[1]; c++) {
            float d = b->addend[(e->r0 + r) * ld + e->c0 + c];
            if (d != 0.0f)
                dst[r * e->shape[1] + c] += d;
        }
    return CZ_OK;
}

/* Whether this rank keeps the buffer of tensor e, from the plan alone: a piece of a SHARDED
 * tensor where it updates a piece of the parameter, a part of a PARTS tensor where it holds
 * that part, a HOSTED tensor where it holds the matrix's task. Checks that the optimizer has
 * each such buffer (the list and the state are built apart; a disagreement would leave a
 * transfer without its peer). */
static int check_entry(const cz_executor *ex, const ck_entry *e, cz_error *err)
{
    const cz_plan_param *p = &ex->plan->params[e->param];
    cz_exec_part *v = NULL;
    int64_t lo;
    int n = 0, rc;
    if (e->place == CZ_STATE_SHARDED) {
        if (my_owner(ex, p) >= 0 && cz__param_piece(ex->plan, p, my_owner(ex, p), &lo) > 0 &&
            !entry_buffer(e))
            return cz__error_set(err, CZ_EINTERNAL,
                                 "checkpoint: rank %d has no buffer for '%s.%s' it should keep",
                                 ex->planes.world.rank, p->def.name, e->suffix);
        return CZ_OK;
    }
    if ((rc = task_parts(ex, e->param, &v, &n, err)) != CZ_OK)
        goto done;
    for (int k = 0; k < n; k++) {
        if (!holds_part(ex, p, &v[k]))
            continue;
        if (e->place == CZ_STATE_PARTS ? !part_buffer(e, &v[k].part) : !entry_buffer(e)) {
            rc = cz__error_set(err, CZ_EINTERNAL,
                               "checkpoint: rank %d has no buffer for '%s.%s' (the part at "
                               "(%lld, %lld)) it should keep",
                               ex->planes.world.rank, p->def.name, e->suffix,
                               (long long)v[k].part.r0, (long long)v[k].part.c0);
            goto done;
        }
    }
done:
    free(v);
    return rc;
}

/* What a save and a load start with: the tensor list, the buffers sized for it, and the
 * check that this rank keeps what the list says it does. */
static int entries_open(cz_executor *ex, ck_entry **e, size_t *ne, ck_bufs *b, cz_error *err)
{
    int64_t max_full, max_local;
    int rc;
    if ((rc = entries_build(ex, e, ne, err)) != CZ_OK)
        return rc;
    max_sizes(ex->plan, *e, *ne, &max_full, &max_local);
    if ((rc = bufs_open(ex, b, max_full, max_local, max_addend(ex->plan, *e, *ne), err)) != CZ_OK)
        return rc;
    for (size_t i = 0; i < *ne; i++)
        if ((rc = check_entry(ex, &(*e)[i], err)) != CZ_OK)
            return rc;
    return CZ_OK;
}

/* A save in progress: the tensor list, the buffers, which world rank sends each HOSTED state
 * (the lowest that hosts it), the grid, and on rank 0 the file being assembled. */
typedef struct ck_save {
    ck_entry *e;
    size_t ne;
    ck_bufs b;
    int64_t *holder, *grid;
    char *header, *file;
    size_t hlen, data_bytes, total;
} ck_save;

/* What a rank checks and allocates alone before the ranks agree to save. */
static int save_prepare(cz_executor *ex, const char *path, ck_save *s, cz_error *err)
{
    const cz_plan *plan = ex->plan;
    bool root = ex->planes.world.rank == 0;
    int rc;
    if ((rc = check_usable(ex, "save_state", err)) != CZ_OK)
        return rc;
    if (root && (!path || !*path))
        return cz__error_set(err, CZ_EINVALID, "save_state: no checkpoint path given");
    if ((rc = entries_open(ex, &s->e, &s->ne, &s->b, err)) != CZ_OK)
        return rc;
    s->holder = calloc(plan->nparams ? plan->nparams : 1, sizeof *s->holder);
    s->grid =
        calloc((size_t)ex->grid.pp * (size_t)ex->grid.dp * (size_t)ex->grid.tp, sizeof *s->grid);
    if (!s->holder || !s->grid)
        return cz__error_set(err, CZ_ENOMEM, "save_state: out of memory");
    if (root) {
        if ((rc = cz__ckpt_header_build(plan, s->e, s->ne, ex->steps, &s->header, &s->hlen,
                                        &s->data_bytes, err)) != CZ_OK)
            return rc;
        s->total = 8 + s->hlen + s->data_bytes;
        if (!(s->file = malloc(s->total)))
            return cz__error_set(err, CZ_ENOMEM,
                                 "save_state: out of memory for a %zu-byte checkpoint on rank 0",
                                 s->total);
    }
    /* The state is final: whatever the last step issued on the compute stream is done before
     * the data plane reads it. */
    if (!ex->ev_params)
        return CZ_OK;
    ex->compute.ops->event_record(&ex->compute, ex->ev_params);
    return ex->compute.ops->event_sync(&ex->compute, ex->ev_params, err);
}

/* Which world rank sends each HOSTED state (the lowest that keeps it), and the grid. */
static int save_holders(cz_executor *ex, ck_save *s, cz_error *err)
{
    int rc;
    for (size_t i = 0; i < ex->plan->nparams; i++)
        s->holder[i] = INT64_MAX;
    for (size_t i = 0; i < s->ne; i++)
        if (s->e[i].place == CZ_STATE_HOSTED && entry_buffer(&s->e[i]))
            s->holder[s->e[i].param] = ex->planes.world.rank;
    if ((rc = ex->ctrl.ops->allreduce_min_i64(&ex->ctrl, s->holder, (int)ex->plan->nparams, err)) !=
        CZ_OK)
        return rc;
    return grid_build(ex, s->grid, err);
}

/* A SHARDED tensor into dst (rank 0): every TP rank's shard, put back together from the
 * pieces the DP ranks keep (the owner's whole shard, or in a split layout the pieces of the
 * elementwise buffer's even slices). */
static int save_sharded(cz_executor *ex, ck_save *s, const ck_entry *e, float *dst, cz_error *err)
{
    const cz_plan_param *p = &ex->plan->params[e->param];
    bool root = ex->planes.world.rank == 0;
    int rc;
    for (int t = 0; t < split_of(ex, p); t++) {
        for (int d = 0; d < owners_of(ex, p); d++) {
            int64_t lo, len = cz__param_piece(ex->plan, p, d, &lo);
            int src = (int)s->grid[place(ex, p, d, t)];
            if (len > 0 &&
                (rc = fetch(ex, &s->b, ex->planes.world.rank == src ? entry_buffer(e) : NULL, len,
                            src, root ? s->b.shard + lo : NULL, err)) != CZ_OK)
                return rc;
        }
        if (root)
            cz__shard_unpack(p, split_of(ex, p), t, s->b.shard, dst);
    }
    return CZ_OK;
}

/* A HOSTED tensor into dst (rank 0), from the lowest rank that keeps it, and its addend. */
static int save_hosted(cz_executor *ex, ck_save *s, const ck_entry *e, float *dst, cz_error *err)
{
    int src = (int)s->holder[e->param], rc;
    if (s->holder[e->param] == INT64_MAX)
        return cz__error_set(err, CZ_EINTERNAL,
                             "save_state: no rank holds the optimizer state of '%s'",
                             ex->plan->params[e->param].def.name);
    if ((rc = fetch(ex, &s->b, ex->planes.world.rank == src ? entry_buffer(e) : NULL, e->n, src,
                    dst, err)) != CZ_OK)
        return rc;
    return e->plus_addend ? add_addend(ex, &s->b, e, s->grid, dst, err) : CZ_OK;
}

/* Every tensor into rank 0's file, after its header. */
static int save_tensors(cz_executor *ex, ck_save *s, cz_error *err)
{
    bool root = ex->planes.world.rank == 0;
    size_t off = 8 + s->hlen;
    int rc;
    if (root)
        cz__ckpt_header_put(s->file, s->header, s->hlen);
    for (size_t i = 0; i < s->ne; i++) {
        const ck_entry *e = &s->e[i];
        float *dst = root ? (float *)(s->file + off) : NULL;
        off += (size_t)e->n * sizeof(float);
        rc = e->place == CZ_STATE_PARTS    ? save_parts(ex, &s->b, e, s->grid, dst, err)
             : e->place == CZ_STATE_HOSTED ? save_hosted(ex, s, e, dst, err)
                                           : save_sharded(ex, s, e, dst, err);
        if (rc != CZ_OK)
            return rc;
    }
    CZ_ASSERT(!root || off == s->total, err);
    return CZ_OK;
}

/* This rank's part of a save: its transfers of every tensor, and on rank 0 the file. */
static int save_write(cz_executor *ex, ck_save *s, const char *path, cz_error *err)
{
    int rc;
    if ((rc = save_tensors(ex, s, err)) != CZ_OK || ex->planes.world.rank != 0)
        return rc;
    return cz__file_write(path, s->file, s->total, err);
}

int cz_executor_save_state(cz_executor *ex, const char *path, cz_error *err)
{
    ck_save s = {0};
    int rc;
    if (!ex)
        return cz__error_set(err, CZ_EINVALID, "save_state: executor is NULL");
    ex->phase = (cz_phase){"saving the optimizer state", ex->steps};
    if (ex->bws_settle && (rc = ex->bws_settle(ex, "save_state", err)) != CZ_OK)
        return rc;
    /* A state that matches no step would be written with a step count none of its tensors
     * has: refused on every rank. */
    if ((rc = cz__exec_poison_agree(ex, "save_state", err)) != CZ_OK)
        return rc;
    rc = save_prepare(ex, path, &s, err);
    if ((rc = agree(ex, rc, "prepare the checkpoint", err)) != CZ_OK ||
        (rc = save_holders(ex, &s, err)) != CZ_OK)
        goto done;
    /* A failure on the way is shared here, so that no rank is left in a transfer: every rank
     * enters the agreement, whatever its own outcome. */
    rc = agree(ex, save_write(ex, &s, path, err), "save the optimizer-state checkpoint", err);
done:
    bufs_close(ex, &s.b);
    free(s.e);
    free(s.holder);
    free(s.grid);
    free(s.file);
    free(s.header);
    return rc;
}

/* ---- load ---- */

/* Puts every part of a PARTS tensor this rank holds into its state: its rectangle of the full
 * tensor (host memory). */
static int store_parts(cz_executor *ex, ck_bufs *b, const ck_entry *e, const float *full,
                       cz_error *err)
{
    const cz_plan_param *p = &ex->plan->params[e->param];
    cz_compute *c = &ex->compute;
    cz_exec_part *v = NULL;
    int n = 0, rc;
    if ((rc = task_parts(ex, e->param, &v, &n, err)) != CZ_OK)
        goto done;
    for (int k = 0; k < n; k++) {
        float *buf = holds_part(ex, p, &v[k]) ? part_buffer(e, &v[k].part) : NULL;
        if (!buf)
            continue;
        cz_block r = part_rect(e, &v[k].part);
        rect_copy(b->part, full, e->shape[1], &r, 0);
        if ((rc = c->ops->upload(c, buf, b->part, (size_t)(r.rows * r.cols) * sizeof *full, err)) !=
            CZ_OK)
            goto done;
    }
done:
    free(v);
    return rc;
}

/* Puts a whole tensor (host memory, on this rank) into this rank's state: all of it for a
 * HOSTED tensor, the parts it holds of a PARTS one; for a SHARDED tensor, the piece
 * [lo, lo + len) of this TP rank's shard (the whole shard unless a split layout cuts the
 * parameter between DP ranks). */
static int store(cz_executor *ex, ck_bufs *b, const ck_entry *e, const float *full, int64_t lo,
                 int64_t len, cz_error *err)
{
    cz_compute *c = &ex->compute;
    if (e->place == CZ_STATE_PARTS)
        return store_parts(ex, b, e, full, err);
    float *buf = entry_buffer(e);
    if (!buf)
        return CZ_OK; /* a TP rank that does not host this matrix */
    if (e->place == CZ_STATE_HOSTED)
        return c->ops->upload(c, buf, full, (size_t)e->n * sizeof *full, err);
    const cz_plan_param *p = &ex->plan->params[e->param];
    cz__shard_pack(p, split_of(ex, p), my_split(ex, p), full, b->shard);
    return c->ops->upload(c, buf, b->shard + lo, (size_t)len * sizeof *full, err);
}

/* A plus_addend tensor in the file is the whole of it (the host's part and the addend): it is
 * loaded into the host's part and every addend starts again from zero. */
static int clear_addends(cz_executor *ex, ck_bufs *b, cz_error *err)
{
    int rc;
    for (size_t i = 0; i < ex->plan->nparams; i++) {
        const cz_plan_param *p = &ex->plan->params[i];
        float *addend = addend_of(opt_of(ex, p), (int)i);
        if (!addend)
            continue;
        memset(b->shard, 0, (size_t)p->numel * sizeof(float));
        if ((rc = ex->compute.ops->upload(&ex->compute, addend, b->shard,
                                          (size_t)p->numel * sizeof(float), err)) != CZ_OK)
            return rc;
    }
    return CZ_OK;
}

/* A load in progress: the tensor list, the buffers, the grid, and on rank 0 the file and
 * where each tensor's data starts in it. */
typedef struct ck_load {
    ck_entry *e;
    size_t ne;
    ck_bufs b;
    size_t *offs;
    int64_t *grid;
    char *data;
    size_t len;
    int64_t steps;
} ck_load;

/* What a rank checks and allocates alone before the ranks agree to load; rank 0 reads and
 * checks the file. */
static int load_prepare(cz_executor *ex, const char *path, ck_load *l, cz_error *err)
{
    int rc;
    if ((rc = check_usable(ex, "load_state", err)) != CZ_OK ||
        (rc = entries_open(ex, &l->e, &l->ne, &l->b, err)) != CZ_OK)
        return rc;
    l->offs = calloc(l->ne ? l->ne : 1, sizeof *l->offs);
    l->grid =
        calloc((size_t)ex->grid.pp * (size_t)ex->grid.dp * (size_t)ex->grid.tp, sizeof *l->grid);
    if (!l->offs || !l->grid)
        return cz__error_set(err, CZ_ENOMEM, "load_state: out of memory");
    if (ex->planes.world.rank != 0)
        return CZ_OK;
    if (!path || !*path)
        return cz__error_set(err, CZ_EINVALID, "load_state: no checkpoint path given");
    if ((rc = cz__ckpt_read(ex->plan, l->e, l->ne, path, &l->data, &l->len, err)) != CZ_OK)
        return rc;
    return cz__ckpt_parse(ex->plan, l->e, l->ne, path, l->data, l->len, l->offs, &l->steps, err);
}

/* Tensor i of the list from rank 0 to every rank that keeps a part of it: every TP rank of
 * each DP rank that keeps a piece of the parameter's state gets the whole tensor and keeps its
 * part (the owner of a whole parameter, or in a split layout every DP rank whose slice of the
 * elementwise buffer holds a piece of it). */
static int load_tensor(cz_executor *ex, ck_load *l, size_t i, cz_error *err)
{
    const ck_entry *e = &l->e[i];
    const cz_plan_param *p = &ex->plan->params[e->param];
    size_t bytes = (size_t)e->n * sizeof(float);
    bool root = ex->planes.world.rank == 0, staged = false; /* rank 0's bounce buffer holds it */
    int rc;
    if (root) /* the file's data need not be aligned for floats: copy it out */
        memcpy(l->b.host, l->data + l->offs[i], bytes);
    for (int d = 0; d < owners_of(ex, p); d++) {
        int64_t lo, len = cz__param_piece(ex->plan, p, d, &lo);
        for (int t = 0; t < split_of(ex, p) && len > 0; t++) {
            int dst = (int)l->grid[place(ex, p, d, t)];
            if (dst == 0) {
                if (root && (rc = store(ex, &l->b, e, l->b.host, lo, len, err)) != CZ_OK)
                    return rc;
                continue;
            }
            if (root && !staged) {
                if ((rc = ex->compute.ops->upload(&ex->compute, l->b.dev, l->b.host, bytes, err)) !=
                    CZ_OK)
                    return rc;
                staged = true;
            }
            if ((rc = transfer(ex, l->b.req, l->b.dev, l->b.dev, e->n, 0, dst, err)) != CZ_OK)
                return rc;
            if (ex->planes.world.rank == dst &&
                ((rc = ex->compute.ops->download(&ex->compute, l->b.host, l->b.dev, bytes, err)) !=
                     CZ_OK ||
                 (rc = store(ex, &l->b, e, l->b.host, lo, len, err)) != CZ_OK))
                return rc;
        }
    }
    return CZ_OK;
}

/* This rank's part of a load: the addends cleared, then every tensor into its state. */
static int load_tensors(cz_executor *ex, ck_load *l, cz_error *err)
{
    int rc;
    if ((rc = clear_addends(ex, &l->b, err)) != CZ_OK)
        return rc;
    for (size_t i = 0; i < l->ne; i++)
        if ((rc = load_tensor(ex, l, i, err)) != CZ_OK)
            return rc;
    return CZ_OK;
}

int cz_executor_load_state(cz_executor *ex, const char *path, cz_error *err)
{
    ck_load l = {.steps = INT64_MAX};
    int rc;
    if (!ex)
        return cz__error_set(err, CZ_EINVALID, "load_state: executor is NULL");
    ex->phase = (cz_phase){"loading the optimizer state", ex->steps};
    if (ex->bws_settle && (rc = ex->bws_settle(ex, "load_state", err)) != CZ_OK)
        return rc;
    rc = load_prepare(ex, path, &l, err);
    /* Rank 0's step count to everyone (the others hold INT64_MAX). */
    if ((rc = agree(ex, rc, "read the optimizer-state checkpoint", err)) != CZ_OK ||
        (rc = ex->ctrl.ops->allreduce_min_i64(&ex->ctrl, &l.steps, 1, err)) != CZ_OK ||
        (rc = grid_build(ex, l.grid, err)) != CZ_OK)
        goto done;
    /* A failure on the way is shared here, so that no rank is left in a transfer: every rank
     * enters the agreement, whatever its own outcome. */
    if ((rc = agree(ex, load_tensors(ex, &l, err), "load the optimizer-state checkpoint", err)) ==
        CZ_OK) {
        ex->steps = l.steps;
        ex->poison.on = false; /* the whole state is the file's now */
    } else {
        /* Some tensors may be the file's, others not. */
        cz__exec_poison(ex, "load_state failed while distributing %s", path ? path : "the file");
    }
done:
    bufs_close(ex, &l.b);
    free(l.e);
    free(l.offs);
    free(l.grid);
    free(l.data);
    return rc;
}
