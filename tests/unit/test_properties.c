/*
 * Property tests on random models: every DP x TP strategy on every model must give a plan
 * whose ranges cover the buckets, whose parameters are assigned once (and atomically where the
 * strategy promises it), whose schedules host every owned matrix exactly once, and which is
 * deterministic and never beats the lower bound. Under block and cooperative tasks (--coop auto,
 * --split-blocks) the plans must also pass the validator (which checks every task once, widths
 * on aligned slots, costs against the cost model) and never beat the split lower bound.
 */
#include "cz_analysis.h"
#include "cz_test_util.h"

#include <check.h>
#include <math.h>

#define NMODELS 200

static const cz_dp_strategy dp_strategies[] = {CZ_DP_EVEN, CZ_DP_ANCHORED, CZ_DP_LAYERWISE,
                                               CZ_DP_ALPHA};
static const cz_tp_strategy tp_strategies[] = {CZ_TP_SC, CZ_TP_NONE, CZ_TP_SINGLE, CZ_TP_SLOT,
                                               CZ_TP_ROLLBACK};

static int close_to(double a, double b)
{
    return fabs(a - b) <= 1e-9 * (fabs(a) + fabs(b)) + 1e-300;
}

static void check_layout(const cz_plan *plan, const char *ctx)
{
    int dp = plan->dp;
    int64_t *stage_end = calloc((size_t)plan->pp, sizeof *stage_end);
    for (size_t b = 0; b < plan->nbuckets; b++) {
        const cz_plan_bucket *bk = &plan->buckets[b];
        ck_assert_msg(bk->id == (int)b, "%s: bucket id %d at %zu", ctx, bk->id, b);
        ck_assert_msg(bk->stage >= 0 && bk->stage < plan->pp, "%s: bucket stage", ctx);
        ck_assert_msg(b == 0 || plan->buckets[b - 1].stage <= bk->stage,
                      "%s: buckets not in stage order", ctx);
        ck_assert_msg(bk->offset == stage_end[bk->stage], "%s: bucket %zu not contiguous", ctx, b);
        stage_end[bk->stage] += bk->size;
        ck_assert_msg(bk->size > 0 && bk->size % dp == 0, "%s: bucket %zu size %lld", ctx, b,
                      (long long)bk->size);
        ck_assert_msg(bk->ranges[0] == 0, "%s: bucket %zu range 0 starts at %lld", ctx, b,
                      (long long)bk->ranges[0]);
        ck_assert_msg(bk->ranges[2 * dp - 1] == bk->size, "%s: bucket %zu ranges end short", ctx,
                      b);
        for (int r = 0; r < dp; r++) {
            ck_assert_msg(bk->ranges[2 * r] <= bk->ranges[2 * r + 1], "%s: range reversed", ctx);
            if (r + 1 < dp)
                ck_assert_msg(bk->ranges[2 * r + 1] == bk->ranges[2 * r + 2],
                              "%s: bucket %zu ranges %d and %d not contiguous", ctx, b, r, r + 1);
        }
    }
    free(stage_end);
    for (size_t i = 0; i < plan->nparams; i++) {
        const cz_plan_param *p = &plan->params[i];
        ck_assert_msg(p->id == (int)i, "%s: param id", ctx);
        ck_assert_msg(p->bucket >= 0 && (size_t)p->bucket < plan->nbuckets, "%s: bucket of %zu",
                      ctx, i);
        const cz_plan_bucket *bk = &plan->buckets[p->bucket];
        ck_assert_msg(bk->stage == p->stage, "%s: param %zu stage %d in bucket of stage %d", ctx, i,
                      p->stage, bk->stage);
        ck_assert_msg(p->offset >= 0 && p->offset % plan->bucket_align == 0,
                      "%s: param %zu offset %lld unaligned", ctx, i, (long long)p->offset);
        ck_assert_msg(p->offset + p->numel <= bk->size, "%s: param %zu overflows its bucket", ctx,
                      i);
        ck_assert_msg(p->numel == p->local_shape[0] * p->local_shape[1], "%s: numel", ctx);
        /* Reverse fill: the next parameter of the same bucket lies before this one. */
        if (i + 1 < plan->nparams && plan->params[i + 1].bucket == p->bucket)
            ck_assert_msg(plan->params[i + 1].offset + plan->params[i + 1].numel <= p->offset,
                          "%s: params %zu and %zu overlap or are not in reverse order", ctx, i,
                          i + 1);
    }
}

static void check_ownership(const cz_plan *plan, const char *ctx)
{
    cz_dp_strategy s = plan->settings.dp;
    double sum = 0.0;
    for (size_t i = 0; i < plan->nparams; i++) {
        const cz_plan_param *p = &plan->params[i];
        if (s == CZ_DP_EVEN) {
            ck_assert_msg(p->dp_owner == -1, "%s: even owner %d", ctx, p->dp_owner);
            continue;
        }
        ck_assert_msg(p->dp_owner >= 0 && p->dp_owner < plan->dp, "%s: param %zu owner %d", ctx, i,
                      p->dp_owner);
        sum += p->cost;
        if (s == CZ_DP_LAYERWISE)
            continue;
        const int64_t *rg = plan->buckets[p->bucket].ranges;
        ck_assert_msg(rg[2 * p->dp_owner] <= p->offset &&
                          p->offset + p->numel <= rg[2 * p->dp_owner + 1],
                      "%s: param %zu [%lld, %lld) not inside its owner %d's range [%lld, %lld)",
                      ctx, i, (long long)p->offset, (long long)(p->offset + p->numel), p->dp_owner,
                      (long long)rg[2 * p->dp_owner], (long long)rg[2 * p->dp_owner + 1]);
    }
    if (s != CZ_DP_EVEN) {
        double loads = 0.0;
        for (int k = 0; k < plan->dp * plan->pp; k++)
            loads += plan->metrics.dp_load[k];
        ck_assert_msg(close_to(loads, sum), "%s: dp loads %g != total %g", ctx, loads, sum);
    }
}

static bool touches(const cz_plan *plan, const cz_plan_param *p, int r)
{
    const int64_t *rg = plan->buckets[p->bucket].ranges;
    return p->offset < rg[2 * r + 1] && p->offset + p->numel > rg[2 * r];
}

static void check_schedules(const cz_plan *plan, const char *ctx)
{
    int dp = plan->dp, tp = plan->tp;
    bool sc = plan->settings.tp == CZ_TP_SC;
    int want_slots = (sc || tp == 1) ? 1 : tp;
    int *count = calloc(plan->nparams, sizeof *count);
    ck_assert_msg(plan->nschedules == (size_t)(dp * plan->pp), "%s: nschedules", ctx);
    for (size_t k = 0; k < plan->nschedules; k++) {
        const cz_rank_schedule *rs = &plan->schedules[k];
        ck_assert_msg(rs->stage == (int)k / dp && rs->dp_rank == (int)k % dp, "%s: schedule order",
                      ctx);
        memset(count, 0, plan->nparams * sizeof *count);
        for (int g = 0; g < rs->ngroups; g++) {
            const cz_plan_group *grp = &rs->groups[g];
            ck_assert_msg(grp->id == g && grp->ntasks > 0, "%s: group id/size", ctx);
            ck_assert_msg(grp->nslots == want_slots, "%s: nslots %d want %d", ctx, grp->nslots,
                          want_slots);
            double *load = calloc((size_t)grp->nslots, sizeof *load);
            for (int t = 0; t < grp->ntasks; t++) {
                int id = grp->task_param[t], s = grp->task_slot[t];
                ck_assert_msg(id >= 0 && (size_t)id < plan->nparams, "%s: task id", ctx);
                ck_assert_msg(s >= 0 && s < grp->nslots, "%s: slot %d", ctx, s);
                load[s] += plan->params[id].cost;
                count[id]++;
            }
            for (int s = 0; s < grp->nslots; s++)
                ck_assert_msg(close_to(load[s], grp->load[s]), "%s: group load %g != %g", ctx,
                              grp->load[s], load[s]);
            free(load);
        }
        for (size_t i = 0; i < plan->nparams; i++) {
            const cz_plan_param *p = &plan->params[i];
            int want = 0;
            if (p->def.kind == CZ_KIND_MATRIX && p->stage == rs->stage)
                want = plan->settings.dp == CZ_DP_EVEN ? touches(plan, p, rs->dp_rank)
                                                       : p->dp_owner == rs->dp_rank;
            ck_assert_msg(count[i] == want, "%s: param %zu hosted %d times by rank %d, want %d",
                          ctx, i, count[i], rs->dp_rank, want);
        }
    }
    free(count);
}

static void check_bounds(const cz_plan *plan, const char *ctx)
{
    const cz_plan_metrics *m = &plan->metrics;
    double gpus = (double)plan->dp * plan->tp * plan->pp;
    /* Every term of the bound holds for every strategy, the even baseline too (its cut
     * elementwise parameters are no tasks there: lower_bound.c). */
    double lb = m->lower_bound;
    ck_assert_msg(lb <= m->tp_makespan * (1.0 + 1e-9), "%s: lower bound %g > makespan %g", ctx, lb,
                  m->tp_makespan);
    ck_assert_msg(m->lower_bound >= m->total_cost / gpus * (1.0 - 1e-12), "%s: lower bound", ctx);
    ck_assert_msg(m->dp_imbalance >= 1.0 - 1e-12 && m->tp_imbalance >= 1.0 - 1e-12,
                  "%s: imbalance below 1", ctx);
    ck_assert_msg(m->predicted_step_s > 0.0, "%s: predicted step time", ctx);
}

static void check_same(const cz_plan *a, const cz_plan *b, const char *ctx)
{
    ck_assert_msg(a->nparams == b->nparams && a->nbuckets == b->nbuckets &&
                      a->nschedules == b->nschedules,
                  "%s: sizes differ", ctx);
    for (size_t i = 0; i < a->nparams; i++) {
        const cz_plan_param *p = &a->params[i], *q = &b->params[i];
        ck_assert_msg(p->bucket == q->bucket && p->offset == q->offset &&
                          p->dp_owner == q->dp_owner && p->cost == q->cost && p->stage == q->stage,
                      "%s: param %zu differs", ctx, i);
    }
    for (size_t k = 0; k < a->nbuckets; k++)
        ck_assert_msg(!memcmp(a->buckets[k].ranges, b->buckets[k].ranges,
                              2 * (size_t)a->dp * sizeof *a->buckets[k].ranges),
                      "%s: ranges differ", ctx);
    for (size_t k = 0; k < a->nschedules; k++) {
        const cz_rank_schedule *x = &a->schedules[k], *y = &b->schedules[k];
        ck_assert_msg(x->ngroups == y->ngroups, "%s: group counts differ", ctx);
        for (int g = 0; g < x->ngroups; g++) {
            const cz_plan_group *gx = &x->groups[g], *gy = &y->groups[g];
            ck_assert_msg(
                gx->ntasks == gy->ntasks && gx->nslots == gy->nslots &&
                    !memcmp(gx->task_param, gy->task_param, (size_t)gx->ntasks * sizeof(int)) &&
                    !memcmp(gx->task_slot, gy->task_slot, (size_t)gx->ntasks * sizeof(int)) &&
                    !memcmp(gx->load, gy->load, (size_t)gx->nslots * sizeof(double)),
                "%s: group %d differs", ctx, g);
        }
    }
    size_t nr = (size_t)a->dp * a->pp, ng = nr * a->tp;
    const cz_plan_metrics *m = &a->metrics, *n = &b->metrics;
    ck_assert_msg(!memcmp(m->dp_load, n->dp_load, nr * sizeof(double)) &&
                      !memcmp(m->rank_makespan, n->rank_makespan, nr * sizeof(double)) &&
                      !memcmp(m->gpu_load, n->gpu_load, ng * sizeof(double)) &&
                      !memcmp(m->memory, n->memory, ng * sizeof(double)) &&
                      m->tp_makespan == n->tp_makespan && m->lower_bound == n->lower_bound &&
                      m->predicted_step_s == n->predicted_step_s &&
                      a->capacity_used == b->capacity_used && a->dp_fell_back == b->dp_fell_back,
                  "%s: metrics differ", ctx);
}

/* A cluster for a random model: DP from {1, 2, 3, 4, 8}, TP from tps (ntps of them), PP 1 or 2
 * (1 when the model has a single layer), drawn in that order. */
static cz_cluster *random_cluster(uint64_t *rng, const cz_model *m, const int *tps, int ntps,
                                  int *dp, int *tp, int *pp)
{
    static const int dps[] = {1, 2, 3, 4, 8};
    *dp = dps[czt_rand_int(rng, 0, 4)];
    *tp = tps[czt_rand_int(rng, 0, ntps - 1)];
    *pp = czt_rand_int(rng, 1, 2);
    if (*pp > m->nlayers)
        *pp = 1;
    return czt_cluster_new(*dp, *tp, *pp);
}

START_TEST(random_models_all_strategies)
{
    static const int tps[] = {1, 2, 4};
    uint64_t rng = 0x9e3779b97f4a7c15ULL;
    int builds = 0, fellback = 0;
    for (int n = 0; n < NMODELS; n++) {
        cz_model *m = czt_model_random(&rng);
        int dp, tp, pp;
        cz_cluster *c = random_cluster(&rng, m, tps, 3, &dp, &tp, &pp);
        static const int64_t aligns[] = {1, 8, 64};
        c->bucket_align = aligns[czt_rand_int(&rng, 0, 2)];
        c->bucket_size = czt_rand_int(&rng, 0, 3) == 0 ? 0 : czt_rand_int(&rng, 64, 20000);
        cz_settings s;
        cz_settings_init(&s);
        s.optimizer = (cz_optimizer)czt_rand_int(&rng, 0, 3);
        s.unit = (cz_cost_unit)czt_rand_int(&rng, 0, 2);
        s.alpha = czt_rand_int(&rng, 0, 4) / 4.0;
        s.alpha_numel_loads = czt_rand_int(&rng, 0, 1);
        s.layerwise_order = (cz_layerwise_order)czt_rand_int(&rng, 0, 2);
        for (size_t i = 0; i < sizeof dp_strategies / sizeof *dp_strategies; i++) {
            for (size_t j = 0; j < sizeof tp_strategies / sizeof *tp_strategies; j++) {
                char ctx[160];
                snprintf(ctx, sizeof ctx, "model %d (dp %d tp %d pp %d) %s/%s", n, dp, tp, pp,
                         cz_dp_strategy_name(dp_strategies[i]),
                         cz_tp_strategy_name(tp_strategies[j]));
                s.dp = dp_strategies[i];
                s.tp = tp_strategies[j];
                s.capacity = 0.0;
                cz_plan *a = NULL, *b = NULL;
                cz_error err;
                int rc = cz_plan_build(&a, m, c, &s, &err);
                ck_assert_msg(rc == CZ_OK, "%s: %s", ctx, err.message);
                rc = cz_plan_build(&b, m, c, &s, &err);
                ck_assert_msg(rc == CZ_OK, "%s: %s", ctx, err.message);
                check_layout(a, ctx);
                check_ownership(a, ctx);
                check_schedules(a, ctx);
                check_bounds(a, ctx);
                check_same(a, b, ctx);
                fellback += a->dp_fell_back;
                cz_plan_free(b);
                builds += 2;
                /* A fixed, small capacity too (many micro-groups), where it matters. */
                bool capped = s.tp == CZ_TP_SC || s.tp == CZ_TP_SLOT || s.tp == CZ_TP_ROLLBACK;
                s.capacity = a->capacity_used > 0.0 ? a->capacity_used / 3.0 : 1.0;
                cz_plan_free(a);
                if (!capped)
                    continue;
                rc = cz_plan_build(&a, m, c, &s, &err);
                ck_assert_msg(rc == CZ_OK, "%s: %s", ctx, err.message);
                check_schedules(a, ctx);
                check_bounds(a, ctx);
                cz_plan_free(a);
                builds++;
            }
        }
        cz_model_free(m);
        cz_cluster_free(c);
    }
    ck_assert_int_eq(builds, NMODELS * (20 * 2 + 4 * 3));
    /* The fallback exists for a reason: some random model needs it. */
    ck_assert_int_gt(fellback, 0);
}
END_TEST

START_TEST(random_models_split_tasks)
{
    static const int tps[] = {2, 4};
    uint64_t rng = 0x243f6a8885a308d3ULL;
    int coop = 0, blocks = 0;
    for (int n = 0; n < NMODELS / 2; n++) {
        cz_model *m = czt_model_random(&rng);
        int dp, tp, pp;
        cz_cluster *c = random_cluster(&rng, m, tps, 2, &dp, &tp, &pp);
        /* A slow device half the time, so that compute outweighs the all-reduces' latency on
         * these small matrices and splits pay. */
        if (czt_rand_int(&rng, 0, 1))
            c->device.matmul_tflops = 1e-4;
        cz_settings s;
        cz_settings_init(&s);
        s.optimizer = CZ_OPTIM_MUON;
        s.unit = CZ_UNIT_TIME;
        s.dp = CZ_DP_ALPHA;
        s.tp = CZ_TP_ROLLBACK;
        s.coop = czt_rand_int(&rng, 0, 2) ? CZ_COOP_AUTO : 0;
        s.split_blocks = s.coop == 0;
        char ctx[160];
        snprintf(ctx, sizeof ctx, "model %d (dp %d tp %d pp %d) %s", n, dp, tp, pp,
                 s.coop ? "--coop auto" : "--split-blocks");
        cz_plan *a = NULL, *b = NULL;
        cz_error err;
        ck_assert_msg(cz_plan_build(&a, m, c, &s, &err) == CZ_OK, "%s: %s", ctx, err.message);
        ck_assert_msg(cz_plan_build(&b, m, c, &s, &err) == CZ_OK, "%s: %s", ctx, err.message);
        check_layout(a, ctx);
        check_ownership(a, ctx);
        check_same(a, b, ctx);
        ck_assert_msg(a->metrics.split_lower_bound <= a->metrics.tp_makespan * (1.0 + 1e-9),
                      "%s: split lower bound %g > makespan %g", ctx, a->metrics.split_lower_bound,
                      a->metrics.tp_makespan);
        json_t *v = NULL;
        ck_assert_msg(cz__plan_validate_json(a, m, c, &v, &err) > 0, "%s: %s", ctx, err.message);
        if (json_array_size(v) > 0) {
            char *dump = json_dumps(json_array_get(v, 0), 0);
            ck_abort_msg("%s: %zu violations, the first %s", ctx, json_array_size(v), dump);
        }
        json_decref(v);
        for (size_t k = 0; k < a->nschedules; k++)
            for (int g = 0; g < a->schedules[k].ngroups; g++) {
                const cz_plan_group *gr = &a->schedules[k].groups[g];
                for (int t = 0; t < gr->ntasks; t++) {
                    coop += cz_group_task_width(gr, t) > 1;
                    blocks += cz_group_task_block(gr, t) >= 0;
                }
            }
        cz_plan_free(a);
        cz_plan_free(b);
        cz_model_free(m);
        cz_cluster_free(c);
    }
    /* The models exercise what they are meant to. */
    ck_assert_int_gt(coop, 0);
    ck_assert_int_gt(blocks, 0);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("properties");
    TCase *tc = tcase_create("random");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, random_models_all_strategies);
    tcase_add_test(tc, random_models_split_tasks);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
