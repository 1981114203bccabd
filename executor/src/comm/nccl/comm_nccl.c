/* The "nccl" data plane: the step's collectives on device memory, on a communication stream of
 * the plane's own, ordered against the compute stream by events only (no host waits).
 *
 * Ordering: an operation first makes the communication stream wait for `after` (a compute
 * event); a blocking-form operation (reduce_scatter, all_gather) then records an event on the
 * communication stream and makes the compute stream wait for it, so the compute ops issued
 * next see its result; a request (iall_gather, iallreduce_sum, a send/receive group) records
 * its event and the compute stream waits for it in wait(). The uneven collectives replay the call
 * lists of nccl_plan.c, rooted or padded as its alpha-beta rule chooses.
 *
 * Failure: the plane registers a watcher with the cuda backend, polled whenever the host waits
 * on the device (the step's read-back, event syncs): ncclCommGetAsyncError reporting an error,
 * or a wait longer than the timeout, aborts the communicator (ncclCommAbort) and fails the
 * wait, so a rank whose peer died returns an error instead of hanging; its peers' own waits
 * then fail the same way. An aborted plane refuses every later operation. */
#include "comm_nccl.h"
#include "alloc.h"
#include "clock.h"

#include "compute_cuda.h"
#include "nccl_plan.h"
#include "../cuda/check.h"

#include "nccl_api.h"

#include <cuda_runtime_api.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct nccl_plane {
    ncclComm_t comm;
    cudaStream_t stream;
    cudaEvent_t done;   /* end of the last blocking-form collective */
    cudaEvent_t issued; /* the compute stream's point when a blocking-form one starts */
    void *scratch;      /* the padded forms' slots, reserved at create */
    size_t scratch_bytes;
    double alpha_s, bytes_per_s, timeout_s;
    cz_compute *watched;
    int aborted;
    int borrowed; /* the job's communicator: not destroyed at close */
} nccl_plane;

struct cz_comm_req {
    cudaEvent_t ev;
    int active, fail;
    cz_error fail_err;
    /* The group's exchange with this rank itself (cz__nccl_self_copy), copied at group_end. */
    const void *self_send;
    void *self_recv;
    size_t self_sent, self_received;
    int has_self_send, has_self_recv;
    cz_dtype self_type;
};

int cz__nccl_status(int rc, const char *call, const char *file, int line, cz_error *err)
{
    if (rc == (int)ncclSuccess)
        return CZ_OK;
    return cz__error_set(err, CZ_EIO, "%s:%d: %s failed: %s", file, line, call,
                         ncclGetErrorString((ncclResult_t)rc));
}

/* For statuses checked where no caller is left to report them to (teardown, a second error
 * after the first). */
static void ignore(int rc)
{
    (void)rc;
}

static nccl_plane *impl_of(cz_plane *p)
{
    return p->impl;
}

static ncclDataType_t nccl_type(cz_dtype t)
{
    return t == CZ_DTYPE_FP32 ? ncclFloat32 : ncclBfloat16;
}

/* ---- non-blocking communicators ----
 * The executor's communicators are created non-blocking (cz__plane_nccl_open, split), so that
 * a creation a peer never joins times out instead of hanging. On such a communicator any call
 * may return ncclInProgress (ncclGroupEnd, a collective outside a group): its work is then
 * being enqueued in the background, and the communicator's state is polled until it settles
 * before anything (an event record) may follow. A borrowed blocking communicator returns its
 * final status at once and is never polled. */
typedef struct comm_poll {
    ncclComm_t comm;
    int failed; /* the ncclResult_t that ended the wait */
} comm_poll;

static cz_nccl_state poll_comm(void *ctx)
{
    comm_poll *c = ctx;
    ncclResult_t st = ncclSuccess;
    int rc = CZ_NCCL_RC(ncclCommGetAsyncError(c->comm, &st));
    if (rc != (int)ncclSuccess) {
        c->failed = rc;
        return CZ_NCCL_STATE_FAILED;
    }
    if (st == ncclInProgress)
        return CZ_NCCL_STATE_PENDING;
    c->failed = (int)st;
    return st == ncclSuccess ? CZ_NCCL_STATE_READY : CZ_NCCL_STATE_FAILED;
}

static double poll_now(void *ctx)
{
    (void)ctx;
    return cz__exec_now();
}

static void poll_pause(void *ctx)
{
    (void)ctx;
    struct timespec ts = {0, 1000000}; /* 1 ms: creation takes tens of ms to seconds */
    nanosleep(&ts, NULL);
}

/* rc, the status of `call` on comm, settled: ncclInProgress polls the communicator until it
 * is ready (CZ_OK), failed (CZ_EIO with NCCL's reason) or timeout_s pass (CZ_ETIMEOUT). */
static CZ_MUST_USE int settle(ncclComm_t comm, double timeout_s, int rc, const char *call,
                              const char *file, int line, cz_error *err)
{
    if (rc != (int)ncclInProgress)
        return cz__nccl_status(rc, call, file, line, err);
    comm_poll c = {comm, (int)ncclSuccess};
    cz_nccl_poller p = {poll_comm, poll_now, poll_pause, &c};
    switch (cz__nccl_poll_until(&p, timeout_s, NULL)) {
    case CZ_NCCL_WAIT_OK:
        return CZ_OK;
    case CZ_NCCL_WAIT_FAILED:
        return cz__nccl_status(c.failed, call, file, line, err);
    case CZ_NCCL_WAIT_TIMEOUT:
        break;
    }
    return cz__error_set(err, CZ_ETIMEOUT,
                         "%s:%d: %s still in progress after %.0f s (a peer rank failed, stopped or "
                         "never started?); communicator aborted (cz_exec_config.nccl_timeout_s or "
                         "CZ_NCCL_TIMEOUT_S sets the limit)",
                         file, line, call, timeout_s);
}

static double env_or(const char *name, double def, double unit)
{
    const char *v = getenv(name);
    char *end = NULL;
    double x = v ? strtod(v, &end) : 0.0;
    return v && end != v && x > 0.0 ? x * unit : def;
}

static int abort_comm(nccl_plane *h, cz_error *err)
{
    if (h->aborted)
        return CZ_OK;
    h->aborted = 1;
    return CZ_NCCL(err, ncclCommAbort(h->comm));
}

/* A call on the plane's communicator, settled; a failure while it was in progress aborts the
 * communicator, so that the peers' own waits on it fail too. */
static CZ_MUST_USE int plane_call(nccl_plane *h, int rc, const char *call, const char *file,
                                  int line, cz_error *err)
{
    int in_progress = rc == (int)ncclInProgress;
    rc = settle(h->comm, h->timeout_s, rc, call, file, line, err);
    if (rc && in_progress) {
        cz_error tmp;
        ignore(abort_comm(h, &tmp));
    }
    return rc;
}
#define CZ_NCCL_ON(h, err, call) plane_call((h), CZ_NCCL_RC(call), #call, __FILE__, __LINE__, (err))

/* The watcher polled by the cuda backend's host waits. */
static int watch(void *ctx, double waited_s, cz_error *err)
{
    nccl_plane *h = ctx;
    ncclResult_t st = ncclSuccess;
    cz_error tmp;
    if (h->aborted)
        return cz__error_set(err, CZ_EIO, "NCCL communicator was aborted after an earlier error");
    int rc;
    if ((rc = CZ_NCCL(err, ncclCommGetAsyncError(h->comm, &st))) != CZ_OK)
        goto done;
    if (st != ncclSuccess && st != ncclInProgress) {
        rc = CZ_NCCL(err, st);
        goto done;
    }
    if (waited_s > h->timeout_s)
        rc = cz__error_set(err, CZ_EIO,
                           "NCCL operation not complete after %.0f s (a peer rank failed or "
                           "stopped?); communicator aborted (cz_exec_config.nccl_timeout_s or "
                           "CZ_NCCL_TIMEOUT_S sets the limit)",
                           waited_s);
done:
    if (rc != CZ_OK)
        ignore(abort_comm(h, &tmp));
    return rc;
}

/* Registers the watcher with the compute backend (a free slot, no allocation). */
static int ensure_ready(cz_plane *p, cz_error *err)
{
    nccl_plane *h = impl_of(p);
    if (h->aborted)
        return cz__error_set(err, CZ_EIO, "NCCL communicator was aborted after an earlier error");
    if (!p->compute || p->compute->ops->kind != CZ_BACKEND_CUDA)
        return cz__error_set(err, CZ_EUNSUPPORTED,
                             "comm backend 'nccl' needs the 'cuda' compute backend");
    if (h->watched != p->compute) {
        if (cz__cuda_watch(p->compute, watch, h))
            return cz__error_set(err, CZ_EINTERNAL, "no free watcher slot for the NCCL plane");
        h->watched = p->compute;
    }
    return cz__cuda_take_error(p->compute, err);
}

static int wait_after(cz_plane *p, cz_event *after, cz_error *err)
{
    int rc;
    if ((rc = ensure_ready(p, err)) != CZ_OK || !after)
        return rc;
    return CZ_CU(err, cudaStreamWaitEvent(impl_of(p)->stream, cz__cuda_event(after), 0));
}

/* The compute stream waits for everything issued so far on the communication stream. */
static int join_compute(cz_plane *p, cz_error *err)
{
    nccl_plane *h = impl_of(p);
    int rc;
    if ((rc = CZ_CU(err, cudaEventRecord(h->done, h->stream))) != CZ_OK)
        return rc;
    return CZ_CU(err, cudaStreamWaitEvent(cz__cuda_stream(p->compute), h->done, 0));
}

/* The padded forms' scratch is allocated once, when the executor is created
 * (cz__plane_nccl_reserve, sized by cz__nccl_plan_scratch for the plan); a step never allocates.
 * A collective needing more than was reserved means the plan-wide computation and the plane
 * disagree: a bug, reported rather than papered over with a cudaMalloc inside the step. */
static int check_scratch(const nccl_plane *h, size_t bytes, cz_error *err)
{
    if (bytes <= h->scratch_bytes)
        return CZ_OK;
    return cz__error_set(err, CZ_EINTERNAL,
                         "NCCL plane: a padded collective needs %zu bytes of scratch but %zu were "
                         "reserved at create (cz__nccl_plan_scratch disagrees with the step)",
                         bytes, h->scratch_bytes);
}

static int replay(cz_plane *p, const cz_nccl_call *calls, int n, void *send, void *recv, cz_dtype t,
                  cz_error *err)
{
    nccl_plane *h = impl_of(p);
    size_t es = (size_t)cz__dtype_bytes(t);
    int rc = CZ_OK, grouped = 0;
    for (int i = 0; i < n; i++) {
        const cz_nccl_call *c = &calls[i];
        void *src = cz__nccl_call_ptr(c->src_buf, c->src_off, es, send, recv, h->scratch);
        void *dst = cz__nccl_call_ptr(c->dst_buf, c->dst_off, es, send, recv, h->scratch);
        if (c->grouped && !grouped) {
            if ((rc = CZ_NCCL_ON(h, err, ncclGroupStart())) != CZ_OK)
                goto done;
            grouped = 1;
        }
        switch (c->kind) {
        case CZ_NCCL_COPY:
            rc = CZ_CU(
                err, cudaMemcpyAsync(dst, src, c->count * es, cudaMemcpyDeviceToDevice, h->stream));
            break;
        case CZ_NCCL_REDUCE:
            rc = CZ_NCCL_ON(
                h, err,
                ncclReduce(src, dst, c->count, nccl_type(t), ncclSum, c->root, h->comm, h->stream));
            break;
        case CZ_NCCL_BROADCAST:
            rc = CZ_NCCL_ON(
                h, err,
                ncclBroadcast(src, dst, c->count, nccl_type(t), c->root, h->comm, h->stream));
            break;
        case CZ_NCCL_REDUCE_SCATTER:
            rc = CZ_NCCL_ON(
                h, err,
                ncclReduceScatter(src, dst, c->count, nccl_type(t), ncclSum, h->comm, h->stream));
            break;
        case CZ_NCCL_ALL_GATHER:
            rc = CZ_NCCL_ON(h, err,
                            ncclAllGather(src, dst, c->count, nccl_type(t), h->comm, h->stream));
            break;
        }
        /* A group ends where its last call is, even after a failed call in it (every
         * ncclGroupStart is closed); the first failure is the one reported. */
        if (grouped && (i + 1 == n || !calls[i + 1].grouped)) {
            cz_error tmp;
            int erc = CZ_NCCL_ON(h, rc != CZ_OK ? &tmp : err, ncclGroupEnd());
            grouped = 0;
            rc = rc != CZ_OK ? rc : erc;
        }
        if (rc != CZ_OK)
            goto done;
    }
done:
    /* A failure inside a group leaves it open: it is closed here, its status not the one to
     * report. */
    if (grouped) {
        cz_error tmp;
        ignore(CZ_NCCL_ON(h, &tmp, ncclGroupEnd()));
    }
    return rc;
}

/* Posts an uneven collective on the communication stream after `after` and after every compute
 * op issued so far (its output, a reduce-scatter's scratch, may still be read by ops issued
 * after `after`: the previous bucket's scale). */
static int post_uneven(cz_plane *p, int gather, const void *send, void *recv, const size_t *counts,
                       cz_dtype t, cz_event *after, cz_error *err)
{
    nccl_plane *h = impl_of(p);
    cz_nccl_call calls[2 * p->size + 1];
    size_t scratch = 0;
    int rc;
    if ((rc = wait_after(p, after, err)) != CZ_OK ||
        (rc = CZ_CU(err, cudaEventRecord(h->issued, cz__cuda_stream(p->compute)))) != CZ_OK ||
        (rc = CZ_CU(err, cudaStreamWaitEvent(h->stream, h->issued, 0))) != CZ_OK)
        return rc;
    cz_nccl_form f =
        cz__nccl_choose(counts, p->size, (size_t)cz__dtype_bytes(t), h->alpha_s, h->bytes_per_s);
    int n = gather ? cz__nccl_plan_all_gather(calls, counts, p->size, p->rank, f, &scratch)
                   : cz__nccl_plan_reduce_scatter(calls, counts, p->size, p->rank, f, &scratch);
    if ((rc = check_scratch(h, scratch * (size_t)cz__dtype_bytes(t), err)) != CZ_OK)
        return rc;
    return replay(p, calls, n, (void *)send, recv, t, err);
}

/* A blocking-form collective: posted, then joined to the compute stream. */
static int uneven(cz_plane *p, int gather, const void *send, void *recv, const size_t *counts,
                  cz_dtype t, cz_event *after, cz_error *err)
{
    int rc = post_uneven(p, gather, send, recv, counts, t, after, err);
    return rc ? rc : join_compute(p, err);
}

static int nccl_reduce_scatter(cz_plane *p, const void *send, void *recv, const size_t *counts,
                               cz_dtype t, cz_event *after, cz_error *err)
{
    return uneven(p, 0, send, recv, counts, t, after, err);
}

static int nccl_all_gather(cz_plane *p, void *buf, const size_t *counts, cz_dtype t,
                           cz_event *after, cz_error *err)
{
    return uneven(p, 1, buf, NULL, counts, t, after, err);
}

/* The bucket-wise step's forms: the same calls, stream-ordered and so already asynchronous; the
 * compute stream waits for req's event in wait(), not at once. The padded forms' scratch is
 * shared, but every collective of the plane runs on its one stream, one after another. */
/* Posts an uneven collective (post_uneven) and records req's event after it. */
static int post_uneven_req(cz_plane *p, int gather, const void *send, void *recv,
                           const size_t *counts, cz_dtype t, cz_event *after, cz_comm_req *req,
                           cz_error *err)
{
    int rc;
    if ((rc = post_uneven(p, gather, send, recv, counts, t, after, err)) != CZ_OK)
        goto done;
    rc = CZ_CU(err, cudaEventRecord(req->ev, impl_of(p)->stream));
done:
    req->active = rc == CZ_OK;
    return rc;
}

static int nccl_ireduce_scatter(cz_plane *p, const void *send, void *recv, const size_t *counts,
                                cz_dtype t, cz_event *after, cz_comm_req *req, cz_error *err)
{
    return post_uneven_req(p, 0, send, recv, counts, t, after, req, err);
}

static int nccl_iall_gatherv(cz_plane *p, void *buf, const size_t *counts, cz_dtype t,
                             cz_event *after, cz_comm_req *req, cz_error *err)
{
    return post_uneven_req(p, 1, buf, NULL, counts, t, after, req, err);
}

static int nccl_iall_gather(cz_plane *p, const void *send, size_t count, void *recv, cz_dtype t,
                            cz_event *after, cz_comm_req *req, cz_error *err)
{
    nccl_plane *h = impl_of(p);
    int rc;
    if ((rc = wait_after(p, after, err)) != CZ_OK ||
        (rc = CZ_NCCL_ON(
             h, err, ncclAllGather(send, recv, count, nccl_type(t), h->comm, h->stream))) != CZ_OK)
        goto done;
    rc = CZ_CU(err, cudaEventRecord(req->ev, h->stream));
done:
    req->active = rc == CZ_OK;
    return rc;
}

/* Posts an in-place sum on the communication stream after `after` and after every compute op
 * issued so far (the sum is written in place, and ops issued after `after` may still read the
 * buffer: what a host-driven plane guarantees by posting once they have run). h->issued is
 * reused by the next post: a stream wait takes the event's state when it is enqueued, so
 * re-recording it later does not move this wait. */
static int post_allreduce(cz_plane *p, void *buf, size_t count, ncclDataType_t t, cz_event *after,
                          cz_error *err)
{
    nccl_plane *h = impl_of(p);
    int rc;
    if ((rc = wait_after(p, after, err)) != CZ_OK ||
        (rc = CZ_CU(err, cudaEventRecord(h->issued, cz__cuda_stream(p->compute)))) != CZ_OK ||
        (rc = CZ_CU(err, cudaStreamWaitEvent(h->stream, h->issued, 0))) != CZ_OK)
        return rc;
    return CZ_NCCL_ON(h, err, ncclAllReduce(buf, buf, count, t, ncclSum, h->comm, h->stream));
}

/* The cooperative Newton-Schulz sums of squares: blocking form, as uneven() orders it. */
static int nccl_allreduce_sum(cz_plane *p, void *buf, size_t count, int f64, cz_event *after,
                              cz_error *err)
{
    int rc;
    if ((rc = post_allreduce(p, buf, count, f64 ? ncclFloat64 : ncclFloat32, after, err)) != CZ_OK)
        return rc;
    return join_compute(p, err);
}

/* A cooperative Gram panel, completed as iall_gather (an event on the communication stream
 * that wait() makes the compute stream wait for). Each panel has its own req; all share the one
 * communication stream, so they complete in the order they were posted. */
static int nccl_iallreduce_sum(cz_plane *p, float *buf, size_t count, cz_event *after,
                               cz_comm_req *req, cz_error *err)
{
    int rc;
    if ((rc = post_allreduce(p, buf, count, ncclFloat32, after, err)) != CZ_OK)
        goto done;
    rc = CZ_CU(err, cudaEventRecord(req->ev, impl_of(p)->stream));
done:
    req->active = rc == CZ_OK;
    return rc;
}

static int nccl_group_start(cz_plane *p, cz_comm_req *req, cz_event *after, cz_error *err)
{
    req->fail = 0;
    req->active = 0;
    req->has_self_send = req->has_self_recv = 0;
    int rc;
    /* send/recv record their failure in req; group_end reports it. */
    if ((rc = wait_after(p, after, err)) != CZ_OK ||
        (rc = CZ_NCCL_ON(impl_of(p), err, ncclGroupStart())) != CZ_OK) {
        req->fail = rc;
        req->fail_err = err ? *err : (cz_error){0};
    }
    return rc;
}

static void post(cz_plane *p, cz_comm_req *req, void *buf, size_t count, cz_dtype t, int peer,
                 int is_send)
{
    nccl_plane *h = impl_of(p);
    if (count == 0 || req->fail)
        return;
    if (peer == p->rank) { /* copied at group_end, not through NCCL */
        if (is_send)
            req->self_send = buf, req->self_sent = count, req->has_self_send = 1;
        else
            req->self_recv = buf, req->self_received = count, req->has_self_recv = 1;
        req->self_type = t;
        return;
    }
    req->fail = is_send ? CZ_NCCL_ON(h, &req->fail_err,
                                     ncclSend(buf, count, nccl_type(t), peer, h->comm, h->stream))
                        : CZ_NCCL_ON(h, &req->fail_err,
                                     ncclRecv(buf, count, nccl_type(t), peer, h->comm, h->stream));
}

static void nccl_send(cz_plane *p, cz_comm_req *req, const void *buf, size_t count, cz_dtype t,
                      int peer)
{
    /* ncclSend takes a const buffer; the cast only serves the shared helper. */
    post(p, req, (void *)buf, count, t, peer, 1);
}

static void nccl_recv(cz_plane *p, cz_comm_req *req, void *buf, size_t count, cz_dtype t, int peer)
{
    post(p, req, buf, count, t, peer, 0);
}

static int nccl_group_end(cz_plane *p, cz_comm_req *req, cz_error *err)
{
    nccl_plane *h = impl_of(p);
    cz_error tmp;
    /* Every group_start that succeeded is closed, even after a failed send or receive. */
    int rc = CZ_NCCL_ON(h, req->fail ? &tmp : err, ncclGroupEnd());
    if (req->fail) {
        if (err)
            *err = req->fail_err;
        return req->fail;
    }
    int64_t self = cz__nccl_self_copy(req->self_sent, req->has_self_send, req->self_received,
                                      req->has_self_recv);
    if (rc != CZ_OK)
        goto done;
    if (self < 0) {
        rc = cz__error_set(err, CZ_EINTERNAL,
                           "a group's exchange with its own rank is unpaired (a send of %zu and a "
                           "receive of %zu elements)",
                           req->has_self_send ? req->self_sent : 0,
                           req->has_self_recv ? req->self_received : 0);
        goto done;
    }
    if (self > 0 &&
        (rc = CZ_CU(err, cudaMemcpyAsync(req->self_recv, req->self_send,
                                         (size_t)self * (size_t)cz__dtype_bytes(req->self_type),
                                         cudaMemcpyDeviceToDevice, h->stream))) != CZ_OK)
        goto done;
    rc = CZ_CU(err, cudaEventRecord(req->ev, h->stream));
done:
    req->active = rc == CZ_OK;
    return rc;
}

static int nccl_wait(cz_plane *p, cz_comm_req *req, cz_error *err)
{
    if (!req || !req->active)
        return CZ_OK;
    req->active = 0;
    return CZ_CU(err, cudaStreamWaitEvent(cz__cuda_stream(p->compute), req->ev, 0));
}

static void nccl_progress(cz_plane *p, cz_comm_req *req)
{
    /* NCCL's kernels progress on their own; nothing to drive from the host. */
    (void)p;
    (void)req;
}

static cz_comm_req *nccl_req_create(cz_plane *p)
{
    cz_comm_req *q = cz__exec_calloc(1, sizeof *q);
    cz_error e;
    (void)p;
    if (!q)
        return NULL;
    if (CZ_CU(&e, cudaEventCreateWithFlags(&q->ev, cudaEventDisableTiming))) {
        cz__exec_free(q);
        return NULL;
    }
    return q;
}

static void nccl_req_free(cz_plane *p, cz_comm_req *req)
{
    cz_error e;
    (void)p;
    if (!req)
        return;
    ignore(CZ_CU(&e, cudaEventDestroy(req->ev)));
    cz__exec_free(req);
}

static const cz_plane_ops cz_plane_nccl_ops;

/* Wraps a communicator into p (taken over, or borrowed from the job): its stream, events and
 * model constants. */
static int wrap(cz_plane *p, ncclComm_t comm, int borrowed, double timeout_s, cz_error *err)
{
    nccl_plane *h = cz__exec_calloc(1, sizeof *h);
    if (!h) {
        cz_error tmp;
        if (!borrowed)
            ignore(CZ_NCCL(&tmp, ncclCommDestroy(comm)));
        return cz__error_set(err, CZ_ENOMEM, "out of memory for an NCCL plane");
    }
    h->comm = comm;
    h->borrowed = borrowed;
    h->alpha_s = env_or("CZ_NCCL_ALPHA_US", CZ_NCCL_DEFAULT_ALPHA_S, 1e-6);
    h->bytes_per_s = env_or("CZ_NCCL_GBPS", CZ_NCCL_DEFAULT_BYTES_PER_S, 1e9);
    h->timeout_s = timeout_s;
    p->ops = &cz_plane_nccl_ops;
    p->impl = h;
    int rc;
    /* On a failure p holds the plane as far as it was made: the caller's close releases it. */
    if ((rc = CZ_CU(err, cudaStreamCreateWithFlags(&h->stream, cudaStreamNonBlocking))) != CZ_OK ||
        (rc = CZ_CU(err, cudaEventCreateWithFlags(&h->done, cudaEventDisableTiming))) != CZ_OK ||
        (rc = CZ_CU(err, cudaEventCreateWithFlags(&h->issued, cudaEventDisableTiming))) != CZ_OK ||
        (rc = CZ_NCCL(err, ncclCommCount(comm, &p->size))) != CZ_OK)
        return rc;
    return CZ_NCCL(err, ncclCommUserRank(comm, &p->rank));
}

static int nccl_split(cz_plane *p, int color, int key, cz_plane *out, cz_error *err)
{
    nccl_plane *h = impl_of(p);
    ncclComm_t sub = NULL;
    /* The child inherits the parent's configuration: non-blocking when the executor made the
     * parent. Then ncclCommSplit returns at once, ncclSuccess included, and runs the split in
     * the background: the parent is in progress until it is done, and only then is the
     * child's handle written to `sub` (seen on a GPU: NULL right after the call, so the child
     * must not be polled first). So the parent is polled until it settles, then the child
     * until its own initialization does, each with the plane's time limit. The caller agrees
     * on the outcome over the control plane (executor.c). */
    int raw = CZ_NCCL_RC(ncclCommSplit(h->comm, color, key, &sub, NULL));
    int pending = raw == (int)ncclSuccess ? (int)ncclInProgress : raw;
    int rc = settle(h->comm, h->timeout_s, pending, "ncclCommSplit", __FILE__, __LINE__, err);
    /* Written by NCCL's thread before the parent's state settled: read it anew. */
    sub = *(ncclComm_t volatile *)&sub;
    if (rc != CZ_OK)
        goto done;
    if (!sub) {
        rc = cz__error_set(err, CZ_EIO, "ncclCommSplit completed without a new communicator");
        goto done;
    }
    if ((rc = settle(sub, h->timeout_s, (int)ncclInProgress, "ncclCommSplit (the new communicator)",
                     __FILE__, __LINE__, err)) != CZ_OK)
        goto done;
    *out = (cz_plane){.compute = p->compute};
    rc = wrap(out, sub, 0, h->timeout_s, err);
    sub = NULL; /* out's now, even when wrap fails (it destroys it or out's close does) */
done:
    if (sub) {
        cz_error tmp;
        ignore(CZ_NCCL(&tmp, ncclCommAbort(sub)));
    }
    return rc;
}

/* The close's drain: the communication stream's last event, and the communicator's own
 * asynchronous error (a peer's failure), polled. */
static cz_nccl_state poll_drained(void *ctx)
{
    nccl_plane *h = ctx;
    int q = CZ_CU_RC(cudaEventQuery(h->done));
    if (q == (int)cudaSuccess)
        return CZ_NCCL_STATE_READY;
    if (q != (int)cudaErrorNotReady)
        return CZ_NCCL_STATE_FAILED;
    comm_poll c = {h->comm, (int)ncclSuccess};
    return poll_comm(&c) == CZ_NCCL_STATE_FAILED ? CZ_NCCL_STATE_FAILED : CZ_NCCL_STATE_PENDING;
}

static cz_nccl_wait drain(nccl_plane *h)
{
    cz_error e;
    if (CZ_CU(&e, cudaEventRecord(h->done, h->stream)))
        return CZ_NCCL_WAIT_FAILED;
    cz_nccl_poller p = {poll_drained, poll_now, poll_pause, h};
    return cz__nccl_poll_until(&p, h->timeout_s, NULL);
}

static void nccl_close(cz_plane *p)
{
    nccl_plane *h = impl_of(p);
    cz_error e;
    if (!h)
        return;
    if (h->watched)
        cz__cuda_unwatch(h->watched, h);
    cz_nccl_wait drained =
        h->stream && h->done && h->comm && !h->aborted ? drain(h) : CZ_NCCL_WAIT_OK;
    switch (cz__nccl_close_step_of(drained, h->aborted, h->borrowed || !h->comm)) {
    case CZ_NCCL_CLOSE_ABORT:
        ignore(abort_comm(h, &e));
        break;
    case CZ_NCCL_CLOSE_FINALIZE: {
        /* Finalize (flush, then wait for the peers: ncclInProgress on a non-blocking
         * communicator, polled with the time limit), then destroy; a peer that never
         * finalizes gets the communicator aborted instead of a hang at teardown. */
        int raw = CZ_NCCL_RC(ncclCommFinalize(h->comm));
        if (settle(h->comm, h->timeout_s, raw, "ncclCommFinalize", __FILE__, __LINE__, &e))
            ignore(CZ_NCCL(&e, ncclCommAbort(h->comm)));
        else
            ignore(CZ_NCCL(&e, ncclCommDestroy(h->comm)));
        break;
    }
    case CZ_NCCL_CLOSE_LEAVE:
        break;
    }
    /* Drained or aborted: nothing is left to wait for on the stream. */
    if (h->stream)
        ignore(CZ_CU(&e, cudaStreamSynchronize(h->stream)));
    if (h->scratch)
        ignore(CZ_CU(&e, cudaFree(h->scratch)));
    if (h->done)
        ignore(CZ_CU(&e, cudaEventDestroy(h->done)));
    if (h->issued)
        ignore(CZ_CU(&e, cudaEventDestroy(h->issued)));
    if (h->stream)
        ignore(CZ_CU(&e, cudaStreamDestroy(h->stream)));
    cz__exec_free(h);
    p->impl = NULL;
}

static const cz_plane_ops cz_plane_nccl_ops = {
    .version = CZ_DATA_PLANE_VERSION,
    .kind = CZ_COMM_NCCL,
    .name = "nccl",
    .reduce_scatter = nccl_reduce_scatter,
    .all_gather = nccl_all_gather,
    .iall_gather = nccl_iall_gather,
    .group_start = nccl_group_start,
    .send = nccl_send,
    .recv = nccl_recv,
    .group_end = nccl_group_end,
    .wait = nccl_wait,
    .progress = nccl_progress,
    .req_create = nccl_req_create,
    .req_free = nccl_req_free,
    .split = nccl_split,
    .close = nccl_close,
    .allreduce_sum = nccl_allreduce_sum,
    .iallreduce_sum = nccl_iallreduce_sum,
    .ireduce_scatter = nccl_ireduce_scatter,
    .iall_gatherv = nccl_iall_gatherv,
};

int cz__plane_nccl_open(cz_plane *p, cz_ctrl *ctrl, double timeout_s, cz_error *err)
{
    ncclUniqueId id;
    /* The id's 128 bytes travel as 16 int64 through the control plane's min-reduction (every
     * other rank contributes INT64_MAX), plus a flag that is 0 when rank 0 could not make it. */
    enum { W = NCCL_UNIQUE_ID_BYTES / 8 };
    int64_t v[W + 1];
    int rc = CZ_OK;
    *p = (cz_plane){0};
    for (int i = 0; i <= W; i++)
        v[i] = INT64_MAX;
    if (ctrl->rank == 0) {
        if ((rc = CZ_NCCL(err, ncclGetUniqueId(&id))) == CZ_OK)
            memcpy(v, id.internal, sizeof id.internal);
        v[W] = rc ? 0 : 1;
    }
    /* Every rank enters the reduction, rank 0 too when it could not make the id: the others
     * wait in it, and learn from v[W] that there is none. Rank 0's own failure is the one it
     * reports. */
    cz_error tmp;
    int crc = ctrl->ops->allreduce_min_i64(ctrl, v, W + 1, rc ? &tmp : err);
    if (rc != CZ_OK)
        return rc;
    if (crc != CZ_OK)
        return crc;
    if (v[W] == 0)
        return cz__error_set(err, CZ_EIO, "rank 0 could not create the NCCL unique id");
    memcpy(id.internal, v, sizeof id.internal);
    /* Non-blocking creation, polled with a time limit: a rank whose peer never arrives (or
     * failed) gets an error instead of waiting forever inside ncclCommInitRank. */
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclComm_t comm = NULL;
    int raw = CZ_NCCL_RC(ncclCommInitRankConfig(&comm, ctrl->size, id, ctrl->rank, &config));
    rc = settle(comm, timeout_s, raw, "ncclCommInitRankConfig", __FILE__, __LINE__, err);
    /* Every rank learns whether every other one got its communicator; all abort otherwise. */
    rc = cz__nccl_agree(ctrl, rc, "create the NCCL communicator", err);
    if (rc) {
        if (comm)
            ignore(CZ_NCCL(&tmp, ncclCommAbort(comm)));
        return rc;
    }
    return wrap(p, comm, 0, timeout_s, err);
}

int cz__plane_nccl_wrap(cz_plane *p, const void *handle, double timeout_s, cz_error *err)
{
    *p = (cz_plane){0};
    if (!handle)
        return cz__error_set(err, CZ_EINVALID, "NCCL communicator handle is NULL");
    return wrap(p, *(const ncclComm_t *)handle, 1, timeout_s, err);
}

int cz__plane_nccl_reserve(cz_plane *p, const cz_plan *plan, cz_error *err)
{
    nccl_plane *h = impl_of(p);
    /* Room for the step's DP collectives in fp32 and in bf16 (wire.c). */
    size_t bytes = cz__nccl_plan_scratch_bytes(plan, h->alpha_s, h->bytes_per_s);
    if (bytes <= h->scratch_bytes)
        return CZ_OK;
    int rc = CZ_OK;
    if (h->scratch)
        rc = CZ_CU(err, cudaFree(h->scratch));
    /* The old scratch is gone even when its free failed: nothing may use it again. */
    h->scratch = NULL;
    h->scratch_bytes = 0;
    if (rc != CZ_OK ||
        (rc = CZ_CU(err, cz__cuda_malloc(&h->scratch, bytes, CZ_CUDA_MEM_DEVICE))) != CZ_OK)
        return rc;
    h->scratch_bytes = bytes;
    return CZ_OK;
}
