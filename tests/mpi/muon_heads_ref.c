/* muon_heads_ref: an independent single-process Muon in double precision with per-head
 * orthogonalization, written from the published definitions, used to check what
 * canzona-bench's distributed run wrote with --dump-dir. It regenerates canzona-bench's
 * deterministic initial parameters and gradients (the gradients averaged over the DP replicas),
 * runs every step on whole matrices and compares, for every matrix parameter, the update the
 * run made: max|dW_run - dW_ref| / max|dW_ref| <= tolerance, dW = W_final - W_initial.
 *
 *   muon_heads_ref PLAN DUMP_DIR STEPS SEED TOLERANCE LR MOMENTUM WEIGHT_DECAY EPS SCALE
 *
 * Muon (Jordan et al. 2024, "Muon: An optimizer for hidden layers"): M = mu M + G; with
 * Nesterov U = G + mu M; U is orthogonalized by 5 steps of the quintic Newton-Schulz iteration
 * X <- a X + (b A + c A^2) X, A = X X^T, (a, b, c) = (3.4445, -4.7750, 2.0315), from
 * X = U / (||U||_F + eps), on the orientation with rows <= cols; the update is scaled by
 * SCALE sqrt(max(rows, cols)) (Moonshot's "Muon is scalable for LLM training", 2025, which
 * matches AdamW's update RMS with SCALE = 0.2) and applied with decoupled weight decay:
 * W <- W (1 - lr wd) - lr scale O.
 * Per head (Kimi K2 / GLM-style, Dion's num_heads, Megatron-LM's batched 3-D Newton-Schulz
 * for QKV): a matrix that declares heads of size s along dim d is cut into shape[d] / s
 * slices of s rows (d = 0) or columns (d = 1), each orthogonalized and scaled as a matrix of
 * its own. A matrix without heads is orthogonalized per declared block (or whole).
 *
 * It also reports how far whole-block Muon is from the per-head result on every per-head
 * matrix, and fails unless that distance is far above the tolerance: the check could not
 * pass if the run orthogonalized whole blocks. */
#include "bench.h"
#include "npy.h"
#include "ref_optim.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const double NS_A = 3.4445, NS_B = -4.7750, NS_C = 2.0315;
static const int NS_STEPS = 5;
static double LR, MU, WD, EPS, SCALE;

/* out (r x c, row length ldo) = orthogonalized in (r x c, row length ld), scaled: the
 * independent reference's Newton-Schulz (tests/exec/ref_optim.h, written from the same
 * definitions) with the coefficients, steps, eps and scale above. */
static void orthogonalize(const double *in, int64_t r, int64_t c, int64_t ld, double *out,
                          int64_t ldo)
{
    ref_hp h = {.abc = {{NS_A, NS_B, NS_C}},
                .rows = 1,
                .ns_steps = NS_STEPS,
                .ns_eps = EPS,
                .scale = SCALE};
    ref_orthogonalize(&h, in, (int)r, (int)c, (int)ld, out, (int)ldo);
}

/* The slices a step orthogonalizes: heads when per_head and the matrix has them, else the
 * declared blocks, else the whole matrix. Slice k spans [*lo, *lo + *len) along *dim. */
static int64_t slices(const cz_plan_param *p, bool per_head, int64_t k, int *dim, int64_t *lo,
                      int64_t *len)
{
    const cz_param_def *d = &p->def;
    if (per_head && d->head_size > 0) {
        *dim = d->head_dim, *lo = k * d->head_size, *len = d->head_size;
        return d->shape[d->head_dim] / d->head_size;
    }
    if (d->nblocks > 0) {
        int64_t off = 0;
        for (int64_t b = 0; b < k && b < d->nblocks; b++)
            off += d->block_sizes[b];
        *dim = d->block_dim, *lo = off, *len = k < d->nblocks ? d->block_sizes[k] : 0;
        return d->nblocks;
    }
    *dim = 0, *lo = 0, *len = d->shape[0];
    return 1;
}

/* steps of Muon on p from w0; the final weights in w. */
static void run_muon(const cz_plan *plan, const cz_plan_param *p, int steps, uint64_t seed,
                     bool per_head, const double *w0, double *w, float *buf)
{
    int64_t m = p->def.shape[0], n = p->def.shape[1], mn = m * n;
    int dp = plan->dp;
    double *g = calloc((size_t)mn, sizeof *g), *mom = calloc((size_t)mn, sizeof *mom);
    double *u = calloc((size_t)mn, sizeof *u), *o = calloc((size_t)mn, sizeof *o);
    memcpy(w, w0, (size_t)mn * sizeof *w);
    for (int s = 0; s < steps; s++) {
        cz_bench_mean_grad(p, seed, s, dp, buf, g);
        for (int64_t k = 0; k < mn; k++) {
            mom[k] = MU * mom[k] + g[k];
            u[k] = g[k] + MU * mom[k];
        }
        int dim;
        int64_t lo, len, cnt = slices(p, per_head, 0, &dim, &lo, &len);
        for (int64_t k = 0; k < cnt; k++) {
            slices(p, per_head, k, &dim, &lo, &len);
            int64_t off = dim == 0 ? lo * n : lo;
            orthogonalize(u + off, dim == 0 ? len : m, dim == 0 ? n : len, n, o + off, n);
        }
        for (int64_t k = 0; k < mn; k++)
            w[k] = w[k] * (1 - LR * WD) - LR * o[k];
    }
    free(g), free(mom), free(u), free(o);
}

static double rel_diff(const double *a, const double *b, const double *base, int64_t n)
{
    double dmax = 0, bmax = 0;
    for (int64_t k = 0; k < n; k++) {
        double da = a[k] - base[k], db = b[k] - base[k];
        dmax = fabs(da - db) > dmax ? fabs(da - db) : dmax;
        bmax = fabs(db) > bmax ? fabs(db) : bmax;
    }
    return dmax / (bmax > 0 ? bmax : 1);
}

/* 0 pass, 2 fail, 1 could not run. */
static int check_param(const cz_plan *plan, const cz_plan_param *p, const char *dir, int steps,
                       uint64_t seed, double tol, double *worst)
{
    int64_t m = p->def.shape[0], n = p->def.shape[1], mn = m * n;
    float *buf = malloc((size_t)mn * sizeof *buf), *got = NULL;
    double *w0 = malloc((size_t)mn * sizeof *w0), *ref = malloc((size_t)mn * sizeof *ref);
    double *whole = malloc((size_t)mn * sizeof *whole), *run = malloc((size_t)mn * sizeof *run);
    int rc = 1;
    char *path = NULL;
    cz_error err;
    if (!buf || !w0 || !ref || !whole || !run)
        goto out;
    cz_bench_fill_shard(p, 1, 0, seed, 0, 0, 0, CZ_BENCH_PARAM_SCALE, buf);
    for (int64_t k = 0; k < mn; k++)
        w0[k] = buf[k];
    run_muon(plan, p, steps, seed, true, w0, ref, buf);
    if (cz_npy_param_path(dir, p->def.name, &path, &err) ||
        cz_npy_read(path, 2, m, n, &got, &err)) {
        fprintf(stderr, "muon_heads_ref: %s\n", err.message);
        goto out;
    }
    for (int64_t k = 0; k < mn; k++)
        run[k] = got[k];
    double rel = rel_diff(run, ref, w0, mn), apart = 0;
    bool heads = p->def.head_size > 0;
    if (heads) {
        run_muon(plan, p, steps, seed, false, w0, whole, buf);
        apart = rel_diff(whole, ref, w0, mn);
    }
    *worst = rel > *worst ? rel : *worst;
    bool ok = rel <= tol && (!heads || apart > 100 * tol);
    printf("  %-44s %lld x %lld, %s: rel.err %.3e", p->def.name, (long long)m, (long long)n,
           heads ? "per head" : "per block", rel);
    if (heads)
        printf(" (whole-block Muon is %.3e away)", apart);
    printf("%s\n", ok ? "" : "  FAIL");
    rc = ok ? 0 : 2;
out:
    free(path), free(buf), free(got), free(w0), free(ref), free(whole), free(run);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc != 11) {
        fprintf(stderr, "usage: muon_heads_ref PLAN DUMP_DIR STEPS SEED TOLERANCE LR MOMENTUM "
                        "WEIGHT_DECAY EPS SCALE\n");
        return 2;
    }
    LR = atof(argv[6]), MU = atof(argv[7]), WD = atof(argv[8]), EPS = atof(argv[9]);
    SCALE = atof(argv[10]);
    cz_plan *plan = NULL;
    cz_error err;
    if (cz_plan_read(&plan, argv[1], &err)) {
        fprintf(stderr, "muon_heads_ref: %s\n", err.message);
        return 2;
    }
    int steps = atoi(argv[3]), bad = 0, nmat = 0, nheads = 0;
    uint64_t seed = strtoull(argv[4], NULL, 10);
    double tol = atof(argv[5]), worst = 0;
    printf("muon_heads_ref: %d steps on DP %d x TP %d, lr %g, momentum %g (Nesterov), wd %g, "
           "tolerance %g\n",
           steps, plan->dp, plan->tp, LR, MU, WD, tol);
    for (size_t i = 0; i < plan->nparams; i++) {
        const cz_plan_param *p = &plan->params[i];
        if (p->def.kind != CZ_KIND_MATRIX)
            continue;
        nmat++;
        nheads += p->def.head_size > 0;
        int rc = check_param(plan, p, argv[2], steps, seed, tol, &worst);
        if (rc == 1) {
            cz_plan_free(plan);
            return 2;
        }
        bad += rc != 0;
    }
    printf("muon_heads_ref: %d matrices (%d per head), worst rel.err %.3e: %s\n", nmat, nheads,
           worst, bad || !nheads ? "FAIL" : "OK");
    cz_plan_free(plan);
    return bad || nheads == 0 ? 1 : 0;
}
