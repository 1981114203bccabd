/* The "mpi" communicator backend (Open MPI). Communicators are duplicated so that the
 * executor's traffic never mixes with the job's own. */
#include "exec_internal.h"

#ifdef CZ_HAVE_MPI
#include <mpi.h>
#include <stdlib.h>

struct cz_comm_req {
    MPI_Request r;
};

static MPI_Comm mpi_of(cz_comm *c)
{
    return *(MPI_Comm *)c->impl;
}

static int mpi_fail(cz_error *err, int rc, const char *what)
{
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    return cz_error_set(err, CZ_EIO, "MPI %s failed: %s", what, msg);
}

static int mpi_reduce_scatter(cz_comm *c, const float *send, float *recv, const int *counts,
                              cz_error *err)
{
    int rc = MPI_Reduce_scatter(send, recv, counts, MPI_FLOAT, MPI_SUM, mpi_of(c));
    return rc == MPI_SUCCESS ? CZ_OK : mpi_fail(err, rc, "reduce-scatter");
}

static int mpi_allgatherv(cz_comm *c, float *buf, const int *counts, const int *displs,
                          cz_error *err)
{
    int rc = MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_FLOAT, buf, counts, displs, MPI_FLOAT, mpi_of(c));
    return rc == MPI_SUCCESS ? CZ_OK : mpi_fail(err, rc, "all-gather");
}

static int mpi_ialltoallv(cz_comm *c, const float *send, const int *scounts, const int *sdispls,
                          float *recv, const int *rcounts, const int *rdispls, cz_comm_req *req,
                          cz_error *err)
{
    int rc = MPI_Ialltoallv(send, scounts, sdispls, MPI_FLOAT, recv, rcounts, rdispls, MPI_FLOAT,
                            mpi_of(c), &req->r);
    return rc == MPI_SUCCESS ? CZ_OK : mpi_fail(err, rc, "all-to-all");
}

static int mpi_iallgather(cz_comm *c, const float *send, int count, float *recv, cz_comm_req *req,
                          cz_error *err)
{
    int rc = MPI_Iallgather(send, count, MPI_FLOAT, recv, count, MPI_FLOAT, mpi_of(c), &req->r);
    return rc == MPI_SUCCESS ? CZ_OK : mpi_fail(err, rc, "all-gather");
}

static int mpi_wait(cz_comm *c, cz_comm_req *req, cz_error *err)
{
    (void)c;
    if (!req || req->r == MPI_REQUEST_NULL)
        return CZ_OK;
    int rc = MPI_Wait(&req->r, MPI_STATUS_IGNORE);
    req->r = MPI_REQUEST_NULL;
    return rc == MPI_SUCCESS ? CZ_OK : mpi_fail(err, rc, "wait");
}

static void mpi_progress(cz_comm *c, cz_comm_req *req)
{
    (void)c;
    int done = 0;
    if (req && req->r != MPI_REQUEST_NULL)
        MPI_Test(&req->r, &done, MPI_STATUS_IGNORE);
}

static cz_comm_req *mpi_req_create(cz_comm *c)
{
    (void)c;
    cz_comm_req *q = cz_exec_malloc(sizeof *q);
    if (q)
        q->r = MPI_REQUEST_NULL;
    return q;
}

static void mpi_req_free(cz_comm *c, cz_comm_req *req)
{
    cz_error tmp;
    if (req)
        mpi_wait(c, req, &tmp);
    cz_exec_free(req);
}

static int mpi_allreduce_min_i64(cz_comm *c, int64_t *v, int n, cz_error *err)
{
    int rc = MPI_Allreduce(MPI_IN_PLACE, v, n, MPI_INT64_T, MPI_MIN, mpi_of(c));
    return rc == MPI_SUCCESS ? CZ_OK : mpi_fail(err, rc, "all-reduce");
}

static void mpi_close(cz_comm *c)
{
    if (!c->impl)
        return;
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin)
        MPI_Comm_free((MPI_Comm *)c->impl);
    cz_exec_free(c->impl);
    c->impl = NULL;
}

static const cz_comm_ops cz_comm_mpi_ops = {
    .name = "mpi",
    .reduce_scatter = mpi_reduce_scatter,
    .allgatherv = mpi_allgatherv,
    .ialltoallv = mpi_ialltoallv,
    .iallgather = mpi_iallgather,
    .wait = mpi_wait,
    .progress = mpi_progress,
    .allreduce_min_i64 = mpi_allreduce_min_i64,
    .req_create = mpi_req_create,
    .req_free = mpi_req_free,
    .close = mpi_close,
};

bool cz_comm_mpi_available(void)
{
    int init = 0, fin = 0;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    return init && !fin;
}

static int wrap(cz_comm *out, MPI_Comm dup, cz_error *err)
{
    MPI_Comm *h = cz_exec_malloc(sizeof *h);
    if (!h) {
        MPI_Comm_free(&dup);
        return cz_error_set(err, CZ_ENOMEM, "out of memory for a communicator");
    }
    *h = dup;
    out->ops = &cz_comm_mpi_ops;
    out->impl = h;
    MPI_Comm_size(dup, &out->size);
    MPI_Comm_rank(dup, &out->rank);
    return CZ_OK;
}

int cz_comm_mpi_open_world(cz_comm *world, const void *handle, cz_error *err)
{
    MPI_Comm src = handle ? *(const MPI_Comm *)handle : MPI_COMM_WORLD, dup;
    /* Errors come back as codes rather than aborting the job, so they can be reported. */
    int rc = MPI_Comm_dup(src, &dup);
    if (rc != MPI_SUCCESS)
        return mpi_fail(err, rc, "Comm_dup");
    MPI_Comm_set_errhandler(dup, MPI_ERRORS_RETURN);
    return wrap(world, dup, err);
}

int cz_comm_mpi_split(cz_comm *out, cz_comm *world, const void *handle, int color, int key,
                      cz_error *err)
{
    MPI_Comm dup;
    int rc = handle ? MPI_Comm_dup(*(const MPI_Comm *)handle, &dup)
                    : MPI_Comm_split(mpi_of(world), color, key, &dup);
    if (rc != MPI_SUCCESS)
        return mpi_fail(err, rc, handle ? "Comm_dup" : "Comm_split");
    MPI_Comm_set_errhandler(dup, MPI_ERRORS_RETURN);
    return wrap(out, dup, err);
}

#else /* !CZ_HAVE_MPI */

bool cz_comm_mpi_available(void)
{
    return false;
}

int cz_comm_mpi_open_world(cz_comm *world, const void *handle, cz_error *err)
{
    (void)world;
    (void)handle;
    return cz_error_set(err, CZ_EUNSUPPORTED,
                        "comm backend 'mpi' is not available: built with CZ_WITH_MPI=OFF");
}

int cz_comm_mpi_split(cz_comm *out, cz_comm *world, const void *handle, int color, int key,
                      cz_error *err)
{
    (void)out;
    (void)world;
    (void)handle;
    (void)color;
    (void)key;
    return cz_error_set(err, CZ_EUNSUPPORTED,
                        "comm backend 'mpi' is not available: built with CZ_WITH_MPI=OFF");
}

#endif
