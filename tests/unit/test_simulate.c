/* Simulator: alpha-beta collective times, node placement, and the micro-group pipeline on
 * hand-built plans whose step times can be checked by hand. */
#include "cz_algorithms.h"
#include "cz_types.h"

#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MIB 1048576.0

static cz_cluster *make_cluster(int dp, int tp, int gpus_per_node, double intra, double inter,
                                double lat_us)
{
    cz_cluster *c = calloc(1, sizeof *c);
    ck_assert_ptr_nonnull(c);
    c->name = cz__strdup("test-cluster");
    c->dp = dp;
    c->tp = tp;
    c->pp = 1;
    c->gpus = dp * tp;
    c->gpus_per_node = gpus_per_node;
    c->device.name = cz__strdup("test-gpu");
    c->device.matmul_tflops = 100.0;
    c->device.mem_gbps = 2000.0;
    c->device.memory_gib = 80.0;
    c->links.intra_node_gbps = intra;
    c->links.inter_node_gbps = inter;
    c->links.latency_us = lat_us;
    return c;
}

/* A plan with nparams matrices of shape rows x cols split along rows over tp (bf16), one
 * bucket holding them all back to back, owned by DP rank 0 unless changed. */
static cz_plan *make_plan(int dp, int tp, int nparams, int64_t rows, int64_t cols,
                          cz_tp_strategy tps)
{
    cz_plan *p = calloc(1, sizeof *p);
    ck_assert_ptr_nonnull(p);
    cz_settings_init(&p->settings);
    p->settings.tp = tps;
    p->settings.dp = CZ_DP_ANCHORED;
    p->settings.unit = CZ_UNIT_NUMEL;
    p->dtype = CZ_DTYPE_BF16;
    p->dp = dp;
    p->tp = tp;
    p->pp = 1;
    p->gpus_per_node = 8;
    p->nparams = (size_t)nparams;
    p->params = calloc((size_t)nparams, sizeof *p->params);
    ck_assert_ptr_nonnull(p->params);
    int64_t local = rows / tp * cols, off = 0;
    for (int i = 0; i < nparams; i++) {
        cz_plan_param *q = &p->params[i];
        q->id = i;
        q->def.name = cz__strdup("w");
        q->def.ndim = 2;
        q->def.shape[0] = rows;
        q->def.shape[1] = cols;
        q->local_shape[0] = rows / tp;
        q->local_shape[1] = cols;
        q->def.tp_dim = 0;
        q->def.kind = CZ_KIND_MATRIX;
        q->def.block_dim = -1;
        q->def.layer = -1;
        q->bucket = 0;
        q->offset = off;
        q->numel = local;
        q->cost = (double)(rows * cols);
        q->dp_owner = 0;
        off += local;
    }
    p->nbuckets = 1;
    p->buckets = calloc(1, sizeof *p->buckets);
    p->buckets[0].size = off;
    p->buckets[0].ranges = calloc((size_t)(2 * dp), sizeof(int64_t));
    p->buckets[0].ranges[1] = off; /* rank 0 owns everything; others empty at the end */
    for (int d = 1; d < dp; d++)
        p->buckets[0].ranges[2 * d] = p->buckets[0].ranges[2 * d + 1] = off;
    p->nschedules = (size_t)dp;
    p->schedules = calloc((size_t)dp, sizeof *p->schedules);
    for (int d = 0; d < dp; d++)
        p->schedules[d].dp_rank = d;
    return p;
}

/* Appends a group to DP rank d's schedule: ntasks tasks (param ids) on the given slots. */
static void add_group(cz_plan *p, int d, int nslots, int ntasks, const int *ids, const int *slots)
{
    cz_rank_schedule *rs = &p->schedules[d];
    rs->groups = realloc(rs->groups, (size_t)(rs->ngroups + 1) * sizeof *rs->groups);
    ck_assert_ptr_nonnull(rs->groups);
    cz_plan_group *g = &rs->groups[rs->ngroups];
    memset(g, 0, sizeof *g);
    g->id = rs->ngroups++;
    g->nslots = nslots;
    g->ntasks = ntasks;
    g->task_param = malloc((size_t)ntasks * sizeof(int));
    g->task_slot = malloc((size_t)ntasks * sizeof(int));
    g->load = calloc((size_t)nslots, sizeof(double));
    for (int k = 0; k < ntasks; k++) {
        g->task_param[k] = ids[k];
        g->task_slot[k] = slots[k];
        g->load[slots[k]] += p->params[ids[k]].cost;
    }
}

static double task_seconds(const cz_plan *p, int id, const cz_cluster *c)
{
    const cz_plan_param *q = &p->params[id];
    cz_param_def def = {.name = q->def.name,
                        .ndim = q->def.ndim,
                        .shape = {q->def.shape[0], q->def.shape[1]},
                        .tp_dim = q->def.tp_dim,
                        .kind = q->def.kind,
                        .block_dim = -1,
                        .layer = -1};
    return cz__cost_param_seconds(&def, &p->settings, c, p->dtype);
}

/* Sets the block, width and per-slot cost of every task of a group made by add_group, and its
 * Gram panel count (NULL: none recorded, one panel each). */
static void set_tasks(cz_plan *p, cz_plan_group *g, const int *blocks, const int *widths,
                      const double *costs, const int *panels)
{
    g->task_block = malloc((size_t)g->ntasks * sizeof(int));
    g->task_width = malloc((size_t)g->ntasks * sizeof(int));
    g->task_cost = malloc((size_t)g->ntasks * sizeof(double));
    ck_assert(g->task_block && g->task_width && g->task_cost);
    if (panels) {
        g->task_panels = malloc((size_t)g->ntasks * sizeof(int));
        ck_assert_ptr_nonnull(g->task_panels);
        memcpy(g->task_panels, panels, (size_t)g->ntasks * sizeof(int));
    }
    for (int x = 0; x < g->nslots; x++)
        g->load[x] = 0.0;
    for (int k = 0; k < g->ntasks; k++) {
        g->task_block[k] = blocks[k];
        g->task_width[k] = widths[k];
        g->task_cost[k] = costs ? costs[k] : p->params[g->task_param[k]].cost;
        for (int x = g->task_slot[k]; x < g->task_slot[k] + widths[k]; x++)
            g->load[x] += g->task_cost[k];
    }
}

/* A cooperative task (width 2) after two hosted tasks on slot 1, on a DP1 x TP2 group of three
 * 256 x 64 bf16 matrices split along rows (shards of 128 x 64, 32 KiB on the wire: the
 * exchanges are fp32), at 100 GB/s and 10 us:
 *  gather  slot 1 receives the two hosted shards (2 x 32768 B); the cooperative task's slices
 *          (rows 0-127 on member 0, 128-255 on member 1) are the TP shards themselves, so
 *          nothing of it moves: 65536 B from the busiest rank, 10 us + 65536 B / 100 GB/s; the
 *          scatter mirrors it;
 *  coop    slot 0 waits for slot 1's two hosted tasks, then both run the cooperative part:
 *          a = 64, slices of s = 256 / 2 = 128 >= a (the standard form). The Gram's upper
 *          triangle (64 * 65 / 2 = 2080 floats, 8320 B) goes in the 8 panels the plan records,
 *          rows 0, 5, 9, 14, 19, 25, 33, 42, 64, of 1240, 920, 1060, 960, 1020, 1136, 972 and
 *          1012 B; panel p costs 2 h_p (64 - r_p) 128 FLOPs: 81920, 60416, 70400, 64000, 69120,
 *          79872, 71424, 123904 (621056 in all) at 100 TFLOP/s, under 1.3 ns each, while each
 *          all-reduce takes 2 (k - 1) = 2 latencies, 20 us, plus its bytes over 100 GB/s
 *          (2 (k - 1) / k = 1). So the channel never idles after panel 0: it ends at
 *          t(G_0) + 8 x 20 us + 8320 B / 100 GB/s, and the polynomial waits for it. Exposed
 *          per iteration: 160 us + 83.2 ns - t(G_1 .. G_7) = 160 us + 83.2 ns - 539136 FLOPs /
 *          100 TFLOP/s; five iterations, plus the norm's all-reduce (20 us + 8 B / 100 GB/s).
 *          TP communication counts the all-reduces whole: 5 (160 us + 83.2 ns) + the norm's. */
START_TEST(test_coop_allreduce_and_wait)
{
    cz_cluster *c = make_cluster(1, 2, 8, 100.0, 25.0, 10.0);
    cz_plan *p = make_plan(1, 2, 3, 256, 64, CZ_TP_ROLLBACK);
    p->settings.optimizer = CZ_OPTIM_MUON;
    add_group(p, 0, 2, 3, (int[]){0, 1, 2}, (int[]){1, 1, 0});
    set_tasks(p, &p->schedules[0].groups[0], (int[]){-1, -1, -1}, (int[]){1, 1, 2}, NULL,
              (int[]){1, 1, 8});
    cz_sim_result *r = NULL;
    cz_error err;
    int rc = cz_plan_simulate(&r, p, c, NULL, &err);
    ck_assert_msg(rc == 0, "%s", err.message);
    double gather = 10e-6 + 65536.0 / 100e9;
    double ar = 5 * (160e-6 + 8320.0 / 100e9 - 539136.0 / 100e12) + (20e-6 + 8.0 / 100e9);
    double ar_all = 5 * (160e-6 + 8320.0 / 100e9) + (20e-6 + 8.0 / 100e9);
    double hosted = task_seconds(p, 0, c);
    cz_settings st = p->settings;
    st.unit = CZ_UNIT_TIME;
    /* The compute alone: the cost model on links that cost nothing, where no panel waits. */
    cz_cluster free_links = *c;
    free_links.links.latency_us = 0.0;
    free_links.links.intra_node_gbps = free_links.links.inter_node_gbps = 0.0;
    double coop = cz__cost_coop_panels(256, 64, 2, 8, &st, &free_links, p->dtype);
    ck_assert(coop > 0 && coop < hosted);
    ck_assert_double_eq_tol(r->tl_gather[0].end - r->tl_gather[0].start, gather, 1e-15);
    ck_assert_double_eq_tol(r->tl_scatter[0].end - r->tl_scatter[0].start, gather, 1e-15);
    ck_assert_int_eq(r->coop_tasks, 1);
    ck_assert_double_eq_tol(r->coop_allreduce_s, ar, 1e-15);
    /* Both slots end the cooperative task together; slot 0 (the critical one on a tie) waited
     * for slot 1's hosted work. */
    ck_assert_int_eq(r->critical_tp, 0);
    ck_assert_double_eq_tol(r->coop_wait_s, 2 * hosted, 1e-15);
    ck_assert_double_eq_tol(r->tl_compute[0].end, gather + 2 * hosted + coop + ar, 1e-15);
    ck_assert_double_eq_tol(r->tl_compute[1].end, r->tl_compute[0].end, 1e-15);
    ck_assert_double_eq_tol(r->step_s, gather + 2 * hosted + coop + ar + gather, 1e-15);
    /* Busy time is compute only: the waits and all-reduces are not. */
    ck_assert_double_eq_tol(r->gpu_busy[0], coop, 1e-15);
    ck_assert_double_eq_tol(r->gpu_busy[1], 2 * hosted + coop, 1e-15);
    ck_assert_double_eq_tol(r->tp_comm_s, 2 * gather + ar_all, 1e-15);
    cz_sim_result_free(r);

    /* The cooperative task first in the order: nobody waits, the same step. */
    cz_plan_group *g = &p->schedules[0].groups[0];
    g->task_param[0] = 2, g->task_slot[0] = 0, g->task_width[0] = 2, g->task_panels[0] = 8;
    g->task_param[2] = 0, g->task_slot[2] = 1, g->task_width[2] = 1, g->task_panels[2] = 1;
    rc = cz_plan_simulate(&r, p, c, NULL, &err);
    ck_assert_msg(rc == 0, "%s", err.message);
    ck_assert_double_eq_tol(r->coop_wait_s, 0.0, 1e-15);
    ck_assert_double_eq_tol(r->step_s, gather + coop + ar + 2 * hosted + gather, 1e-15);
    cz_sim_result_free(r);

    /* The simulator follows the recorded count: one panel (as a plan without the key runs)
     * computes the whole Gram, 2 64^2 128 FLOPs, and its one all-reduce, 20 us + 83.2 ns, starts
     * after it and is exposed whole in every iteration. */
    g->task_panels[0] = 1;
    rc = cz_plan_simulate(&r, p, c, NULL, &err);
    ck_assert_msg(rc == 0, "%s", err.message);
    double coop1 = cz__cost_coop_panels(256, 64, 2, 1, &st, &free_links, p->dtype);
    double ar1 = 5 * (20e-6 + 8320.0 / 100e9) + (20e-6 + 8.0 / 100e9);
    ck_assert(coop1 > coop);
    ck_assert_double_eq_tol(r->coop_allreduce_s, ar1, 1e-15);
    ck_assert_double_eq_tol(r->step_s, gather + coop1 + ar1 + 2 * hosted + gather, 1e-15);
    cz_sim_result_free(r);
    cz_plan_free(p);
    cz_cluster_free(c);
}
END_TEST

/* Block tasks gather and scatter their block's rows only: a 256 x 64 matrix with blocks of 192
 * and 64 rows, block 0 on slot 0 and block 1 on slot 1. The blocks lie along the TP dimension,
 * so each TP rank holds half of each (Megatron's per-block split: rank 1 has rows 96-191 and
 * 224-255). Slot 0 receives 3/4 of slot 1's 32 KiB shard (24576 B; fp32 on the wire), slot 1
 * 1/4 of slot 0's (8192 B); hosted whole on slot 0 it would be 32768 B. Each slot computes its
 * block alone. */
START_TEST(test_block_gather_volume)
{
    cz_cluster *c = make_cluster(1, 2, 8, 100.0, 25.0, 10.0);
    cz_plan *p = make_plan(1, 2, 1, 256, 64, CZ_TP_ROLLBACK);
    p->settings.optimizer = CZ_OPTIM_MUON;
    cz_param_def *d = &p->params[0].def;
    d->nblocks = 2;
    d->block_dim = 0;
    d->block_sizes = malloc(2 * sizeof *d->block_sizes);
    ck_assert_ptr_nonnull(d->block_sizes);
    d->block_sizes[0] = 192, d->block_sizes[1] = 64;
    add_group(p, 0, 2, 2, (int[]){0, 0}, (int[]){0, 1});
    set_tasks(p, &p->schedules[0].groups[0], (int[]){0, 1}, (int[]){1, 1}, (double[]){3, 1}, NULL);
    cz_sim_result *r = NULL;
    cz_error err;
    int rc = cz_plan_simulate(&r, p, c, NULL, &err);
    ck_assert_msg(rc == 0, "%s", err.message);
    double gather = 10e-6 + 24576.0 / 100e9;
    ck_assert_double_eq_tol(r->tl_gather[0].end - r->tl_gather[0].start, gather, 1e-15);
    ck_assert_double_eq_tol(r->tl_scatter[0].end - r->tl_scatter[0].start, gather, 1e-15);
    cz_settings st = p->settings;
    st.unit = CZ_UNIT_TIME;
    for (int b = 0; b < 2; b++)
        ck_assert_double_eq_tol(r->gpu_busy[b], cz__cost_block(d, b, &st, c, p->dtype), 1e-15);
    ck_assert_int_eq(r->coop_tasks, 0);
    cz_sim_result_free(r);

    /* Without a cluster: each task's recorded cost, on its own slot. */
    rc = cz_plan_simulate(&r, p, NULL, NULL, &err);
    ck_assert_msg(rc == 0, "%s", err.message);
    ck_assert_double_eq(r->gpu_busy[0], 3.0);
    ck_assert_double_eq(r->gpu_busy[1], 1.0);
    cz_sim_result_free(r);
    cz_plan_free(p);
    cz_cluster_free(c);
}
END_TEST

START_TEST(test_alltoall_formula)
{
    /* 8 ranks, 1 GB from the busiest rank, 100 GB/s, 5 us: 7 * 5e-6 + 1e9 / 1e11. */
    double t = cz__sim_collective_seconds(CZ_COLL_ALL_TO_ALL, 8, 1e9, 100.0, 5.0);
    ck_assert_double_eq_tol(t, 0.010035, 1e-12);
    /* Ring reduce-scatter, 4 ranks, largest slice 2e8 B, 50 GB/s, 10 us: 3e-5 + 3 * 4e-3. */
    t = cz__sim_collective_seconds(CZ_COLL_REDUCE_SCATTER, 4, 2e8, 50.0, 10.0);
    ck_assert_double_eq_tol(t, 0.01203, 1e-12);
    /* Ring all-reduce of 8e8 B over 4 ranks: 6 latencies + 2 * 3/4 * 8e8 / 5e10. */
    t = cz__sim_collective_seconds(CZ_COLL_ALL_REDUCE, 4, 8e8, 50.0, 10.0);
    ck_assert_double_eq_tol(t, 6e-5 + 0.024, 1e-12);
    ck_assert_double_eq(cz__sim_collective_seconds(CZ_COLL_ALL_GATHER, 1, 1e9, 50.0, 10.0), 0.0);
}
END_TEST

/* Uneven DP slices of 4 ranks. One owner holding 1e8 elements (bf16, 2e8 B) at 50 GB/s, 10 us:
 * padded = 3 steps of the largest slice; rooted = the busiest link carries the other ranks'
 * slices... here everything but rank 0's, i.e. the whole 2e8 B once. Equal slices agree. */
START_TEST(test_uneven_models)
{
    int64_t one[4] = {100000000, 0, 0, 0}, even[4] = {25000000, 25000000, 25000000, 25000000};
    double lat = 3 * 10e-6;
    ck_assert_double_eq_tol(cz__sim_uneven_seconds(one, 4, 2.0, 50.0, 10.0, CZ_SIM_UNEVEN_PADDED),
                            lat + 3 * 2e8 / 50e9, 1e-12);
    ck_assert_double_eq_tol(cz__sim_uneven_seconds(one, 4, 2.0, 50.0, 10.0, CZ_SIM_UNEVEN_ROOTED),
                            lat + 2e8 / 50e9, 1e-12);
    for (int m = 0; m < 2; m++)
        ck_assert_double_eq_tol(cz__sim_uneven_seconds(even, 4, 2.0, 50.0, 10.0, (cz_sim_uneven)m),
                                lat + 3 * 5e7 / 50e9, 1e-12);
    /* Slices 40, 30, 20, 10 (M elements): busiest link skips only the smallest slice: 90 M. */
    int64_t mixed[4] = {40000000, 30000000, 20000000, 10000000};
    ck_assert_double_eq_tol(cz__sim_uneven_seconds(mixed, 4, 2.0, 50.0, 10.0, CZ_SIM_UNEVEN_ROOTED),
                            lat + 1.8e8 / 50e9, 1e-12);
}
END_TEST

START_TEST(test_node_spans)
{
    /* 8 GPUs per node: TP group 8..15 is one node; DP group 3, 11, 19 crosses nodes. */
    ck_assert_int_eq(cz__sim_group_spans_nodes(8, 1, 8, 8), 0);
    ck_assert_int_eq(cz__sim_group_spans_nodes(4, 1, 8, 8), 1);
    ck_assert_int_eq(cz__sim_group_spans_nodes(3, 8, 3, 8), 1);
    ck_assert_int_eq(cz__sim_group_spans_nodes(1, 2, 4, 8), 0);
}
END_TEST

/* One DP rank, TP 2, two groups: {p0 on 0, p1 on 1} and {p2 on 0}. Each gather/scatter moves
 * one 512 x 1024 shard per rank, fp32 on the wire (2 MiB): 10 us + 2 MiB / 100 GB/s. Compute (a
 * 1024^2 Muon update at 100 TFLOP/s, ~0.3 ms) dominates, so the step is gather0 + compute0 +
 * compute1 + scatter1. */
START_TEST(test_pipeline_overlap)
{
    cz_cluster *c = make_cluster(1, 2, 8, 100.0, 25.0, 10.0);
    cz_plan *p = make_plan(1, 2, 3, 1024, 1024, CZ_TP_ROLLBACK);
    add_group(p, 0, 2, 2, (int[]){0, 1}, (int[]){0, 1});
    add_group(p, 0, 2, 1, (int[]){2}, (int[]){0});
    cz_sim_result *r = NULL;
    cz_error err;
    int rc = cz_plan_simulate(&r, p, c, NULL, &err);
    ck_assert_msg(rc == 0, "%s", err.message);
    double comm = 10e-6 + 2 * MIB / 100e9;
    double comp = task_seconds(p, 0, c);
    ck_assert(comp > 5 * comm); /* the case this test is about */
    ck_assert_double_eq_tol(r->tl_gather[0].end, comm, 1e-12);
    ck_assert_double_eq_tol(r->tl_scatter[1].end - r->tl_scatter[1].start, comm, 1e-12);
    ck_assert_double_eq_tol(r->step_s, comm + comp + comp + comm, 1e-12);
    ck_assert_double_eq_tol(r->optimizer_s, r->step_s, 1e-15); /* DP = 1: no DP sync */
    ck_assert_double_eq(r->grad_sync_s, 0.0);
    /* Scatter of group 0 hides behind compute of group 1. */
    ck_assert_double_eq_tol(r->tl_scatter[0].start, comm + comp, 1e-12);
    ck_assert(r->tl_scatter[0].end < r->tl_compute[1 * 2 + 0].end);
    ck_assert_double_eq_tol(r->tp_comm_s, 4 * comm, 1e-12);
    ck_assert_double_eq_tol(r->compute_s, 2 * comp, 1e-12);
    ck_assert_double_eq_tol(r->exposed_comm_s, 2 * comm, 1e-12);
    ck_assert_int_eq(r->pipelined, 1);
    cz_sim_result_free(r);
    cz_plan_free(p);
    cz_cluster_free(c);
}
END_TEST

/* The same three matrices under synchronous compute: one all-gather of all three shards over TP
 * (ring: 1 step of 6 MiB, fp32, at 100 GB/s + 10 us), then every TP rank updates all three. */
START_TEST(test_sc_vs_pipelined)
{
    cz_cluster *c = make_cluster(1, 2, 8, 100.0, 25.0, 10.0);
    cz_plan *sc = make_plan(1, 2, 3, 1024, 1024, CZ_TP_SC);
    add_group(sc, 0, 1, 3, (int[]){0, 1, 2}, (int[]){0, 0, 0});
    cz_plan *pl = make_plan(1, 2, 3, 1024, 1024, CZ_TP_ROLLBACK);
    add_group(pl, 0, 2, 2, (int[]){0, 1}, (int[]){0, 1});
    add_group(pl, 0, 2, 1, (int[]){2}, (int[]){0});
    cz_sim_result *rs = NULL, *rp = NULL;
    cz_error err;
    ck_assert_int_eq(cz_plan_simulate(&rs, sc, c, NULL, &err), 0);
    ck_assert_int_eq(cz_plan_simulate(&rp, pl, c, NULL, &err), 0);
    double comp = task_seconds(sc, 0, c);
    double gather = 10e-6 + 6 * MIB / 100e9;
    ck_assert_int_eq(rs->pipelined, 0);
    ck_assert_double_eq_tol(rs->step_s, gather + 3 * comp, 1e-12);
    ck_assert_double_eq_tol(rs->compute_s, 3 * comp, 1e-12);
    ck_assert(rp->step_s < rs->step_s);
    /* Busy time per GPU: sc does all three on both ranks; the pipeline 2 on rank 0, 1 on 1. */
    ck_assert_double_eq_tol(rs->gpu_busy[1], 3 * comp, 1e-12);
    ck_assert_double_eq_tol(rp->gpu_busy[0], 2 * comp, 1e-12);
    ck_assert_double_eq_tol(rp->gpu_busy[1], comp, 1e-12);
    cz_sim_result_free(rs);
    cz_sim_result_free(rp);
    cz_plan_free(sc);
    cz_plan_free(pl);
    cz_cluster_free(c);
}
END_TEST

/* DP 2 x TP 2, uneven bucket ranges: the reduce-scatter and all-gather take the largest slice.
 * With 2 GPUs per node the DP group {0, 2} crosses nodes (inter-node rate 25 GB/s); with 4 per
 * node everything is inside one node (100 GB/s). */
START_TEST(test_dp_sync_bandwidth)
{
    for (int gpn = 2; gpn <= 4; gpn += 2) {
        cz_cluster *c = make_cluster(2, 2, gpn, 100.0, 25.0, 10.0);
        cz_plan *p = make_plan(2, 2, 2, 1024, 1024, CZ_TP_ROLLBACK);
        /* Each local shard is 512 x 1024 = 524288 elements; p1 moves to rank 1. */
        p->params[1].dp_owner = 1;
        p->buckets[0].ranges[1] = 524288;
        p->buckets[0].ranges[2] = 524288;
        p->buckets[0].ranges[3] = 1048576;
        p->buckets[0].size = 1048576 + 64;
        p->buckets[0].ranges[3] = p->buckets[0].size; /* rank 1 also holds the padding */
        add_group(p, 0, 2, 1, (int[]){0}, (int[]){0});
        add_group(p, 1, 2, 1, (int[]){1}, (int[]){1});
        cz_sim_result *r = NULL;
        cz_error err;
        int rc = cz_plan_simulate(&r, p, c, NULL, &err);
        ck_assert_msg(rc == 0, "%s", err.message);
        double bw = gpn == 2 ? 25e9 : 100e9;
        double slice = (524288.0 + 64.0) * 2.0;
        ck_assert_double_eq_tol(r->grad_sync_s, 10e-6 + slice / bw, 1e-12);
        ck_assert_double_eq_tol(r->param_sync_s, 10e-6 + slice / bw, 1e-12);
        /* TP groups {0,1} and {2,3} are inside a node either way; their exchanges are fp32. */
        double comm = 10e-6 + 2 * MIB / 100e9;
        double comp = task_seconds(p, 0, c);
        ck_assert_double_eq_tol(r->local_s, comm + comp + comm, 1e-12);
        ck_assert_double_eq_tol(r->step_s, r->grad_sync_s + r->local_s + r->param_sync_s, 1e-12);
        cz_sim_result_free(r);
        cz_plan_free(p);
        cz_cluster_free(c);
    }
}
END_TEST

/* Megatron's overlaps: DP 2 x TP 1, two buckets of one matrix each (1 M elements, bf16) whose
 * largest slices are 1 M (bucket 0: rank 0 holds it all) and 786432 elements (bucket 1). Two
 * ranks' uneven collective takes the latency plus the largest slice over the link. Without the
 * options both buckets are charged; --overlap-grad-reduce leaves exposed only the bucket the
 * backward pass fills last (the stage's last, bucket 1), --overlap-param-gather only the one the
 * forward pass needs first (the same), and the totals still count both. */
static cz_plan *two_bucket_plan(void)
{
    cz_plan *p = make_plan(2, 1, 2, 1024, 1024, CZ_TP_ROLLBACK);
    p->buckets = realloc(p->buckets, 2 * sizeof *p->buckets);
    ck_assert_ptr_nonnull(p->buckets);
    memset(&p->buckets[1], 0, sizeof p->buckets[1]);
    p->nbuckets = 2;
    p->buckets[0].size = 1048576;
    p->buckets[0].ranges[1] = p->buckets[0].ranges[2] = p->buckets[0].ranges[3] = 1048576;
    p->buckets[1].id = 1;
    p->buckets[1].size = 1048576;
    p->buckets[1].ranges = calloc(4, sizeof(int64_t));
    ck_assert_ptr_nonnull(p->buckets[1].ranges);
    p->buckets[1].ranges[1] = p->buckets[1].ranges[2] = 262144;
    p->buckets[1].ranges[3] = 1048576;
    p->params[1].bucket = 1;
    p->params[1].offset = 0;
    p->params[1].dp_owner = 1;
    add_group(p, 0, 1, 1, (int[]){0}, (int[]){0});
    add_group(p, 1, 1, 1, (int[]){1}, (int[]){0});
    return p;
}

START_TEST(test_dp_overlaps)
{
    cz_cluster *c = make_cluster(2, 1, 1, 100.0, 25.0, 10.0);
    cz_plan *p = two_bucket_plan();
    double b0 = 10e-6 + 1048576.0 * 2.0 / 25e9, b1 = 10e-6 + 786432.0 * 2.0 / 25e9;
    for (int ov = 0; ov < 2; ov++) {
        cz_sim_options o = CZ_SIM_OPTIONS_INIT;
        o.overlap_grad_reduce = o.overlap_param_gather = ov;
        cz_sim_result *r = NULL;
        cz_error err;
        int rc = cz_plan_simulate(&r, p, c, &o, &err);
        ck_assert_msg(rc == 0, "%s", err.message);
        ck_assert_double_eq_tol(r->grad_sync_s, ov ? b1 : b0 + b1, 1e-12);
        ck_assert_double_eq_tol(r->param_sync_s, ov ? b1 : b0 + b1, 1e-12);
        ck_assert_double_eq_tol(r->grad_sync_total_s, b0 + b1, 1e-12);
        ck_assert_double_eq_tol(r->param_sync_total_s, b0 + b1, 1e-12);
        ck_assert_double_eq_tol(r->step_s, r->grad_sync_s + r->local_s + r->param_sync_s, 1e-12);
        cz_sim_result_free(r);
    }
    cz_plan_free(p);
    cz_cluster_free(c);
}
END_TEST

/* What goes on the wire, on test_dp_overlaps' plan (bf16, two buckets of 1 M elements): by
 * default both exchanges in bf16, each GPU posting both buckets whole (2 M elements x 2 bytes
 * each way); with grad_reduce_in_fp32 the reduce-scatters move 4 bytes an element (twice the
 * time's bandwidth term), the all-gathers stay bf16. Other values are refused. */
START_TEST(test_wire)
{
    cz_cluster *c = make_cluster(2, 1, 1, 100.0, 25.0, 10.0);
    cz_plan *p = two_bucket_plan();
    for (int fp32 = 0; fp32 < 2; fp32++) {
        cz_sim_options o = CZ_SIM_OPTIONS_INIT;
        o.grad_reduce_in_fp32 = fp32;
        cz_sim_result *r = NULL;
        cz_error err;
        int rc = cz_plan_simulate(&r, p, c, &o, &err);
        ck_assert_msg(rc == 0, "%s", err.message);
        double eb = fp32 ? 4.0 : 2.0;
        ck_assert_double_eq_tol(r->grad_sync_s, 20e-6 + (1048576.0 + 786432.0) * eb / 25e9, 1e-12);
        ck_assert_double_eq_tol(r->param_sync_s, 20e-6 + (1048576.0 + 786432.0) * 2.0 / 25e9,
                                1e-12);
        ck_assert_int_eq(r->grad_wire, fp32 ? CZ_DTYPE_FP32 : CZ_DTYPE_BF16);
        ck_assert_int_eq(r->param_wire, CZ_DTYPE_BF16);
        ck_assert_int_eq(r->grad_sync_bytes, 2 * 1048576 * (int64_t)eb);
        ck_assert_int_eq(r->param_sync_bytes, 2 * 1048576 * 2);
        cz_sim_result_free(r);
    }
    cz_sim_options o = CZ_SIM_OPTIONS_INIT;
    o.grad_reduce_in_fp32 = 2;
    cz_sim_result *r = NULL;
    cz_error err;
    ck_assert_int_eq(cz_plan_simulate(&r, p, c, &o, &err), CZ_EINVALID);
    ck_assert_ptr_nonnull(strstr(err.message, "grad_reduce_in_fp32"));
    cz_plan_free(p);
    cz_cluster_free(c);
}
END_TEST

/* The iteration on a plan: three 1024 x 1024 matrices (TP 2, DP 2, each in a bucket of its
 * own, owned by DP rank 0), 2 micro-batches of 2 x 128 tokens at half of 100 TFLOP/s. A matrix's
 * forward is 2 x 524288 x 256 FLOPs = 5.36 us; without overlap the iteration is the passes
 * (2 x 3 x 3 x 5.36 us) plus the step; with it, no longer, and no shorter than the passes. */
START_TEST(test_iteration)
{
    cz_cluster *c = make_cluster(2, 2, 8, 100.0, 25.0, 10.0);
    cz_plan *p = make_plan(2, 2, 3, 1024, 1024, CZ_TP_ROLLBACK);
    p->buckets = realloc(p->buckets, 3 * sizeof *p->buckets);
    ck_assert_ptr_nonnull(p->buckets);
    int64_t local = 512 * 1024;
    for (int b = 0; b < 3; b++) {
        cz_plan_bucket *bk = &p->buckets[b];
        if (b > 0) {
            memset(bk, 0, sizeof *bk);
            bk->ranges = calloc(4, sizeof(int64_t));
            ck_assert_ptr_nonnull(bk->ranges);
        }
        bk->id = b;
        bk->size = local;
        bk->ranges[0] = 0;
        bk->ranges[1] = bk->ranges[2] = bk->ranges[3] = local;
        p->params[b].bucket = b;
        p->params[b].offset = 0;
    }
    p->nbuckets = 3;
    /* Group 0 needs the first two buckets the backward completes, group 1 the last. */
    add_group(p, 0, 2, 2, (int[]){0, 1}, (int[]){0, 1});
    add_group(p, 0, 2, 1, (int[]){2}, (int[]){0});
    cz_sim_options o = CZ_SIM_OPTIONS_INIT;
    o.iteration = 1;
    o.seq_len = 128;
    o.micro_batch_size = 2;
    o.micro_batches = 2;
    o.pass_efficiency = 0.5;
    cz_sim_result *r = NULL;
    cz_error err;
    int rc = cz_plan_simulate(&r, p, c, &o, &err);
    ck_assert_msg(rc == 0, "%s", err.message);
    double f = 2.0 * local * 256 / 50e12;
    ck_assert_int_eq(r->iteration, 1);
    ck_assert_int_eq(r->iter_overlap, 1);
    ck_assert_double_eq_tol(r->pass_tflops, 50.0, 1e-12);
    ck_assert_double_eq_tol(r->fwd_s, 2 * 3 * f, 1e-15);
    ck_assert_double_eq_tol(r->bwd_s, 2 * 3 * 2 * f, 1e-15);
    ck_assert_double_eq_tol(r->iter_s, r->fwd_s + r->bwd_s + r->step_s, 1e-15);
    ck_assert(r->iter_overlap_s <= r->iter_s + 1e-15);
    ck_assert(r->iter_overlap_s >= r->fwd_s + r->bwd_s - 1e-15);
    /* The last group's inputs are the last bucket: after its reduce-scatter (the last of three
     * on the DP channel) it gathers, computes and scatters, then the all-gather of that bucket
     * comes before the next forward's first chunk, which therefore waits at least those. */
    double rs = 10e-6 + (double)local * 2.0 / 25e9;
    ck_assert(r->first_wait_s >= rs + task_seconds(p, 2, c) + rs - 1e-12);
    cz_report *rep = NULL;
    rc = cz_sim_result_report(&rep, r, &err);
    ck_assert_msg(rc == 0, "%s", err.message);
    double v = 0;
    ck_assert_int_eq(cz_report_number(rep, "iteration.overlap_iteration_s", &v, &err), 0);
    ck_assert_double_eq_tol(v, r->iter_overlap_s, 1e-15);
    cz_report_free(rep);
    cz_sim_result_free(r);
    /* Bad options and no cluster are refused with a message. */
    o.pass_efficiency = 1.5;
    ck_assert_int_eq(cz_plan_simulate(&r, p, c, &o, &err), CZ_EINVALID);
    ck_assert_ptr_nonnull(strstr(err.message, "pass_efficiency"));
    o.pass_efficiency = 0.5;
    o.seq_len = 0;
    ck_assert_int_eq(cz_plan_simulate(&r, p, c, &o, &err), CZ_EINVALID);
    ck_assert_ptr_nonnull(strstr(err.message, "seq_len"));
    o.seq_len = 128;
    ck_assert_int_eq(cz_plan_simulate(&r, p, NULL, &o, &err), CZ_EINVALID);
    ck_assert_ptr_nonnull(strstr(err.message, "needs a cluster"));
    cz_plan_free(p);
    cz_cluster_free(c);
}
END_TEST

/* Layerwise: gradients are all-reduced (2x the reduce-scatter traffic), owned parameters
 * gathered. */
START_TEST(test_layerwise_allreduce)
{
    cz_cluster *c = make_cluster(2, 1, 1, 100.0, 25.0, 0.0);
    cz_plan *p = make_plan(2, 1, 2, 1024, 1024, CZ_TP_SC);
    p->settings.dp = CZ_DP_LAYERWISE;
    p->params[1].dp_owner = 1;
    add_group(p, 0, 1, 1, (int[]){0}, (int[]){0});
    add_group(p, 1, 1, 1, (int[]){1}, (int[]){0});
    cz_sim_result *r = NULL;
    cz_error err;
    ck_assert_int_eq(cz_plan_simulate(&r, p, c, NULL, &err), 0);
    double bucket = 2.0 * MIB * 2.0; /* 2 M elements, bf16 */
    ck_assert_double_eq_tol(r->grad_sync_s, 2.0 * 0.5 * bucket / 25e9, 1e-12);
    ck_assert_double_eq_tol(r->param_sync_s, MIB * 2.0 / 25e9, 1e-12);
    cz_sim_result_free(r);
    cz_plan_free(p);
    cz_cluster_free(c);
}
END_TEST

/* Without a cluster the timeline is in cost units and communication is free. Loads: group 0
 * {3, 1}, group 1 {2, 2} -> rank 0 ends at 5, rank 1 at 3 (it starts group 1 early because
 * nothing but the gather gates a group's compute). */
START_TEST(test_cost_proportional)
{
    cz_plan *p = make_plan(1, 2, 4, 2, 2, CZ_TP_SLOT);
    p->params[0].cost = 3;
    p->params[1].cost = 1;
    p->params[2].cost = 2;
    p->params[3].cost = 2;
    add_group(p, 0, 2, 2, (int[]){0, 1}, (int[]){0, 1});
    add_group(p, 0, 2, 2, (int[]){2, 3}, (int[]){0, 1});
    cz_sim_result *r = NULL;
    cz_error err;
    ck_assert_int_eq(cz_plan_simulate(&r, p, NULL, NULL, &err), 0);
    ck_assert_double_eq_tol(r->step_s, 5.0, 1e-12);
    ck_assert_double_eq_tol(r->tl_compute[1 * 2 + 1].start, 1.0, 1e-12);
    ck_assert_double_eq_tol(r->tl_compute[1 * 2 + 1].end, 3.0, 1e-12);
    ck_assert_double_eq(r->comm_s, 0.0);
    cz_sim_result_free(r);
    cz_plan_free(p);
}
END_TEST

START_TEST(test_bad_inputs)
{
    cz_cluster *c = make_cluster(2, 2, 8, 100.0, 25.0, 10.0);
    cz_plan *p = make_plan(1, 2, 1, 4, 4, CZ_TP_ROLLBACK);
    cz_sim_result *r = NULL;
    cz_error err;
    ck_assert_int_eq(cz_plan_simulate(&r, p, c, NULL, &err), CZ_EMISMATCH);
    ck_assert_ptr_null(r);
    add_group(p, 0, 2, 1, (int[]){0}, (int[]){0});
    p->schedules[0].groups[0].task_slot[0] = 7; /* no TP rank 7 */
    ck_assert_int_eq(cz_plan_simulate(&r, p, NULL, NULL, &err), CZ_EINVALID);
    ck_assert_ptr_nonnull(strstr(err.message, "slot 7"));
    p->schedules[0].groups[0].task_slot[0] = 0;
    p->settings.dp = CZ_DP_EVEN;
    ck_assert_int_eq(cz_plan_simulate(&r, p, NULL, NULL, &err), CZ_EUNSUPPORTED);
    cz_plan_free(p);
    cz_cluster_free(c);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("simulate");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_alltoall_formula);
    tcase_add_test(tc, test_node_spans);
    tcase_add_test(tc, test_uneven_models);
    tcase_add_test(tc, test_pipeline_overlap);
    tcase_add_test(tc, test_sc_vs_pipelined);
    tcase_add_test(tc, test_dp_sync_bandwidth);
    tcase_add_test(tc, test_dp_overlaps);
    tcase_add_test(tc, test_layerwise_allreduce);
    tcase_add_test(tc, test_cost_proportional);
    tcase_add_test(tc, test_bad_inputs);
    tcase_add_test(tc, test_coop_allreduce_and_wait);
    tcase_add_test(tc, test_block_gather_volume);
    tcase_add_test(tc, test_iteration);
    tcase_add_test(tc, test_wire);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
