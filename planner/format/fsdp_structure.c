/*
 * The structural rules of a fully sharded plan (settings.layout "fsdp"), which the structural
 * check (plan_structure.c) runs in place of the bucket, range and ownership rules of the other
 * layouts. FSDP2 owns the gradient reduce-scatter and the parameter all-gather, so the plan has
 * no buckets; what it says is who updates each matrix and in which micro-group:
 *
 *   fsdp.buckets      no buckets (FSDP2 lays out its own flat buffers);
 *   fsdp.replicate    HSDP: dp is a multiple of settings.replicate;
 *   fsdp.shard_rows   shard_rows is torch.chunk's ceil(local rows / shard ranks) (fsdp_shards.c;
 *                     the shard ranks are dp / replicate);
 *   fsdp.owner        a matrix's owner is a slot of its stage's schedule (0 .. slots - 1,
 *                     cz_plan_fsdp_slots) and dp_owner its DP rank (owner / tp); an elementwise
 *                     parameter has none (-1, -1);
 *   fsdp.schedule     one schedule per stage, over that many slots; every matrix of the stage sits
 *                     in exactly one slot of one group, the slot of its owner; nothing else
 *                     does; each slot's load is the sum of its tasks' costs.
 *
 * Safe on any plan the reader accepts: every index is checked before use.
 */
#include "cz_format.h"

#include <stdlib.h>

typedef cz_plan_checks vctx;
#define at cz__plan_checks_at
#define viol cz__plan_checks_fail

static void check_params(vctx *c, const cz_plan *p, int64_t gpus)
{
    for (size_t i = 0; i < p->nparams; i++) {
        const cz_plan_param *q = &p->params[i];
        int shard = cz_plan_fsdp_shard(p);
        int64_t want = cz__fsdp_chunk_rows(q->local_shape[0], shard);
        at(c, "$.params[%zu].shard_rows", i);
        c->checks++;
        if (q->shard_rows != want)
            viol(c, "fsdp.shard_rows",
                 "'%s': shard_rows is %lld but FSDP2 (torch.chunk along dim 0) gives each of "
                 "the %d %s ranks ceil(%lld / %d) = %lld rows of the TP-local shard",
                 q->def.name, (long long)q->shard_rows, shard, shard == p->dp ? "DP" : "shard",
                 (long long)q->local_shape[0], shard, (long long)want);
        at(c, "$.params[%zu].owner", i);
        c->checks++;
        if (q->def.kind != CZ_KIND_MATRIX) {
            if (q->owner != -1 || q->dp_owner != -1)
                viol(c, "fsdp.owner",
                     "'%s' is elementwise: every GPU updates its own shard, so owner and "
                     "dp_owner must be -1 (found %d and %d)",
                     q->def.name, q->owner, q->dp_owner);
            continue;
        }
        if (q->owner < 0 || q->owner >= gpus) {
            viol(c, "fsdp.owner", "'%s': owner %d is outside the schedule's GPUs [0, %lld) (%d*%d)",
                 q->def.name, q->owner, (long long)gpus, (int)(gpus / p->tp), p->tp);
            c->unsafe = 1;
        } else if (q->dp_owner != q->owner / p->tp) {
            viol(c, "fsdp.owner",
                 "'%s': dp_owner is %d but owner GPU %d is on DP rank %d (owner / tp)", q->def.name,
                 q->dp_owner, q->owner, q->owner / p->tp);
        }
    }
}

/* Where each matrix was seen: its stage's schedule, group and slot (g -1: not yet). */
typedef struct seen_at {
    int g, slot;
} seen_at;

static void check_group(vctx *c, const cz_plan *p, const cz_rank_schedule *rs, size_t k, int g,
                        int64_t gpus, seen_at *seen)
{
    const cz_plan_group *gr = &rs->groups[g];
    at(c, "$.fsdp_schedule[%zu].groups[%d]", k, g);
    c->checks++;
    if (gr->nslots != gpus) {
        viol(c, "fsdp.schedule",
             "group has %d slots, expected one per GPU the stage's matrices are scheduled over: "
             "%lld",
             gr->nslots, (long long)gpus);
        c->unsafe = 1;
        return;
    }
    double *load = calloc((size_t)gpus, sizeof *load);
    if (!load) {
        c->oom = 1;
        return;
    }
    for (int t = 0; t < gr->ntasks; t++) {
        int id = gr->task_param[t], slot = gr->task_slot[t];
        at(c, "$.fsdp_schedule[%zu].groups[%d].slots", k, g);
        c->checks++;
        if (id < 0 || (size_t)id >= p->nparams || slot < 0 || slot >= gpus) {
            viol(c, "fsdp.schedule", "task %d names parameter %d on slot %d: out of range", t, id,
                 slot);
            c->unsafe = 1;
            continue;
        }
        const cz_plan_param *q = &p->params[id];
        if ((gr->task_width && gr->task_width[t] != 1) ||
            (gr->task_block && gr->task_block[t] >= 0))
            viol(c, "fsdp.schedule",
                 "'%s': a fully sharded plan hosts whole matrices on one GPU; block and "
                 "cooperative tasks are not supported in this layout",
                 q->def.name);
        if (q->def.kind != CZ_KIND_MATRIX || q->stage != rs->stage)
            viol(c, "fsdp.schedule", "'%s' is %s of stage %d, not a matrix of stage %d",
                 q->def.name, q->def.kind != CZ_KIND_MATRIX ? "elementwise" : "a matrix", q->stage,
                 rs->stage);
        else if (seen[id].g >= 0)
            viol(c, "fsdp.schedule",
                 "'%s' is already in group %d (slot %d): a matrix is updated once", q->def.name,
                 seen[id].g, seen[id].slot);
        else if (slot != q->owner)
            viol(c, "fsdp.schedule", "'%s' is on slot %d but its owner is GPU %d", q->def.name,
                 slot, q->owner);
        if (seen[id].g < 0)
            seen[id] = (seen_at){g, slot};
        load[slot] += gr->task_cost ? gr->task_cost[t] : q->cost;
    }
    for (int64_t s = 0; s < gpus && gr->load; s++) {
        at(c, "$.fsdp_schedule[%zu].groups[%d].load[%lld]", k, g, (long long)s);
        c->checks++;
        if (!cz__close_rel(gr->load[s], load[s]) && !(gr->load[s] == 0.0 && load[s] == 0.0))
            viol(c, "fsdp.schedule", "slot load %.17g, but its tasks sum to %.17g", gr->load[s],
                 load[s]);
    }
    free(load);
}

void cz__fsdp_check_structure(cz_plan_checks *c, const cz_plan *p)
{
    if (p->dp % cz_plan_fsdp_replicas(p) != 0) {
        at(c, "$.settings.replicate");
        c->checks++;
        viol(c, "fsdp.replicate", "DP %d is not a multiple of the HSDP replicate size %d", p->dp,
             cz_plan_fsdp_replicas(p));
        c->unsafe = 1;
        return;
    }
    int64_t gpus = cz_plan_fsdp_slots(p);
    at(c, "$.buckets");
    c->checks++;
    if (p->nbuckets != 0) {
        viol(c, "fsdp.buckets",
             "a fully sharded plan has no buckets (FSDP2 reduce-scatters and all-gathers its own "
             "flat buffers), found %zu",
             p->nbuckets);
        c->unsafe = 1;
    }
    if (cz_plan_has_experts(p)) {
        at(c, "$.topology.ep");
        c->checks++;
        viol(c, "fsdp.experts", "a fully sharded plan has no expert groups");
        c->unsafe = 1;
        return;
    }
    check_params(c, p, gpus);
    at(c, "$.fsdp_schedule");
    c->checks++;
    if (p->nschedules != (size_t)p->pp) {
        viol(c, "fsdp.schedule", "plan has %zu schedules, expected one per stage: %d",
             p->nschedules, p->pp);
        c->unsafe = 1;
        return;
    }
    seen_at *seen = malloc((p->nparams ? p->nparams : 1) * sizeof *seen);
    if (!seen) {
        c->oom = 1;
        return;
    }
    for (size_t i = 0; i < p->nparams; i++)
        seen[i] = (seen_at){-1, -1};
    for (size_t k = 0; k < p->nschedules; k++) {
        const cz_rank_schedule *rs = &p->schedules[k];
        at(c, "$.fsdp_schedule[%zu].stage", k);
        c->checks++;
        if (rs->stage != (int)k) {
            viol(c, "fsdp.schedule", "schedule is for stage %d, expected %zu", rs->stage, k);
            c->unsafe = 1;
            continue;
        }
        for (int g = 0; g < rs->ngroups; g++)
            check_group(c, p, rs, k, g, gpus, seen);
    }
    for (size_t i = 0; i < p->nparams; i++) {
        const cz_plan_param *q = &p->params[i];
        if (q->def.kind != CZ_KIND_MATRIX || seen[i].g >= 0)
            continue;
        at(c, "$.params[%zu]", i);
        c->checks++;
        viol(c, "fsdp.schedule", "'%s' (owner GPU %d) is in no group of stage %d's schedule",
             q->def.name, q->owner, q->stage);
    }
    free(seen);
}
