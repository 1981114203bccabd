/* The "callbacks" planes: the executor's communication over the caller's host collectives
 * (cz_comm_callbacks), for jobs that own their process groups (torch.distributed) and have no
 * MPI. The callbacks are blocking, so every operation here completes before it returns: a
 * request only collects a group's transfers until group_end hands them over in one exchange,
 * and wait has nothing left to do. Every rank of a plane makes the plane's calls in the same
 * order (the pipeline's schedule is the same on every TP rank), which is what keeps blocking
 * calls from waiting on each other.
 *
 * A plane is a group of the callbacks (world, or the job's DP and TP groups) or a subset of
 * one (members: the plane's ranks as ranks of that group), which is how split works without
 * asking the job for new groups: torch.distributed creates groups only collectively over the
 * whole world, while the executor splits its TP plane into cooperative sub-planes that differ
 * between DP ranks. A subset's reductions travel through the group's exchange: its first
 * member gathers, reduces and sends the result back, a chunk of the elements at a time so that
 * what it holds of the others' values stays under CB_GATHER_BYTES whatever the subset's size
 * (an expert-DP plane of 512 members would otherwise hold 511 copies of the largest bucket). */
#include "comm_callbacks.h"

#include "alloc.h"
#include "comm.h"
#include "compute.h"
#include "cz_format.h"
#include "elementwise.h"

#include <stdlib.h>
#include <string.h>

/* The most a subset's first member holds of the other members' values at a time. */
#define CB_GATHER_BYTES ((size_t)64 << 20)

typedef struct cb_plane {
    const cz_comm_callbacks *cb;
    cz_comm_group group;
    int *members; /* plane rank -> rank in group; NULL: the group itself */
    /* Grown on demand, reserved at create for the DP plane: the reduce-scatter's copy of the
     * gradients, and a subset's reduction inputs (size - 1 chunks, on its first member, at
     * most CB_GATHER_BYTES). */
    char *rs, *gather;
    size_t rs_len, gather_len;
} cb_plane;

/* A group's transfers until group_end (at most one send and one receive per peer). */
struct cz_comm_req {
    int n, cap;
    cz_comm_transfer *t;
    const void *self_send; /* the transfer to itself, copied at group_end */
    void *self_recv;
    size_t self_scount, self_rcount, elt;
};

static const char *group_name(cz_comm_group g)
{
    return g == CZ_COMM_DP ? "DP" : g == CZ_COMM_TP ? "TP" : "world";
}

static int cb_fail(const cz_comm_callbacks *cb, cz_comm_group g, int rc, const char *what,
                   cz_error *err)
{
    const char *why = cb->last_error ? cb->last_error(cb->user) : NULL;
    return cz__error_set(err, CZ_EIO,
                         "the caller's %s callback failed on the %s group (returned %d)%s%s", what,
                         group_name(g), rc, why && *why ? ": " : "", why ? why : "");
}

static size_t comm_bytes(cz_comm_dtype t)
{
    return t == CZ_COMM_BF16 ? 2 : t == CZ_COMM_FP32 ? 4 : 8;
}

static int comm_dtype(cz_dtype t, cz_comm_dtype *out, cz_error *err)
{
    if (t == CZ_DTYPE_FP32)
        *out = CZ_COMM_FP32;
    else if (t == CZ_DTYPE_BF16)
        *out = CZ_COMM_BF16;
    else
        return cz__error_set(err, CZ_EUNSUPPORTED, "comm callbacks: no %s transfers",
                             cz_dtype_name(t));
    return CZ_OK;
}

/* Grows *buf to at least len bytes (keeping nothing: a scratch). */
static int grow(char **buf, size_t *cap, size_t len, cz_error *err)
{
    if (len <= *cap)
        return CZ_OK;
    char *n = cz__exec_malloc(len);
    if (!n)
        return cz__error_set(err, CZ_ENOMEM, "out of memory for %zu bytes of comm scratch", len);
    cz__exec_free(*buf);
    *buf = n;
    *cap = len;
    return CZ_OK;
}

/* a op= b over n elements. */
static void reduce_into(void *a, const void *b, size_t n, cz_comm_dtype t, cz_comm_op op)
{
    for (size_t i = 0; i < n; i++) {
        if (t == CZ_COMM_FP32) {
            float *x = a;
            float y = ((const float *)b)[i];
            x[i] = op == CZ_COMM_MIN ? (y < x[i] ? y : x[i]) : x[i] + y;
        } else if (t == CZ_COMM_BF16) {
            /* Each pairwise sum rounded to bf16, as the MPI plane's bf16 sum (comm_mpi.c). */
            uint16_t *x = a;
            float y = cz_ew_f32_from_bf16(((const uint16_t *)b)[i]), z = cz_ew_f32_from_bf16(x[i]);
            x[i] = cz_ew_bf16_from_f32(op == CZ_COMM_MIN ? (y < z ? y : z) : z + y);
        } else if (t == CZ_COMM_FP64) {
            double *x = a;
            double y = ((const double *)b)[i];
            x[i] = op == CZ_COMM_MIN ? (y < x[i] ? y : x[i]) : x[i] + y;
        } else {
            int64_t *x = a;
            int64_t y = ((const int64_t *)b)[i];
            x[i] = op == CZ_COMM_MIN ? (y < x[i] ? y : x[i]) : x[i] + y;
        }
    }
}

static int group_rank(const cb_plane *h, int r)
{
    return h->members ? h->members[r] : r;
}

static int exchange(cb_plane *h, cz_comm_transfer *t, int n, cz_error *err)
{
    if (n == 0)
        return CZ_OK;
    int rc = h->cb->exchange(h->cb->user, h->group, t, n);
    return rc ? cb_fail(h->cb, h->group, rc, "exchange", err) : CZ_OK;
}

/* Elements per chunk of a subset's reduction: size - 1 chunks of them fit CB_GATHER_BYTES. */
static size_t chunk_elems(size_t es, int size)
{
    size_t n = CB_GATHER_BYTES / (es * (size_t)(size > 1 ? size - 1 : 1));
    return n > 0 ? n : 1;
}

/* One chunk of a subset's reduction: the first member gathers the others' values, reduces
 * them and sends the result back. */
static int subset_reduce(cz_plane *p, void *buf, size_t count, cz_comm_dtype t, cz_comm_op op,
                         cz_error *err)
{
    cb_plane *h = p->impl;
    int rc;
    size_t bytes = count * comm_bytes(t);
    if (p->rank != 0) {
        cz_comm_transfer x[2] = {{buf, count, t, h->members[0], 1},
                                 {buf, count, t, h->members[0], 0}};
        /* Sent first, then the result back: two exchanges, as the first member does. */
        if ((rc = exchange(h, &x[0], 1, err)) != CZ_OK)
            return rc;
        return exchange(h, &x[1], 1, err);
    }
    if ((rc = grow(&h->gather, &h->gather_len, bytes * (size_t)(p->size - 1), err)) != CZ_OK)
        return rc;
    cz_comm_transfer x[p->size - 1];
    for (int r = 1; r < p->size; r++)
        x[r - 1] =
            (cz_comm_transfer){h->gather + bytes * (size_t)(r - 1), count, t, h->members[r], 0};
    if ((rc = exchange(h, x, p->size - 1, err)) != CZ_OK)
        return rc;
    /* Reduced in rank order, so that every subset of the same values sums the same way. */
    for (int r = 1; r < p->size; r++)
        reduce_into(buf, h->gather + bytes * (size_t)(r - 1), count, t, op);
    for (int r = 1; r < p->size; r++)
        x[r - 1] = (cz_comm_transfer){buf, count, t, h->members[r], 1};
    return exchange(h, x, p->size - 1, err);
}

/* In-place reduction over the plane: the group's all_reduce, or for a subset subset_reduce
 * chunk by chunk. */
static int plane_reduce(cz_plane *p, void *buf, size_t count, cz_comm_dtype t, cz_comm_op op,
                        cz_error *err)
{
    cb_plane *h = p->impl;
    int rc;
    if (count == 0 || p->size == 1)
        return CZ_OK;
    if (!h->members) {
        rc = h->cb->all_reduce(h->cb->user, h->group, buf, count, t, op);
        return rc ? cb_fail(h->cb, h->group, rc, "all_reduce", err) : CZ_OK;
    }
    /* Every member cuts the elements into the same chunks (from count, dtype and size alone),
     * so that the exchanges match one for one. */
    size_t es = comm_bytes(t), chunk = chunk_elems(es, p->size);
    for (size_t at = 0; at < count; at += chunk) {
        size_t n = count - at < chunk ? count - at : chunk;
        if ((rc = subset_reduce(p, (char *)buf + at * es, n, t, op, err)) != CZ_OK)
            return rc;
    }
    return CZ_OK;
}

static int plane_bcast(cz_plane *p, void *buf, size_t count, cz_comm_dtype t, int root,
                       cz_error *err)
{
    cb_plane *h = p->impl;
    int rc;
    if (count == 0 || p->size == 1)
        return CZ_OK;
    if (!h->members) {
        rc = h->cb->broadcast(h->cb->user, h->group, buf, count, t, root);
        return rc ? cb_fail(h->cb, h->group, rc, "broadcast", err) : CZ_OK;
    }
    if (p->rank != root) {
        cz_comm_transfer x = {buf, count, t, h->members[root], 0};
        return exchange(h, &x, 1, err);
    }
    cz_comm_transfer x[p->size];
    int n = 0;
    for (int r = 0; r < p->size; r++)
        if (r != root)
            x[n++] = (cz_comm_transfer){buf, count, t, h->members[r], 1};
    return exchange(h, x, n, err);
}

/* ---- control plane ---- */

static int ctrl_min_i64(cz_ctrl *c, int64_t *v, int n, cz_error *err)
{
    const cz_comm_callbacks *cb = c->impl;
    int rc = c->size > 1
                 ? cb->all_reduce(cb->user, CZ_COMM_WORLD, v, (size_t)n, CZ_COMM_INT64, CZ_COMM_MIN)
                 : 0;
    return rc ? cb_fail(cb, CZ_COMM_WORLD, rc, "all_reduce", err) : CZ_OK;
}

static int ctrl_sum_f64(cz_ctrl *c, double *v, int n, cz_error *err)
{
    const cz_comm_callbacks *cb = c->impl;
    int rc = c->size > 1
                 ? cb->all_reduce(cb->user, CZ_COMM_WORLD, v, (size_t)n, CZ_COMM_FP64, CZ_COMM_SUM)
                 : 0;
    return rc ? cb_fail(cb, CZ_COMM_WORLD, rc, "all_reduce", err) : CZ_OK;
}

static void ctrl_close(cz_ctrl *c)
{
    (void)c; /* the callbacks are the caller's */
}

static const cz_ctrl_ops cz_ctrl_callbacks_ops = {
    .kind = CZ_COMM_CALLBACKS,
    .name = "callbacks",
    .allreduce_min_i64 = ctrl_min_i64,
    .allreduce_sum_f64 = ctrl_sum_f64,
    .close = ctrl_close,
};

/* ---- data plane ---- */

/* The uneven reduce-scatter as one sum of the whole concatenation, of which this rank keeps
 * its segment: host libraries (gloo) have no uneven reduce-scatter, and one all_reduce moves
 * fewer messages than a reduction per segment. */
static int cb_reduce_scatter(cz_plane *p, const void *send, void *recv, const size_t *counts,
                             cz_dtype t, cz_event *after, cz_error *err)
{
    cb_plane *h = p->impl;
    cz_comm_dtype ct = CZ_COMM_FP32;
    size_t total = 0, off = 0;
    int rc;
    if ((rc = cz_plane_wait_after(p, after, err)) != CZ_OK ||
        (rc = comm_dtype(t, &ct, err)) != CZ_OK)
        return rc;
    for (int r = 0; r < p->size; r++) {
        if (r < p->rank)
            off += counts[r];
        total += counts[r];
    }
    size_t es = comm_bytes(ct);
    if ((rc = grow(&h->rs, &h->rs_len, total * es, err)) != CZ_OK)
        return rc;
    memcpy(h->rs, send, total * es);
    if ((rc = plane_reduce(p, h->rs, total, ct, CZ_COMM_SUM, err)) != CZ_OK)
        return rc;
    memcpy(recv, h->rs + off * es, counts[p->rank] * es);
    return CZ_OK;
}

/* The uneven all-gather as one broadcast per rank of its segment, in place. */
static int cb_all_gather(cz_plane *p, void *buf, const size_t *counts, cz_dtype t, cz_event *after,
                         cz_error *err)
{
    cz_comm_dtype ct = CZ_COMM_FP32;
    int rc;
    if ((rc = cz_plane_wait_after(p, after, err)) != CZ_OK ||
        (rc = comm_dtype(t, &ct, err)) != CZ_OK)
        return rc;
    size_t off = 0;
    for (int r = 0; r < p->size; r++) {
        if ((rc = plane_bcast(p, (char *)buf + off * comm_bytes(ct), counts[r], ct, r, err)) !=
            CZ_OK)
            return rc;
        off += counts[r];
    }
    return CZ_OK;
}

/* The bucket-wise step's forms: the callbacks are blocking, so each collective runs at post time
 * and req stays idle: this plane overlaps nothing yet (the step's results are the same). */
static int cb_ireduce_scatter(cz_plane *p, const void *send, void *recv, const size_t *counts,
                              cz_dtype t, cz_event *after, cz_comm_req *req, cz_error *err)
{
    (void)req;
    return cb_reduce_scatter(p, send, recv, counts, t, after, err);
}

static int cb_iall_gatherv(cz_plane *p, void *buf, const size_t *counts, cz_dtype t,
                           cz_event *after, cz_comm_req *req, cz_error *err)
{
    (void)req;
    return cb_all_gather(p, buf, counts, t, after, err);
}

static int cb_iall_gather(cz_plane *p, const void *send, size_t count, void *recv, cz_dtype t,
                          cz_event *after, cz_comm_req *req, cz_error *err)
{
    cz_comm_dtype ct = CZ_COMM_FP32;
    int rc;
    (void)req;
    if ((rc = cz_plane_wait_after(p, after, err)) != CZ_OK ||
        (rc = comm_dtype(t, &ct, err)) != CZ_OK)
        return rc;
    size_t es = comm_bytes(ct);
    memmove((char *)recv + (size_t)p->rank * count * es, send, count * es);
    for (int r = 0; r < p->size; r++)
        if ((rc = plane_bcast(p, (char *)recv + (size_t)r * count * es, count, ct, r, err)) !=
            CZ_OK)
            return rc;
    return CZ_OK;
}

static int cb_group_start(cz_plane *p, cz_comm_req *req, cz_event *after, cz_error *err)
{
    req->n = 0;
    req->self_send = NULL;
    req->self_recv = NULL;
    req->self_scount = req->self_rcount = 0;
    return cz_plane_wait_after(p, after, err);
}

static void add(cz_plane *p, cz_comm_req *req, void *buf, size_t count, cz_dtype t, int peer,
                int send)
{
    cb_plane *h = p->impl;
    cz_comm_dtype ct = t == CZ_DTYPE_BF16 ? CZ_COMM_BF16 : CZ_COMM_FP32;
    if (count == 0)
        return;
    if (peer == p->rank) {
        req->elt = comm_bytes(ct);
        if (send) {
            req->self_send = buf;
            req->self_scount = count;
        } else {
            req->self_recv = buf;
            req->self_rcount = count;
        }
        return;
    }
    /* req_create sized it for one send and one receive per peer, the interface's limit. */
    if (req->n < req->cap)
        req->t[req->n++] = (cz_comm_transfer){buf, count, ct, group_rank(h, peer), send};
    else
        req->n = req->cap + 1; /* reported by group_end */
}

static void cb_send(cz_plane *p, cz_comm_req *req, const void *buf, size_t count, cz_dtype t,
                    int peer)
{
    /* The callbacks take one transfer type for both directions; a send's buffer is only read. */
    add(p, req, (void *)buf, count, t, peer, 1);
}

static void cb_recv(cz_plane *p, cz_comm_req *req, void *buf, size_t count, cz_dtype t, int peer)
{
    add(p, req, buf, count, t, peer, 0);
}

static int cb_group_end(cz_plane *p, cz_comm_req *req, cz_error *err)
{
    if (req->n > req->cap)
        return cz__error_set(err, CZ_EINTERNAL,
                             "comm callbacks: more than one send and one receive per peer");
    if (req->self_scount != req->self_rcount)
        return cz__error_set(err, CZ_EINTERNAL, "comm callbacks: send to self %zu != receive %zu",
                             req->self_scount, req->self_rcount);
    if (req->self_scount)
        memcpy(req->self_recv, req->self_send, req->self_scount * req->elt);
    int rc = exchange(p->impl, req->t, req->n, err);
    req->n = 0;
    return rc;
}

static int cb_wait(cz_plane *p, cz_comm_req *req, cz_error *err)
{
    (void)p, (void)req, (void)err;
    return CZ_OK; /* every operation completed when it was posted */
}

static void cb_progress(cz_plane *p, cz_comm_req *req)
{
    (void)p, (void)req;
}

static cz_comm_req *cb_req_create(cz_plane *p)
{
    cz_comm_req *r = cz__exec_calloc(1, sizeof *r);
    if (!r)
        return NULL;
    r->cap = 2 * p->size;
    r->t = cz__exec_calloc((size_t)r->cap, sizeof *r->t);
    if (!r->t) {
        cz__exec_free(r);
        return NULL;
    }
    return r;
}

static void cb_req_free(cz_plane *p, cz_comm_req *req)
{
    (void)p;
    if (req)
        cz__exec_free(req->t);
    cz__exec_free(req);
}

static int cb_allreduce_sum(cz_plane *p, void *buf, size_t count, int f64, cz_event *after,
                            cz_error *err)
{
    int rc = cz_plane_wait_after(p, after, err);
    if (rc)
        return rc;
    return plane_reduce(p, buf, count, f64 ? CZ_COMM_FP64 : CZ_COMM_FP32, CZ_COMM_SUM, err);
}

static int cb_iallreduce_sum(cz_plane *p, float *buf, size_t count, cz_event *after,
                             cz_comm_req *req, cz_error *err)
{
    (void)req;
    return cb_allreduce_sum(p, buf, count, 0, after, err);
}

static int open_plane(cz_plane *p, const cz_comm_callbacks *cb, cz_comm_group group, int *members,
                      int size, int rank, cz_error *err);
static int open_subset(cz_plane *p, int *members, int size, cz_plane *out, cz_error *err);

/* The plane of p's ranks members[0 .. size) (p's ranks, in the new plane's order; taken over,
 * freed on failure too), which holds this rank. */
static int open_subset(cz_plane *p, int *members, int size, cz_plane *out, cz_error *err)
{
    cb_plane *h = p->impl;
    int rank = -1;
    for (int i = 0; i < size; i++) {
        if (members[i] == p->rank)
            rank = i;
        members[i] = group_rank(h, members[i]);
    }
    if (rank < 0) {
        cz__exec_free(members);
        return cz__error_set(err, CZ_EINVALID,
                             "internal error: a plane of %d ranks opened without this rank (%d)",
                             size, p->rank);
    }
    int rc = open_plane(out, h->cb, h->group, members, size, rank, err);
    out->compute = p->compute;
    return rc;
}

/* A plane of ranks every member names alike from the plan's layout: no exchange at all, so
 * that a rank's create does not grow with the world (docs/PERF.md section 16). */
static int cb_split_members(cz_plane *p, const int *members, int n, cz_plane *out, cz_error *err)
{
    int *m = n > 0 ? cz__exec_calloc((size_t)n, sizeof *m) : NULL;
    if (!m)
        return cz__error_set(err, CZ_ENOMEM, "out of memory for a plane of %d ranks", n);
    for (int i = 0; i < n; i++) {
        if (members[i] < 0 || members[i] >= p->size) {
            cz__exec_free(m);
            return cz__error_set(err, CZ_EINVALID,
                                 "internal error: plane member %d is rank %d of a plane of %d", i,
                                 members[i], p->size);
        }
        m[i] = members[i];
    }
    return open_subset(p, m, n, out, err);
}

/* Every rank's (color, key) by one sum over the plane, then the ranks of my color ordered by
 * key (ties by rank, as MPI_Comm_split). */
static int cb_split(cz_plane *p, int color, int key, cz_plane *out, cz_error *err)
{
    int n = p->size, rc, size = 0;
    int64_t *ck = cz__exec_calloc(2 * (size_t)n, sizeof *ck);
    int *members = cz__exec_calloc((size_t)n, sizeof *members);
    if (!ck || !members) {
        rc = cz__error_set(err, CZ_ENOMEM, "out of memory for a plane split");
        goto done;
    }
    ck[2 * p->rank] = color;
    ck[2 * p->rank + 1] = key;
    if ((rc = plane_reduce(p, ck, 2 * (size_t)n, CZ_COMM_INT64, CZ_COMM_SUM, err)) != CZ_OK)
        goto done;
    for (int r = 0; r < n; r++) {
        if (ck[2 * r] != color)
            continue;
        int at = size++;
        /* Insertion by (key, rank): planes are small. */
        while (at > 0 && ck[2 * (members[at - 1]) + 1] > ck[2 * r + 1]) {
            members[at] = members[at - 1];
            at--;
        }
        members[at] = r;
    }
    rc = open_subset(p, members, size, out, err);
    members = NULL; /* open_subset's now */
done:
    cz__exec_free(ck);
    cz__exec_free(members);
    return rc;
}

static void cb_close(cz_plane *p)
{
    cb_plane *h = p->impl;
    if (!h)
        return;
    cz__exec_free(h->members);
    cz__exec_free(h->rs);
    cz__exec_free(h->gather);
    cz__exec_free(h);
    p->impl = NULL;
}

static const cz_plane_ops cz_plane_callbacks_ops = {
    .version = CZ_DATA_PLANE_VERSION,
    .kind = CZ_COMM_CALLBACKS,
    .name = "callbacks",
    .reduce_scatter = cb_reduce_scatter,
    .all_gather = cb_all_gather,
    .iall_gather = cb_iall_gather,
    .group_start = cb_group_start,
    .send = cb_send,
    .recv = cb_recv,
    .group_end = cb_group_end,
    .wait = cb_wait,
    .progress = cb_progress,
    .req_create = cb_req_create,
    .req_free = cb_req_free,
    .split = cb_split,
    .close = cb_close,
    .allreduce_sum = cb_allreduce_sum,
    .iallreduce_sum = cb_iallreduce_sum,
    .ireduce_scatter = cb_ireduce_scatter,
    .iall_gatherv = cb_iall_gatherv,
    .split_members = cb_split_members,
};

/* Takes members (NULL: the group itself) whatever happens. */
static int open_plane(cz_plane *p, const cz_comm_callbacks *cb, cz_comm_group group, int *members,
                      int size, int rank, cz_error *err)
{
    cb_plane *h = cz__exec_calloc(1, sizeof *h);
    *p = (cz_plane){0};
    if (!h) {
        cz__exec_free(members);
        return cz__error_set(err, CZ_ENOMEM, "out of memory for a comm plane");
    }
    *h = (cb_plane){.cb = cb, .group = group, .members = members};
    *p = (cz_plane){.ops = &cz_plane_callbacks_ops, .impl = h, .size = size, .rank = rank};
    return CZ_OK;
}

int cz__callbacks_check(const cz_comm_callbacks *cb, cz_error *err)
{
    if (!cb)
        return cz__error_set(err, CZ_EINVALID,
                             "comm backend 'callbacks' needs cz_exec_config.callbacks (the "
                             "caller's all_reduce, broadcast and exchange)");
    /* Every version from 1 to this library's (only 1 so far: a later one that appends fields
     * must copy an older caller's struct over the defaults, as config.c does). */
    int rc = cz__options_version_check(cb->version, CZ_COMM_CALLBACKS_VERSION, "cz_comm_callbacks",
                                       "version = CZ_COMM_CALLBACKS_VERSION", err);
    if (rc != CZ_OK)
        return rc;
    if (!cb->all_reduce || !cb->broadcast || !cb->exchange)
        return cz__error_set(
            err, CZ_EINVALID,
            "cz_comm_callbacks: all_reduce, broadcast and exchange are all needed");
    if (cb->world_size < 1 || cb->world_rank < 0 || cb->world_rank >= cb->world_size)
        return cz__error_set(err, CZ_EINVALID,
                             "cz_comm_callbacks: world rank %d of %d ranks is out of range",
                             cb->world_rank, cb->world_size);
    return CZ_OK;
}

int cz__ctrl_callbacks_open(cz_ctrl *c, const cz_comm_callbacks *cb, cz_error *err)
{
    int rc = cz__callbacks_check(cb, err);
    if (rc)
        return rc;
    *c = (cz_ctrl){.ops = &cz_ctrl_callbacks_ops,
                   .impl = (void *)cb,
                   .size = cb->world_size,
                   .rank = cb->world_rank};
    return CZ_OK;
}

int cz__plane_callbacks_open(cz_plane *p, const cz_comm_callbacks *cb, cz_comm_group group,
                             int size, int rank, cz_error *err)
{
    return open_plane(p, cb, group, NULL, size, rank, err);
}

int cz__plane_callbacks_reserve(cz_plane *p, const cz_plan *plan, cz_error *err)
{
    cb_plane *h = p->impl;
    size_t most = 0;
    for (size_t b = 0; b < plan->nbuckets; b++)
        if ((size_t)plan->buckets[b].size > most)
            most = (size_t)plan->buckets[b].size;
    int rc;
    if ((rc = grow(&h->rs, &h->rs_len, most * sizeof(float), err)) != CZ_OK)
        return rc;
    if (h->members && p->rank == 0) {
        size_t chunk = chunk_elems(sizeof(float), p->size);
        size_t n = most < chunk ? most : chunk;
        return grow(&h->gather, &h->gather_len, n * sizeof(float) * (size_t)(p->size - 1), err);
    }
    return CZ_OK;
}

size_t cz__plane_callbacks_scratch(const cz_plane *p)
{
    const cb_plane *h = p->impl;
    return h ? h->rs_len + h->gather_len : 0;
}
