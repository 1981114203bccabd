/*
 * Cost model: how much optimizer work one parameter needs, in elements, FLOPs or seconds.
 *
 * A matrix parameter is optimized whole (Muon/SOAP/Shampoo): its cost is the sum over its
 * blocks (each block an independent matrix) of the per-matrix cost. An elementwise parameter
 * (AdamW) is updated shard by shard on every TP rank; a replicated one is updated redundantly
 * on every TP rank, so its work across the TP group is tp times its size.
 *
 * Per-matrix work, m x n, a = min(m, n), b = max(m, n), d = bytes per parameter element:
 *
 *  Muon    matmul  ns_steps * (4 a^2 b + 2 a^3)   (X X^T and B X are 2 a^2 b each, A A is 2 a^3;
 *                                                 the reference code drops the 2 a^3 term)
 *          elementwise 10 FLOPs per element (momentum, Nesterov, normalization, scaling, weight
 *          decay); bytes per element 8 + 3 d (fp32 momentum read+write, gradient read, parameter
 *          read+write).
 *  SOAP    per side s of size <= max_precond_dim (other side o):
 *          projection into and out of the eigenbasis 2 * 2 s^2 o, Gram update 2 s^2 o,
 *          eigenbasis refresh (6 + 4/3) s^3 amortized over precondition_frequency steps.
 *          elementwise 12 FLOPs per element (Adam moments in the rotated space); bytes per element
 *          16 + 3 d (fp32 first and second moments read+write, gradient read, parameter r/w).
 *  Shampoo per side s <= max_precond_dim: Gram update 2 s^2 o, preconditioning 2 s^2 o, inverse
 *          4th root by eigendecomposition 10 s^3 amortized over precondition_frequency steps
 *          (10 = a symmetric eigendecomposition ~9 s^3 plus forming Q diag Q^T ~1 s^3, rounded).
 *          elementwise 10 FLOPs per element (AdaGrad grafting, scaling, weight decay); bytes per
 *          element 8 + 3 d (fp32 grafting accumulator read+write, gradient, parameter r/w).
 *  AdamW   12 FLOPs per element; bytes per element 16 + 3 d. Memory bound.
 *
 * Units: numel = elements of the whole matrix (matrix) or of all shards (elementwise); flops =
 * matmul + elementwise FLOPs; time = matmul FLOPs / (matmul_tflops 1e12) + elementwise bytes /
 * (mem_gbps 1e9) on the cluster's device.
 */
#include "cz_algorithms.h"

#include <string.h>

/* Work of one whole m x n matrix split into its matmul and elementwise parts. */
typedef struct {
    double matmul_flops;
    double ew_flops;
    double ew_bytes;
} matrix_work;

static double side_on(int64_t side, const cz_settings *s)
{
    return side <= (int64_t)s->max_precond_dim ? 1.0 : 0.0;
}

static matrix_work matrix_work_of(int64_t m, int64_t n, const cz_settings *s, int dbytes)
{
    matrix_work w = {0, 0, 0};
    double dm = (double)m, dn = (double)n, mn = dm * dn;
    double a = dm < dn ? dm : dn, b = dm < dn ? dn : dm;
    double freq = s->precondition_frequency > 0 ? (double)s->precondition_frequency : 1.0;
    double lm = side_on(m, s), rn = side_on(n, s);
    switch (s->optimizer) {
    case CZ_OPTIM_MUON:
        w.matmul_flops = (double)s->ns_steps * (4.0 * a * a * b + 2.0 * a * a * a);
        w.ew_flops = 10.0 * mn;
        w.ew_bytes = mn * (8.0 + 3.0 * dbytes);
        break;
    case CZ_OPTIM_SOAP:
        w.matmul_flops = lm * (4.0 * dm * dm * dn + 2.0 * dm * dm * dn +
                               (6.0 + 4.0 / 3.0) * dm * dm * dm / freq) +
                         rn * (4.0 * dm * dn * dn + 2.0 * dm * dn * dn +
                               (6.0 + 4.0 / 3.0) * dn * dn * dn / freq);
        w.ew_flops = 12.0 * mn;
        w.ew_bytes = mn * (16.0 + 3.0 * dbytes);
        break;
    case CZ_OPTIM_SHAMPOO:
        w.matmul_flops =
            lm * (2.0 * dm * dm * dn + 2.0 * dm * dm * dn + 10.0 * dm * dm * dm / freq) +
            rn * (2.0 * dm * dn * dn + 2.0 * dm * dn * dn + 10.0 * dn * dn * dn / freq);
        w.ew_flops = 10.0 * mn;
        w.ew_bytes = mn * (8.0 + 3.0 * dbytes);
        break;
    case CZ_OPTIM_ADAMW:
    default:
        w.ew_flops = 12.0 * mn;
        w.ew_bytes = mn * (16.0 + 3.0 * dbytes);
        break;
    }
    return w;
}

static double rate_seconds(double flops, double bytes, const cz_cluster *c)
{
    double t = 0.0;
    if (flops > 0.0 && c->device.matmul_tflops > 0.0)
        t += flops / (c->device.matmul_tflops * 1e12);
    if (bytes > 0.0 && c->device.mem_gbps > 0.0)
        t += bytes / (c->device.mem_gbps * 1e9);
    return t;
}

/* Muon on one m x n matrix under the device model, in seconds: the executor's Newton-Schulz
 * with its kernels (cz__dm_ns_seconds) and the parameter's momentum and update kernels, of which
 * a block of a fused matrix carries its share (share = 1 / blocks) so that the blocks of a
 * matrix sum to its cost. */
static double muon_device_seconds(int64_t m, int64_t n, const cz_settings *s, const cz_cluster *c,
                                  int dbytes, cz_dtype dtype, double share)
{
    double mn = (double)m * (double)n;
    return cz__dm_ns_seconds(c, m, n, 1, s->ns_steps, cz__dm_ns_prec(dtype)) +
           share * 2.0 * cz__dm_kernel_seconds(c, 0.0) +
           cz__dm_bytes_seconds(c, mn * (8.0 + 3.0 * dbytes));
}

static double matrix_cost(int64_t m, int64_t n, cz_cost_unit unit, const cz_settings *s,
                          const cz_cluster *c, int dbytes, cz_dtype dtype, double share)
{
    if (unit == CZ_UNIT_TIME && c->device.costs.on && s->optimizer == CZ_OPTIM_MUON)
        return muon_device_seconds(m, n, s, c, dbytes, dtype, share);
    matrix_work w = matrix_work_of(m, n, s, dbytes);
    switch (unit) {
    case CZ_UNIT_NUMEL:
        return (double)m * (double)n;
    case CZ_UNIT_FLOPS:
        return w.matmul_flops + w.ew_flops;
    case CZ_UNIT_TIME:
    default:
        return rate_seconds(w.matmul_flops, w.ew_bytes, c);
    }
}

static bool is_matrix_work(const cz_param_def *p, const cz_settings *s)
{
    return p->kind == CZ_KIND_MATRIX && s->optimizer != CZ_OPTIM_ADAMW;
}

/* Per-head Muon on the task of block `block` (-1: the whole matrix): its heads, all of one
 * shape, orthogonalized one by one (the executor batches them, so the launches are shared).
 * Multiplied rather than summed, so that a matrix of many heads costs O(1) to price. */
static double heads_cost(const cz_param_def *p, int block, cz_cost_unit unit, const cz_settings *s,
                         const cz_cluster *c, cz_dtype dtype)
{
    int64_t n = cz_task_units(p, block, true), r0, c0, rows, cols;
    cz_task_unit(p, block, true, 0, &r0, &c0, &rows, &cols);
    return n < 1 ? 0.0
                 : (double)n * matrix_cost(rows, cols, unit, s, c, cz__dtype_bytes(dtype), dtype,
                                           1.0 / (double)n);
}

static double cost_in(const cz_param_def *p, const cz_settings *s, const cz_cluster *c,
                      cz_dtype dtype, cz_cost_unit unit)
{
    int dbytes = cz__dtype_bytes(dtype);
    int64_t m = p->shape[0], n = p->ndim == 1 ? 1 : p->shape[1];
    if (is_matrix_work(p, s)) {
        if (cz_param_per_head(p, s->optimizer == CZ_OPTIM_MUON))
            return heads_cost(p, -1, unit, s, c, dtype);
        if (p->nblocks <= 0 || !p->block_sizes || (p->block_dim != 0 && p->block_dim != 1))
            return matrix_cost(m, n, unit, s, c, dbytes, dtype, 1.0);
        double total = 0.0;
        for (int i = 0; i < p->nblocks; i++) {
            int64_t bm = p->block_dim == 0 ? p->block_sizes[i] : m;
            int64_t bn = p->block_dim == 1 ? p->block_sizes[i] : n;
            total += matrix_cost(bm, bn, unit, s, c, dbytes, dtype, 1.0 / p->nblocks);
        }
        return total;
    }
    /* Elementwise: AdamW on every shard; a replicated parameter is redone on every TP rank. */
    double numel = (double)m * (double)n;
    if (p->tp_dim < 0 && c->tp > 1)
        numel *= (double)c->tp;
    switch (unit) {
    case CZ_UNIT_NUMEL:
        return numel;
    case CZ_UNIT_FLOPS:
        return 12.0 * numel;
    case CZ_UNIT_TIME:
    default:
        /* Under the device model each TP rank's shard is one fused AdamW kernel. */
        return (c->device.costs.on ? c->tp * cz__dm_kernel_seconds(c, 0.0) : 0.0) +
               rate_seconds(0.0, numel * (16.0 + 3.0 * dbytes), c);
    }
}

double cz__cost_param(const cz_param_def *p, const cz_settings *s, const cz_cluster *c,
                      cz_dtype dtype)
{
    return cost_in(p, s, c, dtype, s->unit);
}

double cz__cost_param_seconds(const cz_param_def *p, const cz_settings *s, const cz_cluster *c,
                              cz_dtype dtype)
{
    return cost_in(p, s, c, dtype, CZ_UNIT_TIME);
}

/* fp32 optimizer state of one whole m x n matrix:
 *  Muon     momentum: 4 m n.
 *  SOAP     per side <= max_precond_dim a Gram factor and its eigenbasis (2 s^2 each side), plus
 *           Adam's two moments (2 m n): 4 (2 m^2 + 2 n^2 + 2 m n) when both sides qualify.
 *  Shampoo  per side a factor and its inverse root (2 s^2), plus the grafting accumulator (m n):
 *           4 (2 m^2 + 2 n^2 + m n). */
static double matrix_state(int64_t m, int64_t n, const cz_settings *s)
{
    double dm = (double)m, dn = (double)n;
    double lm = side_on(m, s), rn = side_on(n, s);
    switch (s->optimizer) {
    case CZ_OPTIM_MUON:
        return 4.0 * dm * dn;
    case CZ_OPTIM_SOAP:
        return 4.0 * (2.0 * lm * dm * dm + 2.0 * rn * dn * dn + 2.0 * dm * dn);
    case CZ_OPTIM_SHAMPOO:
        return 4.0 * (2.0 * lm * dm * dm + 2.0 * rn * dn * dn + dm * dn);
    case CZ_OPTIM_ADAMW:
    default:
        return 8.0 * dm * dn;
    }
}

double cz__state_bytes(const cz_param_def *p, const cz_settings *s, int tp)
{
    int64_t m = p->shape[0], n = p->ndim == 1 ? 1 : p->shape[1];
    if (is_matrix_work(p, s)) {
        if (p->nblocks <= 0 || !p->block_sizes || (p->block_dim != 0 && p->block_dim != 1))
            return matrix_state(m, n, s);
        double total = 0.0;
        for (int i = 0; i < p->nblocks; i++) {
            int64_t bm = p->block_dim == 0 ? p->block_sizes[i] : m;
            int64_t bn = p->block_dim == 1 ? p->block_sizes[i] : n;
            total += matrix_state(bm, bn, s);
        }
        return total;
    }
    /* AdamW: fp32 first and second moments of the local shard. */
    double numel = (double)m * (double)n;
    if (p->tp_dim >= 0 && tp > 1)
        numel /= (double)tp;
    return 8.0 * numel;
}

/* Megatron-LM's TP modes for Muon (megatron/core/optimizer/emerging_optimizers.py and
 * emerging_optimizers' newton_schulz_tp):
 *  blockwise    Newton-Schulz on the TP-local shard as if it were a whole matrix: the cost of
 *               the local shape.
 *  distributed  the shard X (L / tp rows of the split dimension, K of the other) stays split;
 *               every iteration forms its partial Gram X^T X (K x K, 2 K^2 L / tp FLOPs),
 *               all-reduces it over TP (K^2 elements, bf16 under the default "medium" matmul
 *               precision), computes A A redundantly (2 K^3) and B X (2 K^2 L / tp): per rank
 *               ns_steps (4 K^2 L / tp + 2 K^3) FLOPs, plus one scalar all-reduce for the norm.
 *               K is the unsplit dimension whether or not it is the smaller one.
 * Blocks are separate matrices (the model's choice, e.g. QKV per query group, gate and up). A
 * fused QKV (linear_qkv) whose query groups divide by tp holds whole groups on every rank
 * (Megatron's head rules): both modes are then 1 / tp of the whole matrix, with no
 * communication. Other blocks along the TP dimension (gate / up) are sliced 1 / tp on every rank
 * like a whole matrix; blocks across it each keep the whole split dimension. */
cz_muon_tp_work cz__cost_muon_tp(const cz_param_def *p, const cz_settings *s, const cz_cluster *c,
                                 cz_dtype dtype, cz_muon_tp_mode mode)
{
    cz_muon_tp_work w = {0, 0, 0, 0};
    int R = c->tp, dbytes = cz__dtype_bytes(dtype);
    bool split = p->tp_dim == 0 || p->tp_dim == 1;
    if (mode == CZ_MUON_TP_DUPLICATED || !split || R <= 1 || !is_matrix_work(p, s) ||
        p->ndim != 2) {
        w.seconds = cost_in(p, s, c, dtype, CZ_UNIT_TIME);
        return w;
    }
    bool blocks = p->nblocks > 0 && p->block_sizes && (p->block_dim == 0 || p->block_dim == 1);
    bool along = blocks && p->block_dim == p->tp_dim;
    if (along && p->nblocks % R == 0 && p->name && strstr(p->name, "linear_qkv")) {
        /* Query groups are dealt whole to the TP ranks (Megatron's head rules). */
        w.seconds = cost_in(p, s, c, dtype, CZ_UNIT_TIME) / R;
        return w;
    }
    int nb = blocks ? p->nblocks : 1;
    for (int i = 0; i < nb; i++) {
        /* Block i as a matrix: L along the TP split, K across it. A block along the split dim
         * (gate / up) is sliced 1 / tp on every rank like the whole matrix. */
        double L = along ? (double)p->block_sizes[i] : (double)p->shape[p->tp_dim];
        double K = blocks && !along ? (double)p->block_sizes[i] : (double)p->shape[1 - p->tp_dim];
        int64_t lr = (int64_t)(L / R), k = (int64_t)K; /* the local shard: lr x k along tp_dim */
        matrix_work mw =
            p->tp_dim == 0 ? matrix_work_of(lr, k, s, dbytes) : matrix_work_of(k, lr, s, dbytes);
        if (mode == CZ_MUON_TP_DISTRIBUTED) {
            mw.matmul_flops = (double)s->ns_steps * (4.0 * K * K * (L / R) + 2.0 * K * K * K);
            w.gram_bytes += K * K * 2.0;
            w.grams += s->ns_steps;
            w.scalar_allreduce++;
        }
        w.seconds += rate_seconds(mw.matmul_flops, mw.ew_bytes, c);
    }
    /* Blocks along the other dimension are separate matrices: one Gram each per iteration. */
    if (w.grams > 0)
        w.gram_bytes /= nb;
    return w;
}

/* Cooperative Newton-Schulz of one m x n matrix (a block, or a matrix without blocks) over k TP
 * ranks, per rank, as the executor runs it (cz__muon_coop_run, executor/src/optim/ns_coop.h). With
 * a = min(m, n), b = max(m, n) and s = b / k, each rank holds an a x s slice X_j of X along the
 * long side. Every iteration it forms its partial Gram X_j X_j^T, of which only the upper
 * triangle is needed (the Gram is symmetric), in P row panels (the task's count, which the
 * planner chooses, cz__coop_best_panels, and the plan records; cz_coop_panel_row: equal shares of
 * the packed triangle, so equal all-reduce bytes): panel p, rows r_p .. r_{p+1} - 1 (h_p of
 * them), is one GEMM of those rows against rows r_p .. a - 1,
 * 2 h_p (a - r_p) s FLOPs (P = 1 gives the whole 2 a^2 s; more panels skip the blocks below
 * the diagonal). As soon as a panel is computed its all-reduce is posted; the all-reduces run
 * one after another on one channel while the device computes the next panels. Then the
 * polynomial X_j = a X_j + (b A + c A A) X_j, in the form the executor takes:
 *  A(AX), exactly when the slice is narrower than a (s < a): the rows of Y = A X_j of panel p
 *         (2 h_p a s) start as soon as panel p has been summed, so the all-reduces of the later
 *         panels hide behind them too; then Z = A Y (2 a^2 s) and the elementwise combination.
 *         Per iteration the Gram plus 4 a^2 s.
 *  standard: B = b A + c A A computed redundantly once every panel has arrived, then B X_j:
 *         2 a^3 + 2 a^2 s.
 * The time of an iteration follows two clocks, compute and communication, each from 0: every
 * computation waits for the panels it reads, every all-reduce for its panel and for the
 * channel. The iteration ends when the compute clock does; its waits are the exposed
 * communication. The standard form always waits for at least the last panel's all-reduce (it
 * follows the last Gram panel and the polynomial needs every panel); A(AX) can hide everything
 * behind the rows of Y of the earlier panels. The Frobenius norm costs one scalar all-reduce
 * per step, not overlapped. The elementwise work (momentum, scaling) is the slice's. */
/* The same pipeline under the device model: every GEMM a call of the executor's cooperative
 * path (fp32 cublasSgemmStridedBatched whatever the job's dtype: compute_cuda.c's
 * cuda_ns_gram_rows, cuda_ns_poly_rows, cuda_ns_poly_end) at the fp32 rate, and the kernels
 * around them launched: per panel a pack after its Gram rows and an unpack after its wait, the
 * polynomial's elementwise passes, the norm's sum of squares, the scaled load and the store
 * (cz__muon_coop_run), the parameter's momentum and update. The all-reduces carry their NCCL
 * call through `allreduce`. */
static cz_coop_time coop_device(int64_t ia, double a, double slice, double mn, int k, int panels,
                                const int64_t *row, const cz_settings *s, const cz_cluster *c,
                                int dbytes, cz_coop_allreduce_fn allreduce, const void *ctx)
{
    cz_coop_time r = {0, 0, 0, 0, 0, 0};
    double tc = 0.0, tm = 0.0, pure = 0.0, flops = 0.0, comm = 0.0, done[CZ_COOP_MAX_PANELS];
    for (int p = 0; p < panels; p++) {
        double h = (double)(row[p + 1] - row[p]), w = a - (double)row[p];
        double packed =
            (double)(cz_coop_packed_before(ia, row[p + 1]) - cz_coop_packed_before(ia, row[p]));
        double t = cz__dm_gemm_seconds(c, w, h, slice, 1, CZ_GEMM_FP32, 0) +
                   cz__dm_kernel_seconds(c, 4.0 * (h * w + packed));
        double ar = allreduce(4.0 * packed, ctx);
        flops += 2.0 * h * w * slice, pure += t, tc += t, comm += ar;
        tm = (tc > tm ? tc : tm) + ar;
        done[p] = tm;
    }
    int aax = slice < a;
    for (int p = 0; p < panels; p++) {
        double h = (double)(row[p + 1] - row[p]), w = a - (double)row[p];
        double packed =
            (double)(cz_coop_packed_before(ia, row[p + 1]) - cz_coop_packed_before(ia, row[p]));
        double t = cz__dm_kernel_seconds(c, 4.0 * (packed + 2.0 * h * w));
        if (aax) {
            t += cz__dm_gemm_seconds(c, slice, h, a, 1, CZ_GEMM_FP32, 0);
            flops += 2.0 * h * a * slice;
        }
        pure += t;
        tc = (tc > done[p] ? tc : done[p]) + t;
    }
    double t = aax ? cz__dm_kernel_seconds(c, 12.0 * a * slice) +
                         cz__dm_gemm_seconds(c, slice, a, a, 1, CZ_GEMM_FP32, 1)
                   : cz__dm_kernel_seconds(c, 8.0 * a * a) +
                         cz__dm_gemm_seconds(c, a, a, a, 1, CZ_GEMM_FP32, 1) +
                         cz__dm_kernel_seconds(c, 8.0 * a * slice) +
                         cz__dm_gemm_seconds(c, slice, a, a, 1, CZ_GEMM_FP32, 1) +
                         cz__dm_kernel_seconds(c, 8.0 * a * slice);
    flops += aax ? 2.0 * a * a * slice : 2.0 * a * a * a + 2.0 * a * a * slice;
    pure += t, tc += t;
    double steps = (double)s->ns_steps, mine = mn / (double)k;
    /* sum of squares, scaled load, store, momentum and update around the iterations */
    double around = cz__dm_kernel_seconds(c, 4.0 * mine) + cz__dm_kernel_seconds(c, 8.0 * mine) +
                    cz__dm_kernel_seconds(c, 8.0 * mine) + 2.0 * cz__dm_kernel_seconds(c, 0.0) +
                    cz__dm_bytes_seconds(c, mine * (8.0 + 3.0 * dbytes));
    double norm = allreduce(8.0, ctx);
    r.flops = steps * flops;
    r.ew_flops = 10.0 * mine;
    r.compute = steps * pure + around;
    r.exposed = steps * (tc - pure) + norm;
    r.total = r.compute + r.exposed;
    r.comm = steps * comm + norm;
    return r;
}

cz_coop_time cz__coop_time_of(int64_t m, int64_t n, int k, int panels, const cz_settings *s,
                              const cz_cluster *c, cz_dtype dtype, cz_coop_allreduce_fn allreduce,
                              const void *ctx)
{
    cz_coop_time r = {0, 0, 0, 0, 0, 0};
    int dbytes = cz__dtype_bytes(dtype);
    int64_t ia = m < n ? m : n;
    double dm = (double)m, dn = (double)n, a = (double)ia, b = dm < dn ? dn : dm;
    double steps = (double)s->ns_steps, slice = b / (double)k;
    /* Callers pass a count the plan reader or cz__coop_best_panels bounded; the clamp only keeps
     * row[] in bounds. */
    if (panels > CZ_COOP_MAX_PANELS)
        panels = CZ_COOP_MAX_PANELS;
    if (panels > ia)
        panels = (int)ia;
    if (panels < 1)
        panels = 1;
    int64_t row[CZ_COOP_MAX_PANELS + 1];
    for (int p = 0; p <= panels; p++)
        row[p] = cz_coop_panel_row(ia, panels, p);
    if (c->device.costs.on)
        return coop_device(ia, a, slice, dm * dn, k, panels, row, s, c, dbytes, allreduce, ctx);
    /* One iteration: tc the compute clock, tm the channel's, done[p] when panel p is summed;
     * pure the compute clock without waits. */
    double tc = 0.0, tm = 0.0, pure = 0.0, flops = 0.0, comm = 0.0, done[CZ_COOP_MAX_PANELS];
    for (int p = 0; p < panels; p++) {
        double h = (double)(row[p + 1] - row[p]);
        double f = 2.0 * h * (a - (double)row[p]) * slice, t = rate_seconds(f, 0, c);
        double packed =
            (double)(cz_coop_packed_before(ia, row[p + 1]) - cz_coop_packed_before(ia, row[p]));
        double ar = allreduce(4.0 * packed, ctx);
        flops += f, pure += t, tc += t, comm += ar;
        tm = (tc > tm ? tc : tm) + ar;
        done[p] = tm;
    }
    if (slice < a) { /* A(AX): Y's rows panel by panel, then Z = A Y */
        for (int p = 0; p < panels; p++) {
            double f = 2.0 * (double)(row[p + 1] - row[p]) * a * slice, t = rate_seconds(f, 0, c);
            flops += f, pure += t;
            tc = (tc > done[p] ? tc : done[p]) + t;
        }
        double f = 2.0 * a * a * slice, t = rate_seconds(f, 0, c);
        flops += f, pure += t, tc += t;
    } else { /* standard: B = b A + c A A and B X_j once every panel is in */
        double f = 2.0 * a * a * a + 2.0 * a * a * slice, t = rate_seconds(f, 0, c);
        flops += f, pure += t;
        tc = (tc > tm ? tc : tm) + t;
    }
    double ew_bytes = dm * dn / (double)k * (8.0 + 3.0 * dbytes);
    r.flops = steps * flops;
    r.ew_flops = 10.0 * dm * dn / (double)k;
    r.compute = steps * pure + rate_seconds(0, ew_bytes, c);
    /* The two clocks add the same terms in the same order, so tc - pure is exactly 0 where
     * nothing waited (all-reduces of 0 s give total == compute). */
    double norm = allreduce(8.0, ctx);
    r.exposed = steps * (tc - pure) + norm;
    r.total = r.compute + r.exposed;
    r.comm = steps * comm + norm;
    return r;
}

/* The cost model's all-reduce among the k (cz__cost_allreduce_seconds): a ring, 2 (k - 1)
 * messages of latency and 2 (k - 1) / k of the payload through the TP group's links (inside a
 * node when the TP group fits in one, else across nodes). */
typedef struct {
    int k;
    const cz_cluster *c;
} ring_ctx;

static double ring_allreduce(double bytes, const void *ctx)
{
    const ring_ctx *x = ctx;
    return cz__cost_allreduce_seconds(bytes, x->k, x->c);
}

double cz__cost_coop_panels(int64_t m, int64_t n, int k, int panels, const cz_settings *s,
                            const cz_cluster *c, cz_dtype dtype)
{
    double dm = (double)m, dn = (double)n;
    if (s->unit == CZ_UNIT_NUMEL)
        return dm * dn / (double)k; /* not used: cooperative tasks need a time or FLOP unit */
    ring_ctx ring = {k, c};
    cz_coop_time t = cz__coop_time_of(m, n, k, panels, s, c, dtype, ring_allreduce, &ring);
    /* FLOPs: the exposed communication as the FLOPs the device could have done meanwhile. */
    if (s->unit == CZ_UNIT_FLOPS)
        return t.flops + t.ew_flops + t.exposed * c->device.matmul_tflops * 1e12;
    return t.total;
}

/* Whether no panel of `panels` is empty: an empty one would post an all-reduce of nothing, its
 * latency for no overlap. Up to (a + 1) / 2 panels none is: each share, at least a packed
 * elements, is at least a row's worth, so every share starts a new row. */
static bool panels_all_rows(int64_t a, int panels)
{
    if (2 * (int64_t)panels <= a + 1)
        return true;
    for (int p = 0; p < panels; p++)
        if (cz_coop_panel_row(a, panels, p + 1) <= cz_coop_panel_row(a, panels, p))
            return false;
    return true;
}

/* The least-cost count and its cost. Each extra panel hides more of the Gram's all-reduce behind
 * the computation but adds one all-reduce latency (2 (k - 1) messages on the ring), so the
 * least-cost count depends on the shape, k and the links, not on a alone. */
static int coop_best(int64_t m, int64_t n, int k, const cz_settings *s, const cz_cluster *c,
                     cz_dtype dtype, double *cost)
{
    int64_t a = m < n ? m : n;
    int most = a < CZ_COOP_MAX_PANELS ? (int)(a > 1 ? a : 1) : CZ_COOP_MAX_PANELS, best = 1;
    *cost = cz__cost_coop_panels(m, n, k, 1, s, c, dtype);
    if (s->unit == CZ_UNIT_NUMEL)
        return 1; /* no communication to hide */
    for (int p = 2; p <= most; p++) {
        if (!panels_all_rows(a, p))
            continue;
        double x = cz__cost_coop_panels(m, n, k, p, s, c, dtype);
        if (x < *cost) /* ties keep the fewer panels */
            *cost = x, best = p;
    }
    return best;
}

int cz__coop_best_panels(int64_t m, int64_t n, int k, const cz_settings *s, const cz_cluster *c,
                         cz_dtype dtype)
{
    double cost;
    return coop_best(m, n, k, s, c, dtype, &cost);
}

double cz__cost_coop(int64_t m, int64_t n, int k, const cz_settings *s, const cz_cluster *c,
                     cz_dtype dtype)
{
    double cost;
    coop_best(m, n, k, s, c, dtype, &cost);
    return cost;
}

typedef struct {
    int k;
    double gbps, latency_us;
} ring_ab_ctx;

static double ring_ab(double bytes, const void *ctx)
{
    const ring_ab_ctx *x = ctx;
    double steps = 2.0 * (x->k - 1);
    double t = steps * x->latency_us * 1e-6;
    if (x->gbps > 0.0)
        t += steps / x->k * bytes / (x->gbps * 1e9);
    return t;
}

double cz__cost_allreduce_seconds(double bytes, int k, const cz_cluster *c)
{
    if (k <= 1)
        return 0.0;
    bool intra = c->gpus_per_node <= 0 || c->tp <= c->gpus_per_node;
    ring_ab_ctx x = {k, intra ? c->links.intra_node_gbps : c->links.inter_node_gbps,
                     c->links.latency_us};
    if (!c->device.costs.on)
        return ring_ab(bytes, &x);
    /* The device model adds the NCCL call (or takes the calibration's measurement). */
    return cz__dm_collective_seconds(c, CZ_CAL_ALL_REDUCE, k, !intra, bytes, ring_ab, &x);
}

/* A hosted task: block `block` of d (-1: the whole matrix, every block) on one slot. */
double cz__cost_block(const cz_param_def *d, int block, const cz_settings *s, const cz_cluster *c,
                      cz_dtype dtype)
{
    if (block < 0)
        return cz__cost_param(d, s, c, dtype);
    if (cz_param_per_head(d, s->optimizer == CZ_OPTIM_MUON) && d->kind == CZ_KIND_MATRIX)
        return heads_cost(d, block, s->unit, s, c, dtype);
    int64_t r0, c0, rows, cols;
    cz_task_region(d, block, &r0, &c0, &rows, &cols);
    return matrix_cost(rows, cols, s->unit, s, c, cz__dtype_bytes(dtype), dtype,
                       d->nblocks > 0 ? 1.0 / d->nblocks : 1.0);
}
