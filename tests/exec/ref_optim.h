/* An independent single-process reference of the executor's optimizers, written from the
 * formulas of docs/EXECUTOR.md ("Optimizers") in double precision, sharing no code with the
 * executor: the tests that use it see an error inside the executor's own Muon and AdamW, which
 * canzona-bench --verify (recomputing with those same functions) cannot. It also builds the
 * small model and cluster the tests plan for, through the public planner API only. */
#ifndef CZ_REF_OPTIM_H
#define CZ_REF_OPTIM_H

#include "canzona.h" /* cz_plan_build: the test plans in-process */
#include "canzona_exec.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The test model: a matrix with three row blocks (QKV-like), a wide and a tall matrix (the tall
 * one is transposed for Newton-Schulz), a 1-D and a 2-D elementwise parameter. TP 1, so local
 * shapes are the full shapes. */
typedef struct ref_param {
    const char *name;
    int rows, cols; /* cols = 1 for a 1-D parameter */
    int matrix;
    int nblocks; /* row blocks (dim 0); 0 = the whole matrix */
    int blocks[3];
} ref_param;

static const ref_param REF_PARAMS[] = {
    {"qkv.weight", 48, 32, 1, 3, {16, 16, 16}}, {"wide.weight", 24, 40, 1, 0, {0}},
    {"tall.weight", 40, 24, 1, 0, {0}},         {"norm.weight", 32, 1, 0, 0, {0}},
    {"embed.weight", 16, 8, 0, 0, {0}},
};
#define REF_NPARAMS ((int)(sizeof REF_PARAMS / sizeof REF_PARAMS[0]))

/* Writes dir/cluster.json: dp x tp CPU "GPUs" on one node, with modest rates (they only
 * steer the planner's balance). */
static inline int ref_write_cluster(const char *dir, int dp, int tp)
{
    char path[512];
    snprintf(path, sizeof path, "%s/cluster.json", dir);
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    fprintf(f,
            "{\"schema\": \"canzona.cluster/1\", \"name\": \"ref-dp%d-tp%d\", \"gpus\": %d, "
            "\"dp\": %d, \"tp\": %d, \"pp\": 1, \"gpus_per_node\": %d, \"device\": {\"name\": "
            "\"cpu\", \"matmul_tflops\": 0.5, \"mem_gbps\": 40.0, \"memory_gib\": 16.0}, "
            "\"links\": {\"intra_node_gbps\": 10.0, \"inter_node_gbps\": 10.0, \"latency_us\": "
            "2.0}}\n",
            dp, tp, dp * tp, dp, tp, dp * tp);
    return fclose(f) ? -1 : 0;
}

/* Writes the model and a cluster of dp x 1 GPUs into dir (model.json, cluster.json). */
static inline int ref_write_inputs(const char *dir, int dp)
{
    char path[512];
    snprintf(path, sizeof path, "%s/model.json", dir);
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    fprintf(f, "{\"schema\": \"canzona.model/1\", \"name\": \"ref\", \"dtype\": \"fp32\", "
               "\"params\": [\n");
    for (int i = 0; i < REF_NPARAMS; i++) {
        const ref_param *p = &REF_PARAMS[i];
        if (p->cols == 1)
            fprintf(f, "{\"name\": \"%s\", \"shape\": [%d], \"tp_dim\": null, ", p->name, p->rows);
        else
            fprintf(f, "{\"name\": \"%s\", \"shape\": [%d, %d], \"tp_dim\": null, ", p->name,
                    p->rows, p->cols);
        fprintf(f, "\"optimizer\": \"%s\"", p->matrix ? "matrix" : "elementwise");
        if (p->nblocks)
            fprintf(f, ", \"blocks\": {\"dim\": 0, \"sizes\": [%d, %d, %d]}", p->blocks[0],
                    p->blocks[1], p->blocks[2]);
        fprintf(f, "}%s\n", i + 1 < REF_NPARAMS ? "," : "");
    }
    fprintf(f, "]}\n");
    if (fclose(f))
        return -1;
    return ref_write_cluster(dir, dp, 1);
}

/* Plans the test model on dp x 1 GPUs (default settings: Muon, alpha, rollback). */
static inline int ref_plan(const char *dir, int dp, cz_plan **out, cz_error *err)
{
    cz_model *m = NULL;
    cz_cluster *c = NULL;
    char mp[512], cp[512];
    int rc = ref_write_inputs(dir, dp);
    if (rc)
        return rc;
    snprintf(mp, sizeof mp, "%s/model.json", dir);
    snprintf(cp, sizeof cp, "%s/cluster.json", dir);
    cz_settings s;
    cz_settings_init(&s);
    if (!(rc = cz_model_load(&m, mp, err)) && !(rc = cz_cluster_load(&c, cp, err)))
        rc = cz_plan_build(out, m, c, &s, err);
    cz_model_free(m);
    cz_cluster_free(c);
    return rc;
}

/* A deterministic value in [-1, 1) from a counter (splitmix64). */
static inline double ref_val(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    x ^= x >> 31;
    return (double)(x >> 11) / (double)(1ULL << 52) - 1.0;
}

/* Hyperparameters, read from the executor's configuration so both sides use the same. */
typedef struct ref_hp {
    double lr, mu, wd, ns_eps, scale;
    double abc[5][3]; /* (a, b, c) of iteration s: abc[s < rows ? s : rows - 1] */
    int rows;
    int nesterov, ns_steps, shape_scaling;
    double alr, b1, b2, aeps, awd;
} ref_hp;

/* Optimizer state of one parameter. */
typedef struct ref_state {
    double *buf;   /* Muon momentum (rows x cols) */
    double *m, *v; /* AdamW moments */
    int t;         /* AdamW step count, from 1 */
} ref_state;

/* X <- orthogonalized X for an r x c block (row-major, leading dimension ld): normalize by the
 * Frobenius norm + eps, transpose so that rows <= cols, ns_steps of X = aX + (bA + cA^2)X with
 * A = X X^T, transpose back, scale by scale * sqrt(max(r, c)) (rms) or sqrt(max(1, r / c))
 * (shape). */
static inline void ref_orthogonalize(const ref_hp *h, const double *in, int r, int c, int ld,
                                     double *out, int ldo)
{
    int tr = r > c, R = tr ? c : r, C = tr ? r : c;
    double *X = calloc((size_t)R * C, sizeof *X), *A = calloc((size_t)R * R, sizeof *A);
    double *B = calloc((size_t)R * R, sizeof *B), *Y = calloc((size_t)R * C, sizeof *Y);
    double nrm = 0;
    for (int i = 0; i < r; i++)
        for (int j = 0; j < c; j++)
            nrm += in[i * ld + j] * in[i * ld + j];
    nrm = sqrt(nrm) + h->ns_eps;
    for (int i = 0; i < r; i++)
        for (int j = 0; j < c; j++)
            X[tr ? j * C + i : i * C + j] = in[i * ld + j] / nrm;
    for (int s = 0; s < h->ns_steps; s++) {
        const double *k = h->abc[s < h->rows ? s : h->rows - 1];
        for (int i = 0; i < R; i++)
            for (int j = 0; j < R; j++) {
                double acc = 0;
                for (int q = 0; q < C; q++)
                    acc += X[i * C + q] * X[j * C + q];
                A[i * R + j] = acc;
            }
        for (int i = 0; i < R; i++)
            for (int j = 0; j < R; j++) {
                double acc = 0;
                for (int k = 0; k < R; k++)
                    acc += A[i * R + k] * A[k * R + j];
                B[i * R + j] = k[1] * A[i * R + j] + k[2] * acc;
            }
        for (int i = 0; i < R; i++)
            for (int j = 0; j < C; j++) {
                double acc = 0;
                for (int k = 0; k < R; k++)
                    acc += B[i * R + k] * X[k * C + j];
                Y[i * C + j] = k[0] * X[i * C + j] + acc;
            }
        memcpy(X, Y, (size_t)R * C * sizeof *X);
    }
    double sc = h->shape_scaling ? sqrt(fmax(1.0, (double)r / c))
                                 : h->scale * sqrt((double)(r > c ? r : c));
    for (int i = 0; i < r; i++)
        for (int j = 0; j < c; j++)
            out[i * ldo + j] = sc * X[tr ? j * C + i : i * C + j];
    free(X);
    free(A);
    free(B);
    free(Y);
}

/* One reference step of parameter p (values P, gradient G, both rows x cols, double). */
static inline void ref_step(const ref_hp *h, const ref_param *p, ref_state *st, double *P,
                            const double *G)
{
    int n = p->rows * p->cols;
    if (p->matrix) {
        double *in = malloc((size_t)n * sizeof *in), *u = malloc((size_t)n * sizeof *u);
        for (int k = 0; k < n; k++) {
            st->buf[k] = h->mu * st->buf[k] + G[k];
            in[k] = h->nesterov ? G[k] + h->mu * st->buf[k] : st->buf[k];
        }
        int nb = p->nblocks ? p->nblocks : 1, row = 0;
        for (int b = 0; b < nb; b++) {
            int br = p->nblocks ? p->blocks[b] : p->rows;
            ref_orthogonalize(h, in + (size_t)row * p->cols, br, p->cols, p->cols,
                              u + (size_t)row * p->cols, p->cols);
            row += br;
        }
        for (int k = 0; k < n; k++)
            P[k] = P[k] * (1 - h->lr * h->wd) - h->lr * u[k];
        free(in);
        free(u);
    } else {
        st->t++;
        for (int k = 0; k < n; k++) {
            st->m[k] = h->b1 * st->m[k] + (1 - h->b1) * G[k];
            st->v[k] = h->b2 * st->v[k] + (1 - h->b2) * G[k] * G[k];
            double mh = st->m[k] / (1 - pow(h->b1, st->t));
            double vh = st->v[k] / (1 - pow(h->b2, st->t));
            P[k] = P[k] * (1 - h->alr * h->awd) - h->alr * mh / (sqrt(vh) + h->aeps);
        }
    }
}

/* Reference hyperparameters from the executor's configuration; the Newton-Schulz coefficient
 * sets are the three docs/EXECUTOR.md names (Polar Express written out from its paper). */
static inline void ref_hp_from(const cz_exec_config *cfg, ref_hp *h)
{
    memset(h, 0, sizeof *h);
    h->shape_scaling = cfg->muon.scaling == CZ_MUON_SCALE_SHAPE;
    /* lr 0 is the documented default of the scaling (canzona_exec.h). */
    h->lr = cfg->lr > 0 ? cfg->lr : h->shape_scaling ? 0.02 : 1e-3;
    h->mu = cfg->muon.momentum;
    h->wd = cfg->weight_decay;
    h->ns_eps = cfg->muon.ns_eps;
    h->scale = cfg->muon.scale_coeff;
    h->nesterov = cfg->muon.nesterov;
    h->ns_steps = cfg->muon.ns_steps;
    /* Polar Express as arXiv 2505.16932's Algorithm 1 prints its first 5 rows, each divided by
     * the safety factor (x / 1.01 in the polynomial), the first once more for Algorithm 1's
     * normalization by 1.01 ||X||_F, which the reference (like the executor) does not do. */
    static const double pe[5][3] = {{8.28721201814563, -23.595886519098837, 17.300387312530933},
                                    {4.107059111542203, -2.9478499167379106, 0.5448431082926601},
                                    {3.9486908534822946, -2.908902115962949, 0.5518191394370137},
                                    {3.3184196573706015, -2.488488024314874, 0.51004894012372},
                                    {2.300652019954817, -1.6689039845747493, 0.4188073119525673}};
    const char *name = cfg->muon.ns_coeffs ? cfg->muon.ns_coeffs : "jordan";
    if (!strcmp(name, "polar_express")) {
        h->rows = 5;
        for (int s = 0; s < 5; s++)
            for (int p = 0; p < 3; p++) {
                double f = pow(1.01, 2 * p + 1) * (s == 0 ? pow(1.01, 2 * p + 1) : 1.0);
                h->abc[s][p] = pe[s][p] / f;
            }
    } else if (!strcmp(name, "cubic") || !strcmp(name, "jordan")) {
        static const double cubic[3] = {1.5, -0.5, 0.0}, jordan[3] = {3.4445, -4.7750, 2.0315};
        h->rows = 1;
        memcpy(h->abc[0], !strcmp(name, "cubic") ? cubic : jordan, sizeof cubic);
    } else { /* a set the reference does not know must not pass as jordan's */
        fprintf(stderr, "ref_optim.h: no reference for the coefficients '%s'\n", name);
        abort();
    }
    h->alr = cfg->adamw.lr;
    h->b1 = cfg->adamw.beta1;
    h->b2 = cfg->adamw.beta2;
    h->aeps = cfg->adamw.eps;
    h->awd = cfg->adamw.weight_decay;
}

#endif /* CZ_REF_OPTIM_H */
