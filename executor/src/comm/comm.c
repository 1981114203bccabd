/* The communication seam's dispatch: which control plane and world data plane a comm backend
 * name opens, the planes over the communicators a job hands in, what a backend needs at create,
 * and the closes every plane shares. The backends themselves: comm_self.c ("self"),
 * comm_mpi.c ("mpi"), comm_callbacks.c ("callbacks", the caller's host collectives) and the
 * GPU plugin's nccl/ ("nccl", loaded through gpu_plugin.h), each one line of the table below,
 * as SQLite's os.c stands apart from os_unix.c. */
#include "comm.h"
#include "comm_callbacks.h"
#include "comm_mpi.h"
#include "comm_self.h"
#include "cz_format.h"
#include "gpu_plugin.h"
#include "nccl_plan.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct cz_comm_backend {
    const char *name;
    /* The planes read and write backend memory from the host. */
    bool host_driven;
    /* The fully sharded step's owner exchanges (the pipeline's grouped sends and receives over
     * the shard group) are tested on this backend's planes (cz__comm_runs_fsdp). */
    bool fsdp;
    /* Opens the control plane and the world data plane. */
    int (*open)(const cz_exec_config *cfg, cz_ctrl *ctrl, cz_plane *world, cz_error *err);
    /* The DP or TP plane over the job's own group (which: CZ_COMM_DP/TP; handle the
     * communicator cfg->dp_comm/tp_comm points to). Leaves out->ops NULL when the job gave
     * none, for a split of the world. NULL: the backend takes none. */
    int (*wrap)(const cz_exec_config *cfg, const cz_ctrl *ctrl, cz_comm_group which,
                const void *handle, cz_plane *out, cz_error *err);
    /* What the DP plane needs allocated at create; NULL: nothing. */
    int (*reserve)(cz_plane *dp, const cz_plan *plan, cz_error *err);
};

/* ---- mpi ---- */
static int mpi_open(const cz_exec_config *cfg, cz_ctrl *ctrl, cz_plane *world, cz_error *err)
{
    int rc;
    if (!cz__comm_mpi_available())
        return cz__error_set(err, CZ_EINVALID,
                             "comm backend 'mpi' needs MPI initialized before the executor is "
                             "created (or a build with CZ_WITH_MPI=ON)");
    if ((rc = cz__ctrl_mpi_open(ctrl, cfg->world_comm,
                                cz__comm_mpi_timeout(cfg, getenv("CZ_MPI_TIMEOUT_S")), err)) !=
        CZ_OK)
        return rc;
    return cz__plane_mpi_open(world, cfg->world_comm, ctrl, err);
}

static int mpi_wrap(const cz_exec_config *cfg, const cz_ctrl *ctrl, cz_comm_group which,
                    const void *handle, cz_plane *out, cz_error *err)
{
    (void)cfg, (void)which;
    return handle ? cz__plane_mpi_open(out, handle, ctrl, err) : CZ_OK;
}

/* ---- callbacks (the caller's host collectives) ---- */
/* The config's callbacks (the config create read: of this version, whatever the caller's was;
 * a refused one has the default, none). */
static const cz_comm_callbacks *callbacks_of(const cz_exec_config *cfg)
{
    return cfg->callbacks;
}

static int callbacks_open(const cz_exec_config *cfg, cz_ctrl *ctrl, cz_plane *world, cz_error *err)
{
    const cz_comm_callbacks *cb = callbacks_of(cfg);
    int rc;
    if (cfg->world_comm || cfg->dp_comm || cfg->tp_comm)
        return cz__error_set(err, CZ_EINVALID,
                             "comm backend 'callbacks' takes no communicators (world_comm, "
                             "dp_comm, tp_comm): the callbacks name their groups");
    if ((rc = cz__ctrl_callbacks_open(ctrl, cb, err)) != CZ_OK)
        return rc;
    return cz__plane_callbacks_open(world, cb, CZ_COMM_WORLD, cb->world_size, cb->world_rank, err);
}

/* The job's DP and TP groups when the callbacks have them, with the sizes and ranks the
 * caller gives (create compares them with the plan's). */
static int callbacks_wrap(const cz_exec_config *cfg, const cz_ctrl *ctrl, cz_comm_group which,
                          const void *handle, cz_plane *out, cz_error *err)
{
    const cz_comm_callbacks *cb = callbacks_of(cfg);
    (void)ctrl, (void)handle;
    if (!cb->has_groups)
        return CZ_OK;
    if (which == CZ_COMM_DP)
        return cz__plane_callbacks_open(out, cb, which, cb->dp_size, cb->dp_rank, err);
    return cz__plane_callbacks_open(out, cb, which, cb->tp_size, cb->tp_rank, err);
}

static int callbacks_reserve(cz_plane *dp, const cz_plan *plan, cz_error *err)
{
    return cz__plane_callbacks_reserve(dp, plan, err);
}

/* ---- nccl (the GPU plugin) ---- */
/* The NCCL planes' time limit (of the config create read, as every field here). */
static double nccl_timeout(const cz_exec_config *cfg)
{
    return cz__nccl_timeout(cfg->nccl_timeout_s, getenv("CZ_NCCL_TIMEOUT_S"));
}

/* The control plane is the caller's callbacks when given, else MPI's (the bootstrap, the
 * agreement); the world data plane a new NCCL communicator of its ranks, whose unique id
 * travels over the control plane. */
static int nccl_open(const cz_exec_config *cfg, cz_ctrl *ctrl, cz_plane *world, cz_error *err)
{
    const cz_comm_callbacks *cb = callbacks_of(cfg);
    const cz_gpu_api *gpu = NULL;
    cz_error e;
    int rc;
    if (cb)
        rc = cz__ctrl_callbacks_open(ctrl, cb, err);
    else if (!cz__comm_mpi_available())
        return cz__error_set(err, CZ_EINVALID,
                             "comm backend 'nccl' bootstraps over MPI or the caller's callbacks "
                             "(cz_exec_config.callbacks): initialize MPI or give the callbacks "
                             "before creating the executor");
    else {
        rc = cz__ctrl_mpi_open(ctrl, cfg->world_comm,
                               cz__comm_mpi_timeout(cfg, getenv("CZ_MPI_TIMEOUT_S")), err);
    }
    if (rc != CZ_OK)
        return rc;
    /* Every rank learns whether every other one has the plugin before any NCCL call. */
    if ((rc = cz__gpu_load(&gpu, &e)) != CZ_OK)
        rc = cz__error_set(err, rc, "comm backend 'nccl' is not available: %s", e.message);
    if ((rc = cz__nccl_agree(ctrl, rc, "load the GPU plugin", err)) != CZ_OK)
        return rc;
    return gpu->plane_nccl_open(world, ctrl, nccl_timeout(cfg), err);
}

static int nccl_wrap(const cz_exec_config *cfg, const cz_ctrl *ctrl, cz_comm_group which,
                     const void *handle, cz_plane *out, cz_error *err)
{
    const cz_gpu_api *gpu;
    (void)ctrl, (void)which;
    if (!handle)
        return CZ_OK;
    if (cz__gpu_load(&gpu, err) != CZ_OK)
        return err ? err->code : CZ_EUNSUPPORTED;
    return gpu->plane_nccl_wrap(out, handle, nccl_timeout(cfg), err);
}

static int nccl_reserve(cz_plane *dp, const cz_plan *plan, cz_error *err)
{
    const cz_gpu_api *gpu;
    int rc;
    if ((rc = cz__gpu_load(&gpu, err)) != CZ_OK)
        return rc;
    return gpu->plane_nccl_reserve(dp, plan, err);
}

/* ---- self ---- */
static int self_open(const cz_exec_config *cfg, cz_ctrl *ctrl, cz_plane *world, cz_error *err)
{
    int rc;
    (void)cfg;
    if ((rc = cz__ctrl_self_open(ctrl, err)) != CZ_OK)
        return rc;
    return cz__plane_self_open(world, err);
}

/* In the order the message lists them. */
static const cz_comm_backend backends[] = {
    {"mpi", true, true, mpi_open, mpi_wrap, NULL},
    {"nccl", false, false, nccl_open, nccl_wrap, nccl_reserve},
    {"callbacks", true, true, callbacks_open, callbacks_wrap, callbacks_reserve},
    {"self", true, true, self_open, NULL, NULL},
};
enum { NBACKENDS = sizeof backends / sizeof backends[0] };

int cz__comm_open(const cz_exec_config *cfg, cz_ctrl *ctrl, cz_plane *world,
                  const cz_comm_backend **out, cz_error *err)
{
    const char *name = cfg->comm                  ? cfg->comm
                       : callbacks_of(cfg)        ? "callbacks"
                       : cz__comm_mpi_available() ? "mpi"
                                                  : "self";
    char known[64] = "";
    *out = NULL;
    for (int i = 0; i < NBACKENDS; i++) {
        if (strcmp(name, backends[i].name) == 0) {
            *out = &backends[i];
            return backends[i].open(cfg, ctrl, world, err);
        }
        snprintf(known + strlen(known), sizeof known - strlen(known), "%s%s", i ? ", " : "",
                 backends[i].name);
    }
    return cz__error_set(err, CZ_EUNSUPPORTED, "unknown comm backend '%s' (known: %s)", name,
                         known);
}

const char *cz__comm_name(const cz_comm_backend *b)
{
    return b->name;
}

bool cz__comm_host_driven(const cz_comm_backend *b)
{
    return b->host_driven;
}

bool cz__comm_runs_fsdp(const cz_comm_backend *b)
{
    return b->fsdp;
}

int cz__comm_subplane(const cz_comm_backend *b, const cz_exec_config *cfg, const cz_ctrl *ctrl,
                      cz_plane *world, cz_comm_group which, int color, int key, cz_plane *out,
                      cz_error *err)
{
    return cz__comm_subplane_known(b, cfg, ctrl, world, which, color, key, NULL, 0, out, err);
}

int cz__comm_subplane_known(const cz_comm_backend *b, const cz_exec_config *cfg,
                            const cz_ctrl *ctrl, cz_plane *world, cz_comm_group which, int color,
                            int key, const int *members, int n, cz_plane *out, cz_error *err)
{
    /* CZ_COMM_WORLD: a plane no job hands in (the expert planes), always split. */
    const void *handle = which == CZ_COMM_DP   ? cfg->dp_comm
                         : which == CZ_COMM_TP ? cfg->tp_comm
                                               : NULL;
    int rc;
    *out = (cz_plane){0};
    if (which != CZ_COMM_WORLD && b->wrap &&
        ((rc = b->wrap(cfg, ctrl, which, handle, out, err)) != CZ_OK || out->ops)) {
        out->compute = world->compute;
        return rc;
    }
    /* The wrap's choice is the configuration's, the same on every rank, and so is this one. */
    if (members && world->ops->split_members) {
        rc = world->ops->split_members(world, members, n, out, err);
        out->compute = world->compute;
        return rc;
    }
    return world->ops->split(world, color, key, out, err); /* keeps the world's compute */
}

int cz__comm_reserve(const cz_comm_backend *b, cz_plane *dp, const cz_plan *plan, cz_error *err)
{
    return b->reserve ? b->reserve(dp, plan, err) : CZ_OK;
}

int cz__comm_plan_check(const cz_plan *plan, cz_error *err)
{
    for (size_t b = 0; b < plan->nbuckets; b++) {
        const cz_plan_bucket *bk = &plan->buckets[b];
        /* One range per DP rank, or per expert-DP rank for an expert bucket. */
        for (int r = 0; r < cz_plan_bucket_nranks(plan, bk); r++) {
            int64_t s = bk->ranges[2 * r], e = bk->ranges[2 * r + 1];
            /* The all-gather addresses ranges by their start: an MPI displacement (int). */
            if (s > INT_MAX)
                return cz__error_set(
                    err, CZ_EUNSUPPORTED,
                    "plan $.buckets[%zu].ranges[%d] starts at element %lld; MPI displacements "
                    "are limited to %d (plan with a smaller bucket size)",
                    b, r, (long long)s, INT_MAX);
            if (e - s > INT_MAX)
                return cz__error_set(err, CZ_EUNSUPPORTED,
                                     "plan $.buckets[%zu].ranges[%d] holds %lld elements; MPI "
                                     "counts are limited to %d",
                                     b, r, (long long)(e - s), INT_MAX);
        }
    }
    return CZ_OK;
}

double cz__comm_mpi_timeout(const cz_exec_config *cfg, const char *env)
{
    /* cfg is the config create read (cz__exec_config_read), of this version whatever the
     * caller's was: its mpi_timeout_s is the caller's or the default, 0. */
    double s = cfg ? cfg->mpi_timeout_s : 0.0;
    if (s > 0.0 && isfinite(s))
        return s;
    char *end = NULL;
    double x = env ? strtod(env, &end) : 0.0;
    return env && end != env && *end == '\0' && x > 0.0 && isfinite(x) ? x : 1800.0;
}

void cz__ctrl_close(cz_ctrl *c)
{
    if (c && c->ops) {
        c->ops->close(c);
        *c = (cz_ctrl){0};
    }
}

void cz__plane_close(cz_plane *p)
{
    if (p && p->ops) {
        p->ops->close(p);
        *p = (cz_plane){0};
    }
}
