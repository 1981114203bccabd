/* soap_ref: an independent single-process SOAP in double precision, written from the
 * published algorithm (Vyas et al. 2024, the reference soap.py's step order and defaults),
 * used to check what canzona-bench's distributed run wrote with --dump-dir. It regenerates
 * canzona-bench's deterministic initial parameters and gradients (averaged over the DP
 * replicas), runs every call on whole plan blocks and compares every matrix parameter:
 * max|a-b| / max|b| <= tolerance.
 *
 *   soap_ref PLAN DUMP_DIR CALLS SEED TOLERANCE EPS [SHAMPOO_BETA]
 *
 * Defaults as the library's: lr 3e-3, betas (0.95, 0.95), shampoo_beta = beta2 (eps given;
 * shampoo_beta when given, the Gram factors' own EMA, canzona-bench's --soap-shampoo-beta),
 * weight decay 0.01 after the update, bias correction; precondition_frequency and
 * max_precond_dim from the plan. */
#include "bench.h"
#include "npy.h"

#include <cblas.h>
#include <lapacke.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const double LR = 3e-3, WD = 0.01, B1 = 0.95, B2 = 0.95;
static double EPS = 1e-8, SB = 0.95; /* argv */

typedef struct blk {
    int64_t r0, c0, r, c;
    double *gl, *ql, *gr, *qr, *m, *v; /* gl/ql NULL when the side is not rotated */
} blk;

static void mm(int ta, int tb, int64_t m, int64_t n, int64_t k, double alpha, const double *a,
               const double *b, double beta, double *c)
{
    cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                (int)m, (int)n, (int)k, alpha, a, ta ? (int)m : (int)k, b, tb ? (int)k : (int)n,
                beta, c, (int)n);
}

/* x in the basis (back = 0: QL^T x QR) or out of it (back = 1: QL x QR^T). */
static void rotate(const blk *b, const double *x, double *out, int back)
{
    int64_t n = b->r * b->c;
    double *t = malloc((size_t)n * sizeof *t);
    memcpy(t, x, (size_t)n * sizeof *t);
    if (b->ql)
        mm(!back, 0, b->r, b->c, b->r, 1.0, b->ql, t, 0.0, out);
    else
        memcpy(out, t, (size_t)n * sizeof *t);
    if (b->qr) {
        memcpy(t, out, (size_t)n * sizeof *t);
        mm(0, back, b->r, b->c, b->c, 1.0, t, b->qr, 0.0, out);
    }
    free(t);
}

/* Eigenvectors of gg (n x n) into q, columns by descending eigenvalue. */
static int eig_desc(const double *gg, double *q, int64_t n)
{
    double *a = malloc((size_t)(n * n) * sizeof *a), *w = malloc((size_t)n * sizeof *w);
    memcpy(a, gg, (size_t)(n * n) * sizeof *a);
    int rc = LAPACKE_dsyevd(LAPACK_ROW_MAJOR, 'V', 'U', (lapack_int)n, a, (lapack_int)n, w) != 0;
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < n; j++)
            q[i * n + j] = a[i * n + (n - 1 - j)];
    free(a), free(w);
    return rc;
}

/* One power iteration and QR of the re-sorted basis; v permuted along `side`. */
static int refresh(const double *gg, double *q, int64_t n, double *v, int64_t r, int64_t c,
                   int side)
{
    double *mq = malloc((size_t)(n * n) * sizeof *mq), *est = malloc((size_t)n * sizeof *est);
    double *tmp = malloc((size_t)((n * n > r * c ? n * n : r * c)) * sizeof *tmp);
    double *tau = malloc((size_t)n * sizeof *tau);
    int64_t *idx = malloc((size_t)n * sizeof *idx);
    mm(0, 0, n, n, n, 1.0, gg, q, 0.0, mq);
    for (int64_t j = 0; j < n; j++) {
        est[j] = 0;
        for (int64_t i = 0; i < n; i++)
            est[j] += q[i * n + j] * mq[i * n + j];
        idx[j] = j;
    }
    for (int64_t j = 1; j < n; j++) /* argsort, descending */
        for (int64_t i = j; i > 0 && est[idx[i - 1]] < est[idx[i]]; i--) {
            int64_t t = idx[i];
            idx[i] = idx[i - 1];
            idx[i - 1] = t;
        }
    memcpy(tmp, mq, (size_t)(n * n) * sizeof *tmp);
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < n; j++)
            mq[i * n + j] = tmp[i * n + idx[j]];
    memcpy(tmp, v, (size_t)(r * c) * sizeof *tmp);
    for (int64_t i = 0; i < r; i++)
        for (int64_t j = 0; j < c; j++)
            v[i * c + j] = side == 0 ? tmp[idx[i] * c + j] : tmp[i * c + idx[j]];
    int rc = LAPACKE_dgeqrf(LAPACK_ROW_MAJOR, (lapack_int)n, (lapack_int)n, mq, (lapack_int)n,
                            tau) != 0 ||
             LAPACKE_dorgqr(LAPACK_ROW_MAJOR, (lapack_int)n, (lapack_int)n, (lapack_int)n, mq,
                            (lapack_int)n, tau) != 0;
    memcpy(q, mq, (size_t)(n * n) * sizeof *q);
    free(mq), free(est), free(tmp), free(tau), free(idx);
    return rc;
}

static int run_param(const cz_plan *plan, const cz_plan_param *p, const char *dir, int calls,
                     uint64_t seed, double tol, double *worst, int *nrot)
{
    int64_t M = p->def.shape[0], N = p->def.shape[1], mn = M * N,
            D = plan->settings.max_precond_dim;
    int freq = plan->settings.precondition_frequency, dp = plan->dp, rc = 1;
    float *buf = malloc((size_t)mn * sizeof *buf), *got = NULL;
    double *w = malloc((size_t)mn * sizeof *w), *g = malloc((size_t)mn * sizeof *g);
    cz_block blocks[CZ_MAX_BLOCKS];
    blk bl[CZ_MAX_BLOCKS];
    int nb = cz__param_blocks(p, blocks, CZ_MAX_BLOCKS);
    for (int b = 0; b < nb; b++) {
        blk *k = &bl[b];
        int64_t r = blocks[b].rows, c = blocks[b].cols;
        *k = (blk){blocks[b].r0, blocks[b].c0, r, c, NULL, NULL, NULL, NULL, NULL, NULL};
        k->m = calloc((size_t)(r * c), sizeof(double));
        k->v = calloc((size_t)(r * c), sizeof(double));
        if (r <= D)
            k->gl = calloc((size_t)(r * r), 8), k->ql = calloc((size_t)(r * r), 8), (*nrot)++;
        if (c <= D)
            k->gr = calloc((size_t)(c * c), 8), k->qr = calloc((size_t)(c * c), 8), (*nrot)++;
    }
    cz_bench_fill_shard(p, 1, 0, seed, 0, 0, 0, CZ_BENCH_PARAM_SCALE, buf);
    for (int64_t e = 0; e < mn; e++)
        w[e] = buf[e];
    int64_t t = 0; /* the update counter: calls after the first */
    for (int s = 0; s < calls; s++) {
        cz_bench_mean_grad(p, seed, s, dp, buf, g);
        if (s > 0)
            t++;
        for (int b = 0; b < nb; b++) {
            blk *k = &bl[b];
            int64_t r = k->r, c = k->c, n = r * c;
            double *G = malloc((size_t)n * 8), *P = malloc((size_t)n * 8),
                   *U = malloc((size_t)n * 8);
            for (int64_t i = 0; i < r; i++)
                for (int64_t j = 0; j < c; j++)
                    G[i * c + j] = g[(k->r0 + i) * N + k->c0 + j];
            if (s == 0) { /* initialisation only */
                rc = 0;
                if (k->gl) {
                    mm(0, 1, r, r, c, 1.0 - SB, G, G, 0.0, k->gl);
                    rc = eig_desc(k->gl, k->ql, r);
                }
                if (k->gr) {
                    mm(1, 0, c, c, r, 1.0 - SB, G, G, 0.0, k->gr);
                    rc |= eig_desc(k->gr, k->qr, c);
                }
                free(G), free(P), free(U);
                if (rc)
                    goto out;
                continue;
            }
            rotate(k, G, P, 0);
            for (int64_t e = 0; e < n; e++) {
                k->m[e] = B1 * k->m[e] + (1 - B1) * P[e];
                k->v[e] = B2 * k->v[e] + (1 - B2) * P[e] * P[e];
                P[e] = k->m[e] / (sqrt(k->v[e]) + EPS);
            }
            rotate(k, P, U, 1);
            double step = LR * sqrt(1 - pow(B2, (double)t)) / (1 - pow(B1, (double)t));
            for (int64_t i = 0; i < r; i++)
                for (int64_t j = 0; j < c; j++) {
                    double *pw = &w[(k->r0 + i) * N + k->c0 + j];
                    *pw -= step * U[i * c + j];
                    *pw -= LR * WD * *pw;
                }
            rotate(k, k->m, P, 1);
            if (k->gl)
                mm(0, 1, r, r, c, 1.0 - SB, G, G, SB, k->gl);
            if (k->gr)
                mm(1, 0, c, c, r, 1.0 - SB, G, G, SB, k->gr);
            rc = 0;
            if (t % freq == 0) {
                if (k->gl)
                    rc = refresh(k->gl, k->ql, r, k->v, r, c, 0);
                if (k->gr)
                    rc |= refresh(k->gr, k->qr, c, k->v, r, c, 1);
            }
            rotate(k, P, k->m, 0);
            free(G), free(P), free(U);
            if (rc) {
                rc = 1;
                goto out;
            }
        }
    }
    char *path = NULL;
    cz_error err;
    if (cz_npy_param_path(dir, p->def.name, &path, &err) ||
        cz_npy_read(path, 2, M, N, &got, &err)) {
        fprintf(stderr, "soap_ref: %s\n", err.message);
        free(path);
        rc = 1;
        goto out;
    }
    free(path);
    double dmax = 0, bmax = 0;
    for (int64_t e = 0; e < mn; e++) {
        double d = fabs((double)got[e] - w[e]);
        dmax = d > dmax ? d : dmax;
        bmax = fabs(w[e]) > bmax ? fabs(w[e]) : bmax;
    }
    double rel = dmax / (bmax > 0 ? bmax : 1);
    *worst = rel > *worst ? rel : *worst;
    /* Which sides of the (first) block are rotated, for the test to check its cases. */
    const char *sides = bl[0].gl && bl[0].gr ? "rows+cols"
                        : bl[0].gl           ? "rows"
                        : bl[0].gr           ? "cols"
                                             : "none";
    printf("  %-48s %lld x %lld (rotated: %s): rel.err %.3e%s\n", p->def.name, (long long)M,
           (long long)N, sides, rel, rel <= tol ? "" : "  FAIL");
    rc = rel <= tol ? 0 : 2;
out:
    for (int b = 0; b < nb; b++)
        free(bl[b].gl), free(bl[b].ql), free(bl[b].gr), free(bl[b].qr), free(bl[b].m),
            free(bl[b].v);
    free(buf), free(got), free(w), free(g);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc != 7 && argc != 8) {
        fprintf(stderr, "usage: soap_ref PLAN DUMP_DIR CALLS SEED TOLERANCE EPS [SHAMPOO_BETA]\n");
        return 2;
    }
    cz_plan *plan = NULL;
    cz_error err;
    if (cz_plan_read(&plan, argv[1], &err)) {
        fprintf(stderr, "soap_ref: %s\n", err.message);
        return 2;
    }
    int calls = atoi(argv[3]), bad = 0, nmat = 0, nrot = 0;
    uint64_t seed = strtoull(argv[4], NULL, 10);
    double tol = atof(argv[5]), worst = 0;
    EPS = atof(argv[6]);
    if (argc == 8)
        SB = atof(argv[7]);
    printf("soap_ref: %d calls, refresh every %d updates, sides <= %d rotated, tolerance %g\n",
           calls, plan->settings.precondition_frequency, plan->settings.max_precond_dim, tol);
    for (size_t i = 0; i < plan->nparams; i++) {
        const cz_plan_param *p = &plan->params[i];
        if (p->def.kind != CZ_KIND_MATRIX)
            continue;
        nmat++;
        int rc = run_param(plan, p, argv[2], calls, seed, tol, &worst, &nrot);
        if (rc == 1) {
            fprintf(stderr, "soap_ref: a LAPACK call failed on '%s'\n", p->def.name);
            cz_plan_free(plan);
            return 2;
        }
        bad += rc != 0;
    }
    printf("soap_ref: %d matrices, %d rotated sides, worst rel.err %.3e: %s\n", nmat, nrot, worst,
           bad ? "FAIL" : "OK");
    cz_plan_free(plan);
    return bad || nmat == 0 || nrot == 0 ? 1 : 0;
}
