/* Muon on whole matrices: momentum, per-block Newton-Schulz orthogonalization (same-shape
 * blocks batched), RMS-matching scale, decoupled weight decay. The update depends only on the
 * whole matrix, never on how it was sharded. */
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
    h->coeffs = cz_ns_coeffs_find(cfg->ns_coeffs);
    if (!h->coeffs)
        return cz_error_set(err, CZ_EINVALID,
                            "unknown Newton-Schulz coefficient set '%s' (known: %s)",
                            cfg->ns_coeffs, cz_ns_coeffs_names());
    if (cfg->ns_steps < 0 || cfg->ns_steps > 100)
        return cz_error_set(err, CZ_EINVALID, "ns_steps = %d; expected 0..100", cfg->ns_steps);
    return CZ_OK;
}

int cz_param_blocks(const cz_plan_param *p, cz_block *out, int max)
{
    int64_t rows = p->shape[0], cols = p->ndim == 1 ? 1 : p->shape[1];
    if (p->nblocks <= 0) {
        if (max < 1)
            return 0;
        out[0] = (cz_block){0, 0, rows, cols};
        return 1;
    }
    int n = 0;
    int64_t off = 0;
    for (int b = 0; b < p->nblocks && n < max; b++) {
        int64_t s = p->block_sizes[b];
        if (p->block_dim == 0)
            out[n++] = (cz_block){off, 0, s, cols};
        else
            out[n++] = (cz_block){0, off, rows, s};
        off += s;
    }
    return n;
}

void cz_muon_momentum(const cz_muon_hparams *h, const float *g, float *buf, float *in, int64_t n)
{
    float mu = h->momentum;
    for (int64_t i = 0; i < n; i++) {
        buf[i] = mu * buf[i] + g[i];
        in[i] = h->nesterov ? g[i] + mu * buf[i] : buf[i];
    }
}

void cz_apply_update(float *p, const float *u, int64_t n, float lr, float wd)
{
    float keep = 1.0f - lr * wd;
    for (int64_t i = 0; i < n; i++)
        p[i] = p[i] * keep - lr * u[i];
}

typedef struct blk_ref {
    int mat; /* index in the batch of matrices */
    cz_block b;
    int64_t r, c;   /* oriented shape: r <= c */
    int transposed; /* the block is stored transposed in the NS batch */
} blk_ref;

static int blk_cmp(const void *x, const void *y)
{
    const blk_ref *a = x, *b = y;
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

int cz_muon_orthogonalize_ex(cz_compute *c, const cz_muon_hparams *h,
                             const cz_plan_param *const *params, const float *const *in,
                             float *const *out, int n, void (*progress)(void *), void *ctx,
                             cz_error *err)
{
    int rc = CZ_OK;
    int nblk = 0, cap = 0;
    blk_ref *blks = NULL;
    float *batch = NULL, *work = NULL;
    for (int i = 0; i < n; i++)
        cap += params[i]->nblocks > 0 ? params[i]->nblocks : 1;
    blks = calloc(cap > 0 ? (size_t)cap : 1, sizeof *blks);
    if (!blks) {
        rc = cz_error_set(err, CZ_ENOMEM, "out of memory for %d Muon blocks", cap);
        goto done;
    }
    for (int i = 0; i < n; i++) {
        cz_block tmp[64];
        int k = cz_param_blocks(params[i], tmp, 64);
        for (int j = 0; j < k; j++) {
            blk_ref *r = &blks[nblk++];
            r->mat = i;
            r->b = tmp[j];
            r->transposed = tmp[j].rows > tmp[j].cols;
            r->r = r->transposed ? tmp[j].cols : tmp[j].rows;
            r->c = r->transposed ? tmp[j].rows : tmp[j].cols;
        }
    }
    /* Stable grouping by shape so the batch order (and thus the result) is deterministic. */
    qsort(blks, (size_t)nblk, sizeof *blks, blk_cmp);
    for (int s = 0; s < nblk;) {
        int e = s;
        while (e < nblk && blks[e].r == blks[s].r && blks[e].c == blks[s].c)
            e++;
        int cnt = e - s;
        int64_t r = blks[s].r, cc = blks[s].c, sz = r * cc;
        batch = c->ops->alloc(c, (size_t)(cnt * sz) * sizeof(float));
        work = c->ops->alloc(c, (size_t)cnt * (size_t)(2 * r * r + r * cc) * sizeof(float));
        if (!batch || !work) {
            rc = cz_error_set(err, CZ_ENOMEM,
                              "out of memory for a Newton-Schulz batch of %d x %lld x %lld", cnt,
                              (long long)r, (long long)cc);
            goto done;
        }
        for (int k = 0; k < cnt; k++) {
            const blk_ref *br = &blks[s + k];
            int64_t fcols = params[br->mat]->ndim == 1 ? 1 : params[br->mat]->shape[1];
            const float *src = in[br->mat];
            float *dst = batch + k * sz;
            double sq = 0.0;
            for (int64_t i = 0; i < br->b.rows; i++)
                for (int64_t j = 0; j < br->b.cols; j++) {
                    double v = src[(br->b.r0 + i) * fcols + br->b.c0 + j];
                    sq += v * v;
                }
            float inv = (float)(1.0 / (sqrt(sq) + (double)h->eps));
            for (int64_t i = 0; i < br->b.rows; i++)
                for (int64_t j = 0; j < br->b.cols; j++) {
                    float v = src[(br->b.r0 + i) * fcols + br->b.c0 + j] * inv;
                    if (br->transposed)
                        dst[j * br->b.rows + i] = v;
                    else
                        dst[i * br->b.cols + j] = v;
                }
        }
        rc = c->ops->ns_batched(c, batch, cnt, r, cc, h->coeffs, h->ns_steps, work, err);
        if (rc)
            goto done;
        for (int k = 0; k < cnt; k++) {
            const blk_ref *br = &blks[s + k];
            int64_t fcols = params[br->mat]->ndim == 1 ? 1 : params[br->mat]->shape[1];
            float *o = out[br->mat];
            const float *x = batch + k * sz;
            float scale = h->scale_coeff *
                          (float)sqrt((double)(br->b.rows > br->b.cols ? br->b.rows : br->b.cols));
            for (int64_t i = 0; i < br->b.rows; i++)
                for (int64_t j = 0; j < br->b.cols; j++) {
                    float v = br->transposed ? x[j * br->b.rows + i] : x[i * br->b.cols + j];
                    o[(br->b.r0 + i) * fcols + br->b.c0 + j] = scale * v;
                }
        }
        c->ops->release(c, batch);
        c->ops->release(c, work);
        batch = work = NULL;
        if (progress)
            progress(ctx);
        s = e;
    }
done:
    if (batch)
        c->ops->release(c, batch);
    if (work)
        c->ops->release(c, work);
    free(blks);
    return rc;
}

int cz_muon_orthogonalize(cz_compute *c, const cz_muon_hparams *h,
                          const cz_plan_param *const *params, const float *const *in,
                          float *const *out, int n, cz_error *err)
{
    return cz_muon_orthogonalize_ex(c, h, params, in, out, n, NULL, NULL, err);
}
