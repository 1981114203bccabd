/* SOAP on whole matrices, as the reference implementation (nikhilvyas/SOAP, soap.py) does it
 * for a 2-D parameter, per plan block. The first call only accumulates the Gram factors
 * GG_L = (1-sb) G G^T, GG_R = (1-sb) G^T G and takes their eigenbases (descending
 * eigenvalues); it does not update. Every later call, with the update counter t:
 *   G' = Q_L^T G Q_R;  m = b1 m + (1-b1) G';  v = b2 v + (1-b2) G'^2;
 *   p -= lr * sqrt(1-b2^t)/(1-b1^t) * Q_L (m / (sqrt(v) + eps)) Q_R^T;  p -= lr*wd*p;
 * then the preconditioner: m is rotated back with the old bases, GG = sb GG + (1-sb) G G^T
 * (likewise G^T G), every freq-th t each basis is refreshed by one power iteration and a QR
 * (columns first re-sorted by diag(Q^T GG Q), descending, and v permuted the same way), and
 * m is rotated into the new bases. A side longer than max_dim has no factor: its basis is
 * the identity. Data is touched only through the compute ops. */
#include "alloc.h"
#include "canzona_exec.h"
#include "compute.h"
#include "cz_format.h"
#include "optimizer.h"
#include "shard.h"
#include "soap.h"
#include "whole_groups.h"

#include <math.h>
#include <stdio.h>

typedef struct soap_blk {
    int64_t r0, c0, rows, cols;
    float *gl, *ql, *gr, *qr, *m, *v; /* gl/ql NULL when rows > max_dim, gr/qr for cols */
} soap_blk;

struct cz_soap_state {
    int nblk;
    int64_t ld;
    soap_blk blk[CZ_MAX_BLOCKS];
};

int cz__soap_hparams_from_config(cz_soap_hparams *h, const cz_exec_config *cfg, int freq,
                                 int max_dim, cz_error *err)
{
    *h = (cz_soap_hparams){
        .lr = cfg->lr == CZ_EXEC_LR_DEFAULT ? CZ_SOAP_LR : cfg->lr,
        .weight_decay = cfg->weight_decay,
        .beta1 = cfg->soap.beta1,
        .beta2 = cfg->soap.beta2,
        .shampoo_beta = cfg->soap.shampoo_beta < 0.0f ? cfg->soap.beta2 : cfg->soap.shampoo_beta,
        .eps = cfg->soap.eps,
        .freq = freq,
        .max_dim = max_dim,
        .bias_correction = cfg->soap.bias_correction,
    };
    if (freq < 1 || max_dim < 1)
        return cz__error_set(err, CZ_EINVALID,
                             "plan precondition_frequency = %d, max_precond_dim = %d; SOAP needs "
                             "both >= 1",
                             freq, max_dim);
    if (!(h->lr >= 0.0f) || !isfinite(h->lr))
        return cz__error_set(err, CZ_EINVALID,
                             "lr = %g; expected a finite value >= 0 (0 is a rate of 0; leave "
                             "lr at CZ_EXEC_LR_DEFAULT for the optimizer's default)",
                             (double)h->lr);
    if (!(h->beta1 >= 0.0f && h->beta1 < 1.0f) || !(h->beta2 >= 0.0f && h->beta2 < 1.0f) ||
        !(h->shampoo_beta >= 0.0f && h->shampoo_beta < 1.0f))
        return cz__error_set(err, CZ_EINVALID,
                             "soap_beta1 = %g, soap_beta2 = %g, soap_shampoo_beta = %g; expected "
                             "each in [0, 1) (shampoo_beta -1 = beta2)",
                             (double)h->beta1, (double)h->beta2, (double)h->shampoo_beta);
    if (!(h->eps > 0.0f) || !isfinite(h->eps))
        return cz__error_set(err, CZ_EINVALID, "soap_eps = %g; expected a finite value > 0",
                             (double)h->eps);
    return CZ_OK;
}

int cz__soap_state_create(cz_compute *c, const cz_soap_hparams *h, const cz_plan_param *p,
                          cz_soap_state **out, int64_t *work_n, cz_error *err)
{
    cz_block blocks[CZ_MAX_BLOCKS];
    cz_soap_state *s = cz__exec_calloc(1, sizeof *s);
    if (!s)
        return cz__error_set(err, CZ_ENOMEM, "out of memory for the SOAP state of '%s'",
                             p->def.name);
    *out = s;
    s->nblk = cz__param_blocks(p, blocks, CZ_MAX_BLOCKS);
    s->ld = p->def.ndim == 1 ? 1 : p->def.shape[1];
    for (int b = 0; b < s->nblk; b++) {
        soap_blk *k = &s->blk[b];
        int64_t r = blocks[b].rows, cl = blocks[b].cols, side = r > cl ? r : cl;
        *k = (soap_blk){.r0 = blocks[b].r0, .c0 = blocks[b].c0, .rows = r, .cols = cl};
        bool ok =
            (k->m = cz__compute_alloc(c, CZ_EXEC_MEM_STATE, (size_t)(r * cl) * sizeof(float))) !=
                NULL &&
            (k->v = cz__compute_alloc(c, CZ_EXEC_MEM_STATE, (size_t)(r * cl) * sizeof(float))) !=
                NULL;
        if (ok && r <= h->max_dim) {
            ok = (k->gl = cz__compute_alloc(c, CZ_EXEC_MEM_STATE,
                                            (size_t)(r * r) * sizeof(float))) != NULL &&
                 (k->ql = cz__compute_alloc(c, CZ_EXEC_MEM_STATE,
                                            (size_t)(r * r) * sizeof(float))) != NULL;
        }
        if (ok && cl <= h->max_dim) {
            ok = (k->gr = cz__compute_alloc(c, CZ_EXEC_MEM_STATE,
                                            (size_t)(cl * cl) * sizeof(float))) != NULL &&
                 (k->qr = cz__compute_alloc(c, CZ_EXEC_MEM_STATE,
                                            (size_t)(cl * cl) * sizeof(float))) != NULL;
        }
        if (!ok)
            return cz__error_set(err, CZ_ENOMEM, "out of memory for the SOAP state of '%s'",
                                 p->def.name);
        /* G, two rotation temporaries, M Q (also a rotation temporary: side^2 >= rows*cols),
         * eigenvalues and the largest solver work. */
        cz_linalg_work lw;
        int rc = cz__compute_linalg_work_block(c, r, cl, h->max_dim, &lw, err);
        if (rc)
            return rc;
        int64_t lin = lw.syevd > lw.qr ? lw.syevd : lw.qr;
        lin = lin > lw.sort ? lin : lw.sort;
        int64_t w = 3 * r * cl + side * side + side + lin;
        if (w > *work_n)
            *work_n = w;
    }
    return CZ_OK;
}

void cz__soap_state_free(cz_compute *c, cz_soap_state *s)
{
    if (!s)
        return;
    for (int b = 0; b < s->nblk; b++) {
        float *v[] = {s->blk[b].gl, s->blk[b].ql, s->blk[b].gr,
                      s->blk[b].qr, s->blk[b].m,  s->blk[b].v};
        for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
            if (v[i])
                c->ops->release(c, v[i]);
    }
    cz__exec_free(s);
}

/* Checkpoint tensors of a block, in the order of soap_blk's fields (a side above max_dim has
 * neither its factor nor its basis). */
static const char *const SOAP_FIELD[] = {"GG_left", "Q_left",  "GG_right",
                                         "Q_right", "exp_avg", "exp_avg_sq"};

int64_t cz__soap_state_tensors(const cz_soap_hparams *h, const cz_plan_param *p,
                               cz_state_tensor *out, int64_t max)
{
    cz_block blocks[CZ_MAX_BLOCKS];
    int nb = cz__param_blocks(p, blocks, CZ_MAX_BLOCKS);
    int64_t n = 0;
    for (int b = 0; b < nb; b++) {
        int64_t r = blocks[b].rows, cl = blocks[b].cols;
        for (int f = 0; f < 6; f++) {
            if ((f < 2 && r > h->max_dim) || (f >= 2 && f < 4 && cl > h->max_dim))
                continue;
            if (n < max) {
                cz_state_tensor *t = &out[n];
                /* Named by the block's origin in the full matrix (the model's, not the
                 * plan's layout). */
                snprintf(t->suffix, sizeof t->suffix, "soap.%lld_%lld.%s", (long long)blocks[b].r0,
                         (long long)blocks[b].c0, SOAP_FIELD[f]);
                t->rows = f < 2 ? r : f < 4 ? cl : r;
                t->cols = f < 2 ? r : f < 4 ? cl : cl;
                t->place = CZ_STATE_HOSTED;
                t->ndim = 2;
                t->plus_addend = false;
                t->values = f == 0 || f == 2 ? CZ_STATE_GRAM
                            : f == 5         ? CZ_STATE_NONNEG
                                             : CZ_STATE_FINITE;
            }
            n++;
        }
    }
    return n;
}

float *cz__soap_state_tensor(cz_soap_state *s, int64_t k)
{
    for (int b = 0; s && b < s->nblk; b++) {
        soap_blk *x = &s->blk[b];
        float *f[] = {x->gl, x->ql, x->gr, x->qr, x->m, x->v};
        for (int j = 0; j < 6; j++)
            if (f[j] && k-- == 0)
                return f[j];
    }
    return NULL;
}

/* dst = Q_L^T x Q_R (into the basis) or Q_L x Q_R^T (back), an absent side the identity. */
static void rotate(cz_compute *c, const soap_blk *k, float *dst, const float *x, float *tmp,
                   int back)
{
    const cz_compute_ops *o = c->ops;
    int64_t r = k->rows, cl = k->cols;
    const float *cur = x;
    if (k->ql) {
        o->gemm(c, !back, 0, r, cl, r, 1.0f, k->ql, r, cur, cl, 0.0f, tmp, cl);
        cur = tmp;
    }
    if (k->qr)
        o->gemm(c, 0, back, r, cl, cl, 1.0f, cur, cl, k->qr, cl, 0.0f, dst, cl);
    else
        o->tile_copy(c, dst, cl, cur, cl, r, cl);
}

/* A new eigenbasis of gg into q: from scratch (syevd, then descending order) or refreshed
 * (re-sort by the current estimates, permuting v along `side`, one power iteration, QR). */
static int basis(cz_compute *c, float *gg, float *q, int64_t n, float *v, int64_t rows,
                 int64_t cols, int side, int fresh, float *mq, float *w, float *lin, cz_error *err)
{
    const cz_compute_ops *o = c->ops;
    int rc;
    if (fresh) {
        o->tile_copy(c, q, n, gg, n, n, n);
        rc = o->syevd(c, q, w, n, lin, err);
        if (rc)
            return rc;
        o->gemm(c, 0, 0, n, n, n, 1.0f, gg, n, q, n, 0.0f, mq, n);
        o->basis_sort(c, q, mq, n, NULL, rows, cols, side, lin);
        return CZ_OK;
    }
    o->gemm(c, 0, 0, n, n, n, 1.0f, gg, n, q, n, 0.0f, mq, n);
    o->basis_sort(c, q, mq, n, v, rows, cols, side, lin);
    if ((rc = o->qr(c, mq, n, lin, err)) != CZ_OK)
        return rc;
    o->tile_copy(c, q, n, mq, n, n, n);
    return CZ_OK;
}

/* The first call's initialisation: GG = (1 - sb) G G^T (a lerp from zero) of each side,
 * fresh eigenbases. */
static int blk_init(cz_compute *c, soap_blk *k, const float *gt, float wg, float *mq, float *w,
                    float *lin, cz_error *err)
{
    const cz_compute_ops *o = c->ops;
    int64_t r = k->rows, cl = k->cols;
    int rc;
    if (k->gl) {
        o->gemm(c, 0, 1, r, r, cl, wg, gt, cl, gt, cl, 0.0f, k->gl, r);
        if ((rc = basis(c, k->gl, k->ql, r, NULL, r, cl, 0, 1, mq, w, lin, err)) != CZ_OK)
            return rc;
    }
    if (k->gr) {
        o->gemm(c, 1, 0, cl, cl, r, wg, gt, cl, gt, cl, 0.0f, k->gr, cl);
        return basis(c, k->gr, k->qr, cl, NULL, r, cl, 1, 1, mq, w, lin, err);
    }
    return CZ_OK;
}

/* Every freq-th update: the eigenbases of each side refreshed from the new factors. */
static int blk_refresh(cz_compute *c, soap_blk *k, float *mq, float *w, float *lin, cz_error *err)
{
    int64_t r = k->rows, cl = k->cols;
    int rc;
    if (k->gl && (rc = basis(c, k->gl, k->ql, r, k->v, r, cl, 0, 0, mq, w, lin, err)) != CZ_OK)
        return rc;
    if (k->gr)
        return basis(c, k->gr, k->qr, cl, k->v, r, cl, 1, 0, mq, w, lin, err);
    return CZ_OK;
}

static int blk_step(cz_compute *c, const cz_soap_hparams *h, soap_blk *k, int64_t ld,
                    const float *g, float *u, int64_t call, float *work, cz_error *err)
{
    const cz_compute_ops *o = c->ops;
    int64_t r = k->rows, cl = k->cols, n = r * cl, t = call - 1, side = r > cl ? r : cl;
    float *gt = work, *t1 = gt + n, *t2 = t1 + n, *mq = t2 + n, *w = mq + side * side;
    float *lin = w + side;
    float wg = 1.0f - h->shampoo_beta;
    float *ublk = u + k->r0 * ld + k->c0;
    int rc = CZ_OK;

    o->tile_copy(c, gt, cl, g + k->r0 * ld + k->c0, ld, r, cl);
    if (call == 1) {
        rc = blk_init(c, k, gt, wg, mq, w, lin, err);
        /* No update on the first call: u = 0 for the block (written whatever the bases'
         * outcome, which is returned after). */
        o->scale(c, t1, gt, n, 0.0f);
        o->tile_copy(c, ublk, ld, t1, cl, r, cl);
        return rc;
    }
    /* Adam in the eigenbasis. */
    rotate(c, k, t2, gt, t1, 0);
    o->axpby(c, k->m, t2, n, h->beta1, 1.0f - h->beta1);
    o->sq_accum(c, k->v, t2, n, h->beta2, 1.0f - h->beta2);
    o->graft_div(c, t2, k->m, k->v, n, 1.0f, h->eps);
    rotate(c, k, t1, t2, mq, 1);
    /* The reference's step size, and its weight decay after the update folded in:
     * (p - s*d)(1 - lr*wd) = p(1 - lr*wd) - lr * [s/lr (1 - lr*wd)] d. */
    double step = 1.0;
    if (h->bias_correction)
        step =
            sqrt(1.0 - pow((double)h->beta2, (double)t)) / (1.0 - pow((double)h->beta1, (double)t));
    float f = (float)(step * (1.0 - (double)h->lr * (double)h->weight_decay));
    o->scale(c, t1, t1, n, f);
    o->tile_copy(c, ublk, ld, t1, cl, r, cl);

    /* The preconditioner, after the update: m back to the parameter's space, new factors,
     * refresh every freq-th update, m into the (new) bases. */
    rotate(c, k, t2, k->m, t1, 1);
    if (k->gl)
        o->gemm(c, 0, 1, r, r, cl, wg, gt, cl, gt, cl, h->shampoo_beta, k->gl, r);
    if (k->gr)
        o->gemm(c, 1, 0, cl, cl, r, wg, gt, cl, gt, cl, h->shampoo_beta, k->gr, cl);
    if (t % h->freq == 0)
        rc = blk_refresh(c, k, mq, w, lin, err);
    /* m goes into the bases whatever the refresh's outcome, which is returned after. */
    rotate(c, k, k->m, t2, t1, 0);
    return rc;
}

int cz__soap_run(cz_compute *c, const cz_soap_hparams *h, cz_soap_state *s, const float *g,
                 float *u, int64_t k, float *work, cz_error *err)
{
    for (int b = 0; b < s->nblk; b++) {
        int rc = blk_step(c, h, &s->blk[b], s->ld, g, u, k, work, err);
        if (rc)
            return rc;
    }
    return CZ_OK;
}

/* ---- the optimizer table ---- */
typedef struct soap_impl {
    cz_soap_hparams h;
    cz_soap_state **state; /* indexed by param id, where this rank holds the matrix */
    cz_whole_groups groups;
    int64_t work_n; /* floats of work the largest block needs */
    float *work;
} soap_impl;

static soap_impl *impl_of(const cz_optim *o)
{
    return o->impl;
}

static int soap_create(cz_optim *o, const cz_exec_config *cfg, cz_error *err)
{
    const cz_plan *plan = o->plan;
    int rc;
    soap_impl *s = cz__exec_calloc(1, sizeof *s);
    if (!s)
        return cz__error_set(err, CZ_ENOMEM, "out of memory for the executor's tables");
    o->impl = s;
    s->state = cz__exec_calloc(plan->nparams ? plan->nparams : 1, sizeof *s->state);
    if (!s->state)
        return cz__error_set(err, CZ_ENOMEM, "out of memory for the executor's tables");
    if ((rc = cz__compute_require_linalg(o->compute, o->ops->name, err)) != CZ_OK)
        return rc;
    return cz__soap_hparams_from_config(&s->h, cfg, plan->settings.precondition_frequency,
                                        plan->settings.max_precond_dim, err);
}

static void soap_destroy(cz_optim *o)
{
    soap_impl *s = impl_of(o);
    if (!s)
        return;
    for (size_t i = 0; s->state && i < o->plan->nparams; i++)
        cz__soap_state_free(o->compute, s->state[i]);
    cz__whole_groups_free(&s->groups);
    if (s->work)
        o->compute->ops->release(o->compute, s->work);
    cz__exec_free(s->state);
    cz__exec_free(s);
}

static void soap_set_lr(cz_optim *o, float lr)
{
    impl_of(o)->h.lr = lr;
}

static void soap_set_weight_decay(cz_optim *o, float wd)
{
    impl_of(o)->h.weight_decay = wd;
}

static int soap_part_state(cz_optim *o, const cz_plan_param *p, void **state, cz_error *err)
{
    soap_impl *s = impl_of(o);
    CZ_ASSERT(!s->state[p->id], err); /* each matrix is in one group, once */
    int rc = cz__soap_state_create(o->compute, &s->h, p, &s->state[p->id], &s->work_n, err);
    *state = s->state[p->id];
    return rc;
}

static int soap_group_add(cz_optim *o, const cz_opt_part *parts, int n, const cz_coop_planes *cp,
                          cz_opt_group **out, cz_error *err)
{
    (void)cp;
    return cz__whole_group_add(&impl_of(o)->groups, o, parts, n, soap_part_state, out, err);
}

static int soap_work_create(cz_optim *o, cz_error *err)
{
    soap_impl *s = impl_of(o);
    s->work =
        cz__compute_alloc(o->compute, CZ_EXEC_MEM_SOLVER, (size_t)(s->work_n + 1) * sizeof(float));
    if (!s->work)
        return cz__error_set(err, CZ_ENOMEM, "out of memory for SOAP's work buffer (%lld elements)",
                             (long long)s->work_n);
    return CZ_OK;
}

static int soap_step_group(cz_optim *o, cz_opt_group *og, int64_t t, const cz_opt_progress *pr,
                           cz_error *err)
{
    soap_impl *s = impl_of(o);
    const cz_whole_group *g = (const cz_whole_group *)og;
    for (int k = 0; k < g->nparts; k++) {
        const cz_whole_part *x = &g->parts[k];
        int rc = cz__soap_run(o->compute, &s->h, x->state, x->in, x->out, t, s->work, err);
        pr->fn(pr->ctx);
        if (rc)
            return rc;
    }
    return CZ_OK;
}

/* The first step only initialises the preconditioner: no update, so no weight decay. */
static cz_opt_rates soap_rates(const cz_optim *o)
{
    return (cz_opt_rates){impl_of(o)->h.lr, impl_of(o)->h.weight_decay};
}

static cz_opt_rates soap_apply_rates(const cz_optim *o, int64_t t)
{
    return (cz_opt_rates){impl_of(o)->h.lr, t == 1 ? 0.0f : impl_of(o)->h.weight_decay};
}

static int64_t soap_tensors(const cz_optim *o, const cz_plan_param *p, cz_state_tensor *out,
                            int64_t max)
{
    return cz__soap_state_tensors(&impl_of(o)->h, p, out, max);
}

static float *soap_buffer(cz_optim *o, int param, int64_t k, const cz_block *part)
{
    cz_soap_state *st = impl_of(o)->state[param];
    (void)part;
    return st ? cz__soap_state_tensor(st, k) : NULL;
}

const cz_optimizer_ops cz__soap_ops = {
    .version = CZ_OPTIMIZER_OPS_VERSION,
    .id = CZ_OPTIM_SOAP,
    .kind = CZ_KIND_MATRIX,
    .name = "soap",
    .create = soap_create,
    .destroy = soap_destroy,
    .set_lr = soap_set_lr,
    .set_weight_decay = soap_set_weight_decay,
    .group_add = soap_group_add,
    .work_create = soap_work_create,
    .step_group = soap_step_group,
    .apply_rates = soap_apply_rates,
    .state_tensors = soap_tensors,
    .state_buffer = soap_buffer,
    .rates = soap_rates,
    .per_param_rates = false,
};
