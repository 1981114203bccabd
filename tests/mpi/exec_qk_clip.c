/* QK-clip across ranks (public API, plain MPI): every rank hands its own per-head maxima, with
 * -inf for the heads its TP rank does not hold, and the step must clip with the MAX over all
 * ranks. Two executors run the same step from the same state, one with QK-clip (A) and one
 * without (B): every clipped row of A must be B's times (tau / S)^power with S the head's
 * largest maximum over all ranks, every other element of A equal to B's bit for bit, every DP
 * replica identical bit for bit, and a following step at lr 0 must keep A's clipped rows (the
 * master copy was scaled, not only the bound parameters: with bf16 parameters the next step
 * would otherwise bring B's back). Then the refusals: a NaN on one rank, a wrong count on one
 * rank, different descriptions, a bad description, and early updates, each refused on every
 * rank with nothing changed. Usage: exec_qk_clip TP fp32|bf16 (world = DP x TP). Exit 0 =
 * pass. */
#include "ref_optim.h" /* ref_write_cluster, ref_val */

#include <math.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The model: layer 0 is Megatron's fused QKV of grouped-query attention (4 query heads in 2
 * groups, head_dim 4, each group's rows [q q k v]); layer 1 separate query and key projections
 * of standard attention (4 heads of 4); an output projection and a norm that QK-clip must not
 * touch. */
enum { HEADS = 4, LAYERS = 2, D = 4, COLS = 24 };
typedef struct tparam {
    const char *name;
    int rows, cols, tp_dim, matrix;
} tparam;
static const tparam PARAMS[] = {
    {"l0.qkv.weight", 32, COLS, 0, 1}, {"l1.q.weight", 16, COLS, 0, 1},
    {"l1.k.weight", 16, COLS, 0, 1},   {"l1.o.weight", COLS, 16, 1, 1},
    {"norm.weight", COLS, 1, -1, 0},
};
#define NP ((int)(sizeof PARAMS / sizeof PARAMS[0]))
static const float TAU = 100.0f;

static int rank, size, tp, dp, bf16;
static int fails;

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "rank %d: ", rank);                                                    \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fprintf(stderr, "\n");                                                                 \
            fails = 1;                                                                             \
        }                                                                                          \
    } while (0)

/* The maximum logit DP rank d hands for (layer, head): a per-head base, raised on some DP ranks
 * only, so that the clip must take the MAX across ranks; non-positive ones never clip. */
static float logit(int d, int layer, int head)
{
    static const float base[LAYERS][HEADS] = {{50, 90, 400, -3}, {0, 99, 101, 1000}};
    return base[layer][head] + ((layer + head + d) % 2 == 0 ? 30.0f * (float)d : 0.0f);
}

static double global_max(int layer, int h0, int n)
{
    double s = -INFINITY;
    for (int d = 0; d < dp; d++)
        for (int h = h0; h < h0 + n; h++)
            s = fmax(s, logit(d, layer, h));
    return s;
}

/* The runs of the description: layer 0 by Megatron's grouped rule, layer 1 per head. */
static size_t runs(cz_qk_clip_rows *r)
{
    size_t n = 0;
    for (int g = 0; g < 2; g++) {
        r[n++] = (cz_qk_clip_rows){"l0.qkv.weight", 16 * g, 2 * D, 0, 2 * g, 2, 0.5f};
        r[n++] = (cz_qk_clip_rows){"l0.qkv.weight", 16 * g + 2 * D, D, 0, 2 * g, 2, 0.5f};
    }
    for (int h = 0; h < HEADS; h++) {
        r[n++] = (cz_qk_clip_rows){"l1.q.weight", D * h, D, 1, h, 1, 0.5f};
        r[n++] = (cz_qk_clip_rows){"l1.k.weight", D * h, D, 1, h, 1, 0.5f};
    }
    return n;
}

/* The expected scale of element (row) of parameter i, from the formula. */
static double expected(int i, int row)
{
    cz_qk_clip_rows r[16];
    size_t n = runs(r);
    for (size_t k = 0; k < n; k++)
        if (!strcmp(r[k].param, PARAMS[i].name) && row >= r[k].row0 &&
            row < r[k].row0 + r[k].rows) {
            double s = global_max(r[k].layer, r[k].head0, r[k].heads);
            return s > TAU ? pow(TAU / s, r[k].power) : 1.0;
        }
    return 1.0;
}

static int local_rows(int i)
{
    return PARAMS[i].tp_dim == 0 ? PARAMS[i].rows / tp : PARAMS[i].rows;
}
static int local_cols(int i)
{
    return PARAMS[i].tp_dim == 1 ? PARAMS[i].cols / tp : PARAMS[i].cols;
}
static int first_row(int i)
{
    return PARAMS[i].tp_dim == 0 ? (rank % tp) * local_rows(i) : 0;
}

static int write_inputs(const char *dir)
{
    char path[512];
    snprintf(path, sizeof path, "%s/model.json", dir);
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    fprintf(f,
            "{\"schema\": \"canzona.model/1\", \"name\": \"qk\", \"dtype\": \"%s\", "
            "\"params\": [\n",
            bf16 ? "bf16" : "fp32");
    for (int i = 0; i < NP; i++) {
        const tparam *p = &PARAMS[i];
        if (p->cols == 1)
            fprintf(f, "{\"name\": \"%s\", \"shape\": [%d], \"tp_dim\": null, ", p->name, p->rows);
        else if (p->tp_dim < 0)
            fprintf(f, "{\"name\": \"%s\", \"shape\": [%d, %d], \"tp_dim\": null, ", p->name,
                    p->rows, p->cols);
        else
            fprintf(f, "{\"name\": \"%s\", \"shape\": [%d, %d], \"tp_dim\": %d, ", p->name, p->rows,
                    p->cols, p->tp_dim);
        fprintf(f, "\"optimizer\": \"%s\"}%s\n", p->matrix ? "matrix" : "elementwise",
                i + 1 < NP ? "," : "");
    }
    fprintf(f, "]}\n");
    if (fclose(f))
        return -1;
    return ref_write_cluster(dir, dp, tp);
}

static int make_plan(const char *dir, cz_plan **out, cz_error *err)
{
    char mp[600], cp[600];
    cz_model *m = NULL;
    cz_cluster *c = NULL;
    if (write_inputs(dir))
        return -1;
    snprintf(mp, sizeof mp, "%s/model.json", dir);
    snprintf(cp, sizeof cp, "%s/cluster.json", dir);
    cz_settings s;
    cz_settings_init(&s);
    int rc = cz_model_load(&m, mp, err);
    if (rc == CZ_OK && (rc = cz_cluster_load(&c, cp, err)) == CZ_OK)
        rc = cz_plan_build(out, m, c, &s, err);
    cz_model_free(m);
    cz_cluster_free(c);
    unlink(mp);
    unlink(cp);
    return rc;
}

/* One executor and its buffers (bf16: uint16 bit patterns; fp32 otherwise). */
typedef struct job {
    cz_executor *ex;
    void *P[NP], *G[NP];
} job;

static size_t esz(void)
{
    return bf16 ? 2 : 4;
}
static float get(const void *buf, size_t k)
{
    if (!bf16)
        return ((const float *)buf)[k];
    uint32_t u = (uint32_t)((const uint16_t *)buf)[k] << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
static void put(void *buf, size_t k, double v)
{
    float f = (float)v;
    if (!bf16) {
        ((float *)buf)[k] = f;
        return;
    }
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    ((uint16_t *)buf)[k] = (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

static int job_open(job *j, const cz_plan *plan, cz_error *err)
{
    cz_exec_config cfg;
    cz_exec_config_init(&cfg);
    cfg.comm = "mpi";
    int rc = cz_executor_create_from_plan(&j->ex, plan, &cfg, err);
    for (int i = 0; rc == CZ_OK && i < NP; i++) {
        size_t n = (size_t)local_rows(i) * (size_t)local_cols(i);
        j->P[i] = malloc(n * esz());
        j->G[i] = malloc(n * esz());
        if (!j->P[i] || !j->G[i])
            return CZ_ENOMEM;
        for (size_t k = 0; k < n; k++) {
            size_t row = (size_t)first_row(i) + k / (size_t)local_cols(i);
            put(j->P[i], k, 0.5 * ref_val(7919u * (uint64_t)i + 131u * row + k % local_cols(i)));
        }
        rc = cz_executor_bind_param_typed(j->ex, PARAMS[i].name, j->P[i], j->G[i], local_rows(i),
                                          local_cols(i), bf16 ? CZ_DTYPE_BF16 : CZ_DTYPE_FP32, err);
    }
    return rc;
}

static void job_grads(job *j, int step)
{
    for (int i = 0; i < NP; i++)
        for (size_t k = 0; k < (size_t)local_rows(i) * (size_t)local_cols(i); k++)
            put(j->G[i], k, 0.1 * ref_val(104729u * (uint64_t)(step * 64 + rank) + 977u * i + k));
}

static void job_close(job *j)
{
    cz_executor_free(j->ex);
    for (int i = 0; i < NP; i++) {
        free(j->P[i]);
        free(j->G[i]);
    }
}

/* FNV-1a of this rank's bound parameters: equal on the DP replicas of one TP rank. */
static uint64_t digest(const job *j)
{
    uint64_t h = 1469598103934665603ULL;
    for (int i = 0; i < NP; i++) {
        const unsigned char *b = j->P[i];
        for (size_t k = 0; k < (size_t)local_rows(i) * local_cols(i) * esz(); k++)
            h = (h ^ b[k]) * 1099511628211ULL;
    }
    return h;
}

static void check_replicas(const job *j, const char *when)
{
    uint64_t mine = digest(j), all[256];
    MPI_Allgather(&mine, 1, MPI_UINT64_T, all, 1, MPI_UINT64_T, MPI_COMM_WORLD);
    for (int r = 0; r < size; r++)
        CHECK(r % tp != rank % tp || all[r] == mine,
              "%s: rank %d's parameters differ from this rank's (the same TP rank)", when, r);
}

/* This rank's maxima: its DP rank's values for the heads its TP rank holds, -inf elsewhere. */
static void my_logits(float *out)
{
    int d = rank / tp, t = rank % tp;
    for (int l = 0; l < LAYERS; l++)
        for (int h = 0; h < HEADS; h++)
            out[l * HEADS + h] = h / (HEADS / tp) == t ? logit(d, l, h) : -INFINITY;
}

static int set_spec(cz_executor *ex, float tau, cz_error *err)
{
    cz_qk_clip_rows r[16];
    cz_qk_clip_spec spec = {tau, LAYERS, HEADS, r, runs(r)};
    return cz_executor_set_qk_clip(ex, &spec, err);
}

/* A step that must be refused on every rank with nothing changed (A's digest kept). */
static void refused(job *a, int step, const char *what, const char *says)
{
    cz_error err;
    cz_error_clear(&err);
    uint64_t before = digest(a);
    job_grads(a, step);
    int rc = cz_executor_step(a->ex, &err);
    CHECK(rc != CZ_OK, "%s: the step was not refused", what);
    CHECK(rc == CZ_OK || strstr(err.message, says), "%s: message '%s' does not say '%s'", what,
          err.message, says);
    CHECK(digest(a) == before, "%s: the refused step changed parameters", what);
    if (rank == 0 && rc != CZ_OK)
        printf("refused as expected (%s): %s\n", what, err.message);
}

static void check_step(const job *a, const job *b)
{
    for (int i = 0; i < NP; i++) {
        double worst = 0;
        int scaled = 0;
        for (size_t k = 0; k < (size_t)local_rows(i) * local_cols(i); k++) {
            int row = first_row(i) + (int)(k / (size_t)local_cols(i));
            double f = expected(i, row), x = get(a->P[i], k), y = get(b->P[i], k);
            if (f == 1.0) {
                CHECK(x == y || (isnan(x) && isnan(y)),
                      "%s row %d: not clipped, but %.9g differs from %.9g", PARAMS[i].name, row, x,
                      y);
                continue;
            }
            scaled++;
            /* One fp32 product, then (bf16) the parameter's own rounding. */
            double tol = (bf16 ? 1.0 / 128 : 2e-7) * fabs(y * f) + 1e-30;
            worst = fmax(worst, fabs(x - y * f) / (fabs(y * f) + 1e-30));
            CHECK(fabs(x - y * f) <= tol, "%s row %d: %.9g, expected %.9g x %.6g = %.9g",
                  PARAMS[i].name, row, x, y, f, y * f);
        }
        if (rank == 0 && scaled)
            printf("%s: %d clipped elements on rank 0, worst relative error %.3g\n", PARAMS[i].name,
                   scaled, worst);
    }
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    tp = argc > 1 ? atoi(argv[1]) : 1;
    bf16 = argc > 2 && !strcmp(argv[2], "bf16");
    cz_error err;
    cz_error_clear(&err);
    char dir[256];
    const char *tmp = getenv("TMPDIR");
    cz_plan *plan = NULL;
    job a = {0}, b = {0};
    float lg[LAYERS * HEADS];
    if (tp < 1 || size % tp || HEADS % tp || size > 256) {
        fprintf(stderr, "usage: exec_qk_clip TP [fp32|bf16], TP dividing the world and %d\n",
                HEADS);
        fails = 1;
        goto out;
    }
    dp = size / tp;
    /* Every rank plans the same inputs in a folder of its own (the plan is deterministic). */
    snprintf(dir, sizeof dir, "%s/cz-qk-%d-XXXXXX", tmp && *tmp ? tmp : "/tmp", rank);
    if (!mkdtemp(dir) || make_plan(dir, &plan, &err) != CZ_OK) {
        fprintf(stderr, "rank %d: planning: %s\n", rank, err.message);
        fails = 1;
        goto out;
    }
    rmdir(dir);
    if (job_open(&a, plan, &err) != CZ_OK || job_open(&b, plan, &err) != CZ_OK ||
        set_spec(a.ex, TAU, &err) != CZ_OK) {
        fprintf(stderr, "rank %d: %s\n", rank, err.message);
        fails = 1;
        goto out;
    }
    my_logits(lg);
    job_grads(&a, 0);
    job_grads(&b, 0);
    if (cz_executor_qk_logits(a.ex, lg, LAYERS * HEADS, &err) != CZ_OK ||
        cz_executor_step(a.ex, &err) != CZ_OK || cz_executor_step(b.ex, &err) != CZ_OK) {
        fprintf(stderr, "rank %d: step 1: %s\n", rank, err.message);
        fails = 1;
        goto out;
    }
    int64_t want = 0;
    for (int l = 0; l < LAYERS; l++)
        for (int h = 0; h < HEADS; h++)
            want += global_max(l, h, 1) > TAU;
    CHECK(cz_executor_qk_clipped(a.ex) == want, "%lld heads clipped, expected %lld",
          (long long)cz_executor_qk_clipped(a.ex), (long long)want);
    check_step(&a, &b);
    check_replicas(&a, "after the clipped step");

    /* The master copy was scaled: at lr 0 (no decay) the next step keeps A's parameters. */
    uint64_t kept = digest(&a);
    if (cz_executor_set_lr(a.ex, 0.0f, 0.0f, &err) != CZ_OK ||
        cz_executor_set_weight_decay(a.ex, 0.0f, 0.0f, &err) != CZ_OK) {
        fprintf(stderr, "rank %d: %s\n", rank, err.message);
        fails = 1;
        goto out;
    }
    job_grads(&a, 1);
    CHECK(cz_executor_step(a.ex, &err) == CZ_OK, "step 2: %s", err.message);
    CHECK(digest(&a) == kept, "a step at lr 0 changed the clipped parameters: the master copy "
                              "was not scaled");
    CHECK(cz_executor_qk_clipped(a.ex) == 0, "a step without maxima clipped %lld heads",
          (long long)cz_executor_qk_clipped(a.ex));

    /* Refusals, each on every rank, nothing changed. */
    float bad[LAYERS * HEADS];
    memcpy(bad, lg, sizeof bad);
    if (rank == size - 1)
        bad[1] = NAN;
    int rc = cz_executor_qk_logits(a.ex, bad, LAYERS * HEADS, &err);
    CHECK((rc != CZ_OK) == (rank == size - 1), "a NaN maximum: qk_logits returned %d", rc);
    CHECK(rank != size - 1 || strstr(err.message, "NaN"), "the NaN's message: %s", err.message);
    refused(&a, 2, "a NaN on the last rank", "did not (or was refused");
    rc = cz_executor_qk_logits(a.ex, lg, rank == 0 ? LAYERS * HEADS - 1 : LAYERS * HEADS, &err);
    CHECK((rc != CZ_OK) == (rank == 0), "a short vector: qk_logits returned %d", rc);
    refused(&a, 3, "a short vector on rank 0", "rank 0 did not");
    if (set_spec(a.ex, rank == 0 ? TAU : 2 * TAU, &err) != CZ_OK)
        CHECK(0, "set_spec: %s", err.message);
    CHECK(cz_executor_qk_logits(a.ex, lg, LAYERS * HEADS, &err) == CZ_OK, "%s", err.message);
    refused(&a, 4, "different descriptions", "different QK-clip descriptions");
    CHECK(set_spec(a.ex, TAU, &err) == CZ_OK, "%s", err.message);

    /* Bad descriptions: refused where they are set, the old one kept. */
    cz_qk_clip_rows r[2] = {{"l1.q.weight", 0, 8, 0, 0, 1, 0.5f},
                            {"l1.q.weight", 4, 8, 0, 1, 1, 0.5f}};
    cz_qk_clip_spec spec = {TAU, LAYERS, HEADS, r, 2};
    CHECK(cz_executor_set_qk_clip(a.ex, &spec, &err) == CZ_EINVALID &&
              strstr(err.message, "overlap"),
          "overlapping runs: %s", err.message);
    r[1] = (cz_qk_clip_rows){"l1.nope.weight", 0, 4, 0, 0, 1, 0.5f};
    CHECK(cz_executor_set_qk_clip(a.ex, &spec, &err) == CZ_EINVALID &&
              strstr(err.message, "no parameter named 'l1.nope.weight'"),
          "an unknown parameter: %s", err.message);
    r[1] = (cz_qk_clip_rows){"l1.k.weight", 12, 8, 0, 0, 1, 0.5f};
    CHECK(cz_executor_set_qk_clip(a.ex, &spec, &err) == CZ_EINVALID && strstr(err.message, "rows"),
          "rows past the end: %s", err.message);
    r[1] = (cz_qk_clip_rows){"norm.weight", 0, 4, 0, 0, 1, 0.5f};
    CHECK(cz_executor_set_qk_clip(a.ex, &spec, &err) == CZ_EINVALID && strstr(err.message, "2-D"),
          "a 1-D parameter: %s", err.message);
    r[1] = (cz_qk_clip_rows){"l1.k.weight", 0, 4, 1, 3, 2, 0.5f};
    CHECK(cz_executor_set_qk_clip(a.ex, &spec, &err) == CZ_EINVALID && strstr(err.message, "heads"),
          "heads past the layer's: %s", err.message);
    r[1] = (cz_qk_clip_rows){"l1.k.weight", 0, 4, 1, 0, 1, NAN};
    CHECK(cz_executor_set_qk_clip(a.ex, &spec, &err) == CZ_EINVALID && strstr(err.message, "power"),
          "a NaN power: %s", err.message);
    spec.tau = 0.0f;
    CHECK(cz_executor_set_qk_clip(a.ex, &spec, &err) == CZ_EINVALID && strstr(err.message, "tau"),
          "tau 0: %s", err.message);
    CHECK(cz_executor_set_early_updates(a.ex, 1, &err) != CZ_OK, "early updates with QK-clip");

    /* The kept description still clips: a good step after the refusals. */
    job_grads(&a, 5);
    CHECK(cz_executor_qk_logits(a.ex, lg, LAYERS * HEADS, &err) == CZ_OK &&
              cz_executor_step(a.ex, &err) == CZ_OK,
          "the step after the refusals: %s", err.message);
    CHECK(cz_executor_qk_clipped(a.ex) == want, "after the refusals: %lld heads clipped",
          (long long)cz_executor_qk_clipped(a.ex));
    check_replicas(&a, "after the refusals");
    if (rank == 0)
        printf("qk-clip dp %d x tp %d (%s): %lld heads clipped of %d\n", dp, tp,
               bf16 ? "bf16" : "fp32", (long long)want, LAYERS * HEADS);
out:
    job_close(&a);
    job_close(&b);
    cz_plan_free(plan);
    int any = 0;
    MPI_Allreduce(&fails, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    MPI_Finalize();
    return any ? 1 : 0;
}
