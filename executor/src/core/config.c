/* Executor configuration: the defaults, and every version of cz_exec_config read into this
 * build's layout (libgit2 accepts its options structs of every version up to its own; NCCL's
 * config records its size: a caller built against an older header keeps working). */
#include "config.h"

#include "cz_format.h"

#include <stddef.h>
#include <string.h>

/* The defaults are CZ_EXEC_CONFIG_INIT (canzona_exec.h): one set of values, each optimizer's
 * and backend's among them, written once in the public header. Copied from a static object,
 * whose padding is zero, so that two initialized configs compare equal byte for byte. */
void cz_exec_config_init(cz_exec_config *cfg)
{
    static const cz_exec_config defaults = CZ_EXEC_CONFIG_INIT;
    memcpy(cfg, &defaults, sizeof *cfg);
}

int cz_exec_ns_coeffs_steps(const char *coeffs, int *steps, cz_error *err)
{
    cz_ns_coeffs k;
    int rc = cz__ns_coeffs_parse(coeffs, &k, err);
    if (rc != CZ_OK)
        return rc;
    *steps = k.rows > 1 ? k.rows : 0;
    return CZ_OK;
}

/* cz_exec_config as versions 1 to 6 laid it out (canzona_exec.h's history): one flat struct,
 * each version appending fields to the one before (version 1 ends at check_finite, 2 at
 * stream, 3 at soap_bias_correction, 4 at nccl_timeout_s, 5 at mpi_timeout_s). Version 2's
 * memory, dtype and stream came in a second change that kept the number; a version 2 struct is
 * read with them, as the last library of version 2 read it. */
struct cz__exec_config_v6 {
    int version;
    const char *backend;
    const char *comm;
    int dp_rank, tp_rank;
    const void *world_comm, *dp_comm, *tp_comm;
    float lr;
    float momentum;
    int nesterov;
    float weight_decay;
    int ns_steps;
    const char *ns_coeffs;
    float ns_eps;
    float scale_coeff;
    float adamw_lr, adamw_beta1, adamw_beta2, adamw_eps, adamw_weight_decay;
    int check_finite;
    /* version 2 */
    cz_muon_scaling muon_scaling;
    float max_grad_norm;
    cz_exec_memory memory;
    int dtype;
    void *stream;
    /* version 3 */
    float shampoo_beta1, shampoo_beta2, shampoo_eps, shampoo_momentum;
    int shampoo_nesterov, shampoo_start_step, shampoo_max_dim, shampoo_bias_correction;
    cz_shampoo_grafting shampoo_grafting;
    float shampoo_graft_beta2, shampoo_graft_eps;
    float soap_beta1, soap_beta2, soap_shampoo_beta, soap_eps;
    int soap_bias_correction;
    /* version 4 */
    double nccl_timeout_s;
    /* version 5 */
    double mpi_timeout_s;
    /* version 6 */
    const cz_comm_callbacks *callbacks;
};

/* Where each flat version ends. */
static const size_t flat_ends[] = {
    CZ__OPTIONS_END(struct cz__exec_config_v6, check_finite),
    CZ__OPTIONS_END(struct cz__exec_config_v6, stream),
    CZ__OPTIONS_END(struct cz__exec_config_v6, soap_bias_correction),
    CZ__OPTIONS_END(struct cz__exec_config_v6, nccl_timeout_s),
    CZ__OPTIONS_END(struct cz__exec_config_v6, mpi_timeout_s),
    sizeof(struct cz__exec_config_v6),
};
_Static_assert(sizeof flat_ends / sizeof *flat_ends == 6, "one end per flat version");
/* The fields every version has in the same place (what a refused config is still read for). */
_Static_assert(offsetof(struct cz__exec_config_v6, tp_comm) == offsetof(cz_exec_config, tp_comm),
               "every version starts with the same fields");

/* The flat fields, in this version's places. */
static void from_flat(cz_exec_config *o, const struct cz__exec_config_v6 *f)
{
    o->backend = f->backend;
    o->comm = f->comm;
    o->dp_rank = f->dp_rank;
    o->tp_rank = f->tp_rank;
    o->world_comm = f->world_comm;
    o->dp_comm = f->dp_comm;
    o->tp_comm = f->tp_comm;
    /* Versions 2 to 5 took lr = 0 for the optimizer's default (version 1 had a default of its
     * own, 0.02, and 0 was a rate of 0; version 6 made CZ_EXEC_LR_DEFAULT the default). */
    o->lr = f->version >= 2 && f->version <= 5 && f->lr == 0.0f ? CZ_EXEC_LR_DEFAULT : f->lr;
    o->weight_decay = f->weight_decay;
    o->check_finite = f->check_finite;
    o->max_grad_norm = f->max_grad_norm;
    o->memory = f->memory;
    o->dtype = f->dtype;
    o->stream = f->stream;
    o->nccl_timeout_s = f->nccl_timeout_s;
    o->mpi_timeout_s = f->mpi_timeout_s;
    o->callbacks = f->callbacks;
    o->muon =
        (cz_muon_config){CZ_MUON_CONFIG_VERSION, f->momentum, f->nesterov,    f->ns_steps,
                         f->ns_coeffs,           f->ns_eps,   f->scale_coeff, f->muon_scaling};
    o->adamw = (cz_adamw_config){CZ_ADAMW_CONFIG_VERSION, f->adamw_lr,  f->adamw_beta1,
                                 f->adamw_beta2,          f->adamw_eps, f->adamw_weight_decay};
    o->soap = (cz_soap_config){CZ_SOAP_CONFIG_VERSION, f->soap_beta1, f->soap_beta2,
                               f->soap_shampoo_beta,   f->soap_eps,   f->soap_bias_correction};
    o->shampoo = (cz_shampoo_config){CZ_SHAMPOO_CONFIG_VERSION,  f->shampoo_beta1,
                                     f->shampoo_beta2,           f->shampoo_eps,
                                     f->shampoo_momentum,        f->shampoo_nesterov,
                                     f->shampoo_start_step,      f->shampoo_max_dim,
                                     f->shampoo_bias_correction, f->shampoo_grafting,
                                     f->shampoo_graft_beta2,     f->shampoo_graft_eps};
}

/* This build's defaults in the flat layout: what a flat version lacks. */
static void flat_defaults(struct cz__exec_config_v6 *f, const cz_exec_config *d)
{
    memset(f, 0, sizeof *f);
    f->muon_scaling = d->muon.scaling;
    f->max_grad_norm = d->max_grad_norm;
    f->memory = d->memory;
    f->dtype = d->dtype;
    f->stream = d->stream;
    f->shampoo_beta1 = d->shampoo.beta1;
    f->shampoo_beta2 = d->shampoo.beta2;
    f->shampoo_eps = d->shampoo.eps;
    f->shampoo_momentum = d->shampoo.momentum;
    f->shampoo_nesterov = d->shampoo.nesterov;
    f->shampoo_start_step = d->shampoo.start_step;
    f->shampoo_max_dim = d->shampoo.max_dim;
    f->shampoo_bias_correction = d->shampoo.bias_correction;
    f->shampoo_grafting = d->shampoo.grafting;
    f->shampoo_graft_beta2 = d->shampoo.graft_beta2;
    f->shampoo_graft_eps = d->shampoo.graft_eps;
    f->soap_beta1 = d->soap.beta1;
    f->soap_beta2 = d->soap.beta2;
    f->soap_shampoo_beta = d->soap.shampoo_beta;
    f->soap_eps = d->soap.eps;
    f->soap_bias_correction = d->soap.bias_correction;
    f->nccl_timeout_s = d->nccl_timeout_s;
    f->mpi_timeout_s = d->mpi_timeout_s;
    f->callbacks = d->callbacks;
}

/* Each optimizer's struct of this version: its own version checked the same way. */
static int check_nested(const cz_exec_config *c, cz_error *err)
{
    const struct {
        int version, current;
        const char *type, *how;
    } parts[] = {
        {c->muon.version, CZ_MUON_CONFIG_VERSION, "cz_muon_config", "CZ_MUON_CONFIG_INIT"},
        {c->adamw.version, CZ_ADAMW_CONFIG_VERSION, "cz_adamw_config", "CZ_ADAMW_CONFIG_INIT"},
        {c->soap.version, CZ_SOAP_CONFIG_VERSION, "cz_soap_config", "CZ_SOAP_CONFIG_INIT"},
        {c->shampoo.version, CZ_SHAMPOO_CONFIG_VERSION, "cz_shampoo_config",
         "CZ_SHAMPOO_CONFIG_INIT"},
        {c->normuon.version, CZ_NORMUON_CONFIG_VERSION, "cz_normuon_config",
         "CZ_NORMUON_CONFIG_INIT"}};
    for (size_t i = 0; i < sizeof parts / sizeof *parts; i++) {
        int rc = cz__options_version_check(parts[i].version, parts[i].current, parts[i].type,
                                           parts[i].how, err);
        if (rc != CZ_OK)
            return rc;
    }
    return CZ_OK;
}

int cz__exec_config_read(cz_exec_config *out, const cz_exec_config *in, cz_error *err)
{
    cz_exec_config_init(out);
    if (!in)
        return CZ_OK;
    int version;
    memcpy(&version, in, sizeof version);
    int rc = cz__options_version_check(version, CZ_EXEC_CONFIG_VERSION, "cz_exec_config",
                                       "cz_exec_config_init() or CZ_EXEC_CONFIG_INIT", err);
    if (rc != CZ_OK) {
        /* Only the fields every version starts with (a zeroed struct's are the NULL and 0
         * that select the defaults' communication). */
        memcpy(out, in, CZ__OPTIONS_END(cz_exec_config, tp_comm));
        out->version = CZ_EXEC_CONFIG_VERSION;
        return rc;
    }
    if (version == CZ_EXEC_CONFIG_VERSION) {
        *out = *in;
        return check_nested(out, err);
    }
    /* Versions 7 and 8 are this layout up to the optimizers' structs and grad_reduce_in_fp32;
     * what later versions appended keeps its default. */
    if (version == 7 || version == 8) {
        memcpy(out, in,
               version == 7 ? CZ__OPTIONS_END(cz_exec_config, shampoo)
                            : CZ__OPTIONS_END(cz_exec_config, grad_reduce_in_fp32));
        out->version = CZ_EXEC_CONFIG_VERSION;
        return check_nested(out, err);
    }
    struct cz__exec_config_v6 flat;
    flat_defaults(&flat, out);
    memcpy(&flat, in, flat_ends[version - 1]);
    from_flat(out, &flat);
    return CZ_OK;
}
