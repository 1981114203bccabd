/*
 * comm.h — the communication seam: the control plane (cz_ctrl_ops: host scalars the ranks
 * agree on) and the data plane (cz_plane_ops: the step's collectives on backend memory),
 * implemented by "self" (comm_self.c), "mpi" (comm_mpi.c), "callbacks" (comm_callbacks.c:
 * the caller's host collectives) and "nccl" (the GPU plugin, comm_nccl.h), and its dispatch
 * (comm.c), which opens a backend's planes by name.
 */
#ifndef CZ_COMM_H
#define CZ_COMM_H

#include "canzona_exec.h"
#include "compute.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Element types of the data plane are canzona.h's cz_dtype (cz__dtype_bytes gives sizes). */

typedef enum cz_comm_kind {
    CZ_COMM_SELF = 1, /* one process: every collective is a copy */
    CZ_COMM_MPI = 2,
    CZ_COMM_NCCL = 3,      /* device memory, NCCL (comm_nccl.h) */
    CZ_COMM_CALLBACKS = 4, /* the caller's host collectives (comm_callbacks.h) */
} cz_comm_kind;

/* The control plane: host scalars the ranks must agree on (plan fingerprints, failure
 * agreement, the step's NaN/Inf verdict), over MPI or whatever bootstraps the job. Blocking;
 * never carries parameter data. */
typedef struct cz_ctrl cz_ctrl;

/* What this rank is doing, named in the report of a stalled wait: `what` a string literal,
 * `step` the optimizer step (-1: none). The executor owns one (cz_executor.phase), set as a
 * step moves from phase to phase, and hands the control plane a pointer to it before it opens
 * (cz_ctrl.phase); the planes opened from the control plane, and their splits, keep the same
 * pointer. Like the rest of an executor, written and read by the one thread that drives it. */
typedef struct cz_phase {
    const char *what;
    int64_t step;
} cz_phase;

typedef struct cz_ctrl_ops {
    cz_comm_kind kind;
    const char *name; /* for messages only */
    /* In-place element-wise min over all ranks of n int64 values. */
    int (*allreduce_min_i64)(cz_ctrl *c, int64_t *v, int n, cz_error *err);
    /* In-place element-wise sum over all ranks of n doubles (host scalars read back from the
     * backend, e.g. the gradient norm's partial sums). */
    int (*allreduce_sum_f64)(cz_ctrl *c, double *v, int n, cz_error *err);
    void (*close)(cz_ctrl *c);
} cz_ctrl_ops;

struct cz_ctrl {
    const cz_ctrl_ops *ops;
    void *impl;
    int size, rank;
    const cz_phase *phase; /* set before cz__comm_open (NULL: none to report) */
};

/* The data plane: the collectives of the step on backend memory, with size_t counts and a
 * dtype. No v-collectives: uneven reduce-scatter and all-gather take one count per rank over
 * rank-ordered contiguous segments, and the micro-group all-to-all is a group of sends and
 * receives (NCCL's ncclGroupStart/Send/Recv/GroupEnd shape); a backend may map them onto
 * v-collectives inside (MPI does for the reduce-scatter and the all-gather). Versioned like
 * the compute ops. Version 2 appended allreduce_sum (the cooperative Newton-Schulz sums),
 * version 3 iallreduce_sum (its Gram panels), version 4 ireduce_scatter and iall_gatherv (the
 * bucket-wise step, step.c). */
#define CZ_DATA_PLANE_VERSION 5
typedef struct cz_plane cz_plane;
/* A non-blocking operation's completion, created once (req_create) and reused every step. */
typedef struct cz_comm_req cz_comm_req;
typedef struct cz_plane_ops {
    int version; /* CZ_DATA_PLANE_VERSION */
    cz_comm_kind kind;
    const char *name; /* for messages only */
    /* Every operation that reads backend memory first waits for `after` (a compute event
     * recorded after the ops that wrote it; NULL = nothing to wait for). */
    /* Sum-reduce-scatter: rank r receives counts[r] elements, the r-th segment of the
     * rank-ordered concatenation at send. recv must not alias send. */
    int (*reduce_scatter)(cz_plane *p, const void *send, void *recv, const size_t *counts,
                          cz_dtype t, cz_event *after, cz_error *err);
    /* In-place all-gather: rank r contributes the r-th segment (counts[r] elements) of the
     * rank-ordered concatenation at buf. */
    int (*all_gather)(cz_plane *p, void *buf, const size_t *counts, cz_dtype t, cz_event *after,
                      cz_error *err);
    /* Non-blocking all-gather of `count` elements per rank into recv (size * count),
     * completed through req. */
    int (*iall_gather)(cz_plane *p, const void *send, size_t count, void *recv, cz_dtype t,
                       cz_event *after, cz_comm_req *req, cz_error *err);
    /* A group of point-to-point transfers posted together and completed through one req:
     * group_start, then send/recv per peer (count 0 is skipped; at most one send and one
     * receive per peer), then group_end posts them. Every rank's sends must match its peers'
     * receives. */
    int (*group_start)(cz_plane *p, cz_comm_req *req, cz_event *after, cz_error *err);
    void (*send)(cz_plane *p, cz_comm_req *req, const void *buf, size_t count, cz_dtype t,
                 int peer);
    void (*recv)(cz_plane *p, cz_comm_req *req, void *buf, size_t count, cz_dtype t, int peer);
    int (*group_end)(cz_plane *p, cz_comm_req *req, cz_error *err);
    /* Makes the caller's compute stream wait until req's operation is complete, leaving req
     * idle (an idle req returns at once). On the CPU backend's stream (the calling thread)
     * that is a host wait; a GPU plane makes the stream wait on the operation's event. */
    int (*wait)(cz_plane *p, cz_comm_req *req, cz_error *err);
    /* Lets an operation in flight progress (MPI progresses only inside MPI calls); never
     * blocks. req may be NULL. */
    void (*progress)(cz_plane *p, cz_comm_req *req);
    /* Request handles (allocated at create time, never during a step). */
    cz_comm_req *(*req_create)(cz_plane *p);
    void (*req_free)(cz_plane *p, cz_comm_req *req);
    /* A new plane of the ranks with equal color, ordered by key (collective over p). */
    int (*split)(cz_plane *p, int color, int key, cz_plane *out, cz_error *err);
    void (*close)(cz_plane *p);
    /* ---- version 2 ---- */
    /* In-place sum over the plane's ranks of count elements at buf (backend memory): fp32, or
     * doubles when f64. Blocking form (as reduce_scatter): it reads buf after `after` and
     * after every compute op issued before it, and compute ops issued after it see the sum. */
    int (*allreduce_sum)(cz_plane *p, void *buf, size_t count, int f64, cz_event *after,
                         cz_error *err);
    /* ---- version 3 ---- */
    /* Non-blocking in-place fp32 sum over the plane's ranks of count elements at buf, read
     * after `after`, completed through req (wait): a cooperative Gram panel, all-reduced while
     * the members compute the next. Several may be in flight on one plane; they complete in
     * the order they were posted. */
    int (*iallreduce_sum)(cz_plane *p, float *buf, size_t count, cz_event *after, cz_comm_req *req,
                          cz_error *err);
    /* ---- version 4 ---- */
    /* Non-blocking forms of reduce_scatter and all_gather, completed through req (wait): the
     * bucket-wise step posts one per bucket and lets the job's backward (forward) run while
     * they travel. Same arguments, same result bit for bit as the blocking forms (the same
     * collective, only waited for later). Several may be in flight on one plane; every rank
     * posts them in the same order. A plane whose collectives cannot run in the background
     * (self, callbacks) completes them at post time, leaving req idle. */
    int (*ireduce_scatter)(cz_plane *p, const void *send, void *recv, const size_t *counts,
                           cz_dtype t, cz_event *after, cz_comm_req *req, cz_error *err);
    int (*iall_gatherv)(cz_plane *p, void *buf, const size_t *counts, cz_dtype t, cz_event *after,
                        cz_comm_req *req, cz_error *err);
    /* ---- version 5 ---- */
    /* A new plane of p's ranks members[0 .. n), in that order, this rank among them, which
     * every member computes alike from the plan's layout (the ranks agreed on it): no
     * collective, so a rank's create costs its planes' sizes, not the world's. NULL: the
     * backend has none, and split (collective) does it. */
    int (*split_members)(cz_plane *p, const int *members, int n, cz_plane *out, cz_error *err);
} cz_plane_ops;

struct cz_plane {
    const cz_plane_ops *ops;
    void *impl;
    int size, rank;
    cz_compute *compute; /* whose events `after` refers to (set at create, kept by split) */
    const char *label;   /* "world", "DP", "TP", "cooperative": names the plane in reports */
};

/* For a host-driven plane (MPI, self): waits on the host for `after` before a buffer is read. */
static inline int cz_plane_wait_after(cz_plane *p, cz_event *after, cz_error *err)
{
    return after ? p->compute->ops->event_sync(p->compute, after, err) : CZ_OK;
}

/* ---- the dispatch (comm.c) ---- */
/* A comm backend by name ("self", "mpi", "nccl"): what opens its planes and what it needs. */
typedef struct cz_comm_backend cz_comm_backend;

/* Opens the control plane and the world data plane of the backend cfg->comm names (NULL:
 * "callbacks" when cfg->callbacks is set, else "mpi" when this build has MPI and MPI is
 * initialized, else "self"); *out is the backend, for the calls below. Collective over the
 * world for mpi, callbacks and nccl. */
int cz__comm_open(const cz_exec_config *cfg, cz_ctrl *ctrl, cz_plane *world,
                  const cz_comm_backend **out, cz_error *err);
/* The backend's name, as cz_exec_config.comm spells it. */
const char *cz__comm_name(const cz_comm_backend *b);
/* True when the backend's planes read and write backend memory from the host (mpi, self):
 * a compute backend on device memory then stages the job's buffers (compute.h). */
bool cz__comm_host_driven(const cz_comm_backend *b);
/* True when the fully sharded step (docs/EXECUTOR.md, "The fully sharded step") runs on the
 * backend's planes: its owner exchanges are tested there (mpi, self, callbacks; not yet nccl). */
bool cz__comm_runs_fsdp(const cz_comm_backend *b);
/* The DP or TP plane (which: CZ_COMM_DP or CZ_COMM_TP), the world's ranks with equal color
 * ordered by key: over the job's own group when it handed one in (cfg->dp_comm/tp_comm, a
 * pointer to an MPI_Comm, duplicated, or to an ncclComm_t, borrowed; with callbacks that have
 * groups, the callbacks' CZ_COMM_DP/CZ_COMM_TP), else split from the world (collective). Its
 * events are the world's compute backend's. which = CZ_COMM_WORLD: always split from the world
 * (a plane the job has no group for: the expert-DP and ETP planes). */
int cz__comm_subplane(const cz_comm_backend *b, const cz_exec_config *cfg, const cz_ctrl *ctrl,
                      cz_plane *world, cz_comm_group which, int color, int key, cz_plane *out,
                      cz_error *err);
/* The same plane when every rank knows its members from the plan's layout (world ranks, in key
 * order): the backend's split_members where it has one, which needs no collective, else split
 * by color and key as cz__comm_subplane. Every rank of the world must make the same choice:
 * the callers pass members only after the ranks agreed on the layout. */
int cz__comm_subplane_known(const cz_comm_backend *b, const cz_exec_config *cfg,
                            const cz_ctrl *ctrl, cz_plane *world, cz_comm_group which, int color,
                            int key, const int *members, int n, cz_plane *out, cz_error *err);
/* Allocates what the DP plane needs for the plan's steps, at create (the nccl plane's
 * padded-collective scratch), so that a step allocates nothing. */
int cz__comm_reserve(const cz_comm_backend *b, cz_plane *dp, const cz_plan *plan, cz_error *err);
/* What every data plane needs of a plan: MPI's int counts and displacements (the limits of
 * the narrowest plane, so that a plan runs on any). */
int cz__comm_plan_check(const cz_plan *plan, cz_error *err);
/* The MPI planes' time limit: cz_exec_config.mpi_timeout_s when > 0 (cfg of this version, as
 * create reads every config; NULL allowed), else the environment's CZ_MPI_TIMEOUT_S when it is a
 * number > 0, else 1800 s. */
double cz__comm_mpi_timeout(const cz_exec_config *cfg, const char *env);
/* Close any plane or control plane (NULL ops: nothing), leaving it zeroed. */
void cz__ctrl_close(cz_ctrl *c);
void cz__plane_close(cz_plane *p);

#endif /* CZ_COMM_H */
