/*
 * The fully sharded part of `canzona inspect` (cz__fsdp_inspect_json): what a reader of such a
 * plan wants to see that the per-DP-rank tables do not show. Every micro-group spans the whole
 * shard group (one all-to-all(v) of gradient shards to the owners, one of update shards back),
 * so the groups are listed per stage, with the shapes they batch and how many GPUs own a task
 * in them; and FSDP2's torch.chunk shards, counted where they are uneven or leave DP ranks
 * empty (a matrix of fewer rows than DP ranks: the owner gathers from fewer ranks).
 */
#include "cz_analysis.h"
#include "cz_json_build.h"

#include <jansson.h>
#include <stdlib.h>

/* Distinct full shapes among a group's tasks (groups are small: a quadratic scan). */
static int group_shapes(const cz_plan *p, const cz_plan_group *gr)
{
    int n = 0;
    for (int t = 0; t < gr->ntasks; t++) {
        const cz_param_def *d = &p->params[gr->task_param[t]].def;
        int seen = 0;
        for (int u = 0; u < t && !seen; u++) {
            const cz_param_def *e = &p->params[gr->task_param[u]].def;
            seen = e->shape[0] == d->shape[0] && e->shape[1] == d->shape[1];
        }
        n += !seen;
    }
    return n;
}

static json_t *group_json(const cz_plan *p, const cz_plan_group *gr, int *per_gpu)
{
    double lo = 0.0, hi = 0.0, big = -1.0;
    int owners = 0, bigid = -1;
    for (int k = 0; k < gr->nslots; k++) {
        lo = k == 0 || gr->load[k] < lo ? gr->load[k] : lo;
        hi = gr->load[k] > hi ? gr->load[k] : hi;
        owners += gr->load[k] > 0.0;
    }
    for (int t = 0; t < gr->ntasks; t++) {
        int id = gr->task_param[t];
        per_gpu[gr->task_slot[t]]++;
        if (p->params[id].cost > big)
            big = p->params[id].cost, bigid = id;
    }
    json_t *o =
        json_pack("{s:i, s:i, s:i, s:i, s:f, s:f}", "id", gr->id, "tasks", gr->ntasks, "shapes",
                  group_shapes(p, gr), "owners", owners, "slot_load_min", lo, "slot_load_max", hi);
    if (o && bigid >= 0 &&
        cz__json_put(o, "largest_task",
                     json_pack("{s:i, s:s, s:f}", "id", bigid, "name",
                               cz__str_or_unknown(p->params[bigid].def.name), "cost", big)))
        return NULL;
    return o;
}

int cz__fsdp_inspect_json(json_t *rep, const cz_plan *p)
{
    int uneven = 0, short_rows = 0, gpus = cz_plan_fsdp_slots(p), rc = -1;
    int shard = cz_plan_fsdp_shard(p), R = cz_plan_fsdp_replicas(p);
    for (size_t i = 0; i < p->nparams; i++) {
        int64_t rows = p->params[i].local_shape[0];
        uneven += !cz__fsdp_even(rows, shard);
        short_rows += rows < shard;
    }
    int *per_gpu = calloc((size_t)gpus + 1, sizeof *per_gpu);
    /* shard_group_gpus: the GPUs a stage's schedule spans (one replica's, or every replica's
     * when HSDP partitions the matrices over them). */
    json_t *o =
        json_pack("{s:i, s:i, s:i, s:i, s:i, s:s}", "shard_group_gpus", gpus, "uneven_params",
                  uneven, "short_params", short_rows, "replicas", R, "shard_ranks", shard,
                  "hsdp_compute", R > 1 ? cz_hsdp_compute_name(p->settings.hsdp) : "none");
    json_t *stages = json_array();
    if (!per_gpu || cz__json_put(rep, "fsdp", o) || cz__json_put(o, "stages", stages)) {
        free(per_gpu);
        return -1;
    }
    for (size_t s = 0; s < p->nschedules; s++) {
        const cz_rank_schedule *rs = &p->schedules[s];
        json_t *st = json_pack("{s:i}", "stage", rs->stage), *groups = json_array();
        if (cz__json_push(stages, st) || cz__json_put(st, "groups", groups))
            goto done;
        for (int k = 0; k < gpus; k++)
            per_gpu[k] = 0;
        for (int g = 0; g < rs->ngroups; g++)
            if (rs->groups[g].nslots == gpus && /* else a structural violation validate names */
                cz__json_push(groups, group_json(p, &rs->groups[g], per_gpu)))
                goto done;
        int most = 0;
        for (int k = 0; k < gpus; k++)
            most = per_gpu[k] > most ? per_gpu[k] : most;
        if (cz__json_put(st, "tasks_per_gpu_max", json_integer(most)))
            goto done;
    }
    rc = 0;
done:
    free(per_gpu);
    return rc;
}
