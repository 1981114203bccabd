/* The stream/event order of a step, checked on the CPU against the GPU's execution model.
 *
 * On a GPU the compute ops run in order on one stream and the NCCL plane's operations in order
 * on another; the only orderings between the two are the ones the seam expresses (as the nccl
 * plane implements them): a request-form operation (iall_gather, a send/receive group) starts
 * after the compute ops before its `after` event; a blocking-form one (reduce_scatter,
 * all_gather) after every compute op issued before it, and every compute op issued after it
 * waits for it; a plane wait makes later compute ops wait for the request; a download makes the
 * host wait, so operations issued after it come after the compute ops before it.
 *
 * This test runs real steps on the cpu backend and the self plane through recording wrappers,
 * logs every op's reads and writes (byte intervals of the real buffers), and fails when a
 * compute op and a communication op touch the same bytes, at least one writing, with neither
 * ordered before the other under that model: a race the GPU would have and the CPU hides. The
 * plan has two buckets (the reduce-scatter scratch is reused) and three micro-groups (the
 * double-buffered gather and scatter buffers are reused). A step skips the exchanges of a plane
 * of one rank, which is what the self plane is; cz__exec_exchange_one_rank makes the executor
 * lay out and post them as on a larger plane, so that the self plane stands in for one.
 *
 * The job is a third party: it writes the gradients before a step and reads the parameters
 * after it on a stream of its own, ordered against the backend's stream only by the step's
 * first and last compute ops, step_begin and step_end. So every op that touches the job's
 * bound buffers must come after step_begin (compute ops by position, data-plane ops by their
 * wait) and before step_end (data-plane ops joined by then). */
#include "exec_fixture.h"
#include "canzona_exec.h"
#include "cz_exec_testing.h"
#include "cz_format.h"

#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* compute_cpu.c's index map, mirrored to read a run list made before the wrappers went in. */
struct cz_runs {
    size_t n;
    cz_copy_run v[];
};

enum { MAXACC = 8, MAXOPS = 4096 };
typedef struct acc {
    uintptr_t lo, hi;
    int write;
} acc;
typedef struct rec {
    const char *name;
    acc a[MAXACC];
    int na;
    int wait; /* compute op: comm ops that finish before it; comm op: compute ops before it */
} rec;

static rec C[MAXOPS], M[MAXOPS];
static int nc, nm;
static int mfence;    /* comm ops every later compute op waits for */
static int host_c;    /* compute ops the host has waited for (later comm ops come after) */
static int group_cw;  /* the open group's compute dependency */
static rec *open_grp; /* the send/receive group being built */
static const cz_compute_ops *cpu;
static const cz_plane_ops *self;
static cz_compute_ops tc;
static cz_plane_ops tp;

/* Event and request positions: index into small tables keyed by pointer. */
enum { MAXKEYS = 64 };
static const void *ekeys[MAXKEYS], *rkeys[MAXKEYS];
static int epos[MAXKEYS], rpos[MAXKEYS], nek, nrk;

static int *slot(const void **keys, int *vals, int *n, const void *k)
{
    for (int i = 0; i < *n; i++)
        if (keys[i] == k)
            return &vals[i];
    ck_assert_int_lt(*n, MAXKEYS);
    keys[*n] = k;
    vals[*n] = -1;
    return &vals[(*n)++];
}

static void add(rec *r, const void *p, size_t bytes, int write)
{
    if (!bytes)
        return;
    ck_assert_int_lt(r->na, MAXACC);
    r->a[r->na++] = (acc){(uintptr_t)p, (uintptr_t)p + bytes, write};
}

static rec *cop(const char *name)
{
    ck_assert_int_lt(nc, MAXOPS);
    rec *r = &C[nc++];
    *r = (rec){.name = name, .wait = mfence};
    return r;
}

static rec *mop(const char *name, int cwait)
{
    ck_assert_int_lt(nm, MAXOPS);
    rec *r = &M[nm++];
    *r = (rec){.name = name, .wait = cwait > host_c ? cwait : host_c};
    return r;
}

static int after_pos(cz_event *e)
{
    return e ? *slot((const void **)ekeys, epos, &nek, e) : 0;
}

/* ---- recording compute ops (forwarding to the cpu backend) ---- */

static void t_step_begin(cz_compute *c)
{
    cop("step_begin");
    cpu->step_begin(c);
}

static void t_step_end(cz_compute *c)
{
    cop("step_end");
    cpu->step_end(c);
}

static void t_event_record(cz_compute *c, cz_event *e)
{
    *slot((const void **)ekeys, epos, &nek, e) = nc;
    cpu->event_record(c, e);
}

static int t_download(cz_compute *c, void *host, const void *src, size_t bytes, cz_error *err)
{
    add(cop("download"), src, bytes, 0);
    host_c = nc;
    return cpu->download(c, host, src, bytes, err);
}

static void t_copy_runs(cz_compute *c, float *dst, const float *src, const cz_runs *r)
{
    rec *o = cop("copy_runs");
    uintptr_t dlo = UINTPTR_MAX, dhi = 0, slo = UINTPTR_MAX, shi = 0;
    for (size_t k = 0; k < r->n; k++) {
        const cz_copy_run *v = &r->v[k];
        uintptr_t d = (uintptr_t)(dst + v->dst), s = (uintptr_t)(src + v->src);
        uintptr_t n = (uintptr_t)v->len * sizeof(float);
        dlo = d < dlo ? d : dlo, dhi = d + n > dhi ? d + n : dhi;
        slo = s < slo ? s : slo, shi = s + n > shi ? s + n : shi;
    }
    if (r->n) {
        add(o, (void *)dlo, dhi - dlo, 1);
        add(o, (void *)slo, shi - slo, 0);
    }
    cpu->copy_runs(c, dst, src, r);
}

static void t_convert(cz_compute *c, void *dst, cz_dtype dt, const void *src, cz_dtype st,
                      int64_t n)
{
    rec *o = cop("convert");
    add(o, dst, (size_t)n * (size_t)cz__dtype_bytes(dt), 1);
    add(o, src, (size_t)n * (size_t)cz__dtype_bytes(st), 0);
    cpu->convert(c, dst, dt, src, st, n);
}

static void t_scale(cz_compute *c, float *dst, const float *src, int64_t n, float alpha)
{
    rec *o = cop("scale");
    add(o, dst, (size_t)n * 4, 1);
    add(o, src, (size_t)n * 4, 0);
    cpu->scale(c, dst, src, n, alpha);
}

static void t_sumsq(cz_compute *c, const float *x, int64_t n, double *out)
{
    rec *o = cop("sumsq");
    add(o, x, (size_t)n * 4, 0);
    add(o, out, sizeof *out, 1);
    cpu->sumsq(c, x, n, out);
}

static void t_momentum(cz_compute *c, const float *g, float *buf, float *in, int64_t n, float mu,
                       int nesterov)
{
    rec *o = cop("momentum");
    add(o, g, (size_t)n * 4, 0);
    add(o, buf, (size_t)n * 4, 1);
    add(o, in, (size_t)n * 4, 1);
    cpu->momentum(c, g, buf, in, n, mu, nesterov);
}

static void t_block_load(cz_compute *c, float *dst, const float *src, int64_t ld, int64_t rows,
                         int64_t cols, int transpose, float eps)
{
    rec *o = cop("block_load");
    add(o, dst, (size_t)(rows * cols) * 4, 1);
    add(o, src, (size_t)((rows - 1) * ld + cols) * 4, 0);
    cpu->block_load(c, dst, src, ld, rows, cols, transpose, eps);
}

static int t_ns_batched(cz_compute *c, float *x, int batch, int64_t rows, int64_t cols,
                        const cz_ns_coeffs *k, int steps, float *work, cz_error *err)
{
    rec *o = cop("ns_batched");
    add(o, x, (size_t)(batch * rows * cols) * 4, 1);
    add(o, work, (size_t)(batch * (2 * rows * rows + rows * cols)) * 4, 1);
    return cpu->ns_batched(c, x, batch, rows, cols, k, steps, work, err);
}

static void t_block_store(cz_compute *c, float *dst, int64_t ld, const float *src, int64_t rows,
                          int64_t cols, int transpose, float scale)
{
    rec *o = cop("block_store");
    add(o, dst, (size_t)((rows - 1) * ld + cols) * 4, 1);
    add(o, src, (size_t)(rows * cols) * 4, 0);
    cpu->block_store(c, dst, ld, src, rows, cols, transpose, scale);
}

static void t_apply_update(cz_compute *c, float *p, const float *u, int64_t n, float lr, float wd)
{
    rec *o = cop("apply_update");
    add(o, p, (size_t)n * 4, 1);
    add(o, u, (size_t)n * 4, 0);
    cpu->apply_update(c, p, u, n, lr, wd);
}

static void t_apply_runs(cz_compute *c, float *p, const float *u, const cz_runs *r, float lr,
                         float wd)
{
    rec *o = cop("apply_runs");
    uintptr_t plo = UINTPTR_MAX, phi = 0, ulo = UINTPTR_MAX, uhi = 0;
    for (size_t k = 0; k < r->n; k++) {
        const cz_copy_run *v = &r->v[k];
        uintptr_t d = (uintptr_t)(p + v->dst), s = (uintptr_t)(u + v->src);
        uintptr_t n = (uintptr_t)v->len * sizeof(float);
        plo = d < plo ? d : plo, phi = d + n > phi ? d + n : phi;
        ulo = s < ulo ? s : ulo, uhi = s + n > uhi ? s + n : uhi;
    }
    if (r->n) {
        add(o, (void *)plo, phi - plo, 1);
        add(o, (void *)ulo, uhi - ulo, 0);
    }
    cpu->apply_runs(c, p, u, r, lr, wd);
}

static void t_adamw(cz_compute *c, float *p, const float *g, float *m, float *v, int64_t n,
                    const cz_adamw_args *a)
{
    rec *o = cop("adamw");
    add(o, p, (size_t)n * 4, 1);
    add(o, g, (size_t)n * 4, 0);
    add(o, m, (size_t)n * 4, 1);
    add(o, v, (size_t)n * 4, 1);
    cpu->adamw(c, p, g, m, v, n, a);
}

/* ---- recording data plane (nccl ordering; forwarding to the self plane, after = NULL) ---- */

static size_t sum(const size_t *counts, int n)
{
    size_t s = 0;
    for (int r = 0; r < n; r++)
        s += counts[r];
    return s;
}

static int t_reduce_scatter(cz_plane *p, const void *send, void *recv, const size_t *counts,
                            cz_dtype t, cz_event *after, cz_error *err)
{
    (void)after; /* subsumed: a blocking-form op waits for every compute op issued */
    rec *o = mop("reduce_scatter", nc);
    size_t es = (size_t)cz__dtype_bytes(t);
    add(o, send, sum(counts, p->size) * es, 0);
    add(o, recv, counts[p->rank] * es, 1);
    mfence = nm;
    return self->reduce_scatter(p, send, recv, counts, t, NULL, err);
}

static int t_all_gather(cz_plane *p, void *buf, const size_t *counts, cz_dtype t, cz_event *after,
                        cz_error *err)
{
    (void)after;
    rec *o = mop("all_gather", nc);
    add(o, buf, sum(counts, p->size) * (size_t)cz__dtype_bytes(t), 1);
    mfence = nm;
    return self->all_gather(p, buf, counts, t, NULL, err);
}

static int t_iall_gather(cz_plane *p, const void *send, size_t count, void *recv, cz_dtype t,
                         cz_event *after, cz_comm_req *req, cz_error *err)
{
    rec *o = mop("iall_gather", after_pos(after));
    size_t es = (size_t)cz__dtype_bytes(t);
    add(o, send, count * es, 0);
    add(o, recv, (size_t)p->size * count * es, 1);
    *slot((const void **)rkeys, rpos, &nrk, req) = nm;
    return self->iall_gather(p, send, count, recv, t, NULL, req, err);
}

static int t_group_start(cz_plane *p, cz_comm_req *req, cz_event *after, cz_error *err)
{
    group_cw = after_pos(after);
    open_grp = mop("send/recv group", group_cw);
    return self->group_start(p, req, NULL, err);
}

static void t_send(cz_plane *p, cz_comm_req *req, const void *buf, size_t count, cz_dtype t,
                   int peer)
{
    add(open_grp, buf, count * (size_t)cz__dtype_bytes(t), 0);
    self->send(p, req, buf, count, t, peer);
}

static void t_recv(cz_plane *p, cz_comm_req *req, void *buf, size_t count, cz_dtype t, int peer)
{
    add(open_grp, buf, count * (size_t)cz__dtype_bytes(t), 1);
    self->recv(p, req, buf, count, t, peer);
}

static int t_group_end(cz_plane *p, cz_comm_req *req, cz_error *err)
{
    *slot((const void **)rkeys, rpos, &nrk, req) = nm;
    open_grp = NULL;
    return self->group_end(p, req, err);
}

static int t_wait(cz_plane *p, cz_comm_req *req, cz_error *err)
{
    int pos = req ? *slot((const void **)rkeys, rpos, &nrk, req) : -1;
    if (pos > mfence)
        mfence = pos;
    return self->wait(p, req, err);
}

static int overlap(const acc *x, const acc *y)
{
    return (x->write || y->write) && x->lo < y->hi && y->lo < x->hi;
}

/* Races between compute ops and comm ops under the GPU model; prints each. */
static int races(void)
{
    int n = 0, cw[MAXOPS], mw[MAXOPS];
    for (int m = 0, mx = 0; m < nm; m++)
        cw[m] = mx = M[m].wait > mx ? M[m].wait : mx; /* compute ops before comm op m */
    for (int c = 0, mx = 0; c < nc; c++)
        mw[c] = mx = C[c].wait > mx ? C[c].wait : mx; /* comm ops before compute op c */
    for (int c = 0; c < nc; c++)
        for (int m = 0; m < nm; m++) {
            if (c < cw[m] || m < mw[c])
                continue;
            for (int i = 0; i < C[c].na; i++)
                for (int j = 0; j < M[m].na; j++)
                    if (overlap(&C[c].a[i], &M[m].a[j])) {
                        if (n++ < 10)
                            fprintf(stderr, "race: compute op %d (%s) and comm op %d (%s)\n", c,
                                    C[c].name, m, M[m].name);
                        i = C[c].na;
                        break;
                    }
        }
    return n;
}

static bool touches(const rec *r, const void *p, size_t bytes)
{
    acc job = {(uintptr_t)p, (uintptr_t)p + bytes, 1};
    for (int i = 0; i < r->na; i++)
        if (overlap(&r->a[i], &job))
            return true;
    return false;
}

/* Ops of the log between compute ops c0 .. c1-1 and data-plane ops m0 .. m1-1 (one step) that
 * touch the job's buffers outside the step's step_begin .. step_end. */
static int job_order_violations(int c0, int c1, int m0, int m1, const void *P, const void *G,
                                size_t bytes)
{
    int n = 0;
    if (c1 - c0 < 2 || strcmp(C[c0].name, "step_begin") || strcmp(C[c1 - 1].name, "step_end")) {
        fprintf(stderr, "job order: the step's first and last compute ops are %s and %s\n",
                c1 > c0 ? C[c0].name : "none", c1 > c0 ? C[c1 - 1].name : "none");
        return 1;
    }
    for (int m = m0; m < m1; m++) {
        if (!touches(&M[m], P, bytes) && !touches(&M[m], G, bytes))
            continue;
        /* After step_begin: the op waits for at least the compute op c0. */
        if (M[m].wait <= c0 && n++ < 10)
            fprintf(stderr, "job order: %s may run before step_begin\n", M[m].name);
        /* Joined before step_end: the compute op c1-1 waits for it. */
        if (C[c1 - 1].wait <= m && n++ < 10)
            fprintf(stderr, "job order: %s may still run after step_end\n", M[m].name);
    }
    return n;
}

/* fx_plan's one bucket and one group, split into two buckets (the k parameters first in the
 * bucket and the rest) and three micro-groups (task t in group t % 3). The bucket's fill order
 * is the layout's, not the order of the params array, so the cut is found by offset: the
 * parameters are contiguous, and the cut lies where k of them fill the bucket. */
static void split(cz_plan *pl, int k)
{
    int64_t s0 = 0;
    for (int i = 0; i < k; i++) {
        int64_t next = INT64_MAX;
        for (size_t j = 0; j < pl->nparams; j++)
            if (pl->params[j].offset >= s0 && pl->params[j].offset < next)
                next = pl->params[j].offset;
        for (size_t j = 0; j < pl->nparams; j++)
            if (pl->params[j].offset == next)
                s0 = next + pl->params[j].numel;
    }
    int64_t s1 = pl->buckets[0].size - s0;
    free(pl->buckets[0].ranges);
    free(pl->buckets);
    pl->nbuckets = 2;
    pl->buckets = calloc(2, sizeof *pl->buckets);
    for (int b = 0; b < 2; b++) {
        pl->buckets[b].id = b;
        pl->buckets[b].offset = b ? s0 : 0;
        pl->buckets[b].size = b ? s1 : s0;
        pl->buckets[b].ranges = calloc(2, sizeof(int64_t));
        pl->buckets[b].ranges[1] = pl->buckets[b].size;
    }
    for (size_t i = 0; i < pl->nparams; i++)
        if (pl->params[i].offset >= s0) {
            pl->params[i].bucket = 1;
            pl->params[i].offset -= s0;
        }
    cz_plan_group *old = pl->schedules[0].groups;
    cz_plan_group *g = calloc(3, sizeof *g);
    for (int q = 0; q < 3; q++) {
        g[q].id = q;
        g[q].nslots = old->nslots;
        g[q].task_param = calloc((size_t)old->ntasks, sizeof(int));
        g[q].task_slot = calloc((size_t)old->ntasks, sizeof(int));
        g[q].load = calloc((size_t)old->nslots, sizeof(double));
    }
    for (int t = 0; t < old->ntasks; t++) {
        cz_plan_group *d = &g[t % 3];
        d->task_param[d->ntasks] = old->task_param[t];
        d->task_slot[d->ntasks++] = old->task_slot[t];
    }
    free(old->task_param), free(old->task_slot), free(old->load), free(old);
    pl->schedules[0].groups = g;
    pl->schedules[0].ngroups = 3;
}

static const fx_param PARAMS[] = {
    {"m0", 2, 8, 12, -1, CZ_KIND_MATRIX, 0, 0, {0}},
    {"m1", 2, 8, 12, -1, CZ_KIND_MATRIX, 0, 0, {0}},
    {"e0", 1, 12, 1, -1, CZ_KIND_ELEMENTWISE, 0, 0, {0}},
    {"m2", 2, 16, 6, -1, CZ_KIND_MATRIX, 0, 0, {0}},
    {"m3", 2, 6, 10, -1, CZ_KIND_MATRIX, 0, 0, {0}},
    {"m4", 2, 10, 10, -1, CZ_KIND_MATRIX, 0, 0, {0}},
    {"e1", 1, 10, 1, -1, CZ_KIND_ELEMENTWISE, 0, 0, {0}},
};

static int run_steps(cz_dtype dt)
{
    cz__exec_exchange_one_rank = true;
    cz_plan *pl = fx_plan(PARAMS, 7, 1);
    split(pl, 3);
    cz_exec_config cfg;
    cz_exec_config_init(&cfg);
    cfg.comm = "self";
    cfg.dtype = dt;
    cz_executor *ex = NULL;
    cz_error err;
    ck_assert_msg(cz_executor_create_from_plan(&ex, pl, &cfg, &err) == 0, "%s", err.message);
    size_t n = cz_executor_buffer_numel(ex), es = (size_t)cz__dtype_bytes(dt);
    void *P = calloc(n, es), *G = calloc(n, es);
    ck_assert_int_eq(cz_executor_bind_typed(ex, P, G, n, dt, &err), 0);
    /* The wrappers go in after create: the index maps were made by the cpu backend. */
    cpu = ex->compute.ops;
    self = ex->planes.tp.ops;
    tc = *cpu;
    tc.event_record = t_event_record, tc.download = t_download, tc.copy_runs = t_copy_runs;
    tc.convert = t_convert, tc.scale = t_scale, tc.sumsq = t_sumsq, tc.momentum = t_momentum;
    tc.block_load = t_block_load, tc.ns_batched = t_ns_batched, tc.block_store = t_block_store;
    tc.apply_update = t_apply_update, tc.apply_runs = t_apply_runs, tc.adamw = t_adamw;
    tc.step_begin = t_step_begin, tc.step_end = t_step_end;
    tp = *self;
    tp.reduce_scatter = t_reduce_scatter, tp.all_gather = t_all_gather;
    tp.iall_gather = t_iall_gather, tp.group_start = t_group_start, tp.send = t_send;
    tp.recv = t_recv, tp.group_end = t_group_end, tp.wait = t_wait;
    ex->compute.ops = &tc;
    ex->planes.dp.ops = ex->planes.tp.ops = &tp;
    nc = nm = mfence = host_c = nek = nrk = 0;
    int job = 0;
    for (int s = 0; s < 3; s++) {
        for (size_t i = 0; i < n; i++) {
            float g = 0.01f * fx_val(977u * (uint64_t)s + i);
            if (dt == CZ_DTYPE_BF16)
                ((uint16_t *)G)[i] = cz__bf16_from_f32(g);
            else
                ((float *)G)[i] = g;
        }
        int c0 = nc, m0 = nm;
        ck_assert_msg(cz_executor_step(ex, &err) == 0, "%s", err.message);
        job += job_order_violations(c0, nc, m0, nm, P, G, n * es);
    }
    ex->compute.ops = cpu;
    ex->planes.dp.ops = ex->planes.tp.ops = self;
    int r = races() + job;
    /* The log is real: both streams were used, and the pipeline's groups all ran, each
     * gathering and scattering through its buffers (3 steps x 3 groups x 2 exchanges). */
    ck_assert_int_gt(nm, 3 * 3);
    ck_assert_int_gt(nc, 3 * 10);
    int groups = 0;
    for (int i = 0; i < nm; i++)
        groups += strcmp(M[i].name, "send/recv group") == 0;
    ck_assert_int_eq(groups, 3 * 3 * 2);
    cz_executor_free(ex);
    cz__exec_exchange_one_rank = false;
    cz_plan_free(pl);
    free(P), free(G);
    return r;
}

START_TEST(no_races_fp32)
{
    ck_assert_int_eq(run_steps(CZ_DTYPE_FP32), 0);
}
END_TEST

START_TEST(no_races_bf16)
{
    ck_assert_int_eq(run_steps(CZ_DTYPE_BF16), 0);
}
END_TEST

/* The checker finds a race: a reduce-scatter that only waits for its `after` event (the
 * ordering the nccl plane had before it also waited for every compute op issued) races with
 * the previous bucket's scale reading the shared scratch. */
static int t_reduce_scatter_after_only(cz_plane *p, const void *send, void *recv,
                                       const size_t *counts, cz_dtype t, cz_event *after,
                                       cz_error *err)
{
    rec *o = mop("reduce_scatter", after_pos(after));
    size_t es = (size_t)cz__dtype_bytes(t);
    add(o, send, sum(counts, p->size) * es, 0);
    add(o, recv, counts[p->rank] * es, 1);
    mfence = nm;
    return self->reduce_scatter(p, send, recv, counts, t, NULL, err);
}

START_TEST(checker_finds_the_scratch_race)
{
    cz__exec_exchange_one_rank = true;
    cz_plan *pl = fx_plan(PARAMS, 7, 1);
    split(pl, 3);
    cz_exec_config cfg;
    cz_exec_config_init(&cfg);
    cfg.comm = "self";
    cz_executor *ex = NULL;
    cz_error err;
    ck_assert_int_eq(cz_executor_create_from_plan(&ex, pl, &cfg, &err), 0);
    size_t n = cz_executor_buffer_numel(ex);
    float *P = calloc(n, 4), *G = calloc(n, 4);
    ck_assert_int_eq(cz_executor_bind_buffers(ex, P, G, n, &err), 0);
    cpu = ex->compute.ops;
    self = ex->planes.tp.ops;
    tc = *cpu;
    tc.event_record = t_event_record, tc.download = t_download, tc.scale = t_scale;
    tc.sumsq = t_sumsq;
    tp = *self;
    tp.reduce_scatter = t_reduce_scatter_after_only;
    ex->compute.ops = &tc;
    ex->planes.dp.ops = &tp;
    nc = nm = mfence = host_c = nek = nrk = 0;
    ck_assert_int_eq(cz_executor_step(ex, &err), 0);
    ex->compute.ops = cpu;
    ex->planes.dp.ops = self;
    ck_assert_int_gt(races(), 0);
    cz_executor_free(ex);
    cz__exec_exchange_one_rank = false;
    cz_plan_free(pl);
    free(P), free(G);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("stream_order");
    TCase *tc_ = tcase_create("core");
    tcase_add_test(tc_, no_races_fp32);
    tcase_add_test(tc_, no_races_bf16);
    tcase_add_test(tc_, checker_finds_the_scratch_race);
    suite_add_tcase(s, tc_);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
