/*
 * Plan validation: recompute every invariant of a plan (the checks are listed by violation code
 * in docs/ANALYSIS.md, "What is checked") against the model
 * and cluster it claims to be made for, and report every violation found, each with a JSON path
 * into the plan file, rather than stopping at the first: a user fixing a hand-edited or foreign
 * plan wants the whole list.
 *
 * Two kinds of checks: structural rules (plan_structure.c, shared with the executor: alignment,
 * no overlap, reverse fill order, range coverage, atomicity, schedule membership, group loads)
 * and comparison with the model and cluster plus recomputation against
 * the planner's own code (cost model, bucket layout of a fresh plan with the same settings,
 * metrics), so that a plan that is self-consistent but disagrees with this build is caught too.
 */
#include "cz_analysis.h"

#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef cz_plan_checks vctx;
#define at cz__plan_checks_at
#define viol cz__plan_checks_fail
#define close_rel cz__close_rel

/* ---- content hash ----------------------------------------------------------------------- */

/* A plan read from a file whose recorded content hash does not match was edited after it was
 * written: the executor refuses it, so validate says so too (and goes on listing the rest). */
static void check_content_hash(vctx *c, const cz_plan *p)
{
    if (p->content_hash_ok == 0)
        return; /* built in memory, or a file without a hash: checked against the model below */
    at(c, "$.content_sha256");
    c->checks++;
    if (p->content_hash_ok < 0)
        viol(c, "plan.content_hash",
             "plan content hash mismatch: the plan was edited after it was written; re-run "
             "canzona plan");
}

/* ---- inputs and topology ---------------------------------------------------------------- */

static void check_str(vctx *c, const char *what, const char *found, const char *expected)
{
    c->checks++;
    if (!found || !expected || strcmp(found, expected) != 0)
        viol(c, "inputs", "%s is '%s' but the given file has '%s'", what, found ? found : "(none)",
             expected ? expected : "(none)");
}

/* The expert grid the plan was made for against the cluster's, and whether the model's experts
 * should have buffers of their own under it (EP > 1 or ETP != TP: Megatron-Core's rule), so that
 * a plan made for another EP or ETP is reported as such. */
static void check_expert_topology(vctx *c, const cz_plan *p, const cz_model *m,
                                  const cz_cluster *cl)
{
    int ep = cz_cluster_ep(cl), etp = cz_cluster_etp(cl);
    size_t n = m->nparams ? m->nparams : 1;
    int *experts = malloc(n * sizeof *experts), *index = malloc(n * sizeof *index), any = 0;
    cz_error e;
    if (!experts || !index) {
        c->oom = 1;
        goto done;
    }
    if (cz__model_experts(m, experts, index, &e) == CZ_OK)
        for (size_t i = 0; i < m->nparams; i++)
            any |= experts[i] > 0;
    bool want = any && (ep > 1 || etp != cl->tp);
    at(c, "$.topology.ep");
    c->checks++;
    if (want && !cz_plan_has_experts(p)) {
        viol(c, "topology",
             "the cluster has EP %d and ETP %d (TP %d), under which Megatron-Core gives the "
             "model's experts buffers of their own, but the plan has no expert groups (it was "
             "made for EP 1 and ETP = TP); re-run canzona plan with these sizes",
             ep, etp, cl->tp);
        c->unsafe = 1;
    } else if (!want && cz_plan_has_experts(p)) {
        viol(c, "topology",
             "the plan has expert groups (EP %d, ETP %d) but the cluster has EP %d and ETP %d "
             "(TP %d)%s; re-run canzona plan with the cluster's sizes",
             p->ep, p->etp, ep, etp, cl->tp, any ? "" : " and the model no experts");
        c->unsafe = 1;
    } else if (want && (p->ep != ep || p->etp != etp)) {
        viol(c, "topology",
             "the plan was made for EP %d and ETP %d but the cluster has EP %d and ETP %d", p->ep,
             p->etp, ep, etp);
        c->unsafe = 1;
    }
done:
    free(experts);
    free(index);
}

static void check_inputs(vctx *c, const cz_plan *p, const cz_model *m, const cz_cluster *cl)
{
    at(c, "$.inputs.model.name");
    check_str(c, "model name", p->model_name, m->name);
    at(c, "$.inputs.model.sha256");
    check_str(c, "model SHA-256", p->model_sha256, m->sha256);
    at(c, "$.inputs.cluster.name");
    check_str(c, "cluster name", p->cluster_name, cl->name);
    at(c, "$.inputs.cluster.sha256");
    check_str(c, "cluster SHA-256", p->cluster_sha256, cl->sha256);
    /* The costs are the calibration's: checking them needs the same one (or none for both). */
    at(c, "$.inputs.calibration.sha256");
    c->checks++;
    const char *given = cl->calibration ? cl->calibration->sha256 : NULL;
    if (!p->calibration_sha256 != !given || (given && strcmp(p->calibration_sha256, given) != 0))
        viol(c, "inputs",
             "the plan's costs were made with %s%s%s but %s%s%s was given; give the same "
             "--calibration as canzona plan had",
             p->calibration_sha256 ? "the calibration of SHA-256 '" : "no calibration",
             p->calibration_sha256 ? p->calibration_sha256 : "", p->calibration_sha256 ? "'" : "",
             given ? "the calibration '" : "none", given ? cl->calibration->source : "",
             given ? "'" : "");
    at(c, "$.dtype");
    c->checks++;
    if (p->dtype != m->dtype)
        viol(c, "inputs", "plan dtype is %s but the model's is %s", cz_dtype_name(p->dtype),
             cz_dtype_name(m->dtype));

    const struct {
        const char *key;
        int found, expected;
    } topo[] = {{"dp", p->dp, cl->dp}, {"tp", p->tp, cl->tp}, {"pp", p->pp, cl->pp}};
    for (size_t i = 0; i < sizeof topo / sizeof topo[0]; i++) {
        at(c, "$.topology.%s", topo[i].key);
        c->checks++;
        if (topo[i].found != topo[i].expected) {
            viol(c, "topology", "plan has %s = %d but the cluster has %d", topo[i].key,
                 topo[i].found, topo[i].expected);
            c->unsafe = 1;
        }
    }
    check_expert_topology(c, p, m, cl);
}

/* ---- parameters ------------------------------------------------------------------------- */

static void check_param_identity(vctx *c, const cz_plan *p, const cz_model *m)
{
    size_t n = p->nparams < m->nparams ? p->nparams : m->nparams;
    at(c, "$.params");
    c->checks++;
    if (p->nparams != m->nparams) {
        viol(c, "param.count", "plan has %zu parameters but the model has %zu", p->nparams,
             m->nparams);
        c->unsafe = 1;
    }
    for (size_t i = 0; i < n; i++) {
        const cz_plan_param *q = &p->params[i];
        const cz_param_def *d = &m->params[i];
        /* The format's comparison (shared with canzona-bench); the messages are validate's. */
        unsigned diff = cz__plan_param_diff(q, d);
        at(c, "$.params[%zu].name", i);
        check_str(c, "parameter name", q->def.name, d->name);
        at(c, "$.params[%zu].shape", i);
        c->checks++;
        if (diff & CZ_PARAM_DIFF_SHAPE)
            viol(c, "param.shape",
                 "'%s' has shape %lldx%lld (%dD) but the model has %lldx%lld (%dD)", d->name,
                 (long long)q->def.shape[0], (long long)q->def.shape[1], q->def.ndim,
                 (long long)d->shape[0], (long long)d->shape[1], d->ndim);
        at(c, "$.params[%zu].tp_dim", i);
        c->checks++;
        if (diff & CZ_PARAM_DIFF_TP_DIM)
            viol(c, "param.tp_dim", "'%s' has tp_dim %d but the model has %d", d->name,
                 q->def.tp_dim, d->tp_dim);
        at(c, "$.params[%zu].optimizer", i);
        c->checks++;
        if (diff & CZ_PARAM_DIFF_KIND)
            viol(c, "param.optimizer", "'%s' is %s but the model says %s", d->name,
                 cz__kind_name(q->def.kind), cz__kind_name(d->kind));
        at(c, "$.params[%zu].blocks", i);
        c->checks++;
        if (diff & CZ_PARAM_DIFF_BLOCKS) {
            char qb[160], db[160];
            viol(c, "param.blocks", "'%s' has blocks %s but the model has %s", d->name,
                 cz__blocks_text(qb, sizeof qb, q->def.nblocks, q->def.block_dim,
                                 q->def.block_sizes),
                 cz__blocks_text(db, sizeof db, d->nblocks, d->block_dim, d->block_sizes));
        }
        at(c, "$.params[%zu].heads", i);
        c->checks++;
        if (diff & CZ_PARAM_DIFF_HEADS) {
            char qh[64], dh[64];
            viol(c, "param.heads", "'%s' has heads %s but the model has %s", d->name,
                 cz__heads_text(qh, sizeof qh, &q->def), cz__heads_text(dh, sizeof dh, d));
        }
        if (diff)
            c->foreign = 1;
    }
}

static void check_param_costs(vctx *c, const cz_plan *p, const cz_model *m, const cz_cluster *cl)
{
    size_t n = p->nparams < m->nparams ? p->nparams : m->nparams;
    for (size_t i = 0; i < n; i++) {
        if (cz__plan_param_diff(&p->params[i], &m->params[i]))
            continue; /* already reported; another parameter's cost is no useful comparison */
        /* An expert's replicated work is repeated over its ETP group (planner.c). */
        cz_cluster ec = *cl;
        ec.tp = cz_plan_param_tp(p, &p->params[i]);
        double want = cz__cost_param(&m->params[i], &p->settings, &ec, m->dtype);
        at(c, "$.params[%zu].cost", i);
        c->checks++;
        if (!close_rel(p->params[i].cost, want))
            viol(c, "param.cost", "'%s': cost is %.17g but the cost model gives %.17g (%s)",
                 p->params[i].def.name, p->params[i].cost, want, cz_unit_name(p->settings.unit));
    }
}

/* ---- bucket layout ---------------------------------------------------------------------- */

/* Compare against the layout of a fresh plan with the same model, cluster and settings. */
static void check_layout_reference(vctx *c, const cz_plan *p, const cz_model *m,
                                   const cz_cluster *cl)
{
    cz_plan *ref = NULL;
    cz_error e;
    cz_error_clear(&e);
    at(c, "$.buckets");
    c->checks++;
    if (cz__plan_init(&ref, m, cl, &p->settings, &e) != CZ_OK ||
        cz__buckets_layout(ref, &e) != CZ_OK) {
        viol(c, "bucket.layout", "cannot lay out the model's buckets for comparison: %s",
             e.message);
        goto done;
    }
    at(c, "$.buckets_config.size");
    c->checks += 2;
    if (p->bucket_size != ref->bucket_size)
        viol(c, "bucket.layout", "bucket size is %lld but the cluster gives %lld",
             (long long)p->bucket_size, (long long)ref->bucket_size);
    at(c, "$.buckets_config.align");
    if (p->bucket_align != ref->bucket_align)
        viol(c, "bucket.layout", "bucket alignment is %lld but the cluster gives %lld",
             (long long)p->bucket_align, (long long)ref->bucket_align);
    at(c, "$.buckets");
    c->checks++;
    if (p->nbuckets != ref->nbuckets)
        viol(c, "bucket.layout", "plan has %zu buckets but the layout rules give %zu", p->nbuckets,
             ref->nbuckets);
    size_t nb = p->nbuckets < ref->nbuckets ? p->nbuckets : ref->nbuckets;
    for (size_t b = 0; b < nb; b++) {
        const cz_plan_bucket *x = &p->buckets[b], *y = &ref->buckets[b];
        at(c, "$.buckets[%zu]", b);
        c->checks++;
        if (x->stage != y->stage || x->offset != y->offset || x->size != y->size)
            viol(c, "bucket.layout",
                 "bucket is stage %d offset %lld size %lld but the layout rules give stage %d "
                 "offset %lld size %lld",
                 x->stage, (long long)x->offset, (long long)x->size, y->stage, (long long)y->offset,
                 (long long)y->size);
        else if (x->expert != y->expert || x->ep_rank != y->ep_rank)
            viol(c, "bucket.layout",
                 "bucket is in the %s buffer%s but the layout rules give the %s buffer%s",
                 x->expert ? "expert" : "dense", x->expert ? " of an EP rank" : "",
                 y->expert ? "expert" : "dense", y->expert ? " of an EP rank" : "");
        else if (x->elementwise != y->elementwise)
            viol(c, "bucket.layout", "bucket is in the %s buffer but the layout rules give the %s",
                 x->elementwise ? "elementwise" : "matrix",
                 y->elementwise ? "elementwise" : "matrix");
    }
    size_t n = p->nparams < ref->nparams ? p->nparams : ref->nparams;
    for (size_t i = 0; i < n; i++) {
        const cz_plan_param *x = &p->params[i], *y = &ref->params[i];
        at(c, "$.params[%zu].stage", i);
        c->checks++;
        if (x->stage != y->stage)
            viol(c, "param.stage", "'%s' is in stage %d but the stage assignment gives %d",
                 x->def.name, x->stage, y->stage);
        at(c, "$.params[%zu].bucket", i);
        c->checks++;
        if (x->bucket != y->bucket || x->offset != y->offset)
            viol(c, "bucket.layout",
                 "'%s' is at bucket %d offset %lld but the layout rules give bucket %d offset %lld",
                 x->def.name, x->bucket, (long long)x->offset, y->bucket, (long long)y->offset);
    }
done:
    cz_plan_free(ref);
}

/* ---- block and cooperative tasks ---------------------------------------------------------- */

/* A rule that many tasks may break for one reason (the settings): reported once, with the
 * number of tasks and the first one's path, so that one wrong setting gives one line. */
typedef struct task_tally {
    int count;
    char first[sizeof((vctx *)0)->path];
} task_tally;

static void tally(task_tally *t, const vctx *c)
{
    if (t->count++ == 0)
        snprintf(t->first, sizeof t->first, "%s", c->path);
}

static void tally_report(vctx *c, const task_tally *t, const char *code, const char *path,
                         const char *what)
{
    c->checks++;
    if (t->count == 0)
        return;
    at(c, "%s", path);
    viol(c, code, "%d task%s %s (the first at %s)", t->count, t->count == 1 ? "" : "s", what,
         t->first);
}

/* Whether --coop K gives the task width K (else it stays hosted): tp_tasks.c's rule. */
static int coop_possible(const cz_param_def *d, int block, int k, int tp)
{
    return tp > 1 && tp % k == 0 && cz_task_coop_fits(d, block, k);
}

/* The planner's cost for task (pid, block) at width k, from the task table of a plan that
 * cz__plan_init made with the same model, cluster and settings: INFINITY when the planner would
 * not give the task that width, NAN when the table has no such task or width (no table, or
 * settings that disagree with the plan's tasks). */
static double table_cost(const cz_plan *ref, int pid, int block, int k)
{
    const cz_task_table *tt = ref ? &ref->tasks : NULL;
    if (!tt || !tt->first || pid < 0 || (size_t)pid >= ref->nparams)
        return NAN;
    int w = -1;
    for (int i = 0; i < tt->nwidths; i++)
        if (tt->widths[i] == k)
            w = i;
    for (int x = tt->first[pid]; w >= 0 && x < tt->first[pid + 1]; x++)
        if (tt->block[x] == block)
            return tt->cost[(size_t)x * (size_t)tt->nwidths + (size_t)w];
    return NAN;
}

/* Every task's recorded cost against the cost model for its block and width, and the tasks
 * against the settings that made them (docs/ANALYSIS.md, "What is checked"). Runs on a plan
 * whose structure is sound and whose parameters are the model's. The planner's task table
 * (tp_tasks.c, from a fresh cz__plan_init) says which width each task may take and what it
 * costs; where the plan's settings do not give it, cz__cost_block directly. A cooperative task's
 * cost is cz__cost_coop_panels at the panel count the plan records, whether or not the planner
 * would choose it today: a plan that records none ran one panel, and costs what one costs. */
static void check_tasks(vctx *c, const cz_plan *p, const cz_model *m, const cz_cluster *cl)
{
    const cz_settings *s = &p->settings;
    cz_plan *ref = NULL;
    cz_error e;
    cz_error_clear(&e);
    if (cz__plan_init(&ref, m, cl, s, &e) != CZ_OK)
        ref = NULL; /* settings the planner refuses: reported by bucket.layout */
    task_tally no_split = {0}, whole_split = {0}, no_coop = {0}, not_forced = {0},
               coop_policy = {0};
    /* Block tasks are made under --split-blocks, and under --coop wherever it has widths to
     * choose from (tp_tasks.c): a cooperative task is one matrix. */
    bool split = s->split_blocks || (s->coop != 0 && p->tp > 1 && s->tp == CZ_TP_ROLLBACK &&
                                     s->optimizer == CZ_OPTIM_MUON);
    int most = p->etp > p->tp ? p->etp : p->tp;
    int *pos = calloc((size_t)(most > 0 ? most : 1), sizeof *pos);
    if (!pos) {
        c->oom = 1;
        return;
    }
    /* The DP ranks' schedules over TP, then (expert groups) the expert ranks' over ETP. */
    for (int side = 0; side < (cz_plan_has_experts(p) ? 2 : 1); side++) {
        int group = side ? p->etp : p->tp;
        int nslots = (group == 1 || s->tp == CZ_TP_SC) ? 1 : group;
        size_t nsched = side ? p->nexpert_schedules : p->nschedules;
        const char *root = side ? "expert_schedule" : "tp_schedule";
        for (size_t k = 0; k < nsched; k++) {
            const cz_rank_schedule *rs = side ? &p->expert_schedules[k] : &p->schedules[k];
            for (int g = 0; g < rs->ngroups; g++) {
                const cz_plan_group *gr = &rs->groups[g];
                memset(pos, 0, (size_t)nslots * sizeof *pos);
                for (int t = 0; t < gr->ntasks; t++) {
                    int pid = gr->task_param[t], slot = gr->task_slot[t];
                    int width = cz_group_task_width(gr, t), block = cz_group_task_block(gr, t);
                    if (pid < 0 || (size_t)pid >= m->nparams || slot < 0 || width < 1 ||
                        slot + width > nslots)
                        continue; /* reported by the structural checks */
                    at(c, "$.%s[%zu].groups[%d].slots[%d][%d]", root, k, g, slot, pos[slot]);
                    for (int x = slot; x < slot + width; x++)
                        pos[x]++;
                    const cz_param_def *d = &m->params[pid];
                    if (d->kind != CZ_KIND_MATRIX)
                        continue;
                    c->checks += 3;
                    /* A TP-local per-head task is made without --split-blocks and --coop
                     * (tp_tasks.c); its cost is its share of the heads. */
                    bool local = cz_task_is_local(d, width);
                    if (block >= 0 && !split && !local)
                        tally(&no_split, c);
                    if (block < 0 && d->nblocks > 0 && split)
                        tally(&whole_split, c);
                    if (width > 1 && s->coop == 0 && !local)
                        tally(&no_coop, c);
                    if (width > 1 && !local &&
                        (s->tp != CZ_TP_ROLLBACK || s->unit == CZ_UNIT_NUMEL))
                        tally(&coop_policy, c);
                    if (s->coop > 1) {
                        double ck = table_cost(ref, pid, block, s->coop);
                        int can =
                            isnan(ck) ? coop_possible(d, block, s->coop, group) : isfinite(ck);
                        if (width != (can ? s->coop : 1))
                            tally(&not_forced, c);
                    }
                    if (!gr->task_cost)
                        continue;
                    double want = p->params[pid].cost;
                    const char *model = "the parameter's recorded cost";
                    double tc = width > 1 ? NAN : table_cost(ref, pid, block, width);
                    int panels = cz_group_task_panels(gr, t);
                    char coop_model[96];
                    if (local) {
                        want = cz__cost_block(d, block, s, cl, m->dtype) / width;
                        model = "the cost model of its heads (cz__cost_block / width)";
                    } else if (block >= 0 && isfinite(tc)) {
                        want = tc;
                        model = "the cost model (cz__cost_block)";
                    } else if (width > 1) {
                        int64_t r0, c0, rows, cols;
                        cz_task_region(d, block, &r0, &c0, &rows, &cols);
                        cz_cluster gc = *cl; /* an expert's members are ETP ranks */
                        gc.tp = group;
                        want = cz__cost_coop_panels(rows, cols, width, panels, s, &gc, m->dtype);
                        snprintf(coop_model, sizeof coop_model,
                                 "the cooperative cost model at its %d Gram panel%s "
                                 "(cz__cost_coop_panels)",
                                 panels, panels == 1 ? "" : "s");
                        model = coop_model;
                    } else if (block >= 0) {
                        want = cz__cost_block(d, block, s, cl, m->dtype);
                        model = "the cost model (cz__cost_block)";
                    }
                    c->checks++;
                    if (!close_rel(gr->task_cost[t], want)) {
                        char path[sizeof c->path];
                        memcpy(path, c->path, sizeof path);
                        at(c, "%s.cost", path);
                        viol(c, "schedule.task_cost",
                             "'%s' (id %d, block %d, width %d): cost is %.17g but %s gives %.17g "
                             "(%s)",
                             d->name, pid, block, width, gr->task_cost[t], model, want,
                             cz_unit_name(s->unit));
                    }
                }
            }
        }
    }
    free(pos);
    cz_plan_free(ref);
    tally_report(c, &no_split, "settings.split_blocks", "$.settings",
                 "schedule a single block of a matrix, but $.settings.split_blocks is not set "
                 "(canzona plan makes block tasks only under --split-blocks)");
    tally_report(c, &whole_split, "settings.split_blocks", "$.settings.split_blocks",
                 "schedule a matrix with blocks whole, but split_blocks is set (under "
                 "--split-blocks every block of a blocked matrix is its own task)");
    tally_report(c, &no_coop, "settings.coop", "$.settings",
                 "are cooperative, but $.settings.coop is absent or \"off\"");
    tally_report(c, &coop_policy, "settings.coop", "$.settings.tp_strategy",
                 "are cooperative, which needs the rollback TP strategy and the time or flops "
                 "cost unit");
    char what[160];
    snprintf(what, sizeof what,
             "do not have the forced width: $.settings.coop is %d, which every task whose shape "
             "allows it takes (the others stay hosted, width 1)",
             s->coop);
    tally_report(c, &not_forced, "settings.coop", "$.settings.coop", what);
}

/* The schema the plan's content needs is the format's rule (cz__plan_schema_needed: what the
 * writer writes and the executor demands): version 3 for expert groups, whatever their tasks, 2
 * for a block or cooperative task, else 1. Each message says which part of it broke (the
 * reader refuses expert keys in versions 1 and 2). */
static void check_schema(vctx *c, const cz_plan *p)
{
    if (p->schema_version == 0)
        return; /* built in memory */
    const char *need = cz__plan_schema_needed(p);
    at(c, "$.schema");
    c->checks++;
    if (p->schema_version == 3 && strcmp(need, CZ_PLAN_SCHEMA_EXPERT) != 0)
        viol(c, "plan.schema",
             "the schema is \"%s\" but the plan has no expert groups: such a plan is \"%s\"",
             CZ_PLAN_SCHEMA_EXPERT, need);
    else if (p->schema_version == 2 && strcmp(need, CZ_PLAN_SCHEMA_SPLIT) != 0)
        viol(c, "plan.schema",
             "the schema is \"%s\" but the plan has no block or cooperative task: such a plan "
             "is \"%s\" (canzona plan writes version 2 only when it needs it)",
             CZ_PLAN_SCHEMA_SPLIT, need);
    else if (p->schema_version == 1 && strcmp(need, CZ_PLAN_SCHEMA) != 0)
        viol(c, "plan.schema",
             "the schema is \"%s\" but the plan has block or cooperative tasks, which need \"%s\"",
             CZ_PLAN_SCHEMA, need);
}

/* ---- the fully sharded layout against the job ------------------------------------------- */

/* What FSDP2 will do with the model on the cluster, against what the plan says: the DP size its
 * shards are cut for, and each parameter's dim-0 shard by torch.chunk (fsdp_shards.c) from the
 * model's shape, the cluster's TP and DP sizes. A plan that contradicts the job would have the
 * executor gather shards that are not where it thinks, so each finding names the parameter and
 * the rule. */
static void check_fsdp_job(vctx *c, const cz_plan *p, const cz_model *m, const cz_cluster *cl)
{
    /* HSDP: FSDP2 shards over the cluster's DP ranks of one replica. */
    int R = cz_plan_fsdp_replicas(p), shard = cl->dp % R == 0 ? cl->dp / R : cl->dp;
    const char *ranks = R > 1 ? "shard" : "DP";
    at(c, "$.topology.dp");
    c->checks++;
    if (p->dp != cl->dp)
        viol(c, "fsdp.dp",
             "the plan's shards are cut for DP %d but the cluster's DP mesh dimension is %d: "
             "FSDP2 splits every parameter along dim 0 over all %d %s ranks; re-run canzona plan "
             "--layout fsdp for this cluster",
             p->dp, cl->dp, shard, ranks);
    else if (cl->dp % R != 0)
        viol(c, "fsdp.dp",
             "the cluster's DP size %d is not a multiple of the plan's HSDP replicate size %d",
             cl->dp, R);
    size_t n = p->nparams < m->nparams ? p->nparams : m->nparams;
    int pshard = cz_plan_fsdp_shard(p);
    for (size_t i = 0; i < n; i++) {
        const cz_plan_param *q = &p->params[i];
        const cz_param_def *d = &m->params[i];
        int64_t rows = d->shape[0];
        if (d->tp_dim == 0 && cl->tp > 0)
            rows /= cl->tp;
        int64_t want = cz__fsdp_chunk_rows(rows, shard);
        at(c, "$.params[%zu].shard_rows", i);
        c->checks++;
        if (q->shard_rows == want)
            continue;
        bool planned_even = pshard > 0 && q->shard_rows * (int64_t)pshard == q->local_shape[0];
        if (planned_even && !cz__fsdp_even(rows, shard))
            viol(c, "fsdp.even",
                 "'%s': planned as even shards of %lld rows on each of %d %s ranks, but FSDP2 "
                 "cuts its %lld TP-local rows over %d %s ranks unevenly (torch.chunk: ceil = %lld "
                 "rows per rank, the last ranks %lld)",
                 d->name, (long long)q->shard_rows, pshard, ranks, (long long)rows, shard, ranks,
                 (long long)want, (long long)cz__fsdp_rows(rows, shard, shard - 1));
        else
            viol(c, "fsdp.shard_rows",
                 "'%s': the plan gives each %s rank %lld rows but FSDP2 (torch.chunk along dim 0 "
                 "of the %lld TP-local rows over %d %s ranks) gives ceil(%lld / %d) = %lld",
                 d->name, ranks, (long long)q->shard_rows, (long long)rows, shard, ranks,
                 (long long)rows, shard, (long long)want);
    }
}

/* ---- metrics ---------------------------------------------------------------------------- */

static void cmp_scalar(vctx *c, const char *path, double found, double want)
{
    at(c, "%s", path);
    c->checks++;
    if (!close_rel(found, want))
        viol(c, "metrics", "stored value %.17g, recomputed %.17g", found, want);
}

static void cmp_array(vctx *c, const char *path, const double *found, const double *want, size_t n)
{
    if (!want)
        return;
    if (!found) {
        at(c, "%s", path);
        c->checks++;
        viol(c, "metrics", "missing; expected %zu values", n);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        at(c, "%s[%zu]", path, i);
        c->checks++;
        if (!close_rel(found[i], want[i]))
            viol(c, "metrics", "stored value %.17g, recomputed %.17g", found[i], want[i]);
    }
}

static void check_metrics(vctx *c, const cz_plan *p, const cz_cluster *cl)
{
    /* The planner's own metrics code on a shallow copy: it reads params, buckets and schedules
     * and writes only the copy's metrics. */
    cz_plan tmp = *p;
    cz_error e;
    cz_error_clear(&e);
    memset(&tmp.metrics, 0, sizeof tmp.metrics);
    at(c, "$.metrics");
    c->checks++;
    if (cz__plan_metrics_compute(&tmp, cl, &e) != CZ_OK) {
        viol(c, "metrics", "cannot recompute the metrics: %s", e.message);
        goto done;
    }
    const cz_plan_metrics *f = &p->metrics, *w = &tmp.metrics;
    size_t nr = (size_t)p->pp * (size_t)p->dp, ng = nr * (size_t)p->tp;
    cmp_array(c, "$.metrics.dp.load", f->dp_load, w->dp_load, nr);
    cmp_scalar(c, "$.metrics.dp.imbalance", f->dp_imbalance, w->dp_imbalance);
    cmp_array(c, "$.metrics.tp.gpu_load", f->gpu_load, w->gpu_load, ng);
    cmp_array(c, "$.metrics.tp.rank_makespan", f->rank_makespan, w->rank_makespan, nr);
    cmp_scalar(c, "$.metrics.tp.makespan", f->tp_makespan, w->tp_makespan);
    cmp_scalar(c, "$.metrics.tp.imbalance", f->tp_imbalance, w->tp_imbalance);
    cmp_scalar(c, "$.metrics.total_cost", f->total_cost, w->total_cost);
    cmp_scalar(c, "$.metrics.max_task_cost", f->max_task_cost, w->max_task_cost);
    /* Plans written before the bound counted stages and EP groups (lower_bound.c) store
     * max(total / GPUs, largest task), which bounds them too: either reads as right. */
    double earlier = w->total_cost / (double)(ng > 0 ? ng : 1);
    if (w->max_task_cost > earlier)
        earlier = w->max_task_cost;
    cmp_scalar(c, "$.metrics.lower_bound", f->lower_bound,
               close_rel(f->lower_bound, earlier) ? earlier : w->lower_bound);
    if (cz__plan_has_split_tasks(p)) { /* stored only in version 2 plans */
        cmp_scalar(c, "$.metrics.average_load", f->average_load, w->average_load);
        cmp_scalar(c, "$.metrics.split_lower_bound", f->split_lower_bound, w->split_lower_bound);
    }
    cmp_array(c, "$.metrics.memory", f->memory, w->memory, ng);
    if (cz_plan_has_experts(p)) {
        size_t nx = (size_t)p->pp * (size_t)cz_plan_expert_ranks(p);
        cmp_array(c, "$.metrics.expert.load", f->expert_load, w->expert_load, nx);
        cmp_scalar(c, "$.metrics.expert.imbalance", f->expert_imbalance, w->expert_imbalance);
        cmp_array(c, "$.metrics.expert.rank_makespan", f->expert_rank_makespan,
                  w->expert_rank_makespan, nx);
    }
    cmp_scalar(c, "$.metrics.predicted_step_s", f->predicted_step_s, w->predicted_step_s);
done:
    cz__plan_metrics_free(&tmp.metrics);
}

int cz__plan_validate_json(const cz_plan *plan, const cz_model *model, const cz_cluster *cluster,
                           json_t **violations_out, cz_error *err)
{
    vctx c = {0};
    c.expert_groups = 1; /* validate checks plans with expert groups */
    *violations_out = NULL;
    if (!plan || !model || !cluster)
        return cz__error_set(err, CZ_EINVALID, "validate: plan, model and cluster are required");
    c.out = json_array();
    if (!c.out)
        return cz__error_set(err, CZ_ENOMEM, "validate: out of memory");

    check_content_hash(&c, plan);
    check_inputs(&c, plan, model, cluster);
    check_param_identity(&c, plan, model);
    check_param_costs(&c, plan, model, cluster);
    cz__plan_check_structure(&c, plan);
    check_schema(&c, plan);
    if (cz_plan_is_fsdp(plan)) {
        /* No buckets to lay out and no block or cooperative tasks (the structural check). */
        check_fsdp_job(&c, plan, model, cluster);
    } else if (!c.unsafe && !c.foreign) {
        check_tasks(&c, plan, model, cluster);
        check_layout_reference(&c, plan, model, cluster);
    }
    /* The metrics code indexes by ranks, buckets and param ids: only run it on a plan whose
     * structure is sound, so that a broken plan yields violations, not a crash. */
    if (!c.unsafe)
        check_metrics(&c, plan, cluster);

    if (c.oom) {
        json_decref(c.out);
        return cz__error_set(err, CZ_ENOMEM, "validate: out of memory");
    }
    *violations_out = c.out;
    return c.checks;
}
