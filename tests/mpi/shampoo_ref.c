/* shampoo_ref: an independent single-process Shampoo in double precision, written from the
 * published algorithm (Gupta et al. 2018; Meta's Distributed Shampoo for the defaults, the
 * eigenvalue shift, grafting and blocking), used to check what canzona-bench's distributed
 * run wrote with --dump-dir. It regenerates canzona-bench's deterministic initial parameters
 * and gradients (the gradients averaged over the DP replicas), runs every step on whole
 * matrices and compares every matrix parameter: max|a-b| / max|b| <= tolerance.
 *
 *   shampoo_ref PLAN DUMP_DIR STEPS SEED TOLERANCE MAX_DIM [START MOMENTUM NESTEROV]
 *
 * Defaults as the library's: lr 0.01, decoupled weight decay 0.01, beta1 0.9, beta2 1,
 * eps 1e-12, AdaGrad grafting (eps 1e-10), no momentum, start = precondition_frequency.
 * As Distributed Shampoo (facebookresearch/optimizers, DistributedShampoo.step): the inverse
 * roots are computed at the start step and then at every multiple of the frequency after it;
 * the grafted direction is used alone before the start step; the decoupled weight decay
 * wd*W is added to the direction, and then momentum M = mu*M + P and P = M (or P + mu*M with
 * Nesterov); W -= lr*P. */
#include "bench.h"
#include "npy.h"

#include <cblas.h>
#include <lapacke.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct tile {
    int64_t r0, c0, rows, cols;
    double *L, *R, *XL, *XR, *acc, *filt, *mom;
} tile;

static const double LR = 0.01, WD = 0.01, B1 = 0.9, EPS = 1e-12, GEPS = 1e-10;
static int START = -1, NESTEROV = 0; /* argv; START -1 = the frequency */
static double MU = 0.0;

/* A^(-1/4) of a symmetric n x n matrix: eigenvalues shifted to be >= 0, eps added. */
static int inv_root4(const double *a, double *x, int64_t n)
{
    double *q = malloc((size_t)(n * n) * sizeof *q), *w = malloc((size_t)n * sizeof *w);
    double *s = malloc((size_t)(n * n) * sizeof *s);
    int rc = 1;
    if (!q || !w || !s)
        goto out;
    memcpy(q, a, (size_t)(n * n) * sizeof *q);
    if (LAPACKE_dsyevd(LAPACK_ROW_MAJOR, 'V', 'U', (lapack_int)n, q, (lapack_int)n, w) != 0)
        goto out;
    double lo = w[0] < 0 ? w[0] : 0;
    for (int64_t j = 0; j < n; j++) {
        double f = pow(w[j] - lo + EPS, -0.25);
        for (int64_t i = 0; i < n; i++)
            s[i * n + j] = q[i * n + j] * f;
    }
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)n, (int)n, (int)n, 1.0, s, (int)n, q,
                (int)n, 0.0, x, (int)n);
    rc = 0;
out:
    free(q), free(w), free(s);
    return rc;
}

static int run_param(const cz_plan *plan, const cz_plan_param *p, const char *dir, int steps,
                     uint64_t seed, double tol, int64_t max_dim, double *worst)
{
    int64_t m = p->def.shape[0], n = p->def.shape[1], mn = m * n;
    int freq = plan->settings.precondition_frequency, dp = plan->dp;
    float *buf = malloc((size_t)mn * sizeof *buf), *got = NULL;
    double *w = malloc((size_t)mn * sizeof *w), *g = malloc((size_t)mn * sizeof *g);
    tile tiles[256];
    int nt = 0, rc = 1;
    cz_block blocks[CZ_MAX_BLOCKS];
    int nb = cz__param_blocks(p, blocks, CZ_MAX_BLOCKS);
    for (int b = 0; b < nb; b++)
        for (int64_t i = 0; i < blocks[b].rows; i += max_dim)
            for (int64_t j = 0; j < blocks[b].cols; j += max_dim) {
                tile *t = &tiles[nt++];
                t->r0 = blocks[b].r0 + i, t->c0 = blocks[b].c0 + j;
                t->rows = blocks[b].rows - i < max_dim ? blocks[b].rows - i : max_dim;
                t->cols = blocks[b].cols - j < max_dim ? blocks[b].cols - j : max_dim;
                t->L = calloc((size_t)(t->rows * t->rows), sizeof(double));
                t->XL = calloc((size_t)(t->rows * t->rows), sizeof(double));
                t->R = calloc((size_t)(t->cols * t->cols), sizeof(double));
                t->XR = calloc((size_t)(t->cols * t->cols), sizeof(double));
                t->acc = calloc((size_t)(t->rows * t->cols), sizeof(double));
                t->filt = calloc((size_t)(t->rows * t->cols), sizeof(double));
                t->mom = calloc((size_t)(t->rows * t->cols), sizeof(double));
            }
    int start = START < 0 ? freq : START;
    cz_bench_fill_shard(p, 1, 0, seed, 0, 0, 0, CZ_BENCH_PARAM_SCALE, buf);
    for (int64_t k = 0; k < mn; k++)
        w[k] = buf[k];
    for (int s = 0; s < steps; s++) {
        int64_t t = s + 1;
        cz_bench_mean_grad(p, seed, s, dp, buf, g);
        for (int k = 0; k < nt; k++) {
            tile *tl = &tiles[k];
            int64_t r = tl->rows, c = tl->cols;
            double *G = malloc((size_t)(r * c) * sizeof *G), *H = malloc((size_t)(r * c) * 8);
            double *T = malloc((size_t)(r * c) * 8), *S = malloc((size_t)(r * c) * 8);
            for (int64_t i = 0; i < r; i++)
                for (int64_t j = 0; j < c; j++)
                    G[i * c + j] = g[(tl->r0 + i) * n + tl->c0 + j];
            /* beta2 = 1: the factors are running sums of G G^T and G^T G. */
            cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)r, (int)r, (int)c, 1.0, G,
                        (int)c, G, (int)c, 1.0, tl->L, (int)r);
            cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)c, (int)c, (int)r, 1.0, G,
                        (int)c, G, (int)c, 1.0, tl->R, (int)c);
            for (int64_t e = 0; e < r * c; e++)
                tl->acc[e] += G[e] * G[e];
            bool refresh = t == start || (t > start && t % freq == 0);
            if (refresh && (inv_root4(tl->L, tl->XL, r) || inv_root4(tl->R, tl->XR, c))) {
                fprintf(stderr, "shampoo_ref: dsyevd failed on '%s'\n", p->def.name);
                goto out;
            }
            double bc1 = 1.0 - pow(B1, (double)t), gn = 0, sn = 0;
            for (int64_t e = 0; e < r * c; e++) {
                tl->filt[e] = B1 * tl->filt[e] + (1.0 - B1) * G[e];
                H[e] = tl->filt[e] / bc1;
            }
            double *dir = S;
            for (int64_t e = 0; e < r * c; e++) { /* AdaGrad grafting direction */
                S[e] = H[e] / (sqrt(tl->acc[e]) + GEPS);
                gn += S[e] * S[e];
            }
            if (t >= start) {
                cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)r, (int)c, (int)r, 1.0,
                            tl->XL, (int)r, H, (int)c, 0.0, T, (int)c);
                cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)r, (int)c, (int)c, 1.0,
                            T, (int)c, tl->XR, (int)c, 0.0, G, (int)c);
                for (int64_t e = 0; e < r * c; e++)
                    sn += G[e] * G[e];
                for (int64_t e = 0; e < r * c; e++)
                    G[e] *= sqrt(gn / sn);
                dir = G;
            }
            for (int64_t i = 0; i < r; i++)
                for (int64_t j = 0; j < c; j++) {
                    double *pw = &w[(tl->r0 + i) * n + tl->c0 + j];
                    double pd = dir[i * c + j] + WD * *pw, *m = &tl->mom[i * c + j];
                    if (MU > 0) {
                        *m = MU * *m + pd;
                        pd = NESTEROV ? pd + MU * *m : *m;
                    }
                    *pw -= LR * pd;
                }
            free(G), free(H), free(T), free(S);
        }
    }
    char *path = NULL;
    cz_error err;
    if (cz_npy_param_path(dir, p->def.name, &path, &err) ||
        cz_npy_read(path, 2, m, n, &got, &err)) {
        fprintf(stderr, "shampoo_ref: %s\n", err.message);
        free(path);
        goto out;
    }
    free(path);
    double dmax = 0, bmax = 0;
    for (int64_t k = 0; k < mn; k++) {
        double d = fabs((double)got[k] - w[k]);
        dmax = d > dmax ? d : dmax;
        bmax = fabs(w[k]) > bmax ? fabs(w[k]) : bmax;
    }
    double rel = dmax / (bmax > 0 ? bmax : 1);
    *worst = rel > *worst ? rel : *worst;
    printf("  %-48s %lld x %lld, %d tile(s): rel.err %.3e%s\n", p->def.name, (long long)m,
           (long long)n, nt, rel, rel <= tol ? "" : "  FAIL");
    rc = rel <= tol ? 0 : 2;
out:
    for (int k = 0; k < nt; k++)
        free(tiles[k].L), free(tiles[k].R), free(tiles[k].XL), free(tiles[k].XR),
            free(tiles[k].acc), free(tiles[k].filt), free(tiles[k].mom);
    free(buf), free(got), free(w), free(g);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc != 7 && argc != 10) {
        fprintf(stderr, "usage: shampoo_ref PLAN DUMP_DIR STEPS SEED TOLERANCE MAX_DIM "
                        "[START MOMENTUM NESTEROV]\n");
        return 2;
    }
    if (argc == 10) {
        START = atoi(argv[7]);
        MU = atof(argv[8]);
        NESTEROV = atoi(argv[9]);
    }
    cz_plan *plan = NULL;
    cz_error err;
    if (cz_plan_read(&plan, argv[1], &err)) {
        fprintf(stderr, "shampoo_ref: %s\n", err.message);
        return 2;
    }
    int steps = atoi(argv[3]), bad = 0, nmat = 0;
    uint64_t seed = strtoull(argv[4], NULL, 10);
    double tol = atof(argv[5]), worst = 0;
    int64_t max_dim = atoll(argv[6]);
    printf("shampoo_ref: %d steps, refresh every %d from step %d, tiles <= %lld, momentum %g%s, "
           "tolerance %g\n",
           steps, plan->settings.precondition_frequency,
           START < 0 ? plan->settings.precondition_frequency : START, (long long)max_dim, MU,
           NESTEROV ? " (Nesterov)" : "", tol);
    for (size_t i = 0; i < plan->nparams; i++) {
        const cz_plan_param *p = &plan->params[i];
        if (p->def.kind != CZ_KIND_MATRIX)
            continue;
        nmat++;
        int rc = run_param(plan, p, argv[2], steps, seed, tol, max_dim, &worst);
        if (rc == 1) {
            cz_plan_free(plan);
            return 2;
        }
        bad += rc != 0;
    }
    printf("shampoo_ref: %d matrices, worst rel.err %.3e: %s\n", nmat, worst, bad ? "FAIL" : "OK");
    cz_plan_free(plan);
    return bad || nmat == 0 ? 1 : 0;
}
