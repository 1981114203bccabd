/* AdamW on the pieces of the elementwise parameters this rank owns: bias-corrected moments,
 * decoupled weight decay. Elementwise, so a piece's result equals the same elements of the
 * whole tensor's result, and its moments of a piece are the piece of the whole's. The loop
 * itself is the compute backend's (ops->adamw); here only the per-step scalars are made. */
#include "adamw.h"
#include "alloc.h"
#include "canzona_exec.h"
#include "compute.h"
#include "cz_format.h"
#include "optimizer.h"

#include <math.h>
#include <stdio.h>

void cz__adamw_hparams_from_config(cz_adamw_hparams *h, const cz_exec_config *cfg)
{
    h->lr = cfg->adamw.lr;
    h->beta1 = cfg->adamw.beta1;
    h->beta2 = cfg->adamw.beta2;
    h->eps = cfg->adamw.eps;
    h->weight_decay = cfg->adamw.weight_decay;
}

void cz__adamw_args_make(cz_adamw_args *a, const cz_adamw_hparams *h, int64_t t)
{
    a->lr = h->lr;
    a->beta1 = h->beta1;
    a->beta2 = h->beta2;
    a->eps = h->eps;
    a->weight_decay = h->weight_decay;
    a->bias1 = (float)(1.0 - pow((double)h->beta1, (double)t));
    a->bias2 = (float)(1.0 - pow((double)h->beta2, (double)t));
}

/* ---- the optimizer table ---- */
/* One piece this rank updates and its two moments (piece-sized, backend memory). */
typedef struct adamw_piece {
    cz_opt_shard s;
    float *m, *v;
} adamw_piece;

typedef struct adamw_impl {
    cz_adamw_hparams h;
    adamw_piece *pieces; /* in parameter order */
    int npieces;
    adamw_piece **of; /* indexed by param id: its piece, NULL when this rank has none */
} adamw_impl;

static adamw_impl *impl_of(const cz_optim *o)
{
    return o->impl;
}

const cz_adamw_hparams *cz__adamw_hparams_of(const cz_optim *o)
{
    return &impl_of(o)->h;
}

static int adamw_create(cz_optim *o, const cz_exec_config *cfg, cz_error *err)
{
    size_t n = o->plan->nparams ? o->plan->nparams : 1;
    adamw_impl *a = cz__exec_calloc(1, sizeof *a);
    if (!a)
        return cz__error_set(err, CZ_ENOMEM, "out of memory for the executor's tables");
    o->impl = a;
    a->pieces = cz__exec_calloc(n, sizeof *a->pieces);
    a->of = cz__exec_calloc(n, sizeof *a->of);
    if (!a->pieces || !a->of)
        return cz__error_set(err, CZ_ENOMEM, "out of memory for the executor's tables");
    cz__adamw_hparams_from_config(&a->h, cfg);
    return CZ_OK;
}

static void adamw_destroy(cz_optim *o)
{
    adamw_impl *a = impl_of(o);
    cz_compute *c = o->compute;
    if (!a)
        return;
    for (int i = 0; a->pieces && i < a->npieces; i++) {
        if (a->pieces[i].m)
            c->ops->release(c, a->pieces[i].m);
        if (a->pieces[i].v)
            c->ops->release(c, a->pieces[i].v);
    }
    cz__exec_free(a->pieces);
    cz__exec_free(a->of);
    cz__exec_free(a);
}

static void adamw_set_lr(cz_optim *o, float lr)
{
    impl_of(o)->h.lr = lr;
}

static void adamw_set_weight_decay(cz_optim *o, float wd)
{
    impl_of(o)->h.weight_decay = wd;
}

static void adamw_set_momentum(cz_optim *o, float beta1, float beta2)
{
    impl_of(o)->h.beta1 = beta1;
    impl_of(o)->h.beta2 = beta2;
}

static cz_opt_rates adamw_rates(const cz_optim *o)
{
    return (cz_opt_rates){impl_of(o)->h.lr, impl_of(o)->h.weight_decay};
}

static int adamw_shard_add(cz_optim *o, const cz_opt_shard *s, cz_error *err)
{
    adamw_impl *a = impl_of(o);
    cz_compute *c = o->compute;
    size_t bytes = (size_t)(s->len > 0 ? s->len : 1) * sizeof(float);
    CZ_ASSERT(a->npieces < (int)o->plan->nparams && !a->of[s->p->id], err);
    adamw_piece *k = &a->pieces[a->npieces++];
    k->s = *s;
    a->of[s->p->id] = k;
    k->m = cz__compute_alloc(c, CZ_EXEC_MEM_STATE, bytes);
    k->v = cz__compute_alloc(c, CZ_EXEC_MEM_STATE, bytes);
    if (!k->m || !k->v)
        return cz__error_set(err, CZ_ENOMEM, "out of memory for AdamW state of '%s'",
                             s->p->def.name);
    return CZ_OK;
}

static int adamw_work_create(cz_optim *o, cz_error *err)
{
    (void)o, (void)err;
    return CZ_OK; /* the backend's adamw op needs none */
}

static int adamw_step_shards(cz_optim *o, float *P, const float *G, int64_t t, int64_t lo,
                             int64_t hi, cz_error *err)
{
    adamw_impl *a = impl_of(o);
    cz_compute *c = o->compute;
    cz_adamw_args args;
    (void)err;
    cz__adamw_args_make(&args, &a->h, t);
    for (int i = 0; i < a->npieces; i++) {
        const adamw_piece *k = &a->pieces[i];
        if (k->s.off < lo || k->s.off >= hi)
            continue;
        if (o->param_rates) { /* its parameter group's */
            args.lr = o->param_rates[k->s.p->id].lr;
            args.weight_decay = o->param_rates[k->s.p->id].wd;
        }
        c->ops->adamw(c, P + k->s.off, G + k->s.off, k->m, k->v, k->s.len, &args);
    }
    return CZ_OK;
}

static int64_t adamw_state_tensors(const cz_optim *o, const cz_plan_param *p, cz_state_tensor *out,
                                   int64_t max)
{
    static const char *const field[] = {"exp_avg", "exp_avg_sq"};
    (void)o;
    for (int64_t k = 0; k < 2 && k < max; k++) {
        cz_state_tensor *t = &out[k];
        *t = (cz_state_tensor){.place = CZ_STATE_SHARDED,
                               .ndim = p->def.ndim,
                               .rows = p->def.shape[0],
                               .cols = p->def.ndim == 1 ? 1 : p->def.shape[1],
                               .values = k == 1 ? CZ_STATE_NONNEG : CZ_STATE_FINITE};
        snprintf(t->suffix, sizeof t->suffix, "%s", field[k]);
    }
    return 2;
}

static float *adamw_state_buffer(cz_optim *o, int param, int64_t k, const cz_block *part)
{
    const adamw_piece *p = impl_of(o)->of[param];
    (void)part;
    return !p ? NULL : k == 0 ? p->m : k == 1 ? p->v : NULL;
}

const cz_optimizer_ops cz__adamw_ops = {
    .version = CZ_OPTIMIZER_OPS_VERSION,
    .id = CZ_OPTIM_ADAMW,
    .kind = CZ_KIND_ELEMENTWISE,
    .name = "adamw",
    .create = adamw_create,
    .destroy = adamw_destroy,
    .set_lr = adamw_set_lr,
    .set_weight_decay = adamw_set_weight_decay,
    .set_momentum = adamw_set_momentum,
    .shard_add = adamw_shard_add,
    .work_create = adamw_work_create,
    .step_shards = adamw_step_shards,
    .state_tensors = adamw_state_tensors,
    .state_buffer = adamw_state_buffer,
    .rates = adamw_rates,
    .per_param_rates = true,
};
