/* The "self" communicator: one process, so every collective is a copy. Lets the executor run
 * (and be unit-tested) without MPI for plans with dp = tp = 1. */
#include "exec_internal.h"

#include <string.h>

static int self_reduce_scatter(cz_comm *c, const float *send, float *recv, const int *counts,
                               cz_error *err)
{
    (void)c;
    (void)err;
    memcpy(recv, send, (size_t)counts[0] * sizeof(float));
    return CZ_OK;
}

static int self_allgatherv(cz_comm *c, float *buf, const int *counts, const int *displs,
                           cz_error *err)
{
    (void)c;
    (void)buf;
    (void)counts;
    (void)displs;
    (void)err;
    return CZ_OK;
}

static int self_ialltoallv(cz_comm *c, const float *send, const int *scounts, const int *sdispls,
                           float *recv, const int *rcounts, const int *rdispls, cz_comm_req *req,
                           cz_error *err)
{
    (void)c;
    (void)req;
    if (scounts[0] != rcounts[0])
        return cz_error_set(err, CZ_EINTERNAL, "self all-to-all: send %d != receive %d", scounts[0],
                            rcounts[0]);
    memcpy(recv + rdispls[0], send + sdispls[0], (size_t)scounts[0] * sizeof(float));
    return CZ_OK;
}

static int self_iallgather(cz_comm *c, const float *send, int count, float *recv, cz_comm_req *req,
                           cz_error *err)
{
    (void)c;
    (void)err;
    (void)req;
    memcpy(recv, send, (size_t)count * sizeof(float));
    return CZ_OK;
}

static int self_wait(cz_comm *c, cz_comm_req *req, cz_error *err)
{
    (void)c;
    (void)req;
    (void)err;
    return CZ_OK;
}

static void self_progress(cz_comm *c, cz_comm_req *req)
{
    (void)c;
    (void)req;
}

static int self_allreduce_min_i64(cz_comm *c, int64_t *v, int n, cz_error *err)
{
    (void)c;
    (void)v;
    (void)n;
    (void)err;
    return CZ_OK;
}

/* Every operation completes when posted: a request carries nothing but must be a distinct,
 * non-NULL handle like any backend's. */
struct cz_comm_req {
    char unused;
};

static cz_comm_req *self_req_create(cz_comm *c)
{
    (void)c;
    return cz_exec_malloc(sizeof(cz_comm_req));
}

static void self_req_free(cz_comm *c, cz_comm_req *req)
{
    (void)c;
    cz_exec_free(req);
}

static void self_close(cz_comm *c)
{
    (void)c;
}

static const cz_comm_ops cz_comm_self_ops = {
    .name = "self",
    .reduce_scatter = self_reduce_scatter,
    .allgatherv = self_allgatherv,
    .ialltoallv = self_ialltoallv,
    .iallgather = self_iallgather,
    .wait = self_wait,
    .progress = self_progress,
    .allreduce_min_i64 = self_allreduce_min_i64,
    .req_create = self_req_create,
    .req_free = self_req_free,
    .close = self_close,
};

int cz_comm_self_open(cz_comm *c, cz_error *err)
{
    (void)err;
    c->ops = &cz_comm_self_ops;
    c->impl = NULL;
    c->size = 1;
    c->rank = 0;
    return CZ_OK;
}

void cz_comm_close(cz_comm *c)
{
    if (c && c->ops) {
        c->ops->close(c);
        c->ops = NULL;
        c->impl = NULL;
    }
}
