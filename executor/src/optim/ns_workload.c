/* The Newton-Schulz work of one GPU under a plan (see ns_workload.h). */
#include "ns_workload.h"

#include "alloc.h"
#include "cz_format.h"
#include "muon.h"
#include "ns_plan.h"
#include "shard.h"

#include <stdlib.h>

static int add_group(cz_ns_workload *w, const cz_plan *plan, const cz_plan_group *g, int gi,
                     int steps, double c, cz_error *err)
{
    size_t cap = (size_t)(g->ntasks > 0 ? g->ntasks : 1);
    const cz_plan_param **ps = cz__exec_calloc(cap, sizeof *ps);
    int *blocks = cz__exec_calloc(cap, sizeof *blocks);
    cz_block *regions = cz__exec_calloc(cap, sizeof *regions);
    cz_exec_part *parts = cz__exec_calloc((size_t)(plan->tp > 0 ? plan->tp : 1), sizeof *parts);
    if (!ps || !blocks || !regions || !parts) {
        cz__exec_free(ps), cz__exec_free(blocks), cz__exec_free(regions), cz__exec_free(parts);
        return cz__error_set(err, CZ_ENOMEM, "out of memory for a micro-group");
    }
    bool sc = plan->settings.tp == CZ_TP_SC;
    int n = 0;
    /* Hosted tasks (a whole matrix or one block) and this rank's part of a TP-local one (its
     * own heads, batched with the hosted ones as muon.c does); a cooperative task's slices are
     * not ns_batched work (cz__muon_coop_run) and are left out. */
    for (int t = 0; t < g->ntasks; t++) {
        const cz_plan_param *p = &plan->params[g->task_param[t]];
        int k = cz_group_task_width(g, t);
        bool local = cz_task_is_local(&p->def, k);
        if (!(local || ((sc || g->task_slot[t] == w->tp_rank) && k == 1)))
            continue;
        regions[n] = (cz_block){0, 0, -1, -1};
        if (local && cz__task_parts(plan, g, t, parts, plan->tp) > w->tp_rank)
            regions[n] = parts[w->tp_rank].part;
        blocks[n] = cz_group_task_block(g, t);
        ps[n++] = p;
    }
    cz_muon_prep mp;
    int rc = cz__muon_prepare_parts(&mp, ps, blocks, regions, n, err);
    cz__exec_free(ps), cz__exec_free(blocks), cz__exec_free(regions), cz__exec_free(parts);
    if (rc)
        return rc;
    for (int s = 0; s < mp.nblk && !rc;) {
        int e = cz__muon_batch_end(&mp, s);
        cz_ns_batch *nb = realloc(w->batches, (size_t)(w->nbatches + 1) * sizeof *nb);
        if (!nb) {
            rc = cz__error_set(err, CZ_ENOMEM, "out of memory for the Newton-Schulz batches");
            break;
        }
        w->batches = nb;
        cz_ns_batch *b = &w->batches[w->nbatches++];
        *b = (cz_ns_batch){gi, mp.blks[s].r, mp.blks[s].c, e - s};
        w->nblocks += b->count;
        w->flops += (double)steps * b->count * cz__ns_iter_flops(b->rows, b->cols, c);
        s = e;
    }
    if (mp.batch_n > w->batch_n)
        w->batch_n = mp.batch_n;
    if (mp.work_n > w->work_n)
        w->work_n = mp.work_n;
    cz__muon_prep_free(&mp);
    return rc;
}

int cz__ns_workload_make(cz_ns_workload *w, const cz_plan *plan, int dp_rank, int tp_rank,
                         int steps, double c, cz_error *err)
{
    *w = (cz_ns_workload){.dp_rank = dp_rank, .tp_rank = tp_rank};
    if (dp_rank < 0 || dp_rank >= plan->dp || tp_rank < 0 || tp_rank >= plan->tp ||
        (size_t)dp_rank >= plan->nschedules)
        return cz__error_set(err, CZ_EINVALID,
                             "GPU (dp %d, tp %d) is outside the plan's dp = %d, tp = %d", dp_rank,
                             tp_rank, plan->dp, plan->tp);
    const cz_rank_schedule *rs = &plan->schedules[dp_rank];
    int rc = CZ_OK;
    for (int g = 0; g < rs->ngroups && !rc; g++)
        rc = add_group(w, plan, &rs->groups[g], g, steps, c, err);
    if (rc)
        cz__ns_workload_free(w);
    return rc;
}

void cz__ns_workload_free(cz_ns_workload *w)
{
    free(w->batches);
    w->batches = NULL;
    w->nbatches = w->nblocks = 0;
}

int cz__ns_workload_busiest(const cz_plan *plan, int steps, double c, int *dp_rank, int *tp_rank,
                            cz_error *err)
{
    double best = -1.0;
    for (int d = 0; d < plan->dp; d++)
        for (int t = 0; t < plan->tp; t++) {
            cz_ns_workload w;
            int rc = cz__ns_workload_make(&w, plan, d, t, steps, c, err);
            if (rc)
                return rc;
            if (w.flops > best) {
                best = w.flops;
                *dp_rank = d;
                *tp_rank = t;
            }
            cz__ns_workload_free(&w);
        }
    return CZ_OK;
}

int cz__ns_workload_bytes(const cz_plan *plan, const cz_ns_workload *w, int steps, int64_t hosted,
                          int64_t gemm_bytes, int64_t read[4], int64_t write[4], cz_error *err)
{
    if (plan->settings.optimizer != CZ_OPTIM_MUON)
        return cz__error_set(err, CZ_EUNSUPPORTED,
                             "the byte model covers Muon plans (this one is %s)",
                             cz_optimizer_name(plan->settings.optimizer));
    for (int k = 0; k < 4; k++)
        read[k] = write[k] = 0;
    read[0] = write[0] = 8 * hosted;
    for (int k = 0; k < w->nbatches; k++) {
        const cz_ns_batch *nb = &w->batches[k];
        int64_t r = nb->rows, n = r * nb->cols * nb->count, sq = r * r * nb->count;
        read[1] += 8 * n;
        write[1] += 4 * n;
        read[2] += steps * gemm_bytes * (3 * n + 4 * sq);
        write[2] += steps * gemm_bytes * (2 * sq + n);
        read[3] += 4 * n;
        write[3] += 4 * n;
    }
    return CZ_OK;
}
