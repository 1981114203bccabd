/* Muon on whole matrices: momentum, per-block Newton-Schulz orthogonalization (same-shape
 * blocks batched), the update's scale (rms or shape), decoupled weight decay. The update depends
 * only on the whole matrix, never on how it was sharded. */
#include "alloc.h"
#include "canzona_exec.h"
#include "comm.h"
#include "compute.h"
#include "cz_format.h"
#include "muon.h"
#include "ns_coeffs.h"
#include "shard.h"
#include "ns_coop.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int cz__muon_hparams_from_config(cz_muon_hparams *h, const cz_exec_config *cfg, cz_error *err)
{
    h->lr = cfg->lr;
    h->momentum = cfg->momentum;
    h->weight_decay = cfg->weight_decay;
    h->eps = cfg->ns_eps;
    h->scale_coeff = cfg->scale_coeff;
    h->nesterov = cfg->nesterov;
    h->ns_steps = cfg->ns_steps;
    h->scaling = cfg->muon_scaling;
    if (cfg->muon_scaling != CZ_MUON_SCALE_RMS && cfg->muon_scaling != CZ_MUON_SCALE_SHAPE)
        return cz__error_set(err, CZ_EINVALID,
                             "muon_scaling = %d; expected CZ_MUON_SCALE_RMS (0) or "
                             "CZ_MUON_SCALE_SHAPE (1)",
                             (int)cfg->muon_scaling);
    if (!(cfg->lr >= 0.0f) || !isfinite(cfg->lr))
        return cz__error_set(err, CZ_EINVALID, "lr = %g; expected >= 0 (0 = the default)",
                             (double)cfg->lr);
    if (cfg->lr == 0.0f)
        h->lr = cfg->muon_scaling == CZ_MUON_SCALE_SHAPE ? CZ_MUON_LR_SHAPE : CZ_MUON_LR_RMS;
    h->coeffs = cz__ns_coeffs_find(cfg->ns_coeffs);
    if (!h->coeffs)
        return cz__error_set(err, CZ_EINVALID,
                             "unknown Newton-Schulz coefficient set '%s' (known: %s)",
                             cfg->ns_coeffs, cz__ns_coeffs_names());
    if (cfg->ns_steps < 0 || cfg->ns_steps > 100)
        return cz__error_set(err, CZ_EINVALID, "ns_steps = %d; expected 0..100", cfg->ns_steps);
    /* A zero eps divides a zero gradient block by zero: the update would be NaN. */
    if (!(cfg->ns_eps > 0.0f) || !isfinite(cfg->ns_eps))
        return cz__error_set(err, CZ_EINVALID, "ns_eps = %g; expected a finite value > 0",
                             (double)cfg->ns_eps);
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

int cz__muon_prepare_tasks(cz_muon_prep *mp, const cz_plan_param *const *params, const int *blocks,
                           int n, cz_error *err)
{
    int cap = 0;
    *mp = (cz_muon_prep){0};
    for (int i = 0; i < n; i++)
        cap += blocks && blocks[i] >= 0     ? 1
               : params[i]->def.nblocks > 0 ? params[i]->def.nblocks
                                            : 1;
    mp->blks = cz__exec_calloc(cap > 0 ? (size_t)cap : 1, sizeof *mp->blks);
    if (!mp->blks)
        return cz__error_set(err, CZ_ENOMEM, "out of memory for %d Muon blocks", cap);
    for (int i = 0; i < n; i++) {
        cz_block tmp[CZ_MAX_BLOCKS];
        int k = cz__param_blocks(params[i], tmp, CZ_MAX_BLOCKS);
        int64_t ld = params[i]->def.ndim == 1 ? 1 : params[i]->def.shape[1];
        if (blocks && blocks[i] >= 0) {
            /* One block, stored on its own: its rows x cols at the origin. */
            cz_block one = tmp[blocks[i] < k ? blocks[i] : 0];
            tmp[0] = (cz_block){0, 0, one.rows, one.cols};
            ld = one.cols;
            k = 1;
        }
        for (int j = 0; j < k; j++) {
            cz_muon_blk *r = &mp->blks[mp->nblk++];
            r->mat = i;
            r->b = tmp[j];
            r->ld = ld;
            r->transposed = tmp[j].rows > tmp[j].cols;
            r->r = r->transposed ? tmp[j].cols : tmp[j].rows;
            r->c = r->transposed ? tmp[j].rows : tmp[j].cols;
        }
    }
    /* Stable grouping by shape so the batch order (and thus the result) is deterministic. */
    qsort(mp->blks, (size_t)mp->nblk, sizeof *mp->blks, blk_cmp);
    for (int s = 0; s < mp->nblk;) {
        int e = s;
        while (e < mp->nblk && mp->blks[e].r == mp->blks[s].r && mp->blks[e].c == mp->blks[s].c)
            e++;
        int64_t r = mp->blks[s].r, c = mp->blks[s].c, cnt = e - s;
        if (cnt * r * c > mp->batch_n)
            mp->batch_n = cnt * r * c;
        if (cnt * (2 * r * r + r * c) > mp->work_n)
            mp->work_n = cnt * (2 * r * r + r * c);
        s = e;
    }
    return CZ_OK;
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

int cz__muon_run(cz_compute *c, const cz_muon_hparams *h, const cz_muon_prep *mp,
                 const float *const *in, float *const *out, float *batch, float *work,
                 void (*progress)(void *), void *ctx, cz_error *err)
{
    const cz_compute_ops *ops = c->ops;
    for (int s = 0; s < mp->nblk;) {
        int e = s;
        while (e < mp->nblk && mp->blks[e].r == mp->blks[s].r && mp->blks[e].c == mp->blks[s].c)
            e++;
        int cnt = e - s;
        int64_t sz = mp->blks[s].r * mp->blks[s].c;
        for (int k = 0; k < cnt; k++) {
            const cz_muon_blk *br = &mp->blks[s + k];
            ops->block_load(c, batch + k * sz, in[br->mat] + br->b.r0 * br->ld + br->b.c0, br->ld,
                            br->b.rows, br->b.cols, br->transposed, h->eps);
        }
        int rc = ops->ns_batched(c, batch, cnt, mp->blks[s].r, mp->blks[s].c, h->coeffs,
                                 h->ns_steps, work, err);
        if (rc)
            return rc;
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
    *work_n = b->count * (2 * b->a * b->a + b->a * b->n);
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
        ops->ns_poly_end(c, x, full, y, bm, b->count, a, n, h->coeffs);
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
    batch = c->ops->alloc(c, (size_t)(mp.batch_n + 1) * sizeof(float));
    work = c->ops->alloc(c, (size_t)(mp.work_n + 1) * sizeof(float));
    if (!batch || !work) {
        rc = cz__error_set(err, CZ_ENOMEM, "out of memory for a Newton-Schulz batch of %lld floats",
                           (long long)(mp.batch_n + mp.work_n));
        goto out;
    }
    rc = cz__muon_run(c, h, &mp, in, out, batch, work, NULL, NULL, err);
out:
    if (batch)
        c->ops->release(c, batch);
    if (work)
        c->ops->release(c, work);
    cz__muon_prep_free(&mp);
    return rc;
}
