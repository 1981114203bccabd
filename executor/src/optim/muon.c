/* Muon on whole matrices: momentum, per-block Newton-Schulz orthogonalization (same-shape
 * blocks batched), the update's scale (rms or shape), decoupled weight decay. The update depends
 * only on the whole matrix, never on how it was sharded. */
#include "alloc.h"
#include "canzona_exec.h"
#include "comm.h"
#include "compute.h"
#include "cz_format.h"
#include "muon.h"
#include "shard.h"
#include "ns_coop.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

int cz__muon_hparams_from_config(cz_muon_hparams *h, const cz_exec_config *cfg, cz_error *err)
{
    h->lr = cfg->lr;
    h->momentum = cfg->muon.momentum;
    h->weight_decay = cfg->weight_decay;
    h->eps = cfg->muon.ns_eps;
    h->scale_coeff = cfg->muon.scale_coeff;
    h->nesterov = cfg->muon.nesterov;
    h->ns_steps = cfg->muon.ns_steps;
    h->scaling = cfg->muon.scaling;
    h->normuon = cfg->normuon.mode;
    h->nm_beta2 = cfg->normuon.beta2;
    h->nm_eps = cfg->normuon.eps;
    if (cfg->normuon.mode != CZ_NORMUON_NONE && cfg->normuon.mode != CZ_NORMUON_ROW &&
        cfg->normuon.mode != CZ_NORMUON_COL)
        return cz__error_set(err, CZ_EINVALID,
                             "normuon.mode = %d; expected CZ_NORMUON_NONE (0), CZ_NORMUON_ROW (1) "
                             "or CZ_NORMUON_COL (2)",
                             (int)cfg->normuon.mode);
    /* beta2 = 1 would never move v from its start at 0: every line divided by eps. */
    if (!(cfg->normuon.beta2 >= 0.0f && cfg->normuon.beta2 < 1.0f))
        return cz__error_set(err, CZ_EINVALID, "normuon.beta2 = %g; expected a value in [0, 1)",
                             (double)cfg->normuon.beta2);
    if (!(cfg->normuon.eps > 0.0f) || !isfinite(cfg->normuon.eps))
        return cz__error_set(err, CZ_EINVALID, "normuon.eps = %g; expected a finite value > 0",
                             (double)cfg->normuon.eps);
    if (cfg->muon.scaling != CZ_MUON_SCALE_RMS && cfg->muon.scaling != CZ_MUON_SCALE_SHAPE)
        return cz__error_set(err, CZ_EINVALID,
                             "muon_scaling = %d; expected CZ_MUON_SCALE_RMS (0) or "
                             "CZ_MUON_SCALE_SHAPE (1)",
                             (int)cfg->muon.scaling);
    /* The default is a value no rate takes, so that 0 is a rate (a warm-up's first step). */
    if (cfg->lr == CZ_EXEC_LR_DEFAULT)
        h->lr = cfg->muon.scaling == CZ_MUON_SCALE_SHAPE ? CZ_MUON_LR_SHAPE : CZ_MUON_LR_RMS;
    else if (!(cfg->lr >= 0.0f) || !isfinite(cfg->lr))
        return cz__error_set(err, CZ_EINVALID,
                             "lr = %g; expected a finite value >= 0 (0 is a rate of 0; leave "
                             "lr at CZ_EXEC_LR_DEFAULT for the optimizer's default)",
                             (double)cfg->lr);
    int rc = cz__ns_coeffs_parse(cfg->muon.ns_coeffs, &h->coeffs, err);
    if (rc != CZ_OK)
        return rc;
    /* A table implies its iteration count: a different ns_steps is a mistake, not a choice. */
    if ((rc = cz__ns_coeffs_check_steps(&h->coeffs, cfg->muon.ns_steps, cfg->muon.ns_coeffs,
                                        err)) != CZ_OK)
        return rc;
    /* A zero eps divides a zero gradient block by zero: the update would be NaN. */
    if (!(cfg->muon.ns_eps > 0.0f) || !isfinite(cfg->muon.ns_eps))
        return cz__error_set(err, CZ_EINVALID, "ns_eps = %g; expected a finite value > 0",
                             (double)cfg->muon.ns_eps);
    return CZ_OK;
}

float cz__muon_scale(const cz_muon_hparams *h, int64_t rows, int64_t cols)
{
    if (h->scaling == CZ_MUON_SCALE_SHAPE) {
        double ratio = (double)rows / (double)cols;
        return (float)sqrt(ratio > 1.0 ? ratio : 1.0);
    }
    return h->scale_coeff * (float)sqrt((double)(rows > cols ? rows : cols));
}

static int blk_cmp(const void *x, const void *y)
{
    const cz_muon_blk *a = x, *b = y;
    if (a->r != b->r)
        return a->r < b->r ? -1 : 1;
    if (a->c != b->c)
        return a->c < b->c ? -1 : 1;
    if (a->mat != b->mat)
        return a->mat < b->mat ? -1 : 1;
    if (a->b.r0 != b->b.r0)
        return a->b.r0 < b->b.r0 ? -1 : 1;
    return a->b.c0 < b->b.c0 ? -1 : (a->b.c0 > b->b.c0);
}

/* The work floats Newton-Schulz needs for one r x c block (r <= c) of a batch: X X^T and B
 * (r x r each) and Y (r x c). */
static int64_t ns_work_floats(int64_t r, int64_t c)
{
    return 2 * r * r + r * c;
}

int cz__muon_prepare_parts(cz_muon_prep *mp, const cz_plan_param *const *params, const int *blocks,
                           const cz_block *regions, int n, cz_error *err)
{
    int64_t cap = 0;
    *mp = (cz_muon_prep){0};
    /* The units (a per-head matrix's heads, else the blocks, else the whole) are counted and
     * placed without a per-parameter array, so no number of heads is too many. */
    for (int i = 0; i < n; i++) {
        const cz_param_def *d = &params[i]->def;
        const cz_block *rg = regions && regions[i].rows >= 0 ? &regions[i] : NULL;
        cap += rg ? (d->head_dim == 0 ? rg->rows : rg->cols) / d->head_size
                  : cz_task_units(d, blocks ? blocks[i] : -1, cz_param_per_head(d, true));
    }
    if (cap > INT_MAX)
        return cz__error_set(err, CZ_EUNSUPPORTED,
                             "%lld Muon matrices in one task list; at most %d are supported",
                             (long long)cap, INT_MAX);
    mp->blks = cz__exec_calloc(cap > 0 ? (size_t)cap : 1, sizeof *mp->blks);
    if (!mp->blks)
        return cz__error_set(err, CZ_ENOMEM, "out of memory for %lld Muon blocks", (long long)cap);
    for (int i = 0; i < n; i++) {
        const cz_param_def *d = &params[i]->def;
        int block = blocks ? blocks[i] : -1;
        bool ph = cz_param_per_head(d, true);
        const cz_block *rg = regions && regions[i].rows >= 0 ? &regions[i] : NULL;
        int64_t k = cz_task_units(d, block, ph), br0, bc0, brows, bcols;
        /* A block task's data is the block stored on its own, at the origin, and a TP-local
         * part's its region: units are placed relative to that corner, with its row length. */
        cz_task_region(d, block, &br0, &bc0, &brows, &bcols);
        if (rg)
            br0 = rg->r0, bc0 = rg->c0, bcols = rg->cols,
            k = (d->head_dim == 0 ? rg->rows : rg->cols) / d->head_size;
        int64_t ld = block >= 0 || rg ? bcols : d->ndim == 1 ? 1 : d->shape[1];
        if (block < 0 && !rg)
            br0 = bc0 = 0;
        for (int64_t j = 0; j < k; j++) {
            cz_muon_blk *r = &mp->blks[mp->nblk++];
            cz_block u;
            if (rg) /* whole heads of the region, from its corner */
                u = d->head_dim == 0 ? (cz_block){j * d->head_size, 0, d->head_size, rg->cols}
                                     : (cz_block){0, j * d->head_size, rg->rows, d->head_size};
            else
                cz_task_unit(d, block, ph, j, &u.r0, &u.c0, &u.rows, &u.cols), u.r0 -= br0,
                    u.c0 -= bc0;
            r->mat = i;
            r->b = u;
            r->ld = ld;
            r->transposed = u.rows > u.cols;
            r->r = r->transposed ? u.cols : u.rows;
            r->c = r->transposed ? u.rows : u.cols;
        }
    }
    /* Stable grouping by shape so the batch order (and thus the result) is deterministic. */
    qsort(mp->blks, (size_t)mp->nblk, sizeof *mp->blks, blk_cmp);
    for (int s = 0; s < mp->nblk;) {
        int e = cz__muon_batch_end(mp, s);
        int64_t r = mp->blks[s].r, c = mp->blks[s].c, cnt = e - s;
        if (cnt * r * c > mp->batch_n)
            mp->batch_n = cnt * r * c;
        if (cnt * ns_work_floats(r, c) > mp->work_n)
            mp->work_n = cnt * ns_work_floats(r, c);
        s = e;
    }
    return CZ_OK;
}

int64_t cz__muon_batch_cap(int64_t r, int64_t c)
{
    int64_t per = r * c + ns_work_floats(r, c); /* the block in the batch, and its work */
    return per > 0 && CZ_MUON_BATCH_FLOATS / per > 1 ? CZ_MUON_BATCH_FLOATS / per : 1;
}

int cz__muon_batch_end(const cz_muon_prep *mp, int s)
{
    int64_t cap = cz__muon_batch_cap(mp->blks[s].r, mp->blks[s].c);
    int e = s;
    while (e < mp->nblk && e - s < cap && mp->blks[e].r == mp->blks[s].r &&
           mp->blks[e].c == mp->blks[s].c)
        e++;
    return e;
}

int cz__muon_prepare_tasks(cz_muon_prep *mp, const cz_plan_param *const *params, const int *blocks,
                           int n, cz_error *err)
{
    return cz__muon_prepare_parts(mp, params, blocks, NULL, n, err);
}

int cz__muon_prepare(cz_muon_prep *mp, const cz_plan_param *const *params, int n, cz_error *err)
{
    return cz__muon_prepare_tasks(mp, params, NULL, n, err);
}

void cz__muon_prep_free(cz_muon_prep *mp)
{
    cz__exec_free(mp->blks);
    *mp = (cz_muon_prep){0};
}

int64_t cz__muon_normuon_work(const cz_muon_prep *mp)
{
    int64_t most = 0;
    for (int i = 0; i < mp->nblk; i++) {
        int64_t n = 2 * (mp->blks[i].r > mp->blks[i].c ? mp->blks[i].r : mp->blks[i].c) + 1;
        most = n > most ? n : most;
    }
    return most;
}

int cz__muon_run(cz_compute *c, const cz_muon_hparams *h, const cz_muon_prep *mp,
                 const float *const *in, float *const *out, float *batch, float *work,
                 double *nwork, void (*progress)(void *), void *ctx, cz_error *err)
{
    const cz_compute_ops *ops = c->ops;
    for (int s = 0; s < mp->nblk;) {
        int e = cz__muon_batch_end(mp, s);
        int cnt = e - s;
        int64_t sz = mp->blks[s].r * mp->blks[s].c;
        for (int k = 0; k < cnt; k++) {
            const cz_muon_blk *br = &mp->blks[s + k];
            ops->block_load(c, batch + k * sz, in[br->mat] + br->b.r0 * br->ld + br->b.c0, br->ld,
                            br->b.rows, br->b.cols, br->transposed, h->eps);
        }
        int rc = ops->ns_batched(c, batch, cnt, mp->blks[s].r, mp->blks[s].c, &h->coeffs,
                                 h->ns_steps, work, err);
        if (rc)
            return rc;
        /* NorMuon between the orthogonalization and the scale, as Dion applies it (the scale
         * is its adjusted learning rate, applied to the normalized update). A line of the unit
         * as stored is a column of the batch's matrix when the unit is stored transposed. */
        for (int k = 0; k < cnt && h->normuon != CZ_NORMUON_NONE; k++) {
            const cz_muon_blk *br = &mp->blks[s + k];
            if (br->v)
                ops->normuon(c, batch + k * sz, br->r, br->c,
                             (h->normuon == CZ_NORMUON_COL) != (br->transposed != 0), br->v, br->vs,
                             h->nm_beta2, h->nm_eps, nwork);
        }
        for (int k = 0; k < cnt; k++) {
            const cz_muon_blk *br = &mp->blks[s + k];
            float scale = cz__muon_scale(h, br->b.rows, br->b.cols);
            ops->block_store(c, out[br->mat] + br->b.r0 * br->ld + br->b.c0, br->ld, batch + k * sz,
                             br->b.rows, br->b.cols, br->transposed, scale);
        }
        if (progress)
            progress(ctx);
        s = e;
    }
    return CZ_OK;
}

void cz__muon_coop_sizes(const cz_muon_coop *b, int64_t *x_n, int64_t *gram_n, int64_t *work_n)
{
    *x_n = b->count * b->a * b->n;
    *gram_n = b->count * cz_ns_packed_len(b->a);
    /* [the full Grams: a^2][Y: a n][B: a^2] per matrix, each region the batch's matrices back
     * to back (ns_poly_end's B only in the standard form, but the size is the same). */
    *work_n = b->count * ns_work_floats(b->a, b->n);
}

/* Waits for the all-reduces of panels from .. posted - 1 after a failure, so that nothing is
 * left writing into the batch's buffers; the first error stays the one reported. */
static void drain_panels(cz_plane *pl, cz_comm_req *const *reqs, int from, int posted)
{
    cz_error tmp;
    for (int p = from; p < posted; p++)
        pl->ops->wait(pl, reqs[p], &tmp);
}

/* Cooperative Newton-Schulz: the oriented a x b matrix X is split by columns (the long side)
 * among the k members, X = [X_0 .. X_k-1]. Its norm is the square root of the sum of the
 * members' sums of squares, and X X^T = sum_j X_j X_j^T, so with both sums all-reduced every
 * member computes the same A and updates its own columns, X_j = a X_j + (b A + c A A) X_j:
 * exactly the single-process iteration, column block by column block, up to rounding.
 *
 * The Gram travels packed (its upper triangle) in b->panels row panels (ns_coop.h), as many as
 * the planner chose for the task (the count its cost model found quickest, in the plan).
 * Each panel's all-reduce is posted as soon as the panel is computed, so it runs while the
 * member computes the next panels; then, panel by panel, the member waits for the sum, unpacks
 * it and, in the A(AX) form (a slice narrower than a), computes those rows of Y = A X_j at
 * once, which only needs A's rows of that panel: the later panels' all-reduces run meanwhile.
 * The iteration ends with X_j = a X_j + b Y + c A Y (A(AX)) or with B = b A + c A A applied
 * (standard form, which needs the whole A). The planner's cost model charges this same
 * pipeline (cz__coop_time_of). */
int cz__muon_coop_run(cz_compute *c, cz_plane *pl, const cz_muon_hparams *h, const cz_muon_coop *b,
                      const float *const *in, float *const *out, float *x, float *gram, float *work,
                      double *sq, cz_event *ev, cz_comm_req *const *reqs, void (*progress)(void *),
                      void *ctx, cz_error *err)
{
    const cz_compute_ops *ops = c->ops;
    int64_t a = b->a, n = b->n, sz = a * n, pn = b->prows * b->pcols;
    int panels = b->panels, aax = cz_ns_coop_use_aax(a, n);
    float *full = work, *y = full + b->count * a * a, *bm = y + b->count * sz;
    for (int i = 0; i < b->count; i++)
        ops->sumsq(c, in[i], pn, sq + i);
    ops->event_record(c, ev);
    int rc = pl->ops->allreduce_sum(pl, sq, (size_t)b->count, 1, ev, err);
    if (rc)
        return rc;
    for (int i = 0; i < b->count; i++)
        ops->block_load_sq(c, x + i * sz, in[i], b->pcols, b->prows, b->pcols, b->transposed,
                           h->eps, sq + i);
    for (int s = 0; s < h->ns_steps; s++) {
        float *pan = gram;
        for (int p = 0; p < panels; p++) {
            int64_t r0 = cz_coop_panel_row(a, panels, p), r1 = cz_coop_panel_row(a, panels, p + 1);
            ops->ns_gram_rows(c, x, b->count, a, n, r0, r1, full, pan);
            ops->event_record(c, ev);
            rc = pl->ops->iallreduce_sum(pl, pan, (size_t)(b->count * cz_ns_panel_len(a, r0, r1)),
                                         ev, reqs[p], err);
            if (rc) {
                drain_panels(pl, reqs, 0, p);
                return rc;
            }
            for (int q = 0; q <= p; q++) /* MPI moves its transfers only inside MPI calls */
                pl->ops->progress(pl, reqs[q]);
            pan += b->count * cz_ns_panel_len(a, r0, r1);
        }
        pan = gram;
        for (int p = 0; p < panels; p++) {
            int64_t r0 = cz_coop_panel_row(a, panels, p), r1 = cz_coop_panel_row(a, panels, p + 1);
            rc = pl->ops->wait(pl, reqs[p], err);
            if (rc) {
                drain_panels(pl, reqs, p + 1, panels);
                return rc;
            }
            ops->ns_unpack_rows(c, full, pan, b->count, a, r0, r1);
            if (aax)
                ops->ns_poly_rows(c, x, full, y, b->count, a, n, r0, r1);
            if (p + 1 < panels)
                pl->ops->progress(pl, reqs[p + 1]);
            pan += b->count * cz_ns_panel_len(a, r0, r1);
        }
        cz_ns_triple t = cz__ns_coeffs_at(&h->coeffs, s);
        ops->ns_poly_end(c, x, full, y, bm, b->count, a, n, &t);
        if (progress)
            progress(ctx);
    }
    /* The scale is the whole region's: every member applies the same. */
    float scale = cz__muon_scale(h, b->rows, b->cols);
    for (int i = 0; i < b->count; i++)
        ops->block_store(c, out[i], b->pcols, x + i * sz, b->prows, b->pcols, b->transposed, scale);
    return CZ_OK;
}

int cz__muon_orthogonalize(cz_compute *c, const cz_muon_hparams *h,
                           const cz_plan_param *const *params, const float *const *in,
                           float *const *out, int n, cz_error *err)
{
    cz_muon_prep mp;
    float *batch = NULL, *work = NULL;
    int rc = cz__muon_prepare(&mp, params, n, err);
    if (rc)
        return rc;
    batch = cz__compute_alloc(c, CZ_EXEC_MEM_NS, (size_t)(mp.batch_n + 1) * sizeof(float));
    work = cz__compute_alloc(c, CZ_EXEC_MEM_NS, (size_t)(mp.work_n + 1) * sizeof(float));
    if (!batch || !work) {
        rc = cz__error_set(err, CZ_ENOMEM, "out of memory for a Newton-Schulz batch of %lld floats",
                           (long long)(mp.batch_n + mp.work_n));
        goto done;
    }
    rc = cz__muon_run(c, h, &mp, in, out, batch, work, NULL, NULL, NULL, err);
done:
    if (batch)
        c->ops->release(c, batch);
    if (work)
        c->ops->release(c, work);
    cz__muon_prep_free(&mp);
    return rc;
}

/* ---- the optimizer table ---- */
/* A part this rank computes, with its momentum (part-sized, backend memory) and, under
 * NorMuon, its rectangle of the parameter's second-moment tensor (nm_rect) at v. */
typedef struct muon_part {
    cz_opt_part x;
    float *mom;
    float *v;
} muon_part;

/* A batch of cooperative tasks of one shape and slot set, in the order of their first task. */
typedef struct coop_batch {
    cz_muon_coop shape;
    int width, first_slot;
    cz_plane *plane;          /* the members' sub-plane */
    cz_comm_req *const *reqs; /* its CZ_COOP_MAX_PANELS requests */
    cz_event *ready;          /* recorded before each all-reduce */
    const float **ins;        /* the member's slices (gradients) and their updates */
    float **outs;
} coop_batch;

/* Muon's layout of one micro-group (what its cz_opt_group points to): its parts in the group's
 * order, the hosted (width 1) ones as one Newton-Schulz preparation, the cooperative ones in
 * batches. */
typedef struct muon_group muon_group;
struct muon_group {
    muon_group *next;
    muon_part *parts;
    int nparts;
    const cz_plan_param **hp;
    int *hb;
    cz_block *hr; /* a TP-local part's region; rows -1: the task's block (or whole) */
    int *hk;      /* the index in parts of each hosted one */
    const float **hin;
    float **hout;
    int nh1;
    cz_muon_prep prep;
    coop_batch *coop;
    int ncoop;
};

typedef struct muon_impl {
    cz_muon_hparams h;
    muon_group *groups, *last;
    /* The largest batch, work, packed Grams (floats) and sums (doubles) any group needs. */
    int64_t batch_n, work_n, gram_n, sq_n, nwork_n;
    float *batch, *work, *gram;
    double *sq, *nwork;
} muon_impl;

static muon_impl *impl_of(const cz_optim *o)
{
    return o->impl;
}

const cz_muon_hparams *cz__muon_hparams_of(const cz_optim *o)
{
    return &impl_of(o)->h;
}

/* n floats of backend memory, one more so that n may be 0. */
static float *falloc(cz_compute *c, cz_exec_mem_kind kind, int64_t n)
{
    return cz__compute_alloc(c, kind, (size_t)(n + 1) * sizeof(float));
}

static void brelease(cz_compute *c, void *p)
{
    if (p)
        c->ops->release(c, p);
}

static int muon_create(cz_optim *o, const cz_exec_config *cfg, cz_error *err)
{
    muon_impl *m = cz__exec_calloc(1, sizeof *m);
    if (!m)
        return cz__error_set(err, CZ_ENOMEM, "out of memory for the executor's tables");
    o->impl = m;
    int rc = cz__muon_hparams_from_config(&m->h, cfg, err);
    if (rc == CZ_OK && m->h.normuon != CZ_NORMUON_NONE && !o->compute->ops->normuon)
        return cz__error_set(err, CZ_EUNSUPPORTED,
                             "NorMuon (normuon.mode = %s): the '%s' compute backend has no "
                             "normuon operation; use the cpu or cuda backend of this build",
                             m->h.normuon == CZ_NORMUON_ROW ? "row" : "col", o->compute->ops->name);
    return rc;
}

/* ---- NorMuon's second moment ----
 * One EMA per line of every unit Muon orthogonalizes (cz_task_units: the heads, else the
 * declared blocks, else the whole matrix), as Dion keeps it per head and per split block. The
 * units of a matrix cut it along one dimension only (heads lie inside blocks, along the
 * blocks' dimension), so the parameter's EMA is one matrix: under row normalization one
 * column per unit along the columns (rows x 1 unless the units cut the columns), under column
 * normalization one row per unit along the rows (1 x cols unless they cut the rows). A task's
 * part is whole units, so its share is a rectangle of that matrix (nm_rect). */

/* How many units of d start before pos along dimension dim (pos a unit boundary): the index
 * of the unit that starts at pos, or the count of units for pos = the dimension's length. */
static int64_t unit_index(const cz_param_def *d, int dim, int64_t pos)
{
    if (cz_param_per_head(d, true))
        return d->head_dim == dim ? pos / d->head_size : pos > 0;
    if (d->nblocks > 0 && d->block_sizes && d->block_dim == dim) {
        int64_t k = 0, at = 0;
        while (k < d->nblocks && at < pos)
            at += d->block_sizes[k++];
        return k;
    }
    return pos > 0;
}

static int64_t param_cols(const cz_param_def *d)
{
    return d->ndim == 1 ? 1 : d->shape[1];
}

/* The rectangle of d's second-moment tensor that the region r of d (whole units) owns. */
static cz_block nm_rect(const cz_param_def *d, cz_normuon_mode mode, const cz_block *r)
{
    if (mode == CZ_NORMUON_ROW) {
        int64_t c0 = unit_index(d, 1, r->c0);
        return (cz_block){r->r0, c0, r->rows, unit_index(d, 1, r->c0 + r->cols) - c0};
    }
    int64_t r0 = unit_index(d, 0, r->r0);
    return (cz_block){r0, r->c0, unit_index(d, 0, r->r0 + r->rows) - r0, r->cols};
}

/* Points every NorMuon unit of the group's hosted preparation at its lines of its part's v.
 * A unit's position in its part's data (b.r0, b.c0) plus the part's corner is its place in the
 * matrix; under row normalization its EMA is a column of the part's rectangle (stride: the
 * rectangle's width), under column normalization a row. */
static void nm_attach(const muon_impl *m, muon_group *g)
{
    for (int i = 0; i < g->prep.nblk; i++) {
        cz_muon_blk *br = &g->prep.blks[i];
        const muon_part *k = &g->parts[g->hk[br->mat]];
        const cz_param_def *d = &k->x.p->def;
        cz_block rect = nm_rect(d, m->h.normuon, &k->x.x.part);
        int64_t r0 = k->x.x.part.r0 + br->b.r0, c0 = k->x.x.part.c0 + br->b.c0;
        if (m->h.normuon == CZ_NORMUON_ROW) {
            br->v = k->v + br->b.r0 * rect.cols + (unit_index(d, 1, c0) - rect.c0);
            br->vs = rect.cols;
        } else {
            br->v = k->v + (unit_index(d, 0, r0) - rect.r0) * rect.cols + br->b.c0;
            br->vs = 1;
        }
    }
}

static void group_free(cz_compute *c, muon_group *g)
{
    for (int i = 0; g->parts && i < g->nparts; i++)
        brelease(c, g->parts[i].mom), brelease(c, g->parts[i].v);
    for (int b = 0; g->coop && b < g->ncoop; b++) {
        cz__exec_free(g->coop[b].ins);
        cz__exec_free(g->coop[b].outs);
    }
    cz__exec_free(g->coop);
    cz__exec_free(g->parts), cz__exec_free(g->hp), cz__exec_free(g->hb), cz__exec_free(g->hr);
    cz__exec_free(g->hin), cz__exec_free(g->hout), cz__exec_free(g->hk);
    cz__muon_prep_free(&g->prep);
    cz__exec_free(g);
}

static void muon_destroy(cz_optim *o)
{
    muon_impl *m = impl_of(o);
    if (!m)
        return;
    for (muon_group *g = m->groups, *next; g; g = next) {
        next = g->next;
        group_free(o->compute, g);
    }
    brelease(o->compute, m->batch);
    brelease(o->compute, m->work);
    brelease(o->compute, m->gram);
    brelease(o->compute, m->sq);
    brelease(o->compute, m->nwork);
    cz__exec_free(m);
}

static void muon_set_lr(cz_optim *o, float lr)
{
    impl_of(o)->h.lr = lr;
}

static void muon_set_weight_decay(cz_optim *o, float wd)
{
    impl_of(o)->h.weight_decay = wd;
}

static void muon_set_momentum(cz_optim *o, float mu, float unused)
{
    (void)unused;
    impl_of(o)->h.momentum = mu;
}

/* The sub-plane of the members of a cooperative task of width k; -1 when there is none. */
static int width_index(const cz_coop_planes *cp, int k)
{
    for (int i = 0; i < cp->n; i++)
        if (cp->widths[i] == k)
            return i;
    return -1;
}

/* The batch a cooperative part joins: same width, first slot, shapes and Gram panels, in the
 * order of their first task (the same order on every member, so the all-reduces never
 * cross); a new one when none matches. */
static int coop_join(const cz_opt_part *x, const cz_coop_planes *cp, muon_group *g, size_t cap,
                     coop_batch **out, cz_error *err)
{
    const cz_exec_part *e = &x->x;
    bool tall = e->region.rows > e->region.cols;
    cz_muon_coop sh = {.rows = e->region.rows,
                       .cols = e->region.cols,
                       .prows = e->part.rows,
                       .pcols = e->part.cols,
                       .transposed = tall};
    sh.a = tall ? e->region.cols : e->region.rows;
    sh.n = tall ? e->part.rows : e->part.cols;
    /* 1 .. min(CZ_COOP_MAX_PANELS, a), as the sub-plane's requests need: the reader and the
     * structural check (cz__exec_plan_check, at create) refuse any other count. */
    sh.panels = e->panels;
    int first = e->slot - e->member, b = 0;
    while (b < g->ncoop &&
           !(g->coop[b].width == e->width && g->coop[b].first_slot == first &&
             g->coop[b].shape.rows == sh.rows && g->coop[b].shape.cols == sh.cols &&
             g->coop[b].shape.prows == sh.prows && g->coop[b].shape.pcols == sh.pcols &&
             g->coop[b].shape.panels == sh.panels))
        b++;
    coop_batch *cb = &g->coop[b];
    *out = cb;
    if (b < g->ncoop)
        return CZ_OK;
    int w = width_index(cp, e->width);
    g->ncoop++;
    cb->shape = sh;
    cb->width = e->width;
    cb->first_slot = first;
    cb->ins = cz__exec_calloc(cap, sizeof *cb->ins);
    cb->outs = cz__exec_calloc(cap, sizeof *cb->outs);
    if (!cb->ins || !cb->outs)
        return cz__error_set(err, CZ_ENOMEM, "out of memory for cooperative batches");
    if (w < 0)
        return cz__error_set(err, CZ_EINTERNAL, "no sub-plane of width %d", e->width);
    cb->plane = &cp->planes[w];
    cb->reqs = cp->reqs[w];
    cb->ready = cp->ready;
    CZ_ASSERT(cb->plane->size == e->width && cb->shape.panels >= 1 &&
                  cb->shape.panels <= CZ_COOP_MAX_PANELS,
              err);
    return CZ_OK;
}

/* Groups the group's cooperative parts into batches and grows the buffer sizes to theirs. */
static int layout_coop(muon_impl *m, muon_group *g, const cz_coop_planes *cp, cz_error *err)
{
    size_t cap = (size_t)g->nparts + 1;
    int rc;
    g->coop = cz__exec_calloc(cap, sizeof *g->coop);
    if (!g->coop)
        return cz__error_set(err, CZ_ENOMEM, "out of memory for cooperative batches");
    for (int i = 0; i < g->nparts; i++) {
        coop_batch *cb;
        if (g->parts[i].x.x.width < 2 ||
            cz_task_is_local(&g->parts[i].x.p->def, g->parts[i].x.x.width))
            continue;
        if ((rc = coop_join(&g->parts[i].x, cp, g, cap, &cb, err)) != CZ_OK)
            return rc;
        cb->ins[cb->shape.count] = g->parts[i].x.in;
        cb->outs[cb->shape.count++] = g->parts[i].x.out;
    }
    for (int b = 0; b < g->ncoop; b++) {
        int64_t xn, gn, wn;
        cz__muon_coop_sizes(&g->coop[b].shape, &xn, &gn, &wn);
        m->batch_n = xn > m->batch_n ? xn : m->batch_n;
        m->gram_n = gn > m->gram_n ? gn : m->gram_n;
        m->work_n = wn > m->work_n ? wn : m->work_n;
        m->sq_n = g->coop[b].shape.count > m->sq_n ? g->coop[b].shape.count : m->sq_n;
    }
    return CZ_OK;
}

/* NorMuon's part of adding part k (local: a TP-local part): its rectangle of the second
 * moment, refused for a cooperative member. */
static int nm_part_add(cz_optim *o, muon_part *k, bool local, cz_error *err)
{
    const muon_impl *m = impl_of(o);
    /* A cooperative member holds a slice of the long side: a line's mean square would need a
     * sum across the members, which this version does not do. */
    if (k->x.x.width > 1 && !local)
        return cz__error_set(err, CZ_EUNSUPPORTED,
                             "NorMuon (normuon.mode = %s): '%s' has a cooperative task over %d "
                             "TP ranks, whose lines' second moments would cross ranks; plan "
                             "with --coop off (the default) for NorMuon",
                             m->h.normuon == CZ_NORMUON_ROW ? "row" : "col", k->x.p->def.name,
                             k->x.x.width);
    cz_block r = nm_rect(&k->x.p->def, m->h.normuon, &k->x.x.part);
    if (!(k->v = falloc(o->compute, CZ_EXEC_MEM_STATE, r.rows * r.cols)))
        return cz__error_set(err, CZ_ENOMEM, "out of memory for the NorMuon second moment of '%s'",
                             k->x.p->def.name);
    return CZ_OK;
}

static int muon_group_add(cz_optim *o, const cz_opt_part *parts, int n, const cz_coop_planes *cp,
                          cz_opt_group **out, cz_error *err)
{
    muon_impl *m = impl_of(o);
    size_t cap = (size_t)n + 1;
    int rc;
    muon_group *g = cz__exec_calloc(1, sizeof *g);
    if (!g)
        return cz__error_set(err, CZ_ENOMEM, "out of memory for micro-group layouts");
    /* Listed first, so that destroy releases whatever the rest builds. */
    *(m->last ? &m->last->next : &m->groups) = g;
    m->last = g;
    *out = (cz_opt_group *)g;
    g->parts = cz__exec_calloc(cap, sizeof *g->parts);
    g->hp = cz__exec_calloc(cap, sizeof *g->hp);
    g->hb = cz__exec_calloc(cap, sizeof *g->hb);
    g->hr = cz__exec_calloc(cap, sizeof *g->hr);
    g->hin = cz__exec_calloc(cap, sizeof *g->hin);
    g->hout = cz__exec_calloc(cap, sizeof *g->hout);
    g->hk = cz__exec_calloc(cap, sizeof *g->hk);
    if (!g->parts || !g->hp || !g->hb || !g->hr || !g->hin || !g->hout || !g->hk)
        return cz__error_set(err, CZ_ENOMEM, "out of memory for micro-group layouts");
    for (int i = 0; i < n; i++) {
        muon_part *k = &g->parts[g->nparts++];
        k->x = parts[i];
        if (!(k->mom = falloc(o->compute, CZ_EXEC_MEM_STATE, k->x.x.part.rows * k->x.x.part.cols)))
            return cz__error_set(err, CZ_ENOMEM, "out of memory for the momentum of '%s'",
                                 k->x.p->def.name);
        /* A TP-local part is this rank's whole heads: Newton-Schulz of its own, with the
         * hosted ones (the part as its region). */
        bool local = cz_task_is_local(&k->x.p->def, k->x.x.width);
        if (m->h.normuon != CZ_NORMUON_NONE && (rc = nm_part_add(o, k, local, err)) != CZ_OK)
            return rc;
        if (k->x.x.width > 1 && !local)
            continue;
        g->hk[g->nh1] = g->nparts - 1;
        g->hp[g->nh1] = k->x.p;
        g->hb[g->nh1] = k->x.x.block;
        g->hr[g->nh1] = local ? k->x.x.part : (cz_block){0, 0, -1, -1};
        g->hin[g->nh1] = k->x.in;
        g->hout[g->nh1] = k->x.out;
        g->nh1++;
    }
    if ((rc = cz__muon_prepare_parts(&g->prep, g->hp, g->hb, g->hr, g->nh1, err)) != CZ_OK)
        return rc;
    if (m->h.normuon != CZ_NORMUON_NONE) {
        nm_attach(m, g);
        int64_t nw = cz__muon_normuon_work(&g->prep);
        m->nwork_n = nw > m->nwork_n ? nw : m->nwork_n;
    }
    m->batch_n = g->prep.batch_n > m->batch_n ? g->prep.batch_n : m->batch_n;
    m->work_n = g->prep.work_n > m->work_n ? g->prep.work_n : m->work_n;
    return layout_coop(m, g, cp, err);
}

static int muon_work_create(cz_optim *o, cz_error *err)
{
    muon_impl *m = impl_of(o);
    cz_compute *c = o->compute;
    m->batch = falloc(c, CZ_EXEC_MEM_NS, m->batch_n);
    m->work = falloc(c, CZ_EXEC_MEM_NS, m->work_n);
    m->gram = falloc(c, CZ_EXEC_MEM_NS, m->gram_n);
    m->sq = cz__compute_alloc(c, CZ_EXEC_MEM_NS, (size_t)(m->sq_n + 1) * sizeof(double));
    m->nwork = cz__compute_alloc(c, CZ_EXEC_MEM_NS, (size_t)(m->nwork_n + 1) * sizeof(double));
    if (!m->batch || !m->work || !m->gram || !m->sq || !m->nwork)
        return cz__error_set(err, CZ_ENOMEM,
                             "out of memory for the Newton-Schulz buffers (%lld elements)",
                             (long long)(m->batch_n + m->work_n + m->gram_n));
    return CZ_OK;
}

static int muon_step_group(cz_optim *o, cz_opt_group *og, int64_t t, const cz_opt_progress *pr,
                           cz_error *err)
{
    muon_impl *m = impl_of(o);
    muon_group *g = (muon_group *)og;
    cz_compute *c = o->compute;
    int rc;
    (void)t;
    for (int k = 0; k < g->nparts; k++) {
        /* The optimizer input overwrites the gradient in place. */
        const muon_part *x = &g->parts[k];
        c->ops->momentum(c, x->x.in, x->mom, x->x.in, x->x.x.part.rows * x->x.x.part.cols,
                         m->h.momentum, m->h.nesterov);
        pr->fn(pr->ctx);
    }
    /* Cooperative batches first, in the same order on every member: a member's peers wait for
     * it at every all-reduce, so none of them should first spend time on its hosted work. */
    for (int b = 0; b < g->ncoop; b++) {
        coop_batch *cb = &g->coop[b];
        if ((rc = cz__muon_coop_run(c, cb->plane, &m->h, &cb->shape, cb->ins, cb->outs, m->batch,
                                    m->gram, m->work, m->sq, cb->ready, cb->reqs, pr->fn, pr->ctx,
                                    err)) != CZ_OK)
            return rc;
    }
    return cz__muon_run(c, &m->h, &g->prep, g->hin, g->hout, m->batch, m->work, m->nwork, pr->fn,
                        pr->ctx, err);
}

static cz_opt_rates muon_rates(const cz_optim *o)
{
    return (cz_opt_rates){impl_of(o)->h.lr, impl_of(o)->h.weight_decay};
}

static cz_opt_rates muon_apply_rates(const cz_optim *o, int64_t t)
{
    (void)t;
    return (cz_opt_rates){impl_of(o)->h.lr, impl_of(o)->h.weight_decay};
}

static int64_t muon_state_tensors(const cz_optim *o, const cz_plan_param *p, cz_state_tensor *out,
                                  int64_t max)
{
    const cz_param_def *d = &p->def;
    cz_normuon_mode mode = impl_of(o)->h.normuon;
    if (mode != CZ_NORMUON_NONE && max >= 2) {
        cz_block all = nm_rect(d, mode, &(cz_block){0, 0, d->shape[0], param_cols(d)});
        out[1] = (cz_state_tensor){.suffix = "normuon_v",
                                   .place = CZ_STATE_PARTS,
                                   .ndim = 2,
                                   .rows = all.rows,
                                   .cols = all.cols,
                                   .values = CZ_STATE_NONNEG};
    }
    if (max >= 1)
        out[0] = (cz_state_tensor){.suffix = "momentum",
                                   .place = CZ_STATE_PARTS,
                                   .ndim = p->def.ndim,
                                   .rows = p->def.shape[0],
                                   .cols = p->def.ndim == 1 ? 1 : p->def.shape[1],
                                   .values = CZ_STATE_FINITE};
    return mode != CZ_NORMUON_NONE ? 2 : 1;
}

static float *muon_state_buffer(cz_optim *o, int param, int64_t k, const cz_block *part)
{
    if (k < 0 || k > 1 || !part)
        return NULL;
    for (const muon_group *g = impl_of(o)->groups; g; g = g->next)
        for (int i = 0; i < g->nparts; i++) {
            const cz_exec_part *x = &g->parts[i].x.x;
            if (x->param == param && x->part.r0 == part->r0 && x->part.c0 == part->c0 &&
                x->part.rows == part->rows && x->part.cols == part->cols)
                return k == 0 ? g->parts[i].mom : g->parts[i].v;
        }
    return NULL;
}

static void muon_state_rect(const cz_optim *o, int param, int64_t k, const cz_block *part,
                            cz_block *out)
{
    *out = *part;
    if (k == 1 && impl_of(o)->h.normuon != CZ_NORMUON_NONE)
        *out = nm_rect(&o->plan->params[param].def, impl_of(o)->h.normuon, part);
}

const cz_optimizer_ops cz__muon_ops = {
    .version = CZ_OPTIMIZER_OPS_VERSION,
    .id = CZ_OPTIM_MUON,
    .kind = CZ_KIND_MATRIX,
    .name = "muon",
    .create = muon_create,
    .destroy = muon_destroy,
    .set_lr = muon_set_lr,
    .set_weight_decay = muon_set_weight_decay,
    .set_momentum = muon_set_momentum,
    .group_add = muon_group_add,
    .work_create = muon_work_create,
    .step_group = muon_step_group,
    .apply_rates = muon_apply_rates,
    .state_tensors = muon_state_tensors,
    .state_buffer = muon_state_buffer,
    .state_rect = muon_state_rect,
    .rates = muon_rates,
    .per_param_rates = true,
    .update_in_place = true,
};
