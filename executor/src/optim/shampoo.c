/* Shampoo on whole matrices, as Meta's Distributed Shampoo does it for a 2-D block: factor
 * EMAs L = b2 L + w G G^T and R = b2 R + w G^T G (w = 1 when b2 = 1, else 1 - b2); at the
 * start step and at every multiple of `freq` after it their inverse 4th roots by symmetric
 * eigendecomposition (eigenvalues shifted so the smallest is >= 0, then eps added); the
 * direction X_L Ghat X_R of the filtered, bias-corrected gradient Ghat from start_step on; its
 * per-block Frobenius norm grafted from a diagonal method (AdaGrad by default); momentum or
 * Nesterov on the direction plus the decoupled weight decay, whose part of the momentum the
 * ranks holding the parameters keep (cz__shampoo_decay_momentum). Sides longer than max_dim are cut
 * into tiles, each an independent Shampoo block (Distributed Shampoo's blocking). Data is
 * touched only through the compute ops. */
#include "alloc.h"
#include "canzona_exec.h"
#include "compute.h"
#include "cz_format.h"
#include "optimizer.h"
#include "shampoo.h"
#include "shard.h"
#include "whole_groups.h"

#include <math.h>
#include <stdio.h>

typedef struct sh_tile {
    int64_t r0, c0, rows, cols;
    float *L, *R, *XL, *XR, *acc, *filt, *mom;
} sh_tile;

struct cz_shampoo_state {
    int ntiles;
    int64_t ld, bytes;
    sh_tile *tiles;
};

int cz__shampoo_hparams_from_config(cz_shampoo_hparams *h, const cz_exec_config *cfg, int freq,
                                    cz_error *err)
{
    *h = (cz_shampoo_hparams){
        .lr = cfg->lr == CZ_EXEC_LR_DEFAULT ? CZ_SHAMPOO_LR : cfg->lr,
        .weight_decay = cfg->weight_decay,
        .beta1 = cfg->shampoo.beta1,
        .beta2 = cfg->shampoo.beta2,
        .eps = cfg->shampoo.eps,
        .momentum = cfg->shampoo.momentum,
        .graft_eps = cfg->shampoo.graft_eps,
        .nesterov = cfg->shampoo.nesterov,
        .freq = freq,
        .start_step = cfg->shampoo.start_step < 0 ? freq : cfg->shampoo.start_step,
        .max_dim = cfg->shampoo.max_dim > 0 ? cfg->shampoo.max_dim : 1024,
        .bias_correction = cfg->shampoo.bias_correction,
        .grafting = cfg->shampoo.grafting,
    };
    h->graft_beta2 = cfg->shampoo.graft_beta2 >= 0.0f ? cfg->shampoo.graft_beta2
                     : h->grafting == CZ_GRAFT_ADAM   ? 0.999f
                                                      : 0.99f;
    if (freq < 1)
        return cz__error_set(err, CZ_EINVALID,
                             "plan precondition_frequency = %d; Shampoo needs >= 1", freq);
    if (!(h->lr >= 0.0f) || !isfinite(h->lr))
        return cz__error_set(err, CZ_EINVALID,
                             "lr = %g; expected a finite value >= 0 (0 is a rate of 0; leave "
                             "lr at CZ_EXEC_LR_DEFAULT for the optimizer's default)",
                             (double)h->lr);
    if (!(h->beta1 >= 0.0f && h->beta1 < 1.0f))
        return cz__error_set(err, CZ_EINVALID, "shampoo_beta1 = %g; expected 0 <= beta1 < 1",
                             (double)h->beta1);
    if (!(h->beta2 > 0.0f && h->beta2 <= 1.0f))
        return cz__error_set(err, CZ_EINVALID, "shampoo_beta2 = %g; expected 0 < beta2 <= 1",
                             (double)h->beta2);
    if (!(h->eps >= 0.0f) || !isfinite(h->eps))
        return cz__error_set(err, CZ_EINVALID, "shampoo_eps = %g; expected a finite value >= 0",
                             (double)h->eps);
    if (!(h->momentum >= 0.0f && h->momentum < 1.0f))
        return cz__error_set(err, CZ_EINVALID, "shampoo_momentum = %g; expected 0 <= momentum < 1",
                             (double)h->momentum);
    if ((int)h->grafting < CZ_GRAFT_NONE || (int)h->grafting > CZ_GRAFT_ADAM)
        return cz__error_set(err, CZ_EINVALID,
                             "shampoo_grafting = %d; expected CZ_GRAFT_NONE (0), ADAGRAD (1), "
                             "RMSPROP (2) or ADAM (3)",
                             (int)h->grafting);
    if (!(h->graft_beta2 > 0.0f && h->graft_beta2 <= 1.0f) || !(h->graft_eps > 0.0f))
        return cz__error_set(err, CZ_EINVALID,
                             "shampoo_graft_beta2 = %g, shampoo_graft_eps = %g; expected 0 < "
                             "beta2 <= 1 and eps > 0",
                             (double)h->graft_beta2, (double)h->graft_eps);
    /* As Distributed Shampoo: preconditioning must not start before the first inverse roots
     * exist (they are computed at the multiples of freq). */
    if (h->start_step < freq)
        return cz__error_set(err, CZ_EINVALID,
                             "shampoo_start_step = %d is before the first preconditioner refresh "
                             "(step %d = the plan's precondition_frequency); expected >= %d or -1",
                             h->start_step, freq, freq);
    return CZ_OK;
}

static float *tile_alloc(cz_compute *c, cz_shampoo_state *s, int64_t n)
{
    s->bytes += n * (int64_t)sizeof(float);
    return cz__compute_alloc(c, CZ_EXEC_MEM_STATE, (size_t)n * sizeof(float));
}

int cz__shampoo_state_create(cz_compute *c, const cz_shampoo_hparams *h, const cz_plan_param *p,
                             cz_shampoo_state **out, int64_t *work_n, cz_error *err)
{
    cz_block blocks[CZ_MAX_BLOCKS];
    int nb = cz__param_blocks(p, blocks, CZ_MAX_BLOCKS), n = 0;
    int64_t d = h->max_dim;
    cz_shampoo_state *s = cz__exec_calloc(1, sizeof *s);
    if (!s)
        return cz__error_set(err, CZ_ENOMEM, "out of memory for the Shampoo state of '%s'",
                             p->def.name);
    *out = s;
    s->ld = p->def.ndim == 1 ? 1 : p->def.shape[1];
    for (int b = 0; b < nb; b++)
        s->ntiles += (int)(((blocks[b].rows + d - 1) / d) * ((blocks[b].cols + d - 1) / d));
    s->tiles = cz__exec_calloc((size_t)s->ntiles, sizeof *s->tiles);
    if (!s->tiles)
        return cz__error_set(err, CZ_ENOMEM, "out of memory for the Shampoo state of '%s'",
                             p->def.name);
    for (int b = 0; b < nb; b++)
        for (int64_t i = 0; i < blocks[b].rows; i += d)
            for (int64_t j = 0; j < blocks[b].cols; j += d) {
                sh_tile *t = &s->tiles[n++];
                int64_t r = blocks[b].rows - i < d ? blocks[b].rows - i : d;
                int64_t cl = blocks[b].cols - j < d ? blocks[b].cols - j : d;
                int64_t side = r > cl ? r : cl;
                *t = (sh_tile){
                    .r0 = blocks[b].r0 + i, .c0 = blocks[b].c0 + j, .rows = r, .cols = cl};
                t->L = tile_alloc(c, s, r * r);
                t->R = tile_alloc(c, s, cl * cl);
                t->XL = tile_alloc(c, s, r * r);
                t->XR = tile_alloc(c, s, cl * cl);
                bool ok = t->L && t->R && t->XL && t->XR;
                if (ok && h->grafting != CZ_GRAFT_NONE)
                    ok = (t->acc = tile_alloc(c, s, r * cl)) != NULL;
                if (ok && h->beta1 > 0.0f)
                    ok = (t->filt = tile_alloc(c, s, r * cl)) != NULL;
                if (ok && h->momentum > 0.0f)
                    ok = (t->mom = tile_alloc(c, s, r * cl)) != NULL;
                if (!ok)
                    return cz__error_set(
                        err, CZ_ENOMEM, "out of memory for the Shampoo state of '%s'", p->def.name);
                /* Five tile-sized buffers, an eigenbasis, its scaled copy and the solver's
                 * work; a side's eigenvalues. */
                cz_linalg_work lw;
                int rc = cz__compute_linalg_work_block(c, r, cl, d, &lw, err);
                if (rc)
                    return rc;
                int64_t w = 5 * r * cl + 2 * side * side + side + lw.syevd;
                if (w > *work_n)
                    *work_n = w;
            }
    return CZ_OK;
}

void cz__shampoo_state_free(cz_compute *c, cz_shampoo_state *s)
{
    if (!s)
        return;
    for (int k = 0; s->tiles && k < s->ntiles; k++) {
        float *v[] = {s->tiles[k].L,   s->tiles[k].R,    s->tiles[k].XL, s->tiles[k].XR,
                      s->tiles[k].acc, s->tiles[k].filt, s->tiles[k].mom};
        for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
            if (v[i])
                c->ops->release(c, v[i]);
    }
    cz__exec_free(s->tiles);
    cz__exec_free(s);
}

/* Checkpoint tensors of a tile, in the order of sh_tile's fields: the four n x n ones, then
 * the tile-shaped ones the settings keep. */
static const char *const SH_FIELD[] = {"factor_left",    "factor_right", "inv_root_left",
                                       "inv_root_right", "grafting",     "filtered_grad",
                                       "momentum"};

static bool sh_field_kept(const cz_shampoo_hparams *h, int f)
{
    return f < 4 || (f == 4 && h->grafting != CZ_GRAFT_NONE) || (f == 5 && h->beta1 > 0.0f) ||
           (f == 6 && h->momentum > 0.0f);
}

int64_t cz__shampoo_state_tensors(const cz_shampoo_hparams *h, const cz_plan_param *p,
                                  cz_state_tensor *out, int64_t max)
{
    cz_block blocks[CZ_MAX_BLOCKS];
    int nb = cz__param_blocks(p, blocks, CZ_MAX_BLOCKS);
    int64_t d = h->max_dim, n = 0;
    for (int b = 0; b < nb; b++)
        for (int64_t i = 0; i < blocks[b].rows; i += d)
            for (int64_t j = 0; j < blocks[b].cols; j += d) {
                int64_t r = blocks[b].rows - i < d ? blocks[b].rows - i : d;
                int64_t cl = blocks[b].cols - j < d ? blocks[b].cols - j : d;
                for (int f = 0; f < 7; f++) {
                    if (!sh_field_kept(h, f))
                        continue;
                    if (n < max) {
                        cz_state_tensor *t = &out[n];
                        /* Named by the tile's origin in the full matrix: the model's blocks
                         * and max_dim fix it, the plan's DP/TP layout does not. */
                        snprintf(t->suffix, sizeof t->suffix, "shampoo.%lld_%lld.%s",
                                 (long long)(blocks[b].r0 + i), (long long)(blocks[b].c0 + j),
                                 SH_FIELD[f]);
                        t->rows = f == 1 || f == 3 ? cl : r;
                        t->cols = f == 0 || f == 2 ? r : cl;
                        /* The factors sum G G^T; every grafting accumulator sums squares. */
                        t->values = f < 2    ? CZ_STATE_GRAM
                                    : f == 4 ? CZ_STATE_NONNEG
                                             : CZ_STATE_FINITE;
                        t->place = CZ_STATE_HOSTED;
                        t->ndim = 2;
                        /* The file holds Distributed Shampoo's momentum: the host's part
                         * plus the weight-decay part the shards keep (state_addend). */
                        t->plus_addend = f == 6;
                        t->r0 = blocks[b].r0 + i;
                        t->c0 = blocks[b].c0 + j;
                    }
                    n++;
                }
            }
    return n;
}

float *cz__shampoo_state_tensor(cz_shampoo_state *s, int64_t k)
{
    for (int i = 0; s && i < s->ntiles; i++) {
        sh_tile *t = &s->tiles[i];
        float *f[] = {t->L, t->R, t->XL, t->XR, t->acc, t->filt, t->mom};
        for (int j = 0; j < 7; j++)
            if (f[j] && k-- == 0)
                return f[j];
    }
    return NULL;
}

int64_t cz__shampoo_state_bytes(const cz_shampoo_state *s)
{
    return s ? s->bytes : 0;
}

/* X = (F / bias)^(-1/4) by eigendecomposition, through q (n x n), sq (n x n), w (n). */
static int inverse_root(cz_compute *c, const cz_shampoo_hparams *h, const float *f, float *x,
                        int64_t n, float bias, float *q, float *sq, float *w, float *work,
                        cz_error *err)
{
    const cz_compute_ops *o = c->ops;
    o->scale(c, q, f, n * n, 1.0f / bias);
    int rc = o->syevd(c, q, w, n, work, err);
    if (rc)
        return rc;
    /* A 2-D block's factors each take the 2*order = 4th root (Distributed Shampoo's default
     * exponent), so X_L G X_R approximates (L kron R)^(-1/4) vec(G). */
    o->eig_root_scale(c, sq, q, w, n, 4.0f, h->eps);
    o->gemm(c, 0, 1, n, n, n, 1.0f, sq, n, q, n, 0.0f, x, n);
    return CZ_OK;
}

bool cz__shampoo_refreshes(const cz_shampoo_hparams *h, int64_t t)
{
    /* Not at multiples of the frequency before the start step: their roots would go unused,
     * and one start step that is not a multiple would use roots up to freq - 1 steps old. */
    return t == h->start_step || (t > h->start_step && t % h->freq == 0);
}

void cz__shampoo_decay_momentum(cz_compute *c, const cz_shampoo_hparams *h, float *p, float *b,
                                int64_t n, float lr, float wd)
{
    const cz_compute_ops *o = c->ops;
    o->axpby(c, b, p, n, h->momentum, wd);
    if (h->nesterov)
        o->axpby(c, p, b, n, 1.0f - lr * wd, -lr * h->momentum);
    else
        o->axpby(c, p, b, n, 1.0f, -lr);
}

static int tile_step(cz_compute *c, const cz_shampoo_hparams *h, sh_tile *tl, int64_t ld,
                     const float *g, float *u, int64_t t, float *work, double *stats, cz_error *err)
{
    const cz_compute_ops *o = c->ops;
    int64_t r = tl->rows, cl = tl->cols, n = r * cl, side = r > cl ? r : cl;
    float *gt = work, *gh = gt + n, *tmp = gh + n, *sd = tmp + n, *gd = sd + n;
    float *q = gd + n, *sq = q + side * side, *w = sq + side * side, *sw = w + side;
    const float *gsrc = g + tl->r0 * ld + tl->c0;

    o->tile_copy(c, gt, cl, gsrc, ld, r, cl);
    /* Factors: w = 1 when beta2 = 1 (a running sum, AdaGrad-like), else 1 - beta2. */
    float wgt = h->beta2 == 1.0f ? 1.0f : 1.0f - h->beta2;
    o->gemm(c, 0, 1, r, r, cl, wgt, gt, cl, gt, cl, h->beta2, tl->L, r);
    o->gemm(c, 1, 0, cl, cl, r, wgt, gt, cl, gt, cl, h->beta2, tl->R, cl);
    if (h->grafting == CZ_GRAFT_ADAGRAD)
        o->sq_accum(c, tl->acc, gt, n, 1.0f, 1.0f);
    else if (h->grafting != CZ_GRAFT_NONE)
        o->sq_accum(c, tl->acc, gt, n, h->graft_beta2, 1.0f - h->graft_beta2);
    if (cz__shampoo_refreshes(h, t)) {
        float bias = h->beta2 < 1.0f && h->bias_correction
                         ? (float)(1.0 - pow((double)h->beta2, (double)t))
                         : 1.0f;
        int rc;
        if ((rc = inverse_root(c, h, tl->L, tl->XL, r, bias, q, sq, w, sw, err)) != CZ_OK ||
            (rc = inverse_root(c, h, tl->R, tl->XR, cl, bias, q, sq, w, sw, err)) != CZ_OK)
            return rc;
    }
    /* The filtered gradient: an EMA with dampening, bias-corrected. */
    float *in = gt;
    if (h->beta1 > 0.0f) {
        o->axpby(c, tl->filt, gt, n, h->beta1, 1.0f - h->beta1);
        float bc1 = h->bias_correction ? (float)(1.0 - pow((double)h->beta1, (double)t)) : 1.0f;
        o->scale(c, gh, tl->filt, n, 1.0f / bc1);
        in = gh;
    }
    bool pre = t >= h->start_step;
    if (pre) {
        o->gemm(c, 0, 0, r, cl, r, 1.0f, tl->XL, r, in, cl, 0.0f, tmp, cl);
        o->gemm(c, 0, 0, r, cl, cl, 1.0f, tmp, cl, tl->XR, cl, 0.0f, sd, cl);
    }
    float *dir = pre ? sd : in;
    if (h->grafting != CZ_GRAFT_NONE) {
        float inv_bias = h->grafting == CZ_GRAFT_ADAM && h->bias_correction
                             ? (float)(1.0 / (1.0 - pow((double)h->graft_beta2, (double)t)))
                             : 1.0f;
        o->graft_div(c, gd, in, tl->acc, n, inv_bias, h->graft_eps);
        if (pre) {
            /* Shampoo's direction with the grafted method's norm, per block. */
            o->sumsq(c, gd, n, &stats[0]);
            o->sumsq(c, sd, n, &stats[1]);
            o->scale_ratio(c, sd, n, &stats[0], &stats[1]);
        } else {
            dir = gd;
        }
    }
    if (h->momentum > 0.0f) {
        o->axpby(c, tl->mom, dir, n, h->momentum, 1.0f);
        if (h->nesterov)
            o->axpby(c, dir, tl->mom, n, 1.0f, h->momentum);
        else
            dir = tl->mom;
    }
    o->tile_copy(c, u + tl->r0 * ld + tl->c0, ld, dir, cl, r, cl);
    return CZ_OK;
}

int cz__shampoo_run(cz_compute *c, const cz_shampoo_hparams *h, cz_shampoo_state *s, const float *g,
                    float *u, int64_t t, float *work, double *stats, cz_error *err)
{
    for (int k = 0; k < s->ntiles; k++) {
        int rc = tile_step(c, h, &s->tiles[k], s->ld, g, u, t, work, stats, err);
        if (rc)
            return rc;
    }
    return CZ_OK;
}

/* ---- the optimizer table ---- */
/* With momentum: the weight-decay part of the momentum of one matrix shard this rank updates
 * (cz__shampoo_decay_momentum), numel floats at off in the flat buffers. */
typedef struct sh_decay {
    int64_t off, numel;
    float *buf;
} sh_decay;

typedef struct sh_impl {
    cz_shampoo_hparams h;
    cz_shampoo_state **state; /* indexed by param id, where this rank holds the matrix */
    cz_whole_groups groups;
    sh_decay *decay; /* in parameter order */
    int ndecay;
    float **decay_of; /* indexed by param id: its decay part's buffer, or NULL */
    int64_t work_n;   /* floats of work the largest tile needs */
    float *work;
    double *stats; /* two backend doubles: the grafting norms */
} sh_impl;

static sh_impl *impl_of(const cz_optim *o)
{
    return o->impl;
}

static int sh_create(cz_optim *o, const cz_exec_config *cfg, cz_error *err)
{
    size_t n = o->plan->nparams ? o->plan->nparams : 1;
    int rc;
    sh_impl *s = cz__exec_calloc(1, sizeof *s);
    if (!s)
        return cz__error_set(err, CZ_ENOMEM, "out of memory for the executor's tables");
    o->impl = s;
    s->state = cz__exec_calloc(n, sizeof *s->state);
    s->decay = cz__exec_calloc(n, sizeof *s->decay);
    s->decay_of = cz__exec_calloc(n, sizeof *s->decay_of);
    if (!s->state || !s->decay || !s->decay_of)
        return cz__error_set(err, CZ_ENOMEM, "out of memory for the executor's tables");
    if ((rc = cz__compute_require_linalg(o->compute, o->ops->name, err)) != CZ_OK)
        return rc;
    return cz__shampoo_hparams_from_config(&s->h, cfg, o->plan->settings.precondition_frequency,
                                           err);
}

static void sh_destroy(cz_optim *o)
{
    sh_impl *s = impl_of(o);
    cz_compute *c = o->compute;
    if (!s)
        return;
    for (size_t i = 0; s->state && i < o->plan->nparams; i++)
        cz__shampoo_state_free(c, s->state[i]);
    for (int i = 0; s->decay && i < s->ndecay; i++)
        if (s->decay[i].buf)
            c->ops->release(c, s->decay[i].buf);
    cz__whole_groups_free(&s->groups);
    if (s->work)
        c->ops->release(c, s->work);
    if (s->stats)
        c->ops->release(c, s->stats);
    cz__exec_free(s->state);
    cz__exec_free(s->decay);
    cz__exec_free(s->decay_of);
    cz__exec_free(s);
}

static void sh_set_lr(cz_optim *o, float lr)
{
    impl_of(o)->h.lr = lr;
}

static void sh_set_weight_decay(cz_optim *o, float wd)
{
    impl_of(o)->h.weight_decay = wd;
}

/* With momentum, every rank that applies updates to a shard of a matrix (its owning DP rank's
 * TP ranks) keeps the weight-decay part of its momentum, the size of that shard. */
static int sh_shard_add(cz_optim *o, const cz_opt_shard *sh, cz_error *err)
{
    sh_impl *s = impl_of(o);
    cz_compute *c = o->compute;
    if (!(s->h.momentum > 0.0f))
        return CZ_OK;
    /* A matrix is never cut between DP ranks: the piece is the whole shard. */
    CZ_ASSERT(sh->lo == 0 && sh->len == sh->p->numel && s->ndecay < (int)o->plan->nparams, err);
    sh_decay *d = &s->decay[s->ndecay++];
    *d = (sh_decay){.off = sh->off, .numel = sh->len};
    d->buf = cz__compute_alloc(c, CZ_EXEC_MEM_STATE,
                               (size_t)(d->numel > 0 ? d->numel : 1) * sizeof(float));
    if (!d->buf)
        return cz__error_set(err, CZ_ENOMEM, "out of memory for the Shampoo momentum of '%s'",
                             sh->p->def.name);
    s->decay_of[sh->p->id] = d->buf;
    return CZ_OK;
}

static int sh_part_state(cz_optim *o, const cz_plan_param *p, void **state, cz_error *err)
{
    sh_impl *s = impl_of(o);
    CZ_ASSERT(!s->state[p->id], err); /* each matrix is in one group, once */
    int rc = cz__shampoo_state_create(o->compute, &s->h, p, &s->state[p->id], &s->work_n, err);
    *state = s->state[p->id];
    return rc;
}

static int sh_group_add(cz_optim *o, const cz_opt_part *parts, int n, const cz_coop_planes *cp,
                        cz_opt_group **out, cz_error *err)
{
    (void)cp;
    return cz__whole_group_add(&impl_of(o)->groups, o, parts, n, sh_part_state, out, err);
}

static int sh_work_create(cz_optim *o, cz_error *err)
{
    sh_impl *s = impl_of(o);
    cz_compute *c = o->compute;
    s->work = cz__compute_alloc(c, CZ_EXEC_MEM_SOLVER, (size_t)(s->work_n + 1) * sizeof(float));
    s->stats = cz__compute_alloc(c, CZ_EXEC_MEM_SOLVER, 2 * sizeof(double));
    if (!s->work || !s->stats)
        return cz__error_set(err, CZ_ENOMEM,
                             "out of memory for Shampoo's work buffer (%lld elements)",
                             (long long)s->work_n);
    return CZ_OK;
}

/* Shampoo's weight decay enters its momentum on the parameters of this step, before any
 * update of them is applied. */
static int sh_step_shards(cz_optim *o, float *P, const float *G, int64_t t, int64_t lo, int64_t hi,
                          cz_error *err)
{
    sh_impl *s = impl_of(o);
    (void)G, (void)t, (void)err;
    for (int i = 0; i < s->ndecay; i++)
        if (s->decay[i].off >= lo && s->decay[i].off < hi)
            cz__shampoo_decay_momentum(o->compute, &s->h, P + s->decay[i].off, s->decay[i].buf,
                                       s->decay[i].numel, s->h.lr, s->h.weight_decay);
    return CZ_OK;
}

static int sh_step_group(cz_optim *o, cz_opt_group *og, int64_t t, const cz_opt_progress *pr,
                         cz_error *err)
{
    sh_impl *s = impl_of(o);
    const cz_whole_group *g = (const cz_whole_group *)og;
    for (int k = 0; k < g->nparts; k++) {
        const cz_whole_part *x = &g->parts[k];
        int rc =
            cz__shampoo_run(o->compute, &s->h, x->state, x->in, x->out, t, s->work, s->stats, err);
        pr->fn(pr->ctx);
        if (rc)
            return rc;
    }
    return CZ_OK;
}

/* With momentum the weight decay went into the momentum (step_shards): none is applied. */
static cz_opt_rates sh_rates(const cz_optim *o)
{
    return (cz_opt_rates){impl_of(o)->h.lr, impl_of(o)->h.weight_decay};
}

static cz_opt_rates sh_apply_rates(const cz_optim *o, int64_t t)
{
    const sh_impl *s = impl_of(o);
    (void)t;
    return (cz_opt_rates){s->h.lr, s->h.momentum > 0.0f ? 0.0f : s->h.weight_decay};
}

static int64_t sh_tensors(const cz_optim *o, const cz_plan_param *p, cz_state_tensor *out,
                          int64_t max)
{
    return cz__shampoo_state_tensors(&impl_of(o)->h, p, out, max);
}

static float *sh_buffer(cz_optim *o, int param, int64_t k, const cz_block *part)
{
    cz_shampoo_state *st = impl_of(o)->state[param];
    (void)part;
    return st ? cz__shampoo_state_tensor(st, k) : NULL;
}

static float *sh_addend(cz_optim *o, int param)
{
    return impl_of(o)->decay_of[param];
}

const cz_optimizer_ops cz__shampoo_ops = {
    .version = CZ_OPTIMIZER_OPS_VERSION,
    .id = CZ_OPTIM_SHAMPOO,
    .kind = CZ_KIND_MATRIX,
    .name = "shampoo",
    .create = sh_create,
    .destroy = sh_destroy,
    .set_lr = sh_set_lr,
    .set_weight_decay = sh_set_weight_decay,
    .shard_add = sh_shard_add,
    .group_add = sh_group_add,
    .work_create = sh_work_create,
    .step_shards = sh_step_shards,
    .step_group = sh_step_group,
    .apply_rates = sh_apply_rates,
    .state_tensors = sh_tensors,
    .state_buffer = sh_buffer,
    .state_addend = sh_addend,
    .rates = sh_rates,
    .per_param_rates = false,
};
