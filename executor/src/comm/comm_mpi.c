/* The "mpi" planes (Open MPI). Every plane and the control plane work on their own duplicate of
 * a communicator, so that the executor's traffic never mixes with the job's own, and return
 * errors as codes (MPI_ERRORS_RETURN) so they can be reported instead of aborting the job.
 *
 * Data plane: the uneven reduce-scatter and all-gather map onto MPI_Ireduce_scatter and
 * MPI_Iallgatherv (counts checked against MPI's int limit here, inside the plane); a group of
 * sends and receives is a set of MPI_Isend/MPI_Irecv completed together. Each request handle
 * has its own tag, so two groups in flight on one plane never match each other's messages.
 *
 * Every wait is bounded (mpi_watch.h): collectives are posted non-blocking and waited for
 * with cz__mpi_wait, which reports, after the time limit, which rank the others wait for. */
#include "alloc.h"
#include "comm.h"
#include "comm_mpi.h"
#include "compute.h"
#include "cz_format.h"
#include "elementwise.h"

#ifdef CZ_HAVE_MPI
#include "mpi_watch.h"

#include <limits.h>
#include <mpi.h>
#include <stdio.h>

typedef struct mpi_plane {
    MPI_Comm comm;
    int next_tag;
    cz_mpi_chan *chan; /* the control plane's diagnosis channel: owned there, borrowed here */
    bool owns_chan;
    double timeout_s;
    const cz_phase *phase; /* the executor's, for the report of a stalled wait */
    MPI_Op bf16_sum;       /* the bf16 reduce-scatter's sum (bf16_sum), MPI_OP_NULL: none */
} mpi_plane;

/* Up to one send and one receive per peer, plus room for a collective. peer[k] is the plane
 * rank request k waits for (-1: a collective), for the report of a stalled wait. */
struct cz_comm_req {
    int tag, n, cap, fail;
    int *peer;
    MPI_Request r[];
};

static MPI_Comm comm_of(void *impl)
{
    return ((mpi_plane *)impl)->comm;
}

static int mpi_fail(cz_error *err, int rc, const char *what)
{
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    return cz__error_set(err, CZ_EIO, "MPI %s failed: %s", what, msg);
}

static MPI_Datatype mpi_type(cz_dtype t)
{
    return t == CZ_DTYPE_FP32 ? MPI_FLOAT : MPI_UINT16_T;
}

/* MPI has no bf16 type: a bf16 reduce-scatter sums 16-bit words with this user operation.
 * Each pairwise sum is widened to fp32 and rounded back to bf16 (nearest even), as NCCL's
 * ncclBfloat16 sum adds two values per step of its ring: a sum over n ranks is rounded n - 1
 * times, in an order MPI chooses (docs/EXECUTOR.md, "On the wire", derives the bound). */
static void bf16_sum(void *in, void *inout, int *len, MPI_Datatype *type)
{
    (void)type;
    const uint16_t *a = in;
    uint16_t *b = inout;
    for (int i = 0; i < *len; i++)
        b[i] = cz_ew_bf16_from_f32(cz_ew_f32_from_bf16(a[i]) + cz_ew_f32_from_bf16(b[i]));
}

static int count_fits(size_t n, const char *what, cz_error *err)
{
    if (n > (size_t)INT_MAX)
        return cz__error_set(err, CZ_EUNSUPPORTED,
                             "MPI %s of %zu elements: MPI counts are limited to %d (plan with a "
                             "smaller bucket or micro-group capacity)",
                             what, n, INT_MAX);
    return CZ_OK;
}

/* After a reported stall (mpi_watch) nothing more is posted on any plane: a collective or
 * transfer posted then could be matched by the peers that posted theirs before the stall and
 * complete later, inside MPI_Finalize's progress, into memory freed since (issue 39: a step
 * cancelled after a stall posted its missing reduce-scatters, which completed into the freed
 * reduce-scatter ranges). */
static int usable(const char *what, cz_error *err)
{
    if (!cz__mpi_watch_broken())
        return CZ_OK;
    return cz__error_set(err, CZ_ETIMEOUT,
                         "MPI %s not posted: an earlier MPI wait of this process stopped for a "
                         "stalled rank (see its message); the communicators cannot be used any "
                         "more",
                         what);
}

/* Waits for one collective posted on the plane, within the limit. */
static int bounded(mpi_plane *h, MPI_Request *r, const char *op, cz_error *err)
{
    return cz__mpi_wait(h->chan, r, 1, h->comm, NULL, h->timeout_s, h->phase, op, err);
}

/* A collective posted and waited for: rc is what posting it returned. */
static int posted(mpi_plane *h, int rc, MPI_Request *r, const char *op, cz_error *err)
{
    return rc == MPI_SUCCESS ? bounded(h, r, op, err) : mpi_fail(err, rc, op);
}

/* The operation's name with the plane's, for a report ("DP reduce-scatter"). */
static const char *op_name(const cz_plane *p, const char *op, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s %s", p->label ? p->label : "data-plane", op);
    return buf;
}

/* ---- control plane ---- */

static int mpi_ctrl_allreduce_min_i64(cz_ctrl *c, int64_t *v, int n, cz_error *err)
{
    mpi_plane *h = c->impl;
    MPI_Request r;
    int rc = usable("control-plane all-reduce", err);
    if (rc)
        return rc;
    rc = MPI_Iallreduce(MPI_IN_PLACE, v, n, MPI_INT64_T, MPI_MIN, h->comm, &r);
    return posted(h, rc, &r, "control-plane all-reduce", err);
}

static int mpi_ctrl_allreduce_sum_f64(cz_ctrl *c, double *v, int n, cz_error *err)
{
    mpi_plane *h = c->impl;
    MPI_Request r;
    int rc = usable("control-plane all-reduce", err);
    if (rc)
        return rc;
    rc = MPI_Iallreduce(MPI_IN_PLACE, v, n, MPI_DOUBLE, MPI_SUM, h->comm, &r);
    return posted(h, rc, &r, "control-plane all-reduce", err);
}

static void free_impl(void **impl)
{
    mpi_plane *h = *impl;
    if (!h)
        return;
    int fin = 0;
    MPI_Finalized(&fin);
    /* After a stalled wait the communicator still has the stalled operation posted: keep it
     * rather than risk freeing it under MPI (the job ends anyway). */
    if (!fin && !cz__mpi_watch_broken())
        MPI_Comm_free(&h->comm);
    if (!fin && h->bf16_sum != MPI_OP_NULL)
        MPI_Op_free(&h->bf16_sum);
    if (h->owns_chan)
        cz__mpi_chan_close(h->chan);
    cz__exec_free(h);
    *impl = NULL;
}

static void mpi_ctrl_close(cz_ctrl *c)
{
    free_impl(&c->impl);
}

static const cz_ctrl_ops cz_ctrl_mpi_ops = {
    .kind = CZ_COMM_MPI,
    .name = "mpi",
    .allreduce_min_i64 = mpi_ctrl_allreduce_min_i64,
    .allreduce_sum_f64 = mpi_ctrl_allreduce_sum_f64,
    .close = mpi_ctrl_close,
};

/* ---- data plane ---- */

/* Posts the uneven reduce-scatter (gather 0: send into recv) or the in-place uneven all-gather
 * (gather 1: at recv) as MPI_Ireduce_scatter / MPI_Iallgatherv into *q, after `after`. */
static int post_uneven(cz_plane *p, int gather, const void *send, void *recv, const size_t *counts,
                       cz_dtype t, cz_event *after, MPI_Request *q, cz_error *err)
{
    int rc = cz_plane_wait_after(p, after, err);
    if (rc)
        return rc;
    mpi_plane *h = p->impl;
    if (!gather && t != CZ_DTYPE_FP32 && (t != CZ_DTYPE_BF16 || h->bf16_sum == MPI_OP_NULL))
        return cz__error_set(err, CZ_EUNSUPPORTED, "MPI reduce-scatter: no %s sum",
                             cz_dtype_name(t));
    const char *what = gather ? "all-gather" : "reduce-scatter";
    if ((rc = usable(what, err)) != CZ_OK)
        return rc;
    int ic[p->size], id[p->size];
    size_t off = 0;
    for (int r = 0; r < p->size; r++) {
        if ((rc = count_fits(counts[r], what, err)) != CZ_OK ||
            (rc = count_fits(off, "all-gather displacement", err)) != CZ_OK)
            return rc;
        ic[r] = (int)counts[r];
        id[r] = (int)off;
        off += counts[r];
    }
    rc = gather ? MPI_Iallgatherv(MPI_IN_PLACE, 0, mpi_type(t), recv, ic, id, mpi_type(t),
                                  comm_of(p->impl), q)
                : MPI_Ireduce_scatter(send, recv, ic, mpi_type(t),
                                      t == CZ_DTYPE_FP32 ? MPI_SUM : h->bf16_sum, h->comm, q);
    return rc == MPI_SUCCESS ? CZ_OK : mpi_fail(err, rc, what);
}

static int mpi_reduce_scatter(cz_plane *p, const void *send, void *recv, const size_t *counts,
                              cz_dtype t, cz_event *after, cz_error *err)
{
    MPI_Request q;
    char name[64];
    int rc = post_uneven(p, 0, send, recv, counts, t, after, &q, err);
    return rc ? rc : bounded(p->impl, &q, op_name(p, "reduce-scatter", name, sizeof name), err);
}

static int mpi_all_gather(cz_plane *p, void *buf, const size_t *counts, cz_dtype t, cz_event *after,
                          cz_error *err)
{
    MPI_Request q;
    char name[64];
    int rc = post_uneven(p, 1, NULL, buf, counts, t, after, &q, err);
    return rc ? rc : bounded(p->impl, &q, op_name(p, "all-gather", name, sizeof name), err);
}

/* The bucket-wise step's forms: posted as above, waited for by mpi_wait (bounded there). */
static int mpi_ireduce_scatter(cz_plane *p, const void *send, void *recv, const size_t *counts,
                               cz_dtype t, cz_event *after, cz_comm_req *req, cz_error *err)
{
    req->peer[0] = -1;
    int rc = post_uneven(p, 0, send, recv, counts, t, after, &req->r[0], err);
    req->n = rc == CZ_OK;
    return rc;
}

static int mpi_iall_gatherv(cz_plane *p, void *buf, const size_t *counts, cz_dtype t,
                            cz_event *after, cz_comm_req *req, cz_error *err)
{
    req->peer[0] = -1;
    int rc = post_uneven(p, 1, NULL, buf, counts, t, after, &req->r[0], err);
    req->n = rc == CZ_OK;
    return rc;
}

static int mpi_iall_gather(cz_plane *p, const void *send, size_t count, void *recv, cz_dtype t,
                           cz_event *after, cz_comm_req *req, cz_error *err)
{
    int rc;
    if ((rc = cz_plane_wait_after(p, after, err)) != CZ_OK ||
        (rc = usable("all-gather", err)) != CZ_OK ||
        (rc = count_fits(count, "all-gather", err)) != CZ_OK)
        return rc;
    req->n = 1;
    req->peer[0] = -1;
    rc = MPI_Iallgather(send, (int)count, mpi_type(t), recv, (int)count, mpi_type(t),
                        comm_of(p->impl), &req->r[0]);
    if (rc != MPI_SUCCESS) {
        req->n = 0;
        return mpi_fail(err, rc, "all-gather");
    }
    return CZ_OK;
}

static int mpi_allreduce_sum(cz_plane *p, void *buf, size_t count, int f64, cz_event *after,
                             cz_error *err)
{
    int rc;
    if ((rc = cz_plane_wait_after(p, after, err)) != CZ_OK ||
        (rc = usable("all-reduce", err)) != CZ_OK ||
        (rc = count_fits(count, "all-reduce", err)) != CZ_OK)
        return rc;
    MPI_Request q;
    char name[64];
    rc = MPI_Iallreduce(MPI_IN_PLACE, buf, (int)count, f64 ? MPI_DOUBLE : MPI_FLOAT, MPI_SUM,
                        comm_of(p->impl), &q);
    return posted(p->impl, rc, &q, op_name(p, "all-reduce", name, sizeof name), err);
}

static int mpi_iallreduce_sum(cz_plane *p, float *buf, size_t count, cz_event *after,
                              cz_comm_req *req, cz_error *err)
{
    int rc;
    if ((rc = cz_plane_wait_after(p, after, err)) != CZ_OK ||
        (rc = usable("all-reduce", err)) != CZ_OK ||
        (rc = count_fits(count, "all-reduce", err)) != CZ_OK)
        return rc;
    req->n = 1;
    req->peer[0] = -1;
    rc = MPI_Iallreduce(MPI_IN_PLACE, buf, (int)count, MPI_FLOAT, MPI_SUM, comm_of(p->impl),
                        &req->r[0]);
    if (rc != MPI_SUCCESS) {
        req->n = 0;
        return mpi_fail(err, rc, "all-reduce");
    }
    return CZ_OK;
}

static int mpi_group_start(cz_plane *p, cz_comm_req *req, cz_event *after, cz_error *err)
{
    req->n = 0;
    req->fail = MPI_SUCCESS;
    int rc = usable("send/receive group", err);
    /* The group's sends and receives are then not posted either (post skips a failed group). */
    if (rc)
        req->fail = MPI_ERR_OTHER;
    return rc ? rc : cz_plane_wait_after(p, after, err);
}

/* Posts one transfer of a group; the first failure is reported by group_end. */
static void post(cz_plane *p, cz_comm_req *req, void *buf, size_t count, cz_dtype t, int peer,
                 int is_send)
{
    if (count == 0 || req->fail != MPI_SUCCESS)
        return;
    if (count > (size_t)INT_MAX || req->n == req->cap) {
        req->fail = MPI_ERR_COUNT;
        return;
    }
    MPI_Request *r = &req->r[req->n];
    int rc = is_send ? MPI_Isend(buf, (int)count, mpi_type(t), peer, req->tag, comm_of(p->impl), r)
                     : MPI_Irecv(buf, (int)count, mpi_type(t), peer, req->tag, comm_of(p->impl), r);
    if (rc == MPI_SUCCESS)
        req->peer[req->n++] = peer;
    else
        req->fail = rc;
}

static void mpi_send(cz_plane *p, cz_comm_req *req, const void *buf, size_t count, cz_dtype t,
                     int peer)
{
    /* MPI_Isend takes a const buffer since MPI-3; the cast only serves the shared helper. */
    post(p, req, (void *)buf, count, t, peer, 1);
}

static void mpi_recv(cz_plane *p, cz_comm_req *req, void *buf, size_t count, cz_dtype t, int peer)
{
    post(p, req, buf, count, t, peer, 0);
}

static int mpi_wait(cz_plane *p, cz_comm_req *req, cz_error *err)
{
    if (!req || req->n == 0)
        return CZ_OK;
    mpi_plane *h = p->impl;
    char name[64];
    int rc = cz__mpi_wait(
        h->chan, req->r, req->n, h->comm, req->peer, h->timeout_s, h->phase,
        op_name(p, "transfers (send/receive group or collective)", name, sizeof name), err);
    req->n = 0;
    return rc;
}

static int mpi_group_end(cz_plane *p, cz_comm_req *req, cz_error *err)
{
    if (req->fail == MPI_SUCCESS)
        return CZ_OK;
    int fail = req->fail;
    cz_error tmp;
    mpi_wait(p, req, &tmp); /* leave nothing half-posted behind */
    if (cz__mpi_watch_broken())
        return usable("send/receive group", err);
    if (fail == MPI_ERR_COUNT)
        return cz__error_set(err, CZ_EUNSUPPORTED,
                             "MPI send/receive group: a count above %d or more than %d transfers",
                             INT_MAX, req->cap);
    return mpi_fail(err, fail, "send/receive");
}

static void mpi_progress(cz_plane *p, cz_comm_req *req)
{
    (void)p;
    int done = 0;
    if (req && req->n > 0)
        MPI_Testall(req->n, req->r, &done, MPI_STATUSES_IGNORE);
}

static cz_comm_req *mpi_req_create(cz_plane *p)
{
    int cap = 2 * p->size + 1;
    cz_comm_req *q =
        cz__exec_calloc(1, sizeof *q + (size_t)cap * (sizeof(MPI_Request) + sizeof(int)));
    if (!q)
        return NULL;
    q->cap = cap;
    q->peer = (int *)(q->r + cap);
    q->tag = ++((mpi_plane *)p->impl)->next_tag;
    for (int k = 0; k < cap; k++)
        q->r[k] = MPI_REQUEST_NULL;
    return q;
}

static void mpi_req_free(cz_plane *p, cz_comm_req *req)
{
    cz_error tmp;
    if (req)
        mpi_wait(p, req, &tmp);
    cz__exec_free(req);
}

/* A plane (or the control plane) over dup, reporting stalls over chan with the limit of
 * `like` (NULL: chan and timeout_s as given). */
static int wrap(void **impl, int *size, int *rank, MPI_Comm dup, const mpi_plane *like,
                cz_mpi_chan *chan, double timeout_s, const cz_phase *phase, cz_error *err)
{
    mpi_plane *h = cz__exec_calloc(1, sizeof *h);
    if (!h) {
        MPI_Comm_free(&dup);
        return cz__error_set(err, CZ_ENOMEM, "out of memory for a communicator");
    }
    MPI_Comm_set_errhandler(dup, MPI_ERRORS_RETURN);
    h->comm = dup;
    /* A local call (not collective): a plane whose operation could not be made refuses bf16
     * reduce-scatters with a message instead. */
    if (MPI_Op_create(bf16_sum, 1, &h->bf16_sum) != MPI_SUCCESS)
        h->bf16_sum = MPI_OP_NULL;
    h->chan = like ? like->chan : chan;
    h->timeout_s = like ? like->timeout_s : timeout_s;
    h->phase = like ? like->phase : phase;
    *impl = h;
    MPI_Comm_size(dup, size);
    MPI_Comm_rank(dup, rank);
    return CZ_OK;
}

static const cz_plane_ops cz_plane_mpi_ops;

static int mpi_split(cz_plane *p, int color, int key, cz_plane *out, cz_error *err)
{
    /* MPI_Comm_split has no non-blocking form: a bounded barrier first, so that a rank that
     * never arrives is reported there instead of hanging the split. */
    mpi_plane *h = p->impl;
    MPI_Request r;
    char name[64];
    int rc = usable("barrier before a split", err);
    if (rc)
        return rc;
    rc = posted(h, MPI_Ibarrier(h->comm, &r), &r,
                op_name(p, "barrier before a split", name, sizeof name), err);
    if (rc)
        return rc;
    MPI_Comm dup;
    rc = MPI_Comm_split(h->comm, color, key, &dup);
    if (rc != MPI_SUCCESS)
        return mpi_fail(err, rc, "Comm_split");
    out->ops = &cz_plane_mpi_ops;
    out->compute = p->compute;
    return wrap(&out->impl, &out->size, &out->rank, dup, h, NULL, 0.0, NULL, err);
}

static void mpi_close(cz_plane *p)
{
    free_impl(&p->impl);
}

static const cz_plane_ops cz_plane_mpi_ops = {
    .version = CZ_DATA_PLANE_VERSION,
    .kind = CZ_COMM_MPI,
    .name = "mpi",
    .reduce_scatter = mpi_reduce_scatter,
    .all_gather = mpi_all_gather,
    .iall_gather = mpi_iall_gather,
    .group_start = mpi_group_start,
    .send = mpi_send,
    .recv = mpi_recv,
    .group_end = mpi_group_end,
    .wait = mpi_wait,
    .progress = mpi_progress,
    .req_create = mpi_req_create,
    .req_free = mpi_req_free,
    .split = mpi_split,
    .close = mpi_close,
    .allreduce_sum = mpi_allreduce_sum,
    .iallreduce_sum = mpi_iallreduce_sum,
    .ireduce_scatter = mpi_ireduce_scatter,
    .iall_gatherv = mpi_iall_gatherv,
};

bool cz__comm_mpi_available(void)
{
    int init = 0, fin = 0;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    return init && !fin;
}

/* Duplicates the communicator at handle (NULL: MPI_COMM_WORLD), within the limit. */
static int dup_handle(const void *handle, cz_mpi_chan *chan, double timeout_s,
                      const cz_phase *phase, MPI_Comm *dup, cz_error *err)
{
    MPI_Comm src = handle ? *(const MPI_Comm *)handle : MPI_COMM_WORLD;
    MPI_Request r;
    int rc = MPI_Comm_idup(src, dup, &r);
    if (rc != MPI_SUCCESS)
        return mpi_fail(err, rc, "Comm_idup");
    return cz__mpi_wait(chan, &r, 1, src, NULL, timeout_s, phase, "duplicating a communicator",
                        err);
}

int cz__ctrl_mpi_open(cz_ctrl *c, const void *handle, double timeout_s, cz_error *err)
{
    MPI_Comm src = handle ? *(const MPI_Comm *)handle : MPI_COMM_WORLD, dup;
    cz_mpi_chan *chan = NULL;
    int rc;
    if ((rc = cz__mpi_chan_open(&chan, src, timeout_s, c->phase, err)) != CZ_OK ||
        (rc = dup_handle(handle, chan, timeout_s, c->phase, &dup, err)) != CZ_OK)
        goto done;
    c->ops = &cz_ctrl_mpi_ops;
    if ((rc = wrap(&c->impl, &c->size, &c->rank, dup, NULL, chan, timeout_s, c->phase, err)) !=
        CZ_OK)
        goto done;
    ((mpi_plane *)c->impl)->owns_chan = true;
    chan = NULL; /* the plane owns it now */
done:
    cz__mpi_chan_close(chan);
    return rc;
}

int cz__plane_mpi_open(cz_plane *p, const void *handle, const cz_ctrl *ctrl, cz_error *err)
{
    const mpi_plane *like = ctrl && ctrl->ops && ctrl->ops->kind == CZ_COMM_MPI ? ctrl->impl : NULL;
    double timeout_s = like ? like->timeout_s : CZ_MPI_DEFAULT_TIMEOUT_S;
    MPI_Comm dup;
    int rc = dup_handle(handle, like ? like->chan : NULL, timeout_s, like ? like->phase : NULL,
                        &dup, err);
    if (rc)
        return rc;
    p->ops = &cz_plane_mpi_ops;
    return wrap(&p->impl, &p->size, &p->rank, dup, like, NULL, timeout_s, NULL, err);
}

#else /* !CZ_HAVE_MPI */

bool cz__comm_mpi_available(void)
{
    return false;
}

int cz__ctrl_mpi_open(cz_ctrl *c, const void *handle, double timeout_s, cz_error *err)
{
    (void)c;
    (void)handle;
    (void)timeout_s;
    return cz__error_set(err, CZ_EUNSUPPORTED,
                         "comm backend 'mpi' is not available: built with CZ_WITH_MPI=OFF");
}

int cz__plane_mpi_open(cz_plane *p, const void *handle, const cz_ctrl *ctrl, cz_error *err)
{
    (void)p;
    (void)handle;
    (void)ctrl;
    return cz__error_set(err, CZ_EUNSUPPORTED,
                         "comm backend 'mpi' is not available: built with CZ_WITH_MPI=OFF");
}

#endif
