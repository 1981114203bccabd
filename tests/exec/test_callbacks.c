/* The "callbacks" comm backend without MPI: forked ranks whose callbacks move data through
 * shared memory (one mailbox per ordered pair of ranks), as a job's torch.distributed would.
 * The executor over them at DP2 x TP2 and DP4 x TP1, with and without the job's own DP/TP
 * groups, must give the parameters of one process (comm "self") on the same model; rates per
 * parameter must be those parameters' rates; ranks that set different rates must all get
 * CZ_EMISMATCH with nothing changed (so must ranks that set different clipping thresholds);
 * the planes split from the world (subsets of the callbacks' group) must sum every member's
 * values; lr = 0 must be a rate of 0. */
#include "canzona.h" /* cz_plan_build: the test plans in-process */
#include "canzona_exec.h"
#include "cz_format.h"
#include "cz_exec_testing.h"

#include <check.h>
#include <math.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

enum { MAXR = 4, CAP = 1 << 16 };

/* One direction between two ranks: a chunk at a time (full 1 = data waiting). */
typedef struct mailbox {
    atomic_int full;
    size_t len;
    char data[CAP];
} mailbox;

static mailbox *boxes; /* [src * MAXR + dst], shared by the forked ranks */

typedef struct rank_ctx {
    int world, rank, dp, tp, fail_at; /* fail_at: the exchange call that fails (0: none) */
    int calls;
} rank_ctx;

static int world_of(const rank_ctx *c, cz_comm_group g, int r)
{
    int dpr = c->rank / c->tp, tpr = c->rank % c->tp;
    return g == CZ_COMM_DP ? r * c->tp + tpr : g == CZ_COMM_TP ? dpr * c->tp + r : r;
}

static int group_size(const rank_ctx *c, cz_comm_group g)
{
    return g == CZ_COMM_DP ? c->dp : g == CZ_COMM_TP ? c->tp : c->world;
}

static int group_rank(const rank_ctx *c, cz_comm_group g)
{
    return g == CZ_COMM_DP ? c->rank / c->tp : g == CZ_COMM_TP ? c->rank % c->tp : c->rank;
}

static size_t esize(cz_comm_dtype t)
{
    return t == CZ_COMM_BF16 ? 2 : t == CZ_COMM_FP32 ? 4 : 8;
}

/* Every transfer moves a chunk whenever its mailbox allows, so that two ranks sending each
 * other more than a mailbox holds both make progress. */
static int cb_exchange(void *user, cz_comm_group g, const cz_comm_transfer *t, int n)
{
    rank_ctx *c = user;
    if (c->fail_at && ++c->calls >= c->fail_at)
        return -7;
    size_t done[2 * MAXR] = {0};
    int left = n;
    for (int k = 0; k < n; k++)
        if (t[k].count == 0) {
            done[k] = 0;
            left--;
        }
    while (left > 0) {
        for (int k = 0; k < n; k++) {
            size_t total = t[k].count * esize(t[k].dtype);
            if (t[k].count == 0 || done[k] == total + 1)
                continue;
            int peer = world_of(c, g, t[k].peer);
            mailbox *m = t[k].send ? &boxes[c->rank * MAXR + peer] : &boxes[peer * MAXR + c->rank];
            int full = atomic_load_explicit(&m->full, memory_order_acquire);
            if (t[k].send && !full) {
                size_t len = total - done[k] < CAP ? total - done[k] : CAP;
                memcpy(m->data, (char *)t[k].buf + done[k], len);
                m->len = len;
                atomic_store_explicit(&m->full, 1, memory_order_release);
                done[k] += len;
            } else if (!t[k].send && full) {
                memcpy((char *)t[k].buf + done[k], m->data, m->len);
                done[k] += m->len;
                atomic_store_explicit(&m->full, 0, memory_order_release);
            } else {
                continue;
            }
            if (done[k] == total) {
                done[k] = total + 1;
                left--;
            }
        }
        sched_yield();
    }
    return 0;
}

/* Everyone sends everyone its values; each rank reduces them in rank order (the same result
 * on every rank); bf16 as torch's gloo adds it, each pairwise sum rounded to bf16. */
static int cb_all_reduce(void *user, cz_comm_group g, void *buf, size_t count, cz_comm_dtype t,
                         cz_comm_op op)
{
    rank_ctx *c = user;
    int n = group_size(c, g), me = group_rank(c, g);
    size_t bytes = count * esize(t);
    char *all = malloc(bytes * (size_t)n);
    cz_comm_transfer x[2 * MAXR] = {{0}}; /* zeroed: -O3 cannot see that k counts the set ones */
    int k = 0;
    memcpy(all + bytes * (size_t)me, buf, bytes);
    for (int r = 0; r < n; r++)
        if (r != me) {
            x[k++] = (cz_comm_transfer){buf, count, t, r, 1};
            x[k++] = (cz_comm_transfer){all + bytes * (size_t)r, count, t, r, 0};
        }
    int rc = cb_exchange(user, g, x, k);
    for (size_t i = 0; !rc && i < count; i++) {
        for (int r = 0; r < n; r++) {
            if (t == CZ_COMM_FP32) {
                float v = ((float *)all)[r * count + i], *o = (float *)buf + i;
                *o = r == 0 ? v : op == CZ_COMM_MIN ? (v < *o ? v : *o) : *o + v;
            } else if (t == CZ_COMM_BF16) {
                uint16_t *o = (uint16_t *)buf + i;
                float v = cz_ew_f32_from_bf16(((uint16_t *)all)[r * count + i]);
                float w = cz_ew_f32_from_bf16(*o);
                *o = cz_ew_bf16_from_f32(r == 0 ? v : op == CZ_COMM_MIN ? (v < w ? v : w) : w + v);
            } else if (t == CZ_COMM_FP64) {
                double v = ((double *)all)[r * count + i], *o = (double *)buf + i;
                *o = r == 0 ? v : op == CZ_COMM_MIN ? (v < *o ? v : *o) : *o + v;
            } else {
                int64_t v = ((int64_t *)all)[r * count + i], *o = (int64_t *)buf + i;
                *o = r == 0 ? v : op == CZ_COMM_MIN ? (v < *o ? v : *o) : *o + v;
            }
        }
    }
    free(all);
    return rc;
}

static int cb_broadcast(void *user, cz_comm_group g, void *buf, size_t count, cz_comm_dtype t,
                        int root)
{
    rank_ctx *c = user;
    int n = group_size(c, g), me = group_rank(c, g), k = 0;
    cz_comm_transfer x[MAXR];
    if (me != root)
        x[k++] = (cz_comm_transfer){buf, count, t, root, 0};
    else
        for (int r = 0; r < n; r++)
            if (r != me)
                x[k++] = (cz_comm_transfer){buf, count, t, r, 1};
    return cb_exchange(user, g, x, k);
}

static const char *cb_last_error(void *user)
{
    (void)user;
    return "the test's transport refused";
}

/* ---- the model, its shards and the reference ---- */

static char dir[256];

static uint64_t mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    return x;
}

static float val(uint64_t k)
{
    return (float)((double)(mix(k) >> 11) / 9007199254740992.0 - 0.5);
}

/* The plan of the model at model_path on a CPU cluster of dp x tp ranks (written and removed
 * here), with the given buffer layout. */
static cz_plan *plan_of(const char *model_path, int dp, int tp, cz_layout layout)
{
    char cluster[1024];
    snprintf(cluster, sizeof cluster, "%s/cluster_%dx%d.json", dir, dp, tp);
    FILE *f = fopen(cluster, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f,
            "{\"schema\": \"canzona.cluster/1\", \"name\": \"t\", \"gpus\": %d, \"dp\": %d, "
            "\"tp\": %d, \"pp\": 1, \"gpus_per_node\": %d, \"device\": {\"name\": \"cpu\", "
            "\"matmul_tflops\": 0.5, \"mem_gbps\": 40, \"memory_gib\": 16}, \"links\": "
            "{\"intra_node_gbps\": 10, \"inter_node_gbps\": 10, \"latency_us\": 2}}",
            dp * tp, dp, tp, dp * tp);
    fclose(f);
    cz_error err;
    cz_model *model = NULL;
    cz_cluster *cl = NULL;
    cz_plan *plan = NULL;
    cz_settings s;
    cz_settings_init(&s);
    s.layout = layout;
    ck_assert_msg(cz_model_load(&model, model_path, &err) == 0, "%s", err.message);
    ck_assert_msg(cz_cluster_load(&cl, cluster, &err) == 0, "%s", err.message);
    ck_assert_msg(cz_plan_build(&plan, model, cl, &s, &err) == 0, "%s", err.message);
    cz_model_free(model);
    cz_cluster_free(cl);
    unlink(cluster);
    return plan;
}

/* The callbacks table of the rank that ctx describes (world size and rank from it), over the
 * fake transport above. */
static cz_comm_callbacks callbacks_of(rank_ctx *ctx)
{
    return (cz_comm_callbacks){.version = CZ_COMM_CALLBACKS_VERSION,
                               .user = ctx,
                               .world_size = ctx->world,
                               .world_rank = ctx->rank,
                               .all_reduce = cb_all_reduce,
                               .broadcast = cb_broadcast,
                               .exchange = cb_exchange,
                               .last_error = cb_last_error};
}

static cz_plan *make_plan(int dp, int tp)
{
    char model_path[512];
    const char *src = getenv("CZ_SOURCE_DIR");
    ck_assert_ptr_nonnull(src);
    snprintf(model_path, sizeof model_path, "%s/plans/models/test-small.json", src);
    return plan_of(model_path, dp, tp, CZ_LAYOUT_UNIFIED);
}

/* Element (row, col) of the full tensor of parameter i: its initial value or step's gradient. */
static float full_val(int i, int step, int64_t row, int64_t col)
{
    return (step ? 1.0f : 0.05f) *
           val((uint64_t)step << 48 | (uint64_t)i << 32 | (uint64_t)(row * 4099 + col));
}

/* The full index along the TP dimension of local index k of TP rank r's shard (Megatron's:
 * a fused matrix's blocks are cut one by one, shard.c). */
static int64_t full_index(const cz_plan_param *p, int tp, int r, int64_t k)
{
    int64_t lo[8], hi[8];
    int n = cz__shard_ranges(p, tp, r, lo, hi, 8);
    for (int i = 0; i < n; i++) {
        if (k < hi[i] - lo[i])
            return lo[i] + k;
        k -= hi[i] - lo[i];
    }
    ck_abort_msg("index out of the shard");
    return -1;
}

/* Element (a, b) of TP rank r's shard of p: its (row, col) in the full tensor. */
static void full_at(const cz_plan_param *p, int tp, int r, int64_t a, int64_t b, int64_t *row,
                    int64_t *col)
{
    *row = p->def.tp_dim == 0 ? full_index(p, tp, r, a) : a;
    *col = p->def.tp_dim == 1 ? full_index(p, tp, r, b) : b;
}

/* Fills TP rank r's shard of parameter p (of a plan with tp ranks). */
static void fill_shard(const cz_plan_param *p, int tp, int r, int step, float *out)
{
    int64_t lr = p->local_shape[0], lc = p->def.ndim == 1 ? 1 : p->local_shape[1], row, col;
    for (int64_t a = 0; a < lr; a++)
        for (int64_t b = 0; b < lc; b++) {
            full_at(p, tp, r, a, b, &row, &col);
            out[a * lc + b] = full_val(p->id, step, row, col);
        }
}

/* Rates of parameter i in the tests with rates per parameter: three groups. With same_lr, the
 * matrix groups share one learning rate and differ in weight decay only (the matrix updates'
 * uniform fast path must then still apply each group's). */
static void rates_of(const cz_plan *plan, size_t i, int same_lr, float *lr, float *wd)
{
    const cz_plan_param *p = &plan->params[i];
    if (p->def.kind == CZ_KIND_MATRIX) {
        *lr = strstr(p->def.name, "fc2") && !same_lr ? 0.02f : 0.01f;
        *wd = strstr(p->def.name, "fc2") ? 0.0f : 0.1f;
    } else {
        *lr = p->def.ndim == 1 ? 0.004f : 0.002f;
        *wd = p->def.ndim == 1 ? 0.0f : 0.05f;
    }
}

typedef struct run_opts {
    int dp, tp, has_groups, steps, per_param, bad_rank; /* bad_rank: sets other rates (-1) */
    int same_lr;  /* per_param: rates_of's groups of one matrix learning rate */
    int bad_clip; /* bad_rank sets a clipping threshold instead, the others none */
    float lr, wd, adamw_lr, adamw_wd; /* lr > 0: set_lr and set_weight_decay with these */
    int bad_groups;                   /* the callbacks claim DP groups of every rank and no TP */
    int bf16, fp32_reduce;            /* bf16 buffers (the values rounded), grad_reduce_in_fp32 */
    int tp_outer; /* world rank r is DP rank r % dp, TP rank r / dp, handed in (cz_exec_config) */
} run_opts;

/* World rank r's TP rank: TP fastest (the executor's own order) unless tp_outer. */
static int tp_of(const run_opts *o, int r)
{
    return o->tp_outer ? r / o->dp : r % o->tp;
}

/* Runs the model on one rank; writes its parameter shards (plan order, concatenated) to out. */
static int run_rank(const run_opts *o, int rank, const cz_plan *plan, float *out, char *msg)
{
    rank_ctx ctx = {.world = o->dp * o->tp, .rank = rank, .dp = o->dp, .tp = o->tp};
    cz_comm_callbacks cb = {.version = CZ_COMM_CALLBACKS_VERSION,
                            .user = &ctx,
                            .world_size = ctx.world,
                            .world_rank = rank,
                            .has_groups = o->has_groups,
                            .dp_size = o->dp,
                            .dp_rank = rank / o->tp,
                            .tp_size = o->tp,
                            .tp_rank = rank % o->tp,
                            .all_reduce = cb_all_reduce,
                            .broadcast = cb_broadcast,
                            .exchange = cb_exchange,
                            .last_error = cb_last_error};
    if (o->bad_groups) {
        cb.dp_size = ctx.world, cb.dp_rank = rank;
        cb.tp_size = 1, cb.tp_rank = 0;
    }
    cz_exec_config cfg = CZ_EXEC_CONFIG_INIT;
    if (ctx.world == 1)
        cfg.comm = "self";
    else
        cfg.callbacks = &cb;
    cfg.lr = 0.01f;
    if (o->tp_outer)
        cfg.dp_rank = rank % o->dp, cfg.tp_rank = rank / o->dp;
    cfg.dtype = o->bf16 ? CZ_DTYPE_BF16 : CZ_DTYPE_FP32;
    cfg.grad_reduce_in_fp32 = o->fp32_reduce;
    cz_error err = {0};
    cz_executor *ex = NULL;
    int rc = cz_executor_create_from_plan(&ex, plan, &cfg, &err);
    size_t np = plan->nparams, tot = 0;
    float **p = calloc(np, sizeof *p), **g = calloc(np, sizeof *g);
    /* With bf16 the bound buffers are bf16 copies (pb, gb) of p and g. */
    uint16_t **pb = calloc(np, sizeof *pb), **gb = calloc(np, sizeof *gb);
    for (size_t i = 0; !rc && i < np; i++) {
        const cz_plan_param *q = &plan->params[i];
        p[i] = malloc((size_t)q->numel * sizeof(float));
        g[i] = malloc((size_t)q->numel * sizeof(float));
        pb[i] = malloc((size_t)q->numel * sizeof(uint16_t));
        gb[i] = malloc((size_t)q->numel * sizeof(uint16_t));
        fill_shard(q, o->tp, tp_of(o, rank), 0, p[i]);
        for (int64_t k = 0; k < q->numel; k++)
            pb[i][k] = cz_ew_bf16_from_f32(p[i][k]);
        rc = o->bf16
                 ? cz_executor_bind_param_typed(ex, q->def.name, pb[i], gb[i], q->local_shape[0],
                                                q->def.ndim == 1 ? 1 : q->local_shape[1],
                                                CZ_DTYPE_BF16, &err)
                 : cz_executor_bind_param(ex, q->def.name, p[i], g[i], q->local_shape[0],
                                          q->def.ndim == 1 ? 1 : q->local_shape[1], &err);
    }
    if (!rc && o->per_param) {
        float *lr = malloc(np * sizeof *lr), *wd = malloc(np * sizeof *wd);
        for (size_t i = 0; i < np; i++)
            rates_of(plan, i, o->same_lr, &lr[i], &wd[i]);
        if (rank == o->bad_rank && !o->bad_clip)
            lr[0] *= 2.0f;
        rc = cz_executor_set_param_rates(ex, lr, wd, np, &err);
        free(lr);
        free(wd);
    }
    if (!rc && o->bad_clip && rank == o->bad_rank)
        rc = cz_executor_set_max_grad_norm(ex, 1.0f, &err);
    if (!rc && o->lr > 0.0f && (rc = cz_executor_set_lr(ex, o->lr, o->adamw_lr, &err)) == 0)
        rc = cz_executor_set_weight_decay(ex, o->wd, o->adamw_wd, &err);
    for (int s = 1; !rc && s <= o->steps; s++) {
        for (size_t i = 0; i < np; i++) {
            fill_shard(&plan->params[i], o->tp, tp_of(o, rank), s, g[i]);
            for (int64_t k = 0; k < plan->params[i].numel; k++)
                gb[i][k] = cz_ew_bf16_from_f32(g[i][k]);
        }
        rc = cz_executor_step(ex, &err);
    }
    cz_exec_wire w;
    cz_executor_wire(ex, &w);
    cz_dtype want = o->bf16 && !o->fp32_reduce ? CZ_DTYPE_BF16 : CZ_DTYPE_FP32;
    if (!rc && (w.grad_dtype != want || w.param_dtype != (cz_dtype)cfg.dtype))
        rc = cz__error_set(&err, CZ_EINTERNAL, "wire dtypes %s, %s; expected %s, %s",
                           cz_dtype_name(w.grad_dtype), cz_dtype_name(w.param_dtype),
                           cz_dtype_name(want), cz_dtype_name((cz_dtype)cfg.dtype));
    if (rc)
        snprintf(msg, 1024, "%s", err.message);
    for (size_t i = 0; i < np; i++) {
        for (int64_t k = 0; o->bf16 && p[i] && pb[i] && k < plan->params[i].numel; k++)
            p[i][k] = cz_ew_f32_from_bf16(pb[i][k]);
        if (out && p[i])
            memcpy(out + tot, p[i], (size_t)plan->params[i].numel * sizeof(float));
        tot += (size_t)plan->params[i].numel;
        free(p[i]);
        free(g[i]);
        free(pb[i]);
        free(gb[i]);
    }
    free(p);
    free(g);
    free(pb);
    free(gb);
    cz_executor_free(ex);
    return rc;
}

/* What the ranks report back through shared memory. */
typedef struct result {
    int rc[MAXR];
    char msg[MAXR][1024];
} result;

/* Forks n ranks, each running body(rank, ctx) under an alarm of limit_s seconds (times
 * CZ_TIME_SCALE), and waits for them all: a rank that crashes, hangs past its alarm or exits
 * otherwise than through body fails the test. What a rank reports goes through shared memory
 * (ctx). */
static void fork_ranks(int n, unsigned limit_s, void (*body)(int rank, void *ctx), void *ctx)
{
    pid_t pid[MAXR];
    for (int r = 0; r < n; r++) {
        pid[r] = fork();
        ck_assert_int_ge(pid[r], 0);
        if (pid[r] == 0) {
            const char *scale = getenv("CZ_TIME_SCALE");
            alarm(limit_s * (unsigned)(scale ? atoi(scale) : 1));
            body(r, ctx);
            _exit(0);
        }
    }
    for (int r = 0; r < n; r++) {
        int st = 0;
        ck_assert_int_eq(waitpid(pid[r], &st, 0), pid[r]);
        ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "rank %d ended abnormally (%d)", r,
                      st);
    }
}

typedef struct run_ctx {
    const run_opts *o;
    const cz_plan *plan;
    float *shards;
    size_t per_rank;
    result *res;
} run_ctx;

static void run_body(int r, void *p)
{
    run_ctx *c = p;
    c->res->rc[r] = run_rank(c->o, r, c->plan, c->shards + c->per_rank * (size_t)r, c->res->msg[r]);
}

/* Forks the ranks; each writes its shards at its slot of shards (per rank, plan order). */
static void run_ranks(const run_opts *o, float *shards, size_t per_rank, result *res)
{
    cz_plan *plan = make_plan(o->dp, o->tp);
    int n = o->dp * o->tp;
    memset(boxes, 0, sizeof(mailbox) * MAXR * MAXR);
    run_ctx ctx = {o, plan, shards, per_rank, res};
    fork_ranks(n, 120, run_body, &ctx);
    cz_plan_free(plan);
}

static void *shared(size_t bytes)
{
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    ck_assert_ptr_ne(p, MAP_FAILED);
    memset(p, 0, bytes);
    return p;
}

static void setup(void)
{
    const char *tmp = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(dir, sizeof dir, "%s/cz_callbacks_XXXXXX", tmp);
    ck_assert_ptr_nonnull(mkdtemp(dir));
    boxes = shared(sizeof(mailbox) * MAXR * MAXR);
}

static void teardown(void)
{
    munmap(boxes, sizeof(mailbox) * MAXR * MAXR);
    rmdir(dir);
}

/* The distributed run's shards against the one-process run's full tensors. */
static void compare(const run_opts *o)
{
    cz_plan *full = make_plan(1, 1), *dist = make_plan(o->dp, o->tp);
    size_t per_rank = 0, nfull = 0;
    for (size_t i = 0; i < dist->nparams; i++)
        per_rank += (size_t)dist->params[i].numel;
    for (size_t i = 0; i < full->nparams; i++)
        nfull += (size_t)full->params[i].numel;
    float *ref = shared(nfull * sizeof(float));
    float *got = shared(per_rank * MAXR * sizeof(float));
    result *res = shared(sizeof *res);
    run_opts one = *o;
    one.dp = one.tp = 1;
    one.bad_rank = -1;
    run_ranks(&one, ref, nfull, res);
    ck_assert_msg(res->rc[0] == 0, "one process: %s", res->msg[0]);
    run_ranks(o, got, per_rank, res);
    for (int r = 0; r < o->dp * o->tp; r++)
        ck_assert_msg(res->rc[r] == 0, "rank %d: %s", r, res->msg[r]);
    /* Every rank's shard of every parameter: the full tensor's, sliced as fill_shard does. */
    double worst = 0.0;
    float *want = malloc(nfull * sizeof(float));
    for (int r = 0; r < o->dp * o->tp; r++) {
        size_t at = 0, fat = 0;
        for (size_t i = 0; i < dist->nparams; i++) {
            const cz_plan_param *q = &dist->params[i], *fq = &full->params[i];
            int64_t lr = q->local_shape[0], lc = q->def.ndim == 1 ? 1 : q->local_shape[1];
            int64_t fc = fq->def.ndim == 1 ? 1 : fq->local_shape[1];
            int64_t row, col;
            for (int64_t a = 0; a < lr; a++)
                for (int64_t b = 0; b < lc; b++) {
                    full_at(q, o->tp, tp_of(o, r), a, b, &row, &col);
                    double d = fabs((double)got[per_rank * (size_t)r + at + (size_t)(a * lc + b)] -
                                    (double)ref[fat + (size_t)(row * fc + col)]);
                    worst = d > worst ? d : worst;
                }
            at += (size_t)q->numel;
            fat += (size_t)fq->numel;
        }
    }
    free(want);
    ck_assert_msg(worst < 2e-5, "dp %d tp %d groups %d: largest difference %g", o->dp, o->tp,
                  o->has_groups, worst);
    munmap(ref, nfull * sizeof(float));
    munmap(got, per_rank * MAXR * sizeof(float));
    munmap(res, sizeof *res);
    cz_plan_free(full);
    cz_plan_free(dist);
}

START_TEST(dp2_tp2_equals_one_process)
{
    run_opts o = {.dp = 2, .tp = 2, .has_groups = _i, .steps = 3, .bad_rank = -1};
    compare(&o);
}
END_TEST

/* Ranks placed TP outermost by the job (cz_exec_config's dp_rank and tp_rank): the layout then
 * names no plane's members, the ranks agree on that at create, and the executor splits its DP
 * and TP planes by color and key instead, with the same result. */
START_TEST(tp_outermost_ranks_split_by_color)
{
    run_opts o = {.dp = 2, .tp = 2, .steps = 3, .bad_rank = -1, .tp_outer = 1};
    compare(&o);
}
END_TEST

START_TEST(dp4_tp1_equals_one_process)
{
    run_opts o = {.dp = 4, .tp = 1, .has_groups = _i, .steps = 3, .bad_rank = -1};
    compare(&o);
}
END_TEST

/* bf16 on the wire through the callbacks, on the job's groups (the all_reduce callback in
 * CZ_COMM_BF16) and on groups the executor forms (its own bf16 sums): the DP replicas'
 * gradients are equal here, and a sum of two equal bf16 values is exact, so at DP 2 the bf16
 * reduction gives the fp32 one's parameters bit for bit. */
START_TEST(dp2_bf16_wire_equals_fp32_reduction)
{
    run_opts o = {.dp = 2, .tp = 2, .has_groups = _i, .steps = 3, .bad_rank = -1, .bf16 = 1};
    cz_plan *plan = make_plan(o.dp, o.tp);
    size_t per_rank = 0;
    for (size_t i = 0; i < plan->nparams; i++)
        per_rank += (size_t)plan->params[i].numel;
    cz_plan_free(plan);
    float *wire = shared(per_rank * MAXR * sizeof(float));
    float *fp32 = shared(per_rank * MAXR * sizeof(float));
    result *res = shared(sizeof *res);
    for (int k = 0; k < 2; k++) {
        o.fp32_reduce = k;
        run_ranks(&o, k ? fp32 : wire, per_rank, res);
        for (int r = 0; r < o.dp * o.tp; r++)
            ck_assert_msg(res->rc[r] == 0, "rank %d (grad_reduce_in_fp32 %d): %s", r, k,
                          res->msg[r]);
    }
    ck_assert_int_eq(memcmp(wire, fp32, per_rank * (size_t)(o.dp * o.tp) * sizeof(float)), 0);
    munmap(wire, per_rank * MAXR * sizeof(float));
    munmap(fp32, per_rank * MAXR * sizeof(float));
    munmap(res, sizeof *res);
}
END_TEST

START_TEST(rates_per_parameter)
{
    /* Three groups of rates: the distributed run with them equals the one-process one. */
    run_opts o = {.dp = 2, .tp = 2, .has_groups = 1, .steps = 2, .per_param = 1, .bad_rank = -1};
    compare(&o);
}
END_TEST

START_TEST(rates_are_each_parameters_own)
{
    /* One process, three groups of rates, against runs with one rate for all: a parameter of a
     * group ends as it does in the run whose rates are its group's (its update depends on its
     * own gradients and rates only). _i = 1: the matrix groups share their learning rate and
     * differ in weight decay only, which the matrix updates' uniform fast path (one rate and
     * weight decay for a whole micro-group) must not take for one. */
    int same = _i;
    cz_plan *plan = make_plan(1, 1);
    size_t n = 0;
    for (size_t i = 0; i < plan->nparams; i++)
        n += (size_t)plan->params[i].numel;
    float *groups = shared(n * sizeof(float)), *one = shared(n * sizeof(float));
    result *res = shared(sizeof *res);
    run_opts o = {.dp = 1, .tp = 1, .steps = 2, .per_param = 1, .bad_rank = -1, .same_lr = same};
    run_ranks(&o, groups, n, res);
    ck_assert_msg(res->rc[0] == 0, "%s", res->msg[0]);
    run_opts u[2] = {{.dp = 1,
                      .tp = 1,
                      .steps = 2,
                      .bad_rank = -1,
                      .lr = same ? 0.01f : 0.02f,
                      .wd = 0.0f,
                      .adamw_lr = 0.004f,
                      .adamw_wd = 0.0f},
                     {.dp = 1,
                      .tp = 1,
                      .steps = 2,
                      .bad_rank = -1,
                      .lr = 0.01f,
                      .wd = 0.1f,
                      .adamw_lr = 0.002f,
                      .adamw_wd = 0.05f}};
    int checked = 0;
    for (int k = 0; k < 2; k++) {
        run_ranks(&u[k], one, n, res);
        ck_assert_msg(res->rc[0] == 0, "%s", res->msg[0]);
        size_t at = 0;
        for (size_t i = 0; i < plan->nparams; i++) {
            float lr, wd;
            rates_of(plan, i, same, &lr, &wd);
            bool mine = plan->params[i].def.kind == CZ_KIND_MATRIX
                            ? lr == u[k].lr && wd == u[k].wd
                            : lr == u[k].adamw_lr && wd == u[k].adamw_wd;
            if (mine) {
                ck_assert_msg(memcmp(groups + at, one + at,
                                     (size_t)plan->params[i].numel * sizeof(float)) == 0,
                              "'%s' differs from the run with its rates", plan->params[i].def.name);
                checked++;
            } else {
                ck_assert_msg(memcmp(groups + at, one + at,
                                     (size_t)plan->params[i].numel * sizeof(float)) != 0,
                              "'%s' equals the run with other rates", plan->params[i].def.name);
            }
            at += (size_t)plan->params[i].numel;
        }
    }
    ck_assert_int_eq(checked, (int)plan->nparams);
    munmap(groups, n * sizeof(float));
    munmap(one, n * sizeof(float));
    munmap(res, sizeof *res);
    cz_plan_free(plan);
}
END_TEST

START_TEST(rates_that_differ_are_refused_everywhere)
{
    /* Rank 3 sets another learning rate (_i = 0) or, alone, a clipping threshold (_i = 1). */
    run_opts o = {.dp = 2,
                  .tp = 2,
                  .has_groups = 1,
                  .steps = 1,
                  .per_param = !_i,
                  .bad_rank = 3,
                  .bad_clip = _i};
    cz_plan *dist = make_plan(2, 2);
    size_t per_rank = 0;
    for (size_t i = 0; i < dist->nparams; i++)
        per_rank += (size_t)dist->params[i].numel;
    float *got = shared(per_rank * MAXR * sizeof(float));
    result *res = shared(sizeof *res);
    run_ranks(&o, got, per_rank, res);
    for (int r = 0; r < 4; r++) {
        ck_assert_int_eq(res->rc[r], CZ_EMISMATCH);
        ck_assert_msg(strstr(res->msg[r], "different learning rates, weight decays, momentum "
                                          "coefficients or clipping thresholds"),
                      "%s", res->msg[r]);
        /* Nothing changed: every shard still holds its initial values. */
        size_t at = 0;
        float *init = malloc(per_rank * sizeof(float));
        for (size_t i = 0; i < dist->nparams; i++) {
            fill_shard(&dist->params[i], 2, r % 2, 0, init + at);
            at += (size_t)dist->params[i].numel;
        }
        ck_assert_int_eq(memcmp(init, got + per_rank * (size_t)r, per_rank * sizeof(float)), 0);
        free(init);
    }
    munmap(got, per_rank * MAXR * sizeof(float));
    munmap(res, sizeof *res);
    cz_plan_free(dist);
}
END_TEST

START_TEST(groups_that_disagree_with_the_plan)
{
    /* The job's groups are DP4 x TP1 but the plan DP2 x TP2: every rank refuses at create. */
    run_opts o = {.dp = 2, .tp = 2, .has_groups = 1, .steps = 1, .bad_rank = -1, .bad_groups = 1};
    float *got = shared(sizeof(float));
    result *res = shared(sizeof *res);
    run_ranks(&o, got, 0, res);
    for (int r = 0; r < 4; r++) {
        ck_assert_int_eq(res->rc[r], CZ_EMISMATCH);
        ck_assert_msg(strstr(res->msg[r], "the plan needs dp = 2"), "%s", res->msg[r]);
    }
    munmap(got, sizeof(float));
    munmap(res, sizeof *res);
}
END_TEST

START_TEST(a_failed_callback_is_reported)
{
    /* A failing transport: the message names the callback and carries the transport's text. */
    cz_plan *plan = make_plan(1, 2);
    rank_ctx ctx = {.world = 2, .rank = 0, .dp = 1, .tp = 2, .fail_at = 1};
    cz_comm_callbacks cb = {CZ_COMM_CALLBACKS_VERSION,
                            &ctx,
                            2,
                            0,
                            0,
                            0,
                            0,
                            0,
                            0,
                            cb_all_reduce,
                            cb_broadcast,
                            cb_exchange,
                            cb_last_error};
    cz_exec_config cfg = CZ_EXEC_CONFIG_INIT;
    cfg.callbacks = &cb;
    cz_error err;
    cz_executor *ex = NULL;
    /* Rank 0 alone: its first exchange (the world's split) fails before it waits on anyone. */
    ck_assert_int_eq(cz_executor_create_from_plan(&ex, plan, &cfg, &err), CZ_EIO);
    ck_assert_msg(strstr(err.message, "callback failed on the") &&
                      strstr(err.message, "the test's transport refused"),
                  "%s", err.message);
    ck_assert_ptr_null(ex);
    /* A wrong version, and communicators beside the callbacks, are refused before any call. */
    cb.version = 0;
    ck_assert_int_eq(cz_executor_create_from_plan(&ex, plan, &cfg, &err), CZ_EUNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(err.message, "cz_comm_callbacks version 0"));
    cb.version = CZ_COMM_CALLBACKS_VERSION;
    int comm = 0;
    cfg.world_comm = &comm;
    ck_assert_int_eq(cz_executor_create_from_plan(&ex, plan, &cfg, &err), CZ_EINVALID);
    ck_assert_ptr_nonnull(strstr(err.message, "takes no communicators"));
    cz_plan_free(plan);
}
END_TEST

/* The planes split from the callbacks' world (the cooperative Newton-Schulz sums' sub-planes
 * are such subsets) on rank `rank` of 4: a subset of 3 in reverse key order, pairs of ranks
 * apart, and a subset of the subset; out[0..2]: the 3-subset's fp32 sums, out[3..4]: the pairs'
 * fp64 sums, out[5..6]: the inner subset's fp32 sums. Each rank's values are powers of two of
 * its own, so that any member's values missing or counted twice shows. */
static int subset_rank(int rank, double *out, char *msg)
{
    rank_ctx ctx = {.world = 4, .rank = rank, .dp = 4, .tp = 1};
    cz_comm_callbacks cb = callbacks_of(&ctx);
    cz_exec_config cfg = CZ_EXEC_CONFIG_INIT;
    cfg.callbacks = &cb;
    cz_ctrl ctrl = {0};
    cz_plane world = {0}, three = {0}, pair = {0}, inner = {0};
    const cz_comm_backend *be = NULL;
    cz_error err = {0};
    float f[3], g[2];
    double d[2];
    for (int j = 0; j < 3; j++)
        f[j] = ldexpf(1.0f, rank + 4 * j);
    for (int j = 0; j < 2; j++) {
        d[j] = ldexp(1.0, rank + 4 * j);
        g[j] = ldexpf(1.0f, rank + 4 * j);
    }
    int rc = cz__comm_open(&cfg, &ctrl, &world, &be, &err);
    if (!rc)
        rc = world.ops->split(&world, rank < 3 ? 0 : 1, -rank, &three, &err);
    if (!rc)
        rc = three.ops->allreduce_sum(&three, f, 3, 0, NULL, &err);
    if (!rc)
        rc = world.ops->split(&world, rank % 2, rank, &pair, &err);
    if (!rc)
        rc = pair.ops->allreduce_sum(&pair, d, 2, 1, NULL, &err);
    if (!rc)
        rc = three.ops->split(&three, three.rank % 2, three.rank, &inner, &err);
    if (!rc)
        rc = inner.ops->allreduce_sum(&inner, g, 2, 0, NULL, &err);
    for (int j = 0; j < 3; j++)
        out[j] = f[j];
    for (int j = 0; j < 2; j++) {
        out[3 + j] = d[j];
        out[5 + j] = g[j];
    }
    if (rc)
        snprintf(msg, 1024, "%s", err.message);
    cz__plane_close(&inner);
    cz__plane_close(&pair);
    cz__plane_close(&three);
    cz__plane_close(&world);
    cz__ctrl_close(&ctrl);
    return rc;
}

typedef struct subset_ctx {
    double *out;
    result *res;
} subset_ctx;

static void subset_body(int r, void *p)
{
    subset_ctx *c = p;
    c->res->rc[r] = subset_rank(r, c->out + 8 * r, c->res->msg[r]);
}

START_TEST(subset_planes_sum_every_member)
{
    double *out = shared(4 * 8 * sizeof(double));
    result *res = shared(sizeof *res);
    memset(boxes, 0, sizeof(mailbox) * MAXR * MAXR);
    subset_ctx ctx = {out, res};
    fork_ranks(4, 60, subset_body, &ctx);
    for (int r = 0; r < 4; r++)
        ck_assert_msg(res->rc[r] == 0, "rank %d: %s", r, res->msg[r]);
    /* The members' sums of 2^(rank + 4j): {0, 1, 2} and {3} alone; {0, 2} and {1, 3}; inside
     * {2, 1, 0} (plane ranks 0, 1, 2), plane ranks 0 and 2 (world 2 and 0), and world 1. */
    static const int three[4] = {7, 7, 7, 8}, pairs[4] = {5, 10, 5, 10}, inner[4] = {5, 2, 5, 8};
    for (int r = 0; r < 4; r++) {
        for (int j = 0; j < 3; j++)
            ck_assert_msg(out[8 * r + j] == ldexp(three[r], 4 * j),
                          "rank %d: the 3-member subset's sum %d is %g, not %g", r, j,
                          out[8 * r + j], ldexp(three[r], 4 * j));
        for (int j = 0; j < 2; j++) {
            ck_assert_msg(out[8 * r + 3 + j] == ldexp(pairs[r], 4 * j),
                          "rank %d: the pair's sum %d is %g, not %g", r, j, out[8 * r + 3 + j],
                          ldexp(pairs[r], 4 * j));
            ck_assert_msg(out[8 * r + 5 + j] == ldexp(inner[r], 4 * j),
                          "rank %d: the inner subset's sum %d is %g, not %g", r, j,
                          out[8 * r + 5 + j], ldexp(inner[r], 4 * j));
        }
    }
    munmap(out, 4 * 8 * sizeof(double));
    munmap(res, sizeof *res);
}
END_TEST

START_TEST(lr_zero_is_zero)
{
    /* Since config version 6: lr = 0 and adamw.lr = 0 leave every parameter as it was. */
    cz_plan *plan = make_plan(1, 1);
    cz_exec_config cfg = CZ_EXEC_CONFIG_INIT;
    ck_assert_float_eq(cfg.lr, CZ_EXEC_LR_DEFAULT);
    cfg.comm = "self";
    cfg.lr = 0.0f;
    cfg.adamw.lr = 0.0f;
    cz_error err;
    cz_executor *ex = NULL;
    ck_assert_msg(cz_executor_create_from_plan(&ex, plan, &cfg, &err) == 0, "%s", err.message);
    size_t n = cz_executor_buffer_numel(ex);
    float *p = malloc(n * sizeof(float)), *g = malloc(n * sizeof(float));
    float *p0 = malloc(n * sizeof(float));
    for (size_t k = 0; k < n; k++)
        p[k] = p0[k] = val(k), g[k] = val(k + 7);
    ck_assert_int_eq(cz_executor_bind_buffers(ex, p, g, n, &err), 0);
    ck_assert_msg(cz_executor_step(ex, &err) == 0, "%s", err.message);
    ck_assert_int_eq(memcmp(p, p0, n * sizeof(float)), 0);
    /* A config of a version above the library's is refused, naming both (a version-5
     * config, whose lr = 0 meant the default, is read as such: test_config_versions.c). */
    cz_executor *newer = NULL;
    cfg.version = CZ_EXEC_CONFIG_VERSION + 1;
    ck_assert_int_eq(cz_executor_create_from_plan(&newer, plan, &cfg, &err), CZ_EUNSUPPORTED);
    ck_assert_ptr_null(newer);
    ck_assert_ptr_nonnull(strstr(err.message, "is newer than this library"));
    /* Names in plan order, for rates per parameter. */
    ck_assert_uint_eq(cz_executor_param_count(ex), plan->nparams);
    ck_assert_str_eq(cz_executor_param_name(ex, 0), plan->params[0].def.name);
    ck_assert_ptr_null(cz_executor_param_name(ex, plan->nparams));
    float lr[64], wd[64];
    for (size_t i = 0; i < plan->nparams; i++)
        lr[i] = wd[i] = 0.0f;
    lr[1] = -1.0f;
    ck_assert_int_eq(cz_executor_set_param_rates(ex, lr, wd, plan->nparams, &err), CZ_EINVALID);
    ck_assert_ptr_nonnull(strstr(err.message, plan->params[1].def.name));
    ck_assert_int_eq(cz_executor_set_param_rates(ex, lr, wd, 3, &err), CZ_EMISMATCH);
    ck_assert_int_eq(cz_executor_set_max_grad_norm(ex, -1.0f, &err), CZ_EINVALID);
    free(p), free(g), free(p0);
    cz_executor_free(ex);
    cz_plan_free(plan);
}
END_TEST

/* ---- the fully sharded step (docs/EXECUTOR.md, "The fully sharded step") ---- */

/* A model whose row counts FSDP2 cuts unevenly over 4 ranks (torch.chunk: 7 rows 2,2,2,1; 10
 * rows 3,3,3,1; 5 rows 2,2,1,0; 3 rows 1,1,1,0), so that the exchanges carry short and empty
 * shards. */
static cz_plan *make_fsdp_plan(int dp)
{
    char model_path[512];
    snprintf(model_path, sizeof model_path, "%s/fsdp_model.json", dir);
    FILE *f = fopen(model_path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(
        "{\"schema\": \"canzona.model/1\", \"name\": \"uneven\", \"dtype\": \"fp32\", "
        "\"params\": ["
        "{\"name\": \"a.weight\", \"shape\": [7, 12], \"tp_dim\": null, \"optimizer\": \"matrix\"},"
        "{\"name\": \"a.bias\", \"shape\": [7], \"tp_dim\": null, \"optimizer\": \"elementwise\"},"
        "{\"name\": \"b.weight\", \"shape\": [10, 7], \"tp_dim\": null, \"optimizer\": \"matrix\"},"
        "{\"name\": \"c.weight\", \"shape\": [5, 10], \"tp_dim\": null, \"optimizer\": \"matrix\"},"
        "{\"name\": \"d.weight\", \"shape\": [3, 5], \"tp_dim\": null, \"optimizer\": \"matrix\"},"
        "{\"name\": \"d.bias\", \"shape\": [3], \"tp_dim\": null, \"optimizer\": \"elementwise\"}"
        "]}",
        f);
    fclose(f);
    cz_plan *plan = plan_of(model_path, dp, 1, CZ_LAYOUT_FSDP);
    ck_assert(cz_plan_is_fsdp(plan));
    unlink(model_path);
    return plan;
}

/* Rank `rank` of dp binds its FSDP2 rows of every parameter (torch.chunk along dim 0), runs
 * steps, and writes its rows back at their place in out (the whole tensors, plan order): the
 * ranks' rows are disjoint, so together they fill it. norm: the last step's gradient norm. */
static int run_fsdp_rank(int dp, int rank, const cz_plan *plan, int steps, float *out, double *norm,
                         char *msg)
{
    rank_ctx ctx = {.world = dp, .rank = rank, .dp = dp, .tp = 1};
    cz_comm_callbacks cb = callbacks_of(&ctx);
    cz_exec_config cfg = CZ_EXEC_CONFIG_INIT;
    if (dp == 1)
        cfg.comm = "self";
    else
        cfg.callbacks = &cb;
    cfg.lr = 0.01f;
    cz_error err = {0};
    cz_executor *ex = NULL;
    int rc = cz_executor_create_from_plan(&ex, plan, &cfg, &err);
    size_t np = plan->nparams;
    float **p = calloc(np, sizeof *p), **g = calloc(np, sizeof *g);
    int64_t *lo = calloc(np, sizeof *lo), *rows = calloc(np, sizeof *rows);
    for (size_t i = 0; !rc && i < np; i++) {
        const cz_plan_param *q = &plan->params[i];
        int64_t full = q->def.shape[0], cols = q->def.ndim == 1 ? 1 : q->def.shape[1];
        int64_t chunk = (full + dp - 1) / dp;
        lo[i] = chunk * rank < full ? chunk * rank : full;
        rows[i] = full - lo[i] < chunk ? full - lo[i] : chunk;
        /* One element more than the shard, so that an empty shard still has a pointer. */
        p[i] = malloc((size_t)(rows[i] * cols + 1) * sizeof(float));
        g[i] = malloc((size_t)(rows[i] * cols + 1) * sizeof(float));
        for (int64_t a = 0; a < rows[i]; a++)
            for (int64_t b = 0; b < cols; b++)
                p[i][a * cols + b] = full_val((int)i, 0, lo[i] + a, b);
        rc = cz_executor_bind_param(ex, q->def.name, p[i], g[i], rows[i], cols, &err);
    }
    for (int s = 1; !rc && s <= steps; s++) {
        for (size_t i = 0; i < np; i++) {
            const cz_plan_param *q = &plan->params[i];
            int64_t cols = q->def.ndim == 1 ? 1 : q->def.shape[1];
            for (int64_t a = 0; a < rows[i]; a++)
                for (int64_t b = 0; b < cols; b++)
                    g[i][a * cols + b] = full_val((int)i, s, lo[i] + a, b);
        }
        rc = cz_executor_step(ex, &err);
    }
    if (rc)
        snprintf(msg, 1024, "%s", err.message);
    *norm = cz_executor_grad_norm(ex);
    size_t at = 0;
    for (size_t i = 0; i < np; i++) {
        const cz_plan_param *q = &plan->params[i];
        int64_t cols = q->def.ndim == 1 ? 1 : q->def.shape[1];
        if (!rc)
            memcpy(out + at + (size_t)(lo[i] * cols), p[i],
                   (size_t)(rows[i] * cols) * sizeof(float));
        at += (size_t)(q->def.shape[0] * cols);
        free(p[i]);
        free(g[i]);
    }
    free(p), free(g), free(lo), free(rows);
    cz_executor_free(ex);
    return rc;
}

/* The fully sharded plan at DP4 over the callbacks (each rank its FSDP2 rows, the owners'
 * exchanges through the callbacks' exchange) must give the one-process run's parameters on
 * the self plane, bit for bit: the exchanges only move rows, the owners run Muon on the same
 * whole gradients and every rank applies the same update rows. */
typedef struct fsdp_ctx {
    int dp, steps;
    const cz_plan *plan;
    float *out;
    double *norms;
    result *res;
} fsdp_ctx;

static void fsdp_body(int r, void *p)
{
    fsdp_ctx *c = p;
    c->res->rc[r] =
        run_fsdp_rank(c->dp, r, c->plan, c->steps, c->out, &c->norms[r], c->res->msg[r]);
}

START_TEST(fsdp_dp4_equals_one_process)
{
    enum { DP = 4, STEPS = 3 };
    cz_plan *one = make_fsdp_plan(1), *dist = make_fsdp_plan(DP);
    size_t total = 0;
    for (size_t i = 0; i < one->nparams; i++)
        total += (size_t)one->params[i].numel;
    float *ref = shared(total * sizeof(float)), *got = shared(total * sizeof(float));
    double *norms = shared((DP + 1) * sizeof(double));
    result *res = shared(sizeof *res);
    /* The owners are spread: more than one rank runs Muon, so the exchanges go both ways. */
    int owners = 0;
    for (size_t i = 0; i < dist->nparams; i++)
        owners |= dist->params[i].def.kind == CZ_KIND_MATRIX ? 1 << dist->params[i].owner : 0;
    ck_assert_msg(owners != 0 && (owners & (owners - 1)) != 0, "owners 0x%x", owners);
    memset(boxes, 0, sizeof(mailbox) * MAXR * MAXR);
    res->rc[0] = run_fsdp_rank(1, 0, one, STEPS, ref, &norms[DP], res->msg[0]);
    ck_assert_msg(res->rc[0] == 0, "one process: %s", res->msg[0]);
    fsdp_ctx ctx = {DP, STEPS, dist, got, norms, res};
    fork_ranks(DP, 120, fsdp_body, &ctx);
    for (int r = 0; r < DP; r++) {
        ck_assert_msg(res->rc[r] == 0, "rank %d: %s", r, res->msg[r]);
        /* The ranks' sums of squares are added in another order than one process's. */
        ck_assert_msg(fabs(norms[r] - norms[DP]) <= 1e-12 * norms[DP],
                      "rank %d: norm %.17g vs %.17g", r, norms[r], norms[DP]);
    }
    size_t at = 0;
    for (size_t i = 0; i < one->nparams; i++) {
        size_t n = (size_t)one->params[i].numel;
        ck_assert_msg(memcmp(got + at, ref + at, n * sizeof(float)) == 0,
                      "'%s' differs from the one-process run", one->params[i].def.name);
        ck_assert_msg(ref[at] != full_val((int)i, 0, 0, 0), "'%s' was not updated",
                      one->params[i].def.name);
        at += n;
    }
    munmap(ref, total * sizeof(float));
    munmap(got, total * sizeof(float));
    munmap(norms, (DP + 1) * sizeof(double));
    munmap(res, sizeof *res);
    cz_plan_free(one);
    cz_plan_free(dist);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("callbacks");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 300);
    tcase_add_loop_test(tc, dp2_tp2_equals_one_process, 0, 2);
    tcase_add_loop_test(tc, dp4_tp1_equals_one_process, 0, 2);
    tcase_add_test(tc, tp_outermost_ranks_split_by_color);
    tcase_add_loop_test(tc, dp2_bf16_wire_equals_fp32_reduction, 0, 2);
    tcase_add_test(tc, rates_per_parameter);
    tcase_add_loop_test(tc, rates_are_each_parameters_own, 0, 2);
    tcase_add_loop_test(tc, rates_that_differ_are_refused_everywhere, 0, 2);
    tcase_add_test(tc, subset_planes_sum_every_member);
    tcase_add_test(tc, groups_that_disagree_with_the_plan);
    tcase_add_test(tc, a_failed_callback_is_reported);
    tcase_add_test(tc, lr_zero_is_zero);
    suite_add_tcase(s, tc);
    /* A case of its own: CK_RUN_CASE=fsdp runs it alone. */
    TCase *fs = tcase_create("fsdp");
    tcase_add_checked_fixture(fs, setup, teardown);
    tcase_set_timeout(fs, 300);
    tcase_add_test(fs, fsdp_dp4_equals_one_process);
    suite_add_tcase(s, fs);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
