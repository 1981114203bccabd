/* AdamW on a local shard: bias-corrected moments, decoupled weight decay. Elementwise, so a
 * shard's result equals the same elements of the whole tensor's result. */
#include "exec_internal.h"

#include <math.h>

void cz_adamw_hparams_from_config(cz_adamw_hparams *h, const cz_exec_config *cfg)
{
    h->lr = cfg->adamw_lr;
    h->beta1 = cfg->adamw_beta1;
    h->beta2 = cfg->adamw_beta2;
    h->eps = cfg->adamw_eps;
    h->weight_decay = cfg->adamw_weight_decay;
}

void cz_adamw_step(const cz_adamw_hparams *h, int64_t t, float *p, const float *g, float *m,
                   float *v, int64_t n)
{
    float b1 = h->beta1, b2 = h->beta2;
    float c1 = (float)(1.0 - pow((double)b1, (double)t));
    float c2 = (float)(1.0 - pow((double)b2, (double)t));
    float keep = 1.0f - h->lr * h->weight_decay;
    for (int64_t i = 0; i < n; i++) {
        m[i] = b1 * m[i] + (1.0f - b1) * g[i];
        v[i] = b2 * v[i] + (1.0f - b2) * g[i] * g[i];
        float mhat = m[i] / c1, vhat = v[i] / c2;
        p[i] = p[i] * keep - h->lr * mhat / (sqrtf(vhat) + h->eps);
    }
}
