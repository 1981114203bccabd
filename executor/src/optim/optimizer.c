/* The optimizer seam's dispatch: which implementation updates the parameters of a plan. The
 * plan names its matrix optimizer (settings.optimizer: Muon, SOAP or Shampoo); its elementwise
 * parameters take AdamW, the one elementwise optimizer a plan can have. Adding an optimizer is
 * a file with its table and one line below. */
#include "adamw.h"
#include "cz_format.h"
#include "muon.h"
#include "optimizer.h"
#include "shampoo.h"
#include "soap.h"

static const cz_optimizer_ops *const registry[] = {
    &cz__muon_ops,
    &cz__soap_ops,
    &cz__shampoo_ops,
    &cz__adamw_ops,
};
enum { NREGISTRY = sizeof registry / sizeof registry[0] };

/* The implementation of optimizer id for parameters of kind; NULL when there is none. */
static const cz_optimizer_ops *find(cz_optimizer id, cz_param_kind kind)
{
    for (int i = 0; i < NREGISTRY; i++)
        if (registry[i]->kind == kind && (kind == CZ_KIND_ELEMENTWISE || registry[i]->id == id))
            return registry[i];
    return NULL;
}

int cz__optimizer_plan_check(const cz_plan *plan, cz_error *err)
{
    const char *name = cz_optimizer_name(plan->settings.optimizer);
    if (!find(plan->settings.optimizer, CZ_KIND_MATRIX))
        return cz__error_set(err, CZ_EUNSUPPORTED,
                             "plan optimizer '%s': this version executes Muon, SOAP or Shampoo "
                             "(matrix) + AdamW (elementwise) plans; plan with --optimizer muon, "
                             "soap or shampoo",
                             name ? name : "?");
    return CZ_OK;
}

bool cz__optimizer_updates_in_place(const cz_plan *plan)
{
    const cz_optimizer_ops *ops = find(plan->settings.optimizer, CZ_KIND_MATRIX);
    return ops && ops->update_in_place;
}

int cz__optimizer_fsdp_check(const cz_plan *plan, const cz_exec_config *cfg, cz_error *err)
{
    /* Muon's and SOAP's updates are of whole matrices (or blocks) on the owner, their state
     * the owner's only. Shampoo also keeps the weight decay's part of its momentum per shard
     * (shard_add), which is not checked against FSDP2's rows yet; NorMuon is not tested. */
    if (plan->settings.optimizer != CZ_OPTIM_MUON && plan->settings.optimizer != CZ_OPTIM_SOAP)
        return cz__error_set(err, CZ_EUNSUPPORTED,
                             "plan layout fsdp with optimizer '%s': the fully sharded step runs "
                             "Muon or SOAP (+ AdamW) only; plan with --optimizer muon or soap, or "
                             "with --layout unified",
                             cz_optimizer_name(plan->settings.optimizer));
    if (cfg->normuon.mode != CZ_NORMUON_NONE)
        return cz__error_set(err, CZ_EUNSUPPORTED,
                             "plan layout fsdp with normuon.mode = %d: the fully sharded step "
                             "runs plain Muon; leave normuon.mode at CZ_NORMUON_NONE, or plan "
                             "with --layout unified",
                             (int)cfg->normuon.mode);
    return CZ_OK;
}

int cz__optimizer_open(cz_optim *o, cz_param_kind kind, const cz_plan *plan, cz_compute *c,
                       const cz_exec_config *cfg, cz_error *err)
{
    const cz_optimizer_ops *ops = find(plan->settings.optimizer, kind);
    *o = (cz_optim){.compute = c, .plan = plan};
    /* The plan check refused a plan without a matrix optimizer before this. */
    CZ_ASSERT(ops != NULL, err);
    CZ_ASSERT(ops->version == CZ_OPTIMIZER_OPS_VERSION, err);
    /* NorMuon is a Muon variant: set for a SOAP or Shampoo plan it would be ignored. */
    if (kind == CZ_KIND_MATRIX && ops->id != CZ_OPTIM_MUON && cfg->normuon.mode != CZ_NORMUON_NONE)
        return cz__error_set(err, CZ_EINVALID,
                             "normuon.mode = %d: NorMuon is a Muon variant, and this plan's "
                             "matrix optimizer is %s; plan with --optimizer muon or leave "
                             "normuon.mode at CZ_NORMUON_NONE",
                             (int)cfg->normuon.mode, ops->name);
    o->ops = ops;
    return ops->create(o, cfg, err);
}

void cz__optimizer_close(cz_optim *o)
{
    if (o->ops)
        o->ops->destroy(o);
    *o = (cz_optim){0};
}
