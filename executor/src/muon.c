/* Muon on whole matrices: momentum, per-block Newton-Schulz orthogonalization (same-shape
 * blocks batched), the update's scale (rms or shape), decoupled weight decay. The update depends
 * only on the whole matrix, never on how it was sharded. */
#include "exec_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int cz_muon_hparams_from_config(cz_muon_hparams *h, const cz_exec_config *cfg, cz_error *err)
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
        return cz_error_set(err, CZ_EINVALID,
                            "muon_scaling = %d; expected CZ_MUON_SCALE_RMS (0) or "
                            "CZ_MUON_SCALE_SHAPE (1)",
                            (int)cfg->muon_scaling);
    if (!(cfg->lr >= 0.0f) || !isfinite(cfg->lr))
        return cz_error_set(err, CZ_EINVALID, "lr = %g; expected >= 0 (0 = the default)",
                            (double)cfg->lr);
    if (cfg->lr == 0.0f)
        h->lr = cfg->muon_scaling == CZ_MUON_SCALE_SHAPE ? CZ_MUON_LR_SHAPE : CZ_MUON_LR_RMS;
    h->coeffs = cz_ns_coeffs_find(cfg->ns_coeffs);
    if (!h->coeffs)
        return cz_error_set(err, CZ_EINVALID,
                            "unknown Newton-Schulz coefficient set '%s' (known: %s)",
                            cfg->ns_coeffs, cz_ns_coeffs_names());
    if (cfg->ns_steps < 0 || cfg->ns_steps > 100)
        return cz_error_set(err, CZ_EINVALID, "ns_steps = %d; expected 0..100", cfg->ns_steps);
    /* A zero eps divides a zero gradient block by zero: the update would be NaN. */
    if (!(cfg->ns_eps > 0.0f) || !isfinite(cfg->ns_eps))
        return cz_error_set(err, CZ_EINVALID, "ns_eps = %g; expected a finite value > 0",
                            (double)cfg->ns_eps);
    return CZ_OK;
}

float cz_muon_scale(const cz_muon_hparams *h, int64_t rows, int64_t cols)
{
    if (h->scaling == CZ_MUON_SCALE_SHAPE) {
        double ratio = (double)rows / (double)cols;
        return (float)sqrt(ratio > 1.0 ? ratio : 1.0);
    }
    return h->scale_coeff * (float)sqrt((double)(rows > cols ? rows : cols));
}

int cz_param_blocks(const cz_plan_param *p, cz_block *out, int max)
{
    int64_t rows = p->def.shape[0], cols = p->def.ndim == 1 ? 1 : p->def.shape[1];
    if (p->def.nblocks <= 0) {
        if (max < 1)
            return 0;
        out[0] = (cz_block){0, 0, rows, cols};
        return 1;
    }
    int n = 0;
    int64_t off = 0;
    for (int b = 0; b < p->def.nblocks && n < max; b++) {
        int64_t s = p->def.block_sizes[b];
        if (p->def.block_dim == 0)
            out[n++] = (cz_block){off, 0, s, cols};
        else
            out[n++] = (cz_block){0, off, rows, s};
        off += s;
    }
    return n;
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

int cz_muon_prepare(cz_muon_prep *mp, const cz_plan_param *const *params, int n, cz_error *err)
{
    int cap = 0;
    *mp = (cz_muon_prep){0};
    for (int i = 0; i < n; i++)
        cap += params[i]->def.nblocks > 0 ? params[i]->def.nblocks : 1;
    mp->blks = cz_exec_calloc(cap > 0 ? (size_t)cap : 1, sizeof *mp->blks);
    if (!mp->blks)
        return cz_error_set(err, CZ_ENOMEM, "out of memory for %d Muon blocks", cap);
    for (int i = 0; i < n; i++) {
        cz_block tmp[CZ_MAX_BLOCKS];
        int k = cz_param_blocks(params[i], tmp, CZ_MAX_BLOCKS);
        int64_t ld = params[i]->def.ndim == 1 ? 1 : params[i]->def.shape[1];
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

void cz_muon_prep_free(cz_muon_prep *mp)
{
    cz_exec_free(mp->blks);
    *mp = (cz_muon_prep){0};
}

int cz_muon_run(cz_compute *c, const cz_muon_hparams *h, const cz_muon_prep *mp,
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
            float scale = cz_muon_scale(h, br->b.rows, br->b.cols);
            ops->block_store(c, out[br->mat] + br->b.r0 * br->ld + br->b.c0, br->ld, batch + k * sz,
                             br->b.rows, br->b.cols, br->transposed, scale);
        }
        if (progress)
            progress(ctx);
        s = e;
    }
    return CZ_OK;
}

int cz_muon_orthogonalize(cz_compute *c, const cz_muon_hparams *h,
                          const cz_plan_param *const *params, const float *const *in,
                          float *const *out, int n, cz_error *err)
{
    cz_muon_prep mp;
    float *batch = NULL, *work = NULL;
    int rc = cz_muon_prepare(&mp, params, n, err);
    if (rc)
        return rc;
    batch = c->ops->alloc(c, (size_t)(mp.batch_n + 1) * sizeof(float));
    work = c->ops->alloc(c, (size_t)(mp.work_n + 1) * sizeof(float));
    if (!batch || !work) {
        rc = cz_error_set(err, CZ_ENOMEM, "out of memory for a Newton-Schulz batch of %lld floats",
                          (long long)(mp.batch_n + mp.work_n));
        goto out;
    }
    rc = cz_muon_run(c, h, &mp, in, out, batch, work, NULL, NULL, err);
out:
    if (batch)
        c->ops->release(c, batch);
    if (work)
        c->ops->release(c, work);
    cz_muon_prep_free(&mp);
    return rc;
}
