/*
 * Megatron-LM's Muon on a TP (and GTP) sharded matrix, as Megatron-LM's code runs it, in the
 * device model's terms (docs/SIMULATOR.md, "Megatron's TP modes for Muon"). Facts taken from:
 *
 *  megatron/core/optimizer/emerging_optimizers.py, TensorParallelMuon:
 *    orthogonalize (per parameter, one after another on one stream; QKV split per block),
 *    scaled_orthogonalize_fn_with_gtp_remat (blockwise: the local GTP shard alone; duplicated:
 *    all-gather over GTP on dim 0, then newton_schulz_tp; distributed: with both GTP and TP,
 *    all-gather the smaller group first and distribute over the larger one, over GTP along
 *    dim 0), scaled_orthogonalize_fn (newton_schulz_tp, then two multiplies for the scale);
 *  emerging_optimizers/orthogonalized_optimizers/muon_utils.py, newton_schulz_tp (duplicated:
 *    all-gather over TP, whole-matrix NS; distributed: transpose so that the partition dim is the
 *    long side, normalize by an all-reduced norm, every iteration A = X X^T all-reduced over the
 *    group, B = addmm(A, A, A) on every rank, X = addmm(X, B, X)), newton_schulz (bf16 under
 *    "medium" precision);
 *  megatron/core/optimizer/layer_sharded_muon.py, LayerShardedMuon.step (pull request 6683):
 *    one fused all_to_all per direction over the domain, the whole matrix's NS on its home,
 *    same-shape matrices batched by muon_ns_batch_size (_run_ns), params sharded by neither
 *    GTP nor TP computed by every rank; layer_wise_optimizer.py, _assign_ns_homes: LPT over the
 *    domain's ranks by max(M, N) min(M, N)^2.
 *
 * Our code, in our words; the facts are Megatron's. The plan's TP group is Megatron's domain
 * (GTP x TP ranks, TP innermost); gtp of them shard dim 0 (Megatron's gtp_remat).
 */
#include "cz_algorithms.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The ops TensorParallelMuon's step runs on one local shard of `elems` fp32 elements around the
 * orthogonalization (emerging_optimizers' OrthogonalizedOptimizer.step): decoupled weight decay,
 * the momentum's lerp, Nesterov's lerp (TensorParallelMuon's default; LayerShardedMuon has it
 * off), and the update. */
static double param_ops(const cz_cluster *c, double elems, int nesterov)
{
    double t = cz__dm_torch_op_seconds(c, 8.0 * elems) + cz__dm_torch_op_seconds(c, 12.0 * elems) +
               cz__dm_torch_op_seconds(c, 12.0 * elems);
    return nesterov ? t + cz__dm_torch_op_seconds(c, 12.0 * elems) : t;
}

static void add_coll(cz_megatron_work *w, cz_cal_op op, cz_mg_group g, int n, double bytes)
{
    if (n <= 1 || w->ncoll >= CZ_MG_MAX_COLL)
        return;
    for (int i = 0; i < w->ncoll; i++)
        if (w->coll[i].op == op && w->coll[i].group == g && w->coll[i].bytes == bytes) {
            w->coll[i].count++;
            return;
        }
    w->coll[w->ncoll++] = (cz_mg_coll){op, g, n, bytes, 1};
}

/* Distributed Newton-Schulz of one matrix over a group of G ranks, each holding L / G of the
 * distributed dimension L, K the other (full) one: X is K x L / G after the transpose. */
static double distributed_ns(const cz_cluster *c, double K, double LG, int steps,
                             cz_megatron_work *w, cz_mg_group grp, int G)
{
    double e = K * LG;
    /* distributed_normalize_p2: x * x, sum, all-reduce, sqrt, cast, clamp, divide. */
    double t = cz__dm_torch_op_seconds(c, 8.0 * e) + cz__dm_torch_op_seconds(c, 4.0 * e) +
               3.0 * cz__dm_torch_op_seconds(c, 8.0) + cz__dm_torch_op_seconds(c, 8.0 * e);
    add_coll(w, CZ_CAL_ALL_REDUCE, grp, G, 4.0);
    t += cz__dm_torch_op_seconds(c, 6.0 * e); /* to bf16 */
    for (int i = 0; i < steps; i++) {
        t += cz__dm_torch_gemm_seconds(c, K, K, LG, 1, 0) +
             cz__dm_torch_gemm_seconds(c, K, K, K, 1, 1) +
             cz__dm_torch_gemm_seconds(c, K, LG, K, 1, 1);
        add_coll(w, CZ_CAL_ALL_REDUCE, grp, G, 2.0 * K * K); /* the bf16 Gram */
    }
    /* back to fp32, and the scale's two multiplies */
    return t + cz__dm_torch_op_seconds(c, 6.0 * e) + 2.0 * cz__dm_torch_op_seconds(c, 8.0 * e);
}

/* One matrix (a parameter, or a block of one) of full shape M x N split along d by the domain. */
static void one_matrix(const cz_cluster *c, double M, double N, int d, int steps,
                       cz_muon_tp_mode mode, int gtp, cz_megatron_work *w)
{
    int R = c->tp, g = gtp, t = R / gtp;
    double full = 4.0 * M * N; /* fp32 momentum bytes of the whole matrix */
    if (mode == CZ_MUON_TP_BLOCKWISE) {
        /* The rank's own piece: TP splits d by t, GTP dim 0 of that by g. */
        double lm = M / (d == 0 ? t : 1) / g, ln = N / (d == 1 ? t : 1);
        w->compute_s +=
            cz__dm_torch_ns_seconds(c, (int64_t)fmax(1, lm), (int64_t)fmax(1, ln), 1, steps);
        return;
    }
    if (mode == CZ_MUON_TP_DUPLICATED) {
        /* All-gather over GTP then over TP (each slice the rank's piece or its GTP-gathered
         * one), each followed by torch.cat; the whole matrix's NS on every rank; the GTP
         * reshard's copy. */
        if (g > 1) {
            add_coll(w, CZ_CAL_ALL_GATHER, CZ_MG_GTP, g, full / R);
            w->compute_s += cz__dm_torch_op_seconds(c, 2.0 * full / t);
        }
        if (t > 1) {
            add_coll(w, CZ_CAL_ALL_GATHER, CZ_MG_TP, t, full / t);
            w->compute_s += cz__dm_torch_op_seconds(c, 2.0 * full);
        }
        w->compute_s += cz__dm_torch_ns_seconds(c, (int64_t)M, (int64_t)N, 1, steps);
        if (g > 1)
            w->compute_s += cz__dm_torch_op_seconds(c, 2.0 * full / R);
        return;
    }
    /* Distributed: over one (group, dim) pair. With both GTP and TP, the smaller group is
     * all-gathered first and NS is distributed over the larger one (GTP along dim 0 on a tie). */
    cz_mg_group grp = g > 1 ? CZ_MG_GTP : CZ_MG_TP;
    int G = g > 1 ? g : t, dd = g > 1 ? 0 : d;
    if (g > 1 && t > 1) {
        int gtp_wins = g >= t;
        add_coll(w, CZ_CAL_ALL_GATHER, gtp_wins ? CZ_MG_TP : CZ_MG_GTP, gtp_wins ? t : g, full / R);
        w->compute_s += cz__dm_torch_op_seconds(c, 2.0 * full / (gtp_wins ? g : t));
        grp = gtp_wins ? CZ_MG_GTP : CZ_MG_TP;
        G = gtp_wins ? g : t;
        dd = gtp_wins ? 0 : d;
        /* the result narrowed back to the rank's piece */
        w->compute_s += cz__dm_torch_op_seconds(c, 2.0 * full / R);
    }
    double L = dd == 0 ? M : N, K = dd == 0 ? N : M;
    w->compute_s += distributed_ns(c, K, L / G, steps, w, grp, G);
}

int cz__megatron_muon_work(const cz_param_def *p, const cz_settings *s, const cz_cluster *c,
                           cz_muon_tp_mode mode, int gtp, cz_megatron_work *w, cz_error *err)
{
    memset(w, 0, sizeof *w);
    int R = c->tp;
    if (gtp < 1 || R % gtp != 0)
        return cz__error_set(err, CZ_EINVALID,
                             "GTP size %d: it must divide the plan's TP group of %d ranks (the "
                             "domain of GTP x TP ranks)",
                             gtp, R);
    double M = (double)p->shape[0], N = p->ndim == 1 ? 1.0 : (double)p->shape[1];
    int split = (p->tp_dim == 0 || p->tp_dim == 1) && R > 1;
    w->lpt_cost = cz__megatron_ns_cost(p->shape[0], p->ndim == 1 ? 1 : p->shape[1]);
    w->shard_bytes = 4.0 * M * N / (split ? R : 1);
    w->routed = split;
    w->local_elems = M * N / (split ? R : 1);
    w->param_ops_s = param_ops(c, w->local_elems, mode != CZ_MUON_TP_LAYER_SHARDED);
    if (mode == CZ_MUON_TP_LAYER_SHARDED)
        return CZ_OK; /* the exchanges and the homes' batches are the caller's (one DP rank's) */
    if (!split) {
        /* Whole on every rank of the domain: every rank orthogonalizes it, no collective. */
        w->compute_s = cz__dm_torch_ns_seconds(c, p->shape[0], (int64_t)N, 1, s->ns_steps) +
                       2.0 * cz__dm_torch_op_seconds(c, 8.0 * M * N);
        return CZ_OK;
    }
    int blocks = p->nblocks > 0 && p->block_sizes && (p->block_dim == 0 || p->block_dim == 1);
    int nb = blocks ? p->nblocks : 1;
    for (int i = 0; i < nb; i++) {
        double bm = blocks && p->block_dim == 0 ? (double)p->block_sizes[i] : M;
        double bn = blocks && p->block_dim == 1 ? (double)p->block_sizes[i] : N;
        one_matrix(c, bm, bn, p->tp_dim, s->ns_steps, mode, gtp, w);
        /* the scale's two multiplies, on the rank's piece */
        w->compute_s += 2.0 * cz__dm_torch_op_seconds(c, 8.0 * bm * bn / R);
    }
    return CZ_OK;
}

typedef struct ranked {
    double cost;
    int index;
} ranked;

static int ranked_cmp(const void *x, const void *y)
{
    const ranked *a = x, *b = y;
    if (a->cost != b->cost)
        return a->cost > b->cost ? -1 : 1;
    return (a->index > b->index) - (a->index < b->index);
}

int cz__megatron_ns_homes(const double *cost, int n, int bins, int *home, double *bin_cost)
{
    ranked *order = malloc((size_t)(n > 0 ? n : 1) * sizeof *order);
    if (!order)
        return CZ_ENOMEM;
    for (int b = 0; b < bins; b++)
        bin_cost[b] = 0.0;
    /* sorted(params, key=-cost) is stable: equal costs keep their order (the index breaks
     * ties here, which qsort alone would not). */
    for (int i = 0; i < n; i++)
        order[i] = (ranked){cost[i], i};
    qsort(order, (size_t)n, sizeof *order, ranked_cmp);
    for (int r = 0; r < n; r++) {
        int i = order[r].index, best = 0;
        for (int b = 1; b < bins; b++) /* min(range(bins), key=...): the first least */
            if (bin_cost[b] < bin_cost[best])
                best = b;
        home[i] = best;
        bin_cost[best] += cost[i];
    }
    free(order);
    return CZ_OK;
}
