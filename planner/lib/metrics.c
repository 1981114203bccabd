/*
 * Plan metrics: per-rank DP loads, per-GPU optimizer work and state memory under the TP
 * schedule, makespans, imbalances and the lower bound (semantics in cz_format.h).
 *
 * Under the even baseline parameters are fragmented: a DP rank is charged the full cost of every
 * matrix its range touches (it must gather and update it) and the share of each elementwise
 * parameter proportional to the elements of it in its range; the split layout's elementwise
 * parameters are charged the same way. Under every other strategy a DP rank is charged what it
 * owns. Elementwise work and state are spread evenly over the TP ranks.
 *
 * lower_bound, the atomic lower bound (lower_bound.c), bounds every plan that keeps parameters
 * whole and hosted; the split layout's fragmented elementwise parameters are not tasks.
 * average_load = total / GPUs. split_lower_bound bounds every plan with the tasks and widths the
 * settings allow (cz__task_lower_bound, tp_tasks.c): from the plan's task table, or one rebuilt
 * from the cluster for a plan read from a file; without a cluster, the atomic bound when the
 * settings allow no split and a weaker bound when they do: the average load, with each matrix at
 * 3/4 of its cost under cooperative widths. average_load itself is no bound once tasks may be
 * cooperative: a cooperative task's Gram panels skip work its hosted cost counts. The even baseline
 * splits elementwise parameters across DP ranks, so its makespan can fall below the largest
 * elementwise task: they are no tasks of the bound there either.
 *
 * A plan with expert groups accumulates the experts over the expert ranks (expert_load,
 * expert_rank_makespan) and their ETP slots, on the same per-GPU arrays: a GPU runs its DP
 * rank's micro-groups and its expert rank's, so its makespan is the sum of the two ranks'
 * (each group's collectives synchronize its own TP or ETP group) and tp.makespan the largest
 * such sum.
 */
#include "cz_algorithms.h"

#include <stdbool.h>
#include <stdlib.h>

static double ratio_max_mean(const double *v, size_t n)
{
    double max = 0.0, sum = 0.0;
    for (size_t i = 0; i < n; i++) {
        sum += v[i];
        if (v[i] > max)
            max = v[i];
    }
    return (n > 0 && sum > 0.0) ? max / (sum / (double)n) : 1.0;
}

/* Fraction of parameter p's local shard that lies in DP rank r's range: 1 or 0 for an owned
 * parameter, the overlap share for a fragmented one (even baseline, split layout). */
/* Megatron's current layer-wise rule leaves the non-Muon parameters to ZeRO-1: every rank
 * updates and stores an even slice of them. */
static bool even_share(const cz_plan *plan, const cz_plan_param *p)
{
    return plan->settings.dp == CZ_DP_LAYERWISE &&
           plan->settings.layerwise_order == CZ_LAYERWISE_MEGATRON_AUG26 &&
           p->def.kind != CZ_KIND_MATRIX;
}

static double share_of(const cz_plan *plan, const cz_plan_param *p, int r)
{
    if (even_share(plan, p))
        return 1.0 / (p->expert && plan->edp > 0 ? plan->edp : plan->dp);
    if (!cz_plan_param_fragmented(plan, p))
        return p->dp_owner == r ? 1.0 : 0.0;
    if (p->bucket < 0 || (size_t)p->bucket >= plan->nbuckets || p->numel <= 0)
        return 0.0;
    const int64_t *rg = plan->buckets[p->bucket].ranges;
    int64_t lo = p->offset > rg[2 * r] ? p->offset : rg[2 * r];
    int64_t end = cz_plan_param_end(p);
    int64_t hi = end < rg[2 * r + 1] ? end : rg[2 * r + 1];
    return hi > lo ? (double)(hi - lo) / (double)p->numel : 0.0;
}

/* The split lower bound (see the file comment). Plans without block or cooperative freedom
 * keep the atomic bound exactly, so that the two read the same wherever they should. */
static int split_bound(const cz_plan *plan, const cz_cluster *c, double *out, cz_error *err)
{
    const cz_settings *s = &plan->settings;
    const cz_plan_metrics *m = &plan->metrics;
    bool coop =
        s->coop != 0 && plan->tp > 1 && s->tp == CZ_TP_ROLLBACK && s->optimizer == CZ_OPTIM_MUON;
    bool freedom = s->split_blocks || coop;
    /* The even baseline's fragments are no tasks: it keeps the bound it always had. */
    if (!freedom || s->dp == CZ_DP_EVEN) {
        *out = m->lower_bound;
        return CZ_OK;
    }
    if (plan->tasks.first) {
        *out = cz__task_lower_bound(plan, &plan->tasks);
        return CZ_OK;
    }
    if (!c) {
        /* No task can be costed. Block tasks sum to their matrix, so the average load bounds
         * them; a cooperative task does less work than its matrix hosted (its Gram panels skip
         * most of the lower triangle), never below 3/4 of the matmul part (docs/PLANNER.md,
         * "Metrics"), so with cooperative widths each matrix counts 3/4 of its cost. */
        double sum = 0.0;
        for (size_t i = 0; i < plan->nparams; i++)
            sum += (coop && plan->params[i].def.kind == CZ_KIND_MATRIX ? 0.75 : 1.0) *
                   plan->params[i].cost;
        double G = (double)plan->dp * (double)plan->tp * (double)plan->pp;
        *out = sum / (G > 0.0 ? G : 1.0);
        return CZ_OK;
    }
    cz_task_table tt = {0};
    int rc = cz__task_table_fill(&tt, plan, c, err);
    if (rc == CZ_OK)
        *out = cz__task_lower_bound(plan, &tt);
    cz__task_table_free(&tt);
    return rc;
}

/* One kind of rank the metrics accumulate over: the DP ranks, whose TP groups schedule the
 * dense matrices, or (a plan with expert groups) the expert ranks, whose ETP groups schedule the
 * experts. Rank k of either holds the stage's GPUs x * slots .. x * slots + slots - 1, where x
 * is its index within the stage (cz_plan_expert_rank). */
typedef struct side {
    int expert;
    size_t per_stage; /* ranks per stage: dp, or ep * edp */
    int slots;        /* tp, or etp */
    double *load;     /* m->dp_load or m->expert_load */
    double *makespan; /* m->rank_makespan or m->expert_rank_makespan */
    double *rank_s;   /* per rank: seconds of its elementwise work, then of its groups too */
    double *gpu_load; /* per GPU (the plan's order): m->gpu_load, or a caller's */
    double *memory;   /* per GPU: m->memory, or a caller's */
} side;

static size_t side_gpu(const cz_plan *plan, const side *sd, size_t rank, int t)
{
    size_t stage = rank / sd->per_stage, x = rank % sd->per_stage;
    return stage * (size_t)plan->dp * (size_t)plan->tp + x * (size_t)sd->slots + (size_t)t;
}

/* Parameter p's owned or fragment shares: loads, the elementwise part of makespans and seconds,
 * per-GPU load and state. */
static void param_shares(const cz_plan *plan, const side *sd, const cz_plan_param *p, double sec,
                         double state, const cz_rank_window *win)
{
    int n = sd->expert ? plan->edp : plan->dp, tp = sd->slots;
    /* Only the ranks that hold a part of p: its owner, or those its fragments lie in (every
     * rank for the even slices of Megatron's current layer-wise rule). */
    int lo = 0, hi = n;
    if (!even_share(plan, p) && !cz_plan_param_fragmented(plan, p))
        lo = p->dp_owner, hi = p->dp_owner + 1;
    else if (!even_share(plan, p))
        cz__rank_window_of(win, p, &lo, &hi);
    if (lo < 0 || hi > n)
        return;
    for (int r = lo; r < hi; r++) {
        double share = share_of(plan, p, r);
        if (share <= 0.0)
            continue;
        size_t rank = sd->expert ? cz_plan_expert_rank(plan, p->stage, p->ep_rank, r)
                                 : (size_t)p->stage * (size_t)n + (size_t)r;
        if (p->def.kind == CZ_KIND_MATRIX) {
            sd->load[rank] += p->cost;
            continue;
        }
        sd->load[rank] += share * p->cost;
        sd->makespan[rank] += share * p->cost / tp;
        sd->rank_s[rank] += share * sec / tp;
        for (int t = 0; t < tp; t++) {
            size_t g = side_gpu(plan, sd, rank, t);
            sd->gpu_load[g] += share * p->cost / tp;
            sd->memory[g] += share * state;
        }
    }
}

/* One rank's micro-groups: its makespan (the sum of each group's largest slot load), seconds,
 * and the per-GPU load and state of its tasks. */
static int schedule_metrics(const cz_plan *plan, const side *sd, const cz_rank_schedule *rs,
                            size_t rank, const double *seconds, const double *state, cz_error *err)
{
    int tp = sd->slots;
    for (int g = 0; g < rs->ngroups; g++) {
        const cz_plan_group *grp = &rs->groups[g];
        bool all = plan->settings.tp == CZ_TP_SC || grp->nslots == 1;
        double max = 0.0, max_s = 0.0;
        double *slot_s = calloc((size_t)(grp->nslots > 0 ? grp->nslots : 1), sizeof *slot_s);
        if (!slot_s)
            return cz__error_set(err, CZ_ENOMEM, "out of memory computing plan metrics");
        for (int s = 0; s < grp->nslots; s++)
            if (grp->load[s] > max)
                max = grp->load[s];
        for (int k2 = 0; k2 < grp->ntasks; k2++) {
            int id = grp->task_param[k2], s = grp->task_slot[k2];
            int w = cz_group_task_width(grp, k2), block = cz_group_task_block(grp, k2);
            if (id < 0 || (size_t)id >= plan->nparams || s < 0 || w < 1 || s + w > grp->nslots)
                continue;
            /* A block or cooperative task: its own cost; its seconds and state in proportion
             * (state by its share of the matrix's elements, split w ways). */
            const cz_plan_param *p = &plan->params[id];
            double cost = p->cost, frac = 1.0;
            if ((block >= 0 || w > 1) && grp->task_cost) {
                int64_t r0, c0, rows, cols;
                cost = grp->task_cost[k2];
                cz_task_region(&p->def, block, &r0, &c0, &rows, &cols);
                frac = (double)rows * (double)cols /
                       ((double)p->def.shape[0] * (double)p->def.shape[1] * w);
            }
            double task_s = seconds[id];
            if (cost != p->cost)
                task_s = p->cost > 0.0 ? seconds[id] * (cost / p->cost) : 0.0;
            for (int x = s; x < s + w; x++)
                slot_s[x] += task_s;
            /* Under sc (and with one slot) every rank of the group updates the task. */
            for (int t = 0; t < tp; t++) {
                if (!all && (t < s || t >= s + w))
                    continue;
                size_t gpu = side_gpu(plan, sd, rank, t);
                sd->gpu_load[gpu] += cost;
                sd->memory[gpu] += state[id] * frac;
            }
        }
        for (int s = 0; s < grp->nslots; s++)
            if (slot_s[s] > max_s)
                max_s = slot_s[s];
        free(slot_s);
        sd->makespan[rank] += max;
        sd->rank_s[rank] += max_s;
    }
    return CZ_OK;
}

/* Both sides of a plan with expert groups end on the same GPUs: a GPU's makespan (and seconds)
 * is its DP rank's plus its expert rank's. */
static void combine_sides(const cz_plan *plan, const side *dense, const side *ex, double *makespan,
                          double *step)
{
    size_t ngpus = (size_t)plan->pp * (size_t)plan->dp * (size_t)plan->tp;
    *makespan = 0.0;
    *step = 0.0;
    for (size_t g = 0; g < ngpus; g++) {
        size_t r = g / (size_t)plan->tp, x = cz_plan_gpu_expert_rank(plan, g, NULL);
        double ms = dense->makespan[r] + ex->makespan[x], s = dense->rank_s[r] + ex->rank_s[x];
        *makespan = ms > *makespan ? ms : *makespan;
        *step = s > *step ? s : *step;
    }
}

int cz__plan_metrics_compute(cz_plan *plan, const cz_cluster *c, cz_error *err)
{
    int rc = CZ_OK;
    int dp = plan->dp, tp = plan->tp, pp = plan->pp;
    size_t nranks = (size_t)dp * (size_t)pp, ngpus = nranks * (size_t)tp;
    size_t nexp = (size_t)pp * (size_t)cz_plan_expert_ranks(plan);
    cz_plan_metrics *m = &plan->metrics;
    double *seconds = NULL, *state = NULL, *dense_s = NULL, *expert_s = NULL;
    cz_rank_window win = {0};
    if (cz_plan_is_fsdp(plan))
        return cz__fsdp_metrics_compute(plan, c, err);
    cz__plan_metrics_free(m);
    if ((rc = cz__rank_window_init(&win, plan, err)) != CZ_OK)
        return rc;
    m->dp_load = calloc(nranks, sizeof *m->dp_load);
    m->rank_makespan = calloc(nranks, sizeof *m->rank_makespan);
    m->gpu_load = calloc(ngpus, sizeof *m->gpu_load);
    m->memory = calloc(ngpus, sizeof *m->memory);
    seconds = calloc(plan->nparams + 1, sizeof *seconds);
    state = calloc(plan->nparams + 1, sizeof *state);
    dense_s = calloc(nranks, sizeof *dense_s);
    if (nexp) {
        m->expert_load = calloc(nexp, sizeof *m->expert_load);
        m->expert_rank_makespan = calloc(nexp, sizeof *m->expert_rank_makespan);
        expert_s = calloc(nexp, sizeof *expert_s);
    }
    if (!m->dp_load || !m->rank_makespan || !m->gpu_load || !m->memory || !seconds || !state ||
        !dense_s || (nexp && (!m->expert_load || !m->expert_rank_makespan || !expert_s))) {
        rc = cz__error_set(err, CZ_ENOMEM, "out of memory computing plan metrics");
        goto done;
    }
    side dense = {0, (size_t)dp, tp, m->dp_load, m->rank_makespan, dense_s, m->gpu_load, m->memory};
    side ex = {1,
               (size_t)cz_plan_expert_ranks(plan),
               plan->etp,
               m->expert_load,
               m->expert_rank_makespan,
               expert_s,
               m->gpu_load,
               m->memory};
    m->total_cost = 0.0;
    m->max_task_cost = 0.0;
    for (size_t i = 0; i < plan->nparams; i++) {
        const cz_plan_param *p = &plan->params[i];
        bool expert = nexp && p->expert && p->ep_rank >= 0 && p->ep_rank < plan->ep;
        int ptp = expert ? plan->etp : tp;
        seconds[i] = c ? cz__cost_param_seconds(&p->def, &plan->settings, c, plan->dtype) : 0.0;
        state[i] = cz__state_bytes(&p->def, &plan->settings, ptp);
        m->total_cost += p->cost;
        /* The split layout's elementwise parameters are no atomic tasks: their pieces go to
         * several DP ranks. (The even baseline keeps the bound it always had.) */
        double task = p->def.kind == CZ_KIND_MATRIX                         ? p->cost
                      : plan->settings.layout == CZ_LAYOUT_SPLIT && !expert ? 0.0
                                                                            : p->cost / ptp;
        if (task > m->max_task_cost)
            m->max_task_cost = task;
        if (p->stage < 0 || p->stage >= pp || (p->expert && !expert))
            continue;
        param_shares(plan, expert ? &ex : &dense, p, seconds[i], state[i], &win);
    }
    for (size_t k = 0; k < plan->nschedules; k++) {
        const cz_rank_schedule *rs = &plan->schedules[k];
        if (rs->stage < 0 || rs->stage >= pp || rs->dp_rank < 0 || rs->dp_rank >= dp)
            continue;
        if ((rc = schedule_metrics(plan, &dense, rs, (size_t)rs->stage * dp + rs->dp_rank, seconds,
                                   state, err)) != CZ_OK)
            goto done;
    }
    for (size_t k = 0; nexp && k < plan->nexpert_schedules; k++) {
        const cz_rank_schedule *rs = &plan->expert_schedules[k];
        if (rs->stage < 0 || rs->stage >= pp || rs->dp_rank < 0 || rs->dp_rank >= plan->edp ||
            rs->ep_rank < 0 || rs->ep_rank >= plan->ep)
            continue;
        if ((rc = schedule_metrics(plan, &ex, rs,
                                   cz_plan_expert_rank(plan, rs->stage, rs->ep_rank, rs->dp_rank),
                                   seconds, state, err)) != CZ_OK)
            goto done;
    }
    m->tp_makespan = 0.0;
    m->predicted_step_s = 0.0;
    if (nexp) {
        combine_sides(plan, &dense, &ex, &m->tp_makespan, &m->predicted_step_s);
    } else {
        for (size_t rank = 0; rank < nranks; rank++) {
            if (dense_s[rank] > m->predicted_step_s)
                m->predicted_step_s = dense_s[rank];
            if (m->rank_makespan[rank] > m->tp_makespan)
                m->tp_makespan = m->rank_makespan[rank];
        }
    }
    m->dp_imbalance = 1.0;
    for (int stage = 0; stage < pp; stage++) {
        double r = ratio_max_mean(m->dp_load + (size_t)stage * dp, (size_t)dp);
        if (stage == 0 || r > m->dp_imbalance)
            m->dp_imbalance = r;
    }
    m->expert_imbalance = nexp ? 1.0 : 0.0;
    for (int stage = 0; nexp && stage < pp; stage++) {
        double r = ratio_max_mean(m->expert_load + (size_t)stage * ex.per_stage, ex.per_stage);
        if (stage == 0 || r > m->expert_imbalance)
            m->expert_imbalance = r;
    }
    m->tp_imbalance = ratio_max_mean(m->gpu_load, ngpus);
    cz_lower_bound lb;
    if ((rc = cz__plan_lower_bound(plan, &lb, err)) != CZ_OK)
        goto done;
    m->lower_bound = lb.value;
    m->average_load = m->total_cost / (double)(ngpus > 0 ? ngpus : 1);
    if ((rc = split_bound(plan, c, &m->split_lower_bound, err)) != CZ_OK)
        goto done;
done:
    cz__rank_window_free(&win);
    free(seconds);
    free(state);
    free(dense_s);
    free(expert_s);
    if (rc != CZ_OK)
        cz__plan_metrics_free(m);
    return rc;
}

int cz__plan_expert_gpu_load(const cz_plan *plan, double *out, cz_error *err)
{
    int rc = CZ_OK;
    size_t ngpus = (size_t)plan->pp * (size_t)plan->dp * (size_t)plan->tp;
    size_t nx = (size_t)plan->pp * (size_t)cz_plan_expert_ranks(plan);
    for (size_t g = 0; g < ngpus; g++)
        out[g] = 0.0;
    if (!nx)
        return CZ_OK;
    /* The expert side of cz__plan_metrics_compute into scratch arrays: only out is kept. */
    double *load = calloc(nx, sizeof *load), *ms = calloc(nx, sizeof *ms);
    double *secs = calloc(nx, sizeof *secs), *memory = calloc(ngpus, sizeof *memory);
    double *zero = calloc(plan->nparams + 1, sizeof *zero);
    cz_rank_window win = {0};
    if (!load || !ms || !secs || !memory || !zero ||
        (rc = cz__rank_window_init(&win, plan, err)) != CZ_OK) {
        rc = rc != CZ_OK ? rc : cz__error_set(err, CZ_ENOMEM, "out of memory");
        goto done;
    }
    side ex = {1, (size_t)cz_plan_expert_ranks(plan), plan->etp, load, ms, secs, out, memory};
    for (size_t i = 0; i < plan->nparams; i++) {
        const cz_plan_param *p = &plan->params[i];
        if (p->expert && p->stage >= 0 && p->stage < plan->pp && p->ep_rank >= 0 &&
            p->ep_rank < plan->ep)
            param_shares(plan, &ex, p, 0.0, 0.0, &win);
    }
    for (size_t k = 0; k < plan->nexpert_schedules && rc == CZ_OK; k++) {
        const cz_rank_schedule *rs = &plan->expert_schedules[k];
        if (rs->stage >= 0 && rs->stage < plan->pp && rs->dp_rank >= 0 && rs->dp_rank < plan->edp &&
            rs->ep_rank >= 0 && rs->ep_rank < plan->ep)
            rc = schedule_metrics(plan, &ex, rs,
                                  cz_plan_expert_rank(plan, rs->stage, rs->ep_rank, rs->dp_rank),
                                  zero, zero, err);
    }
done:
    cz__rank_window_free(&win);
    free(load);
    free(ms);
    free(secs);
    free(memory);
    free(zero);
    return rc;
}
