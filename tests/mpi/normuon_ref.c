/* normuon_ref: an independent single-process NorMuon in double precision, written from Dion's
 * definition (microsoft/dion, dion/normuon.py: NorMuon and _normuon_normalization_core), used
 * to check what canzona-bench's distributed run wrote with --dump-dir. It regenerates
 * canzona-bench's deterministic initial parameters and gradients (the gradients averaged over
 * the DP replicas), runs every step on whole matrices and compares, for every matrix
 * parameter, the update the run made: max|dW_run - dW_ref| / max|dW_ref| <= tolerance,
 * dW = W_final - W_initial.
 *
 *   normuon_ref PLAN DUMP_DIR STEPS SEED TOLERANCE LR MOMENTUM WEIGHT_DECAY NS_EPS SCALE
 *               MODE BETA2 EPS
 *
 * Muon as muon_heads_ref.c states it (Nesterov momentum, 5 quintic Newton-Schulz steps with
 * Jordan's coefficients on the orientation with rows <= cols, decoupled weight decay), per
 * unit: the heads of a per-head matrix, else its declared blocks, else the whole matrix. Then,
 * per unit U (as stored, rows x cols), Dion's NorMuon before Muon's scale:
 *   s    = mean of U^2 over each row (MODE row: Dion's dim -1) or each column (col: dim -2)
 *   v    = v + (1 - BETA2) (s - v), v starting at 0 (torch.lerp(v, s, 1 - beta2))
 *   U'   = U / (sqrt(v) + EPS), per line
 *   U''  = U' ||U||_F / max(||U'||_F, 1e-8)
 * and the update is W <- W (1 - lr wd) - lr SCALE sqrt(max(rows, cols)) U''.
 *
 * It also computes plain Muon on every matrix and fails unless the run is far from it (more
 * than 100 x the tolerance): the check could not pass if the run skipped the normalization. */
#include "bench.h"
#include "npy.h"
#include "ref_optim.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static double LR, MU, WD, NS_EPS, SCALE, BETA2, EPS;
static int BY_COL; /* 0: one second moment per row of a unit (Dion's), 1: per column */

/* The units a step orthogonalizes: heads when the matrix has them, else the declared blocks,
 * else the whole matrix. Unit k spans [*lo, *lo + *len) along *dim. */
static int64_t units(const cz_plan_param *p, int64_t k, int *dim, int64_t *lo, int64_t *len)
{
    const cz_param_def *d = &p->def;
    if (d->head_size > 0) {
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

/* Dion's normalization of the r x c unit u (row length ld) in place, with its lines' second
 * moment v (r values by rows, c by columns). */
static void normalize(double *u, int64_t r, int64_t c, int64_t ld, double *v)
{
    int64_t n = BY_COL ? c : r, len = BY_COL ? r : c;
    double before = 0, after = 0;
    for (int64_t i = 0; i < n; i++) {
        double s = 0;
        for (int64_t j = 0; j < len; j++) {
            double x = BY_COL ? u[j * ld + i] : u[i * ld + j];
            s += x * x;
        }
        before += s;
        v[i] += (1 - BETA2) * (s / (double)len - v[i]);
        double d = 1 / (sqrt(v[i]) + EPS);
        for (int64_t j = 0; j < len; j++) {
            double *x = BY_COL ? &u[j * ld + i] : &u[i * ld + j];
            *x *= d;
            after += *x * *x;
        }
    }
    double f = sqrt(before) / fmax(sqrt(after), 1e-8);
    for (int64_t i = 0; i < r; i++)
        for (int64_t j = 0; j < c; j++)
            u[i * ld + j] *= f;
}

/* steps of Muon (normuon false) or NorMuon on p from w0; the final weights in w. */
static void run(const cz_plan *plan, const cz_plan_param *p, int steps, uint64_t seed, bool normuon,
                const double *w0, double *w, float *buf)
{
    int64_t m = p->def.shape[0], n = p->def.shape[1], mn = m * n, big = m > n ? m : n;
    int dim;
    int64_t lo, len, cnt = units(p, 0, &dim, &lo, &len);
    double *g = calloc((size_t)mn, sizeof *g), *mom = calloc((size_t)mn, sizeof *mom);
    double *u = calloc((size_t)mn, sizeof *u), *o = calloc((size_t)mn, sizeof *o);
    double *v = calloc((size_t)(cnt * big), sizeof *v); /* unit k's lines at v + k * big */
    memcpy(w, w0, (size_t)mn * sizeof *w);
    for (int s = 0; s < steps; s++) {
        cz_bench_mean_grad(p, seed, s, plan->dp, buf, g);
        for (int64_t k = 0; k < mn; k++) {
            mom[k] = MU * mom[k] + g[k];
            u[k] = g[k] + MU * mom[k];
        }
        for (int64_t k = 0; k < cnt; k++) {
            units(p, k, &dim, &lo, &len);
            int64_t off = dim == 0 ? lo * n : lo, r = dim == 0 ? len : m, c = dim == 0 ? n : len;
            double sc = SCALE * sqrt((double)(r > c ? r : c));
            /* The orthogonalized unit unscaled (a scale of 1 / sqrt(max(r, c)) undoes the rms
             * scaling of the shared reference), normalized, then scaled. */
            ref_hp h = {.abc = {{3.4445, -4.7750, 2.0315}},
                        .rows = 1,
                        .ns_steps = 5,
                        .ns_eps = NS_EPS,
                        .scale = 1 / sqrt((double)(r > c ? r : c))};
            ref_orthogonalize(&h, u + off, (int)r, (int)c, (int)n, o + off, (int)n);
            if (normuon)
                normalize(o + off, r, c, n, v + k * big);
            for (int64_t i = 0; i < r; i++)
                for (int64_t j = 0; j < c; j++)
                    o[off + i * n + j] *= sc;
        }
        for (int64_t k = 0; k < mn; k++)
            w[k] = w[k] * (1 - LR * WD) - LR * o[k];
    }
    free(g), free(mom), free(u), free(o), free(v);
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
    double *muon = malloc((size_t)mn * sizeof *muon), *got_d = malloc((size_t)mn * sizeof *got_d);
    int rc = 1;
    char *path = NULL;
    cz_error err;
    if (!buf || !w0 || !ref || !muon || !got_d)
        goto out;
    cz_bench_fill_shard(p, 1, 0, seed, 0, 0, 0, CZ_BENCH_PARAM_SCALE, buf);
    for (int64_t k = 0; k < mn; k++)
        w0[k] = buf[k];
    run(plan, p, steps, seed, true, w0, ref, buf);
    run(plan, p, steps, seed, false, w0, muon, buf);
    if (cz_npy_param_path(dir, p->def.name, &path, &err) ||
        cz_npy_read(path, 2, m, n, &got, &err)) {
        fprintf(stderr, "normuon_ref: %s\n", err.message);
        goto out;
    }
    for (int64_t k = 0; k < mn; k++)
        got_d[k] = got[k];
    double rel = rel_diff(got_d, ref, w0, mn), apart = rel_diff(got_d, muon, w0, mn);
    *worst = rel > *worst ? rel : *worst;
    bool ok = rel <= tol && apart > 100 * tol;
    printf("  %-44s %lld x %lld: rel.err %.3e (plain Muon is %.3e away)%s\n", p->def.name,
           (long long)m, (long long)n, rel, apart, ok ? "" : "  FAIL");
    rc = ok ? 0 : 2;
out:
    free(path), free(buf), free(got), free(w0), free(ref), free(muon), free(got_d);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc != 14 || (strcmp(argv[11], "row") && strcmp(argv[11], "col"))) {
        fprintf(stderr, "usage: normuon_ref PLAN DUMP_DIR STEPS SEED TOLERANCE LR MOMENTUM "
                        "WEIGHT_DECAY NS_EPS SCALE row|col BETA2 EPS\n");
        return 2;
    }
    LR = atof(argv[6]), MU = atof(argv[7]), WD = atof(argv[8]), NS_EPS = atof(argv[9]);
    SCALE = atof(argv[10]), BY_COL = !strcmp(argv[11], "col"), BETA2 = atof(argv[12]);
    EPS = atof(argv[13]);
    cz_plan *plan = NULL;
    cz_error err;
    if (cz_plan_read(&plan, argv[1], &err)) {
        fprintf(stderr, "normuon_ref: %s\n", err.message);
        return 2;
    }
    int steps = atoi(argv[3]), bad = 0, nmat = 0;
    uint64_t seed = strtoull(argv[4], NULL, 10);
    double tol = atof(argv[5]), worst = 0;
    printf("normuon_ref: %d steps on DP %d x TP %d, NorMuon by %s (beta2 %g, eps %g), lr %g, "
           "momentum %g (Nesterov), wd %g, tolerance %g\n",
           steps, plan->dp, plan->tp, argv[11], BETA2, EPS, LR, MU, WD, tol);
    for (size_t i = 0; i < plan->nparams; i++) {
        const cz_plan_param *p = &plan->params[i];
        if (p->def.kind != CZ_KIND_MATRIX)
            continue;
        nmat++;
        int rc = check_param(plan, p, argv[2], steps, seed, tol, &worst);
        if (rc == 1) {
            cz_plan_free(plan);
            return 2;
        }
        bad += rc != 0;
    }
    printf("normuon_ref: %d matrices, worst rel.err %.3e: %s\n", nmat, worst,
           bad || !nmat ? "FAIL" : "OK");
    cz_plan_free(plan);
    return bad || nmat == 0 ? 1 : 0;
}
