/* AdamW on a local shard: bias-corrected moments, decoupled weight decay. Elementwise, so a
 * shard's result equals the same elements of the whole tensor's result. The loop itself is
 * the compute backend's (ops->adamw); here only the per-step scalars are made. */
#include "adamw.h"
#include "canzona_exec.h"
#include "compute.h"

#include <math.h>

void cz__adamw_hparams_from_config(cz_adamw_hparams *h, const cz_exec_config *cfg)
{
    h->lr = cfg->adamw_lr;
    h->beta1 = cfg->adamw_beta1;
    h->beta2 = cfg->adamw_beta2;
    h->eps = cfg->adamw_eps;
    h->weight_decay = cfg->adamw_weight_decay;
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
