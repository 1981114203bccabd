/* The "self" planes: one process, so every collective is a copy and the control plane has
 * nothing to agree with. Lets the executor run (and be unit-tested) without MPI for plans
 * with dp = tp = 1. */
#include "alloc.h"
#include "comm.h"
#include "comm_self.h"
#include "compute.h"
#include "cz_format.h"

#include <string.h>

/* A group holds at most one send to and one receive from rank 0 (itself); group_end copies. */
struct cz_comm_req {
    const void *sbuf;
    void *rbuf;
    size_t scount, rcount;
    cz_dtype t;
};

static int self_ctrl_allreduce_min_i64(cz_ctrl *c, int64_t *v, int n, cz_error *err)
{
    (void)c;
    (void)v;
    (void)n;
    (void)err;
    return CZ_OK;
}

static int self_ctrl_allreduce_sum_f64(cz_ctrl *c, double *v, int n, cz_error *err)
{
    (void)c;
    (void)v;
    (void)n;
    (void)err;
    return CZ_OK;
}

static void self_ctrl_close(cz_ctrl *c)
{
    (void)c;
}

static const cz_ctrl_ops cz_ctrl_self_ops = {
    .kind = CZ_COMM_SELF,
    .name = "self",
    .allreduce_min_i64 = self_ctrl_allreduce_min_i64,
    .allreduce_sum_f64 = self_ctrl_allreduce_sum_f64,
    .close = self_ctrl_close,
};

static int self_reduce_scatter(cz_plane *p, const void *send, void *recv, const size_t *counts,
                               cz_dtype t, cz_event *after, cz_error *err)
{
    int rc = cz_plane_wait_after(p, after, err);
    if (rc)
        return rc;
    memcpy(recv, send, counts[0] * (size_t)cz__dtype_bytes(t));
    return CZ_OK;
}

static int self_all_gather(cz_plane *p, void *buf, const size_t *counts, cz_dtype t,
                           cz_event *after, cz_error *err)
{
    (void)buf;
    (void)counts;
    (void)t;
    return cz_plane_wait_after(p, after, err);
}

/* One rank: the bucket-wise step's forms complete at post time (a copy, or nothing). */
static int self_ireduce_scatter(cz_plane *p, const void *send, void *recv, const size_t *counts,
                                cz_dtype t, cz_event *after, cz_comm_req *req, cz_error *err)
{
    (void)req;
    return self_reduce_scatter(p, send, recv, counts, t, after, err);
}

static int self_iall_gatherv(cz_plane *p, void *buf, const size_t *counts, cz_dtype t,
                             cz_event *after, cz_comm_req *req, cz_error *err)
{
    (void)req;
    return self_all_gather(p, buf, counts, t, after, err);
}

static int self_iall_gather(cz_plane *p, const void *send, size_t count, void *recv, cz_dtype t,
                            cz_event *after, cz_comm_req *req, cz_error *err)
{
    (void)req;
    int rc = cz_plane_wait_after(p, after, err);
    if (rc)
        return rc;
    memcpy(recv, send, count * (size_t)cz__dtype_bytes(t));
    return CZ_OK;
}

static int self_allreduce_sum(cz_plane *p, void *buf, size_t count, int f64, cz_event *after,
                              cz_error *err)
{
    (void)buf, (void)count, (void)f64;
    return cz_plane_wait_after(p, after, err); /* one rank: the sum is its own values */
}

static int self_group_start(cz_plane *p, cz_comm_req *req, cz_event *after, cz_error *err)
{
    *req = (cz_comm_req){0};
    return cz_plane_wait_after(p, after, err);
}

static void self_send(cz_plane *p, cz_comm_req *req, const void *buf, size_t count, cz_dtype t,
                      int peer)
{
    (void)p;
    (void)peer;
    req->sbuf = buf;
    req->scount = count;
    req->t = t;
}

static void self_recv(cz_plane *p, cz_comm_req *req, void *buf, size_t count, cz_dtype t, int peer)
{
    (void)p;
    (void)peer;
    req->rbuf = buf;
    req->rcount = count;
    req->t = t;
}

static int self_group_end(cz_plane *p, cz_comm_req *req, cz_error *err)
{
    (void)p;
    if (req->scount != req->rcount)
        return cz__error_set(err, CZ_EINTERNAL, "self send/receive: send %zu != receive %zu",
                             req->scount, req->rcount);
    if (req->scount)
        memcpy(req->rbuf, req->sbuf, req->scount * (size_t)cz__dtype_bytes(req->t));
    return CZ_OK;
}

static int self_wait(cz_plane *p, cz_comm_req *req, cz_error *err)
{
    (void)p;
    (void)req;
    (void)err;
    return CZ_OK;
}

static void self_progress(cz_plane *p, cz_comm_req *req)
{
    (void)p;
    (void)req;
}

static cz_comm_req *self_req_create(cz_plane *p)
{
    (void)p;
    return cz__exec_calloc(1, sizeof(cz_comm_req));
}

static void self_req_free(cz_plane *p, cz_comm_req *req)
{
    (void)p;
    cz__exec_free(req);
}

static int self_split(cz_plane *p, int color, int key, cz_plane *out, cz_error *err)
{
    (void)color;
    (void)key;
    int rc = cz__plane_self_open(out, err);
    out->compute = p->compute;
    return rc;
}

static void self_close(cz_plane *p)
{
    (void)p;
}

/* The sum over one rank is the buffer itself; ordering against the stream is the blocking
 * form's (the cpu backend's stream is the calling thread). */
static int self_iallreduce_sum(cz_plane *p, float *buf, size_t count, cz_event *after,
                               cz_comm_req *req, cz_error *err)
{
    (void)req;
    return self_allreduce_sum(p, buf, count, 0, after, err);
}

static const cz_plane_ops cz_plane_self_ops = {
    .version = CZ_DATA_PLANE_VERSION,
    .kind = CZ_COMM_SELF,
    .name = "self",
    .reduce_scatter = self_reduce_scatter,
    .all_gather = self_all_gather,
    .iall_gather = self_iall_gather,
    .group_start = self_group_start,
    .send = self_send,
    .recv = self_recv,
    .group_end = self_group_end,
    .wait = self_wait,
    .progress = self_progress,
    .req_create = self_req_create,
    .req_free = self_req_free,
    .split = self_split,
    .close = self_close,
    .allreduce_sum = self_allreduce_sum,
    .iallreduce_sum = self_iallreduce_sum,
    .ireduce_scatter = self_ireduce_scatter,
    .iall_gatherv = self_iall_gatherv,
};

int cz__ctrl_self_open(cz_ctrl *c, cz_error *err)
{
    (void)err;
    *c = (cz_ctrl){.ops = &cz_ctrl_self_ops, .size = 1, .rank = 0};
    return CZ_OK;
}

int cz__plane_self_open(cz_plane *p, cz_error *err)
{
    (void)err;
    *p = (cz_plane){.ops = &cz_plane_self_ops, .size = 1, .rank = 0};
    return CZ_OK;
}
