/* The CUDA kernels' launch shapes (launch.h) for every copy-run list the executor makes from the
 * bundled plans. Each dense bundled model is planned on the bundled clusters of the PERF tables
 * (section 1) and the CPU test clusters; for every DP rank's schedule and every TP rank, the
 * executor's own pipeline layout (cz__exec_pipeline_probe: the code that makes the gathers'
 * and scatters' pack and unpack maps and the update's apply runs) hands its run lists to a
 * recording backend. For each list the test takes cz_launch_runs_grid's grid and checks, in plain
 * C, what the kernels copy_runs and apply_runs (kernels.cu) do with it: the grid within CUDA's
 * limits, every element of every run visited exactly once by the two grid-stride loops, and, for
 * lists with work enough for the card, enough thread blocks busy to fill a 132-SM GPU with no
 * run left to a few of them. The 1-D kernels (conversions, momentum, the update over a shard)
 * are checked the same way for every run length and shard size met. */
#include "cz_exec_testing.h"

#include "canzona.h"
#include "canzona_exec.h"
#include "cz_format.h"

#include <check.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* An H100/H200: 132 SMs, 2048 resident threads each, 8 blocks of CZ_CUDA_THREADS. */
#define SMS 132
#define FILL_BLOCKS (SMS * 2048 / CZ_CUDA_THREADS)
#define FILL_THREADS ((int64_t)FILL_BLOCKS * CZ_CUDA_THREADS)

/* Check's ck_assert records every passing assertion's place (a write per call): the loops below
 * make millions of checks, so they test first and fail through ck_abort_msg. */
#define REQUIRE(cond)                                                                              \
    do {                                                                                           \
        if (!(cond))                                                                               \
            ck_abort_msg("%s: %s failed", S.ctx, #cond);                                           \
    } while (0)

/* What the test saw, over every list. */
typedef struct seen {
    int64_t lists, runs, max_len, max_nruns, pieces, max_piece, max_shard;
    int64_t *lens; /* distinct run lengths (a sorted set) */
    size_t nlens, cap;
    const char *ctx;
} seen;

static seen S;

/* Adds len to the set; true when it was not there. */
static bool note_len(int64_t len)
{
    size_t lo = 0, hi = S.nlens;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (S.lens[mid] < len)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < S.nlens && S.lens[lo] == len)
        return false;
    if (S.nlens == S.cap) {
        S.cap = S.cap ? 2 * S.cap : 1024;
        S.lens = realloc(S.lens, S.cap * sizeof *S.lens);
        REQUIRE(S.lens != NULL);
    }
    memmove(S.lens + lo + 1, S.lens + lo, (S.nlens - lo) * sizeof *S.lens);
    S.lens[lo] = len;
    S.nlens++;
    return true;
}

/* One grid-stride loop of `len` elements over `threads_total` threads (first index t =
 * blockIdx.x * blockDim.x + threadIdx.x, step gridDim.x * blockDim.x), simulated thread by
 * thread: how many elements each visits, its first and last index. Distinct threads start at
 * distinct residues of the stride, so the visited sets are disjoint; the count over all threads
 * must be len, every index below len, and the next one past it. For len up to 2^16 the elements
 * are also marked one by one. */
static void check_stride_loop(int64_t len, int64_t stride)
{
    REQUIRE(stride > 0);
    int64_t total = 0, active = len < stride ? len : stride;
    for (int64_t t = 0; t < active; t++) {
        int64_t n = (len - 1 - t) / stride + 1; /* j = t, t + stride, ... while j < len */
        int64_t last = t + (n - 1) * stride;
        REQUIRE(last < len && last + stride >= len);
        total += n;
    }
    REQUIRE(total == len);
    if (len <= 65536) {
        static unsigned char mark[65536];
        memset(mark, 0, (size_t)len);
        for (int64_t t = 0; t < stride && t < len; t++)
            for (int64_t j = t; j < len; j += stride)
                mark[j]++;
        for (int64_t j = 0; j < len; j++)
            if (mark[j] != 1)
                ck_abort_msg("%s: element %lld of a %lld-run visited %d times", S.ctx, (long long)j,
                             (long long)len, mark[j]);
    }
}

/* The (len, stride) pairs already simulated: many runs repeat them (an open-addressing set). */
#define PAIRS (1u << 20)
typedef struct pair {
    int64_t len, stride;
} pair;
static pair *done_pairs;
static size_t ndone;

static void check_loop_once(int64_t len, int64_t stride)
{
    if (!done_pairs) {
        done_pairs = calloc(PAIRS, sizeof *done_pairs);
        REQUIRE(done_pairs != NULL);
    }
    uint64_t h = ((uint64_t)len * 0x9E3779B97F4A7C15u) ^ ((uint64_t)stride * 0xC2B2AE3D27D4EB4Fu);
    for (size_t i = (size_t)(h >> 44);; i = (i + 1) & (PAIRS - 1)) {
        if (done_pairs[i].len == len && done_pairs[i].stride == stride)
            return;
        if (done_pairs[i].len == 0) {
            REQUIRE(ndone < PAIRS / 2);
            check_stride_loop(len, stride);
            done_pairs[i] = (pair){len, stride};
            ndone++;
            return;
        }
    }
}

/* The 1-D kernels over n elements (blocks(n) in grid.cuh): within the limit, every element once,
 * and as many blocks as the card holds once n has the work for them. */
static void check_blocks(int64_t n)
{
    int b = cz_launch_blocks(n, CZ_CUDA_THREADS, CZ_CUDA_MAX_BLOCKS);
    REQUIRE(b >= 1 && b <= CZ_CUDA_MAX_BLOCKS);
    int64_t need = (n + CZ_CUDA_THREADS - 1) / CZ_CUDA_THREADS;
    REQUIRE(b >= (need < FILL_BLOCKS ? need : FILL_BLOCKS));
    check_loop_once(n, (int64_t)b * CZ_CUDA_THREADS);
}

/* One run list as copy_runs_kernel and apply_runs_kernel walk it: block row y takes runs y, y +
 * gridDim.y, ...; its gridDim.x blocks stride through each run. */
static void check_list(const cz_copy_run *runs, size_t n)
{
    int64_t max_len = 0, total = 0, need = 0;
    for (size_t k = 0; k < n; k++) {
        REQUIRE(runs[k].len >= 1);
        if (runs[k].len > max_len)
            max_len = runs[k].len;
        total += runs[k].len;
        need += (runs[k].len + CZ_CUDA_THREADS - 1) / CZ_CUDA_THREADS;
    }
    int gx, gy;
    cz_launch_runs_grid((int64_t)n, max_len, CZ_CUDA_THREADS, &gx, &gy);
    /* CUDA's limits: x below 2^31, y at most 65535; and the rule's own cap on the blocks. */
    REQUIRE(gx >= 1 && gy >= 1 && gy <= 65535);
    REQUIRE((int64_t)gx * gy <= CZ_CUDA_MAX_RUN_BLOCKS);
    int64_t stride = (int64_t)gx * CZ_CUDA_THREADS;
    /* Each run belongs to exactly one block row (r mod gy), which loops over its elements. Busy
     * blocks: per row, those of its runs' blocks that have elements; a row's threads loop
     * through its runs one after the other, ceil(len / stride) times each: the row that loops
     * most bounds the launch. */
    static int64_t row_iters[65535], row_busy[65535];
    memset(row_iters, 0, (size_t)gy * sizeof *row_iters);
    memset(row_busy, 0, (size_t)gy * sizeof *row_busy);
    for (size_t k = 0; k < n; k++) {
        int64_t y = (int64_t)k % gy, len = runs[k].len;
        int64_t blocks = (len + CZ_CUDA_THREADS - 1) / CZ_CUDA_THREADS;
        REQUIRE((int64_t)k / gy * gy + y == (int64_t)k); /* r = y + i * gridDim.y */
        check_loop_once(len, stride);
        row_iters[y] += (len + stride - 1) / stride;
        if ((blocks < gx ? blocks : gx) > row_busy[y])
            row_busy[y] = blocks < gx ? blocks : gx;
    }
    int64_t busy = 0, worst = 0;
    for (int y = 0; y < gy; y++) {
        busy += row_busy[y];
        if (row_iters[y] > worst)
            worst = row_iters[y];
    }
    /* Fill: as many busy blocks as the card holds, or as the runs have elements for. */
    if (busy < (need < FILL_BLOCKS ? need : FILL_BLOCKS))
        ck_abort_msg("%s: %zu runs (%lld elements, longest %lld): grid %d x %d keeps %lld blocks "
                     "busy, fewer than %d",
                     S.ctx, n, (long long)total, (long long)max_len, gx, gy, (long long)busy,
                     FILL_BLOCKS);
    /* Balance: the busiest row loops at most twice what the whole card needs for the list's
     * elements, plus a few iterations (a list of many short runs, one per row, loops once per
     * run; the card still runs its rows in parallel). */
    int64_t ideal = (total + FILL_THREADS - 1) / FILL_THREADS;
    if (worst > 2 * ideal + 4)
        ck_abort_msg(
            "%s: %zu runs (%lld elements, longest %lld): grid %d x %d, one block row loops "
            "%lld times where the card needs %lld",
            S.ctx, n, (long long)total, (long long)max_len, gx, gy, (long long)worst,
            (long long)ideal);
    S.pieces += (int64_t)n;
    if (max_len > S.max_piece)
        S.max_piece = max_len;
}

/* A backend with only the index maps: what the pipeline's layout calls. */
struct cz_runs {
    size_t n;
};

/* The list as the GPU backend launches it: cut into pieces (cuda_runs_create), which must be the
 * runs' elements, in order, each exactly once. */
static void check_pieces(const cz_copy_run *runs, size_t n)
{
    int64_t total = 0;
    for (size_t k = 0; k < n; k++)
        total += runs[k].len;
    int64_t piece = cz_launch_run_piece(total);
    REQUIRE(piece >= CZ_LAUNCH_MIN_PIECE && piece % CZ_CUDA_THREADS == 0);
    const int64_t *in = (const int64_t *)(const void *)runs;
    int64_t np = cz_launch_split_runs(in, (int64_t)n, piece, NULL);
    cz_copy_run *p = malloc((size_t)np * sizeof *p);
    REQUIRE(p != NULL);
    REQUIRE(cz_launch_split_runs(in, (int64_t)n, piece, (int64_t *)(void *)p) == np);
    size_t k = 0;
    int64_t at = 0;
    for (int64_t i = 0; i < np; i++) {
        REQUIRE(k < n && p[i].len >= 1 && p[i].len <= piece);
        REQUIRE(p[i].dst == runs[k].dst + at && p[i].src == runs[k].src + at);
        at += p[i].len;
        REQUIRE(at <= runs[k].len);
        if (at == runs[k].len) {
            k++;
            at = 0;
        }
    }
    REQUIRE(k == n && at == 0);
    check_list(p, (size_t)np);
    free(p);
}

static cz_runs *rec_runs_create(cz_compute *c, const cz_copy_run *runs, size_t n)
{
    (void)c;
    if (n > 0) {
        for (size_t k = 0; k < n; k++) {
            if (note_len(runs[k].len))
                check_blocks(runs[k].len);
            if (runs[k].len > S.max_len)
                S.max_len = runs[k].len;
        }
        S.lists++;
        S.runs += (int64_t)n;
        if ((int64_t)n > S.max_nruns)
            S.max_nruns = (int64_t)n;
        check_pieces(runs, n);
    }
    cz_runs *r = malloc(sizeof *r);
    if (r)
        r->n = n;
    return r;
}

static void rec_runs_free(cz_compute *c, cz_runs *r)
{
    (void)c;
    free(r);
}

static const cz_compute_ops REC = {.version = CZ_COMPUTE_OPS_VERSION,
                                   .kind = CZ_BACKEND_CPU,
                                   .name = "recording",
                                   .runs_create = rec_runs_create,
                                   .runs_free = rec_runs_free};

static char *path_of(const char *dir, const char *name)
{
    const char *src = getenv("CZ_SOURCE_DIR");
    static char buf[3][1024];
    static int k;
    k = (k + 1) % 3;
    snprintf(buf[k], sizeof buf[k], "%s/plans/%s/%s.json", src ? src : ".", dir, name);
    return buf[k];
}

/* Plans model on cluster with the default settings and probes every (schedule, TP rank). */
static void probe_pair(const char *model, const char *cluster)
{
    cz_error err = {0};
    cz_model *m = NULL;
    cz_cluster *cl = NULL;
    cz_plan *plan = NULL;
    cz_settings st;
    char ctx[256];
    snprintf(ctx, sizeof ctx, "%s on %s", model, cluster);
    S.ctx = ctx;
    cz_settings_init(&st);
    ck_assert_msg(cz_model_load(&m, path_of("models", model), &err) == CZ_OK, "%s", err.message);
    ck_assert_msg(cz_cluster_load(&cl, path_of("clusters", cluster), &err) == CZ_OK, "%s",
                  err.message);
    ck_assert_msg(cz_plan_build(&plan, m, cl, &st, &err) == CZ_OK, "%s on %s: %s", model, cluster,
                  err.message);
    ck_assert(!cz_plan_has_experts(plan));
    /* Where each parameter's shard starts in its stage's flat buffer: its bucket's offset plus
     * its own (executor.c, own_params, for a plan without expert groups). */
    int64_t *off = calloc(plan->nparams + 1, sizeof *off);
    ck_assert_ptr_nonnull(off);
    for (size_t i = 0; i < plan->nparams; i++) {
        int b = cz__bucket_index(plan, plan->params[i].bucket);
        REQUIRE(b >= 0);
        off[i] = plan->buckets[b].offset + plan->params[i].offset;
        /* The elementwise passes over a parameter's local shard (staging, conversions, AdamW's
         * update of the embedding). */
        check_blocks(plan->params[i].numel);
        if (plan->params[i].numel > S.max_shard)
            S.max_shard = plan->params[i].numel;
    }
    for (size_t b = 0; b < plan->nbuckets; b++)
        for (int d = 0; d < plan->dp; d++)
            check_blocks(plan->buckets[b].ranges[2 * d + 1] - plan->buckets[b].ranges[2 * d]);
    cz_compute c = {.ops = &REC};
    bool sc = plan->settings.tp == CZ_TP_SC;
    for (size_t s = 0; s < plan->nschedules; s++)
        for (int r = 0; r < plan->tp; r++) {
            const cz_rank_schedule *rs = &plan->schedules[s];
            snprintf(ctx, sizeof ctx, "%s on %s, stage %d DP %d TP %d", model, cluster, rs->stage,
                     rs->dp_rank, r);
            ck_assert_msg(cz__exec_pipeline_probe(plan, rs, plan->tp, r, sc, off, &c, NULL, &err) ==
                              CZ_OK,
                          "%s: %s", ctx, err.message);
        }
    free(off);
    cz_plan_free(plan);
    cz_cluster_free(cl);
    cz_model_free(m);
}

/* The pairs: every dense model of the PERF tables (section 1) on their four H100 clusters, the
 * larger dense models and pipeline stages, and the CPU test models on the CPU clusters. */
typedef struct pair_spec {
    const char *model, *cluster;
} pair_spec;

static const pair_spec PAIRS_ALL[] = {
#define H100_4(m)                                                                                  \
    {m, "h100-8-dp8-tp1"}, {m, "h100-64-dp8-tp8"}, {m, "h100-256-dp32-tp8"},                       \
    {                                                                                              \
        m, "h100-256-dp64-tp4"                                                                     \
    }
    H100_4("qwen3-0.6b"),
    H100_4("qwen3-1.7b"),
    H100_4("qwen3-4b"),
    H100_4("qwen3-8b"),
    H100_4("qwen3-14b"),
    H100_4("qwen3-32b"),
#undef H100_4
    {"qwen3-8b", "h100-64-dp4-tp8-pp2"},
    {"llama-3.1-70b", "h100-64-dp8-tp8"},
    {"llama-3.1-70b", "h100-256-dp32-tp8"},
    {"kimi-k2-like-12l-dense", "h100-64-dp8-tp8"},
    {"test-small", "cpu-1"},
    {"test-small", "cpu-4-dp1-tp4"},
    {"test-small", "cpu-4-dp2-tp2"},
    {"test-small", "cpu-4-dp4-tp1"},
    {"test-mid", "cpu-1"},
    {"test-mid", "cpu-4-dp1-tp4"},
    {"test-mid", "cpu-4-dp2-tp2"},
    {"test-mid", "cpu-4-dp4-tp1"},
    /* Two heads of a block: whole heads at TP 2 only. */
    {"test-heads", "cpu-4-dp2-tp2"},
};

/* argv[1]: one model's pairs only, argv[2]: on one cluster only (ctest runs the models side by
 * side); none: all. */
static const char *only, *only_cluster;

START_TEST(every_bundled_run_list)
{
    int ran = 0;
    for (size_t i = 0; i < sizeof PAIRS_ALL / sizeof *PAIRS_ALL; i++)
        if ((!only || !strcmp(only, PAIRS_ALL[i].model)) &&
            (!only_cluster || !strcmp(only_cluster, PAIRS_ALL[i].cluster))) {
            probe_pair(PAIRS_ALL[i].model, PAIRS_ALL[i].cluster);
            ran++;
        }
    ck_assert_msg(ran > 0, "no bundled pair for model %s", only ? only : "(all)");
    printf("launch shapes (%s%s%s): %lld run lists, %lld runs, %zu distinct run lengths from %lld "
           "to %lld elements, at most %lld runs in a list; launched as %lld pieces of at most "
           "%lld; shards of up to %lld elements; %zu (length, stride) loops simulated\n",
           only ? only : "every pair", only_cluster ? " on " : "", only_cluster ? only_cluster : "",
           (long long)S.lists, (long long)S.runs, S.nlens, (long long)(S.nlens ? S.lens[0] : 0),
           (long long)S.max_len, (long long)S.max_nruns, (long long)S.pieces,
           (long long)S.max_piece, (long long)S.max_shard, ndone);
    /* The range the issue names ends at the whole 151936 x 4096 embedding, Qwen3-8B's at TP 1:
     * an elementwise shard (AdamW's), not a run of the matrix pipeline. */
    if (only && !strcmp(only, "qwen3-8b"))
        ck_assert_int_eq(S.max_shard, (int64_t)151936 * 4096);
    if (!only) /* Qwen3-14B's and 32B's 151936 x 5120 beyond it */
        ck_assert_int_ge(S.max_shard, (int64_t)151936 * 4096);
    free(S.lens);
    free(done_pairs);
}
END_TEST

int main(int argc, char **argv)
{
    only = argc > 1 ? argv[1] : NULL;
    only_cluster = argc > 2 ? argv[2] : NULL;
    Suite *s = suite_create("launch_shapes");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, every_bundled_run_list);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
