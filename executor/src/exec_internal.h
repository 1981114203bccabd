/*
 * exec_internal.h — libcanzona-exec internals shared by its modules, its unit tests and the
 * canzona-bench driver (which reuses the optimizer math for its single-process reference).
 *
 * The backend seam keeps compute and communication apart, so that a CUDA compute backend and
 * an NCCL data plane are one more implementation of these tables, not a second executor:
 *   cz_compute_ops — every operation on parameter, gradient and state data, on memory the
 *                    backend owns (CPU: host memory), ordered on one stream with events;
 *   cz_ctrl_ops    — the control plane: host scalars the ranks agree on;
 *   cz_plane_ops   — the data plane: the step's collectives (MPI, or "self" for one process).
 * step.c, pipeline.c, muon.c and adamw.c touch data only through them.
 */
#ifndef CZ_EXEC_INTERNAL_H
#define CZ_EXEC_INTERNAL_H

#include "canzona_exec.h"
#include "cz_format.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- Newton-Schulz coefficient sets (ns_coeffs.c) ---- */
typedef struct cz_ns_coeffs {
    const char *name;
    double a, b, c;
} cz_ns_coeffs;

/* Looks a coefficient set up by name; NULL when unknown. */
const cz_ns_coeffs *cz__ns_coeffs_find(const char *name);
/* Comma-separated list of the known names, for messages. */
const char *cz__ns_coeffs_names(void);

/* ---- allocation (alloc.c) ---- */
/* Every allocation the executor makes (host tables, backend memory of the CPU backend,
 * communication requests) goes through these, so that a test can prove that a step allocates
 * nothing: cz__exec_alloc_count() is the number of successful allocations so far. */
void *cz__exec_malloc(size_t bytes);
void *cz__exec_calloc(size_t n, size_t size);
void cz__exec_free(void *p);
uint64_t cz__exec_alloc_count(void);

/* ---- compute backend ---- */
/* The compute seam, versioned like sqlite3_io_methods: a backend fills a cz_compute_ops of
 * CZ_COMPUTE_OPS_VERSION; fields are appended (version 5 is the one exception, see there), and
 * the executor refuses a table whose version it does not know. Every operation on parameter,
 * gradient or optimizer-state data goes through it: step.c, pipeline.c, muon.c and adamw.c never
 * touch data themselves. All pointers below are backend memory (from alloc, or bound buffers the
 * backend accepts), except where a parameter says host. */
#define CZ_COMPUTE_OPS_VERSION 6
/* Version 2 appended the linear-algebra operations of Shampoo (and later SOAP): gemm,
 * tile_copy, syevd, eig_root_scale, axpby, sq_accum, graft_div, scale_ratio, and SOAP's
 * qr and basis_sort. They are optional: a backend that leaves any of them NULL (the cpu
 * backend built without LAPACKE; a GPU backend whose cuSOLVER part is not written yet) still
 * runs Muon and AdamW plans, and the executor refuses a Shampoo or SOAP plan at create time naming
 * the backend and what it lacks (cz__compute_has_linalg). Version 3 appended linalg_work: the
 * work those ops need is the backend's to say (cuSOLVER's workspace sizes are the library's,
 * queried at create time), so a version-2 table is refused for SOAP and Shampoo too. `upload`,
 * appended after it, is optional the same way: without it, optimizer-state checkpoints are
 * refused. Version 4 appended the operations of cooperative Newton-Schulz and of updates of a
 * region of a shard (block_load_sq, ns_gram, ns_poly, apply_runs); every backend has them.
 * Version 5 replaced ns_gram and ns_poly by the row-panel operations (see there). Version 6
 * appended close, step_begin and step_end; every backend has them. */

/* Floats of the `work` buffer that syevd, qr and basis_sort need (linalg_work). */
typedef struct cz_linalg_work {
    int64_t syevd, qr, sort;
} cz_linalg_work;

typedef enum cz_backend_kind {
    CZ_BACKEND_CPU = 1,  /* host memory, OpenBLAS */
    CZ_BACKEND_CUDA = 2, /* device memory, CUDA kernels and cuBLAS (compute_cuda.h) */
} cz_backend_kind;

/* Capability flags of a backend. */
enum {
    /* Backend memory is host memory: the job's host buffers are used in place. */
    CZ_COMPUTE_CAP_HOST_MEMORY = 1u << 0,
};

/* One contiguous copy: len elements from src + src_off to dst + dst_off. */
typedef struct cz_copy_run {
    int64_t dst, src, len;
} cz_copy_run;
/* A run list in the backend's own form (device memory for a GPU backend), built once at
 * create/bind time and replayed by copy_runs every step. */
typedef struct cz_runs cz_runs;

/* AdamW step arguments; bias1/2 = 1 - beta1/2^t, computed on the host per step. */
typedef struct cz_adamw_args {
    float lr, beta1, beta2, eps, weight_decay, bias1, bias2;
} cz_adamw_args;

/* A point in the backend's compute stream. Asynchrony model: a backend runs its ops in order
 * on one stream (CPU: the calling thread, so every op has finished when it returns and an
 * event is complete when recorded); an event recorded after some ops completes when they
 * have. The data plane waits for such an event before reading a buffer those ops wrote, and
 * the compute stream waits for a communication request (cz_plane_ops.wait) before using what
 * it received. */
typedef struct cz_event cz_event;

typedef struct cz_compute cz_compute;
typedef struct cz_compute_ops {
    int version; /* CZ_COMPUTE_OPS_VERSION */
    cz_backend_kind kind;
    unsigned caps;    /* CZ_COMPUTE_CAP_* */
    const char *name; /* for messages only; backends are told apart by kind and caps */

    /* Zero-filled backend memory; NULL when out of memory. Only called at create/bind and by
     * checkpoints (their bounce buffer), never in a step. */
    void *(*alloc)(cz_compute *c, size_t bytes);
    void (*release)(cz_compute *c, void *p);
    /* Events of the compute stream (created at create time). event_record marks the ops
     * issued so far; event_sync blocks the host until they are done. */
    cz_event *(*event_create)(cz_compute *c);
    void (*event_free)(cz_compute *c, cz_event *e);
    void (*event_record)(cz_compute *c, cz_event *e);
    int (*event_sync)(cz_compute *c, cz_event *e, cz_error *err);
    /* Copies bytes of backend memory to the host (the step's one read-back, and checkpoints'
     * staging; waits for the stream). */
    int (*download)(cz_compute *c, void *host, const void *src, size_t bytes, cz_error *err);

    /* Index maps: built from host runs at create time, replayed on any base pointers. */
    cz_runs *(*runs_create)(cz_compute *c, const cz_copy_run *runs, size_t n);
    void (*runs_free)(cz_compute *c, cz_runs *r);
    void (*copy_runs)(cz_compute *c, float *dst, const float *src, const cz_runs *r);
    /* dst (dtype dt) = src (dtype st) element by element, rounding to nearest even when
     * narrowing; fp32 and bf16. */
    void (*convert)(cz_compute *c, void *dst, cz_dtype dt, const void *src, cz_dtype st, int64_t n);
    /* dst[i] = alpha * src[i]; dst may equal src. */
    void (*scale)(cz_compute *c, float *dst, const float *src, int64_t n, float alpha);
    /* *out (backend memory) = sum of x[i]^2 in double: non-finite exactly when x holds NaN or
     * Inf (a float squared cannot overflow a double), so it is also the finiteness check. */
    void (*sumsq)(cz_compute *c, const float *x, int64_t n, double *out);

    /* Muon momentum: buf = mu*buf + g; in = g + mu*buf (nesterov) or buf. in may equal g. */
    void (*momentum)(cz_compute *c, const float *g, float *buf, float *in, int64_t n, float mu,
                     int nesterov);
    /* Normalises the rows x cols block at src (row stride ld) by its Frobenius norm (double)
     * plus eps into dst, contiguous, transposed when transpose. */
    void (*block_load)(cz_compute *c, float *dst, const float *src, int64_t ld, int64_t rows,
                       int64_t cols, int transpose, float eps);
    /* Orthogonalizes `batch` matrices stored back to back, each rows x cols row-major with
     * rows <= cols, in place: `steps` iterations of A = X X^T, B = b A + c A A, X = a X + B X.
     * work holds batch*(2*rows*rows + rows*cols) floats. */
    int (*ns_batched)(cz_compute *c, float *x, int batch, int64_t rows, int64_t cols,
                      const cz_ns_coeffs *k, int steps, float *work, cz_error *err);
    /* Writes scale * the contiguous block src (transposed back when transpose) into the
     * rows x cols block at dst (row stride ld). */
    void (*block_store)(cz_compute *c, float *dst, int64_t ld, const float *src, int64_t rows,
                        int64_t cols, int transpose, float scale);
    /* p = p*(1 - lr*wd) - lr*u over n elements. */
    void (*apply_update)(cz_compute *c, float *p, const float *u, int64_t n, float lr, float wd);
    /* One AdamW step over n elements. */
    void (*adamw)(cz_compute *c, float *p, const float *g, float *m, float *v, int64_t n,
                  const cz_adamw_args *a);

    /* ---- version 2: linear algebra (optional, see above) ---- */
    /* C = alpha * op(A) op(B) + beta * C, row-major, op(X) = X^T when transX; C is m x n,
     * the inner dimension k; lda/ldb/ldc are row strides (cblas_sgemm's meaning). */
    void (*gemm)(cz_compute *c, int transa, int transb, int64_t m, int64_t n, int64_t k,
                 float alpha, const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
                 float *cm, int64_t ldc);
    /* Copies the rows x cols block at src (row stride lds) into dst (row stride ldd). */
    void (*tile_copy)(cz_compute *c, float *dst, int64_t ldd, const float *src, int64_t lds,
                      int64_t rows, int64_t cols);
    /* Symmetric eigendecomposition of the n x n matrix a (row-major; symmetric, so either
     * triangle may be read) in place: on return a's columns are orthonormal eigenvectors and
     * w (n) the eigenvalues in ascending order. work holds linalg_work's syevd floats. Fails
     * (CZ_EINTERNAL, with the solver's code) when the solver does not converge (a GPU backend
     * may report that at its next host wait instead, see compute_cuda_linalg.c). */
    int (*syevd)(cz_compute *c, float *a, float *w, int64_t n, float *work, cz_error *err);
    /* Inverse root from an eigendecomposition (Distributed Shampoo's): w is shifted so that
     * its smallest value is >= 0 (w -= min(min(w), 0)), eps is added, and dst = q *
     * diag(w^(-1/root)), i.e. column j of q scaled by w[j]^(-1/root); n x n, row-major. */
    void (*eig_root_scale)(cz_compute *c, float *dst, const float *q, const float *w, int64_t n,
                           float root, float eps);
    /* y = a*y + b*x over n elements. */
    void (*axpby)(cz_compute *c, float *y, const float *x, int64_t n, float a, float b);
    /* acc = a*acc + b*x^2 over n elements. */
    void (*sq_accum)(cz_compute *c, float *acc, const float *x, int64_t n, float a, float b);
    /* dst = x / (sqrt(acc * inv_bias) + eps) over n elements (diagonal preconditioners). */
    void (*graft_div)(cz_compute *c, float *dst, const float *x, const float *acc, int64_t n,
                      float inv_bias, float eps);
    /* x *= sqrt(*num / *den) over n elements, num and den backend doubles written by sumsq;
     * x = 0 where *den == 0 (a zero direction stays zero). */
    void (*scale_ratio)(cz_compute *c, float *x, int64_t n, const double *num, const double *den);
    /* SOAP's: replaces the n x n matrix a (row-major) by the Q of its QR factorization
     * (Householder, LAPACK's sign convention). work holds linalg_work's qr floats. */
    int (*qr)(cz_compute *c, float *a, int64_t n, float *work, cz_error *err);
    /* SOAP's refresh order: est[j] = column j of q . column j of mq (= diag(q^T M q) when
     * mq = M q); q's and mq's columns are permuted into descending est (ties by index) and,
     * when v is not NULL, the rows x cols matrix v along dimension side (0: rows, 1: columns)
     * the same way. work holds linalg_work's sort floats (vn = rows*cols). */
    void (*basis_sort)(cz_compute *c, float *q, float *mq, int64_t n, float *v, int64_t rows,
                       int64_t cols, int side, float *work);

    /* ---- version 3 ---- */
    /* The floats of `work` that syevd and qr need for an n x n matrix and basis_sort for n
     * and a v of vn elements. Called at create time only (it may query a library or allocate
     * a probe); a step allocates nothing. */
    int (*linalg_work)(cz_compute *c, int64_t n, int64_t vn, cz_linalg_work *out, cz_error *err);
    /* Optional, checkpoints only. */
    /* Copies bytes of host memory into backend memory and waits for the stream: download's
     * inverse, used by cz_executor_load_state outside a step. A backend without it cannot
     * load or save checkpoints (refused naming the backend). */
    int (*upload)(cz_compute *c, void *dst, const void *host, size_t bytes, cz_error *err);

    /* ---- version 4: cooperative Newton-Schulz, updates of shard regions ---- */
    /* block_load with the sum of squares given: normalises the rows x cols block at src (row
     * stride ld) by sqrt(*sq) + eps (sq: one backend double, the sum over every member's
     * slice) into dst, contiguous, transposed when transpose. */
    void (*block_load_sq)(cz_compute *c, float *dst, const float *src, int64_t ld, int64_t rows,
                          int64_t cols, int transpose, float eps, const double *sq);
    /* ---- version 5: cooperative Newton-Schulz in row panels (ns_coop.h) ---- */
    /* (Version 4's ns_gram and ns_poly, which took the whole Gram at once, were replaced by the
     * four operations below: the seam's tables are built with the library, so none can outlive
     * them.) One iteration: ns_gram_rows for every panel, each panel all-reduced as soon as it is
     * computed; then per panel in order ns_unpack_rows and, in the A(AX) form, ns_poly_rows; then
     * ns_poly_end. Matrices are `batch` back to back: X rows x cols (x, y), A rows x rows (full,
     * bm). */
    /* This member's rows r0 .. r1-1 of the upper triangle of X X^T, X[r0:r1] X[r0:rows]^T,
     * written packed to out: per matrix cz_coop_packed_before(rows, r1) -
     * cz_coop_packed_before(rows, r0) floats (row i's columns i .. rows-1, rows in order),
     * matrices back to back. Uses rows r0 .. r1-1, columns r0 .. of each matrix in full as
     * scratch, which the panel's ns_unpack_rows later overwrites. */
    void (*ns_gram_rows)(cz_compute *c, const float *x, int batch, int64_t rows, int64_t cols,
                         int64_t r0, int64_t r1, float *full, float *out);
    /* The summed panel `in` (ns_gram_rows's layout) into full: row i's columns i .. rows-1 and,
     * mirrored, column i's rows i+1 .. rows-1, for i in r0 .. r1-1. Once every earlier panel is
     * unpacked, rows r0 .. r1-1 of full are complete. */
    void (*ns_unpack_rows)(cz_compute *c, float *full, const float *in, int batch, int64_t rows,
                           int64_t r0, int64_t r1);
    /* A(AX) form (cz_ns_coop_use_aax): Y[r0:r1] = A[r0:r1] X, with those rows of A complete. */
    void (*ns_poly_rows)(cz_compute *c, const float *x, const float *full, float *y, int batch,
                         int64_t rows, int64_t cols, int64_t r0, int64_t r1);
    /* Ends the iteration with A complete in full: A(AX) form (y holds A X) X = a X + b Y + c A Y;
     * standard form X = a X + (b A + c A A) X, with bm as B and y as scratch. */
    void (*ns_poly_end)(cz_compute *c, float *x, const float *full, float *y, float *bm, int batch,
                        int64_t rows, int64_t cols, const cz_ns_coeffs *k);
    /* p[dst ..] = p*(1 - lr*wd) - lr*u[src ..] over every run (apply_update over an index
     * map: the elements of a shard that a region's update covers). */
    void (*apply_runs)(cz_compute *c, float *p, const float *u, const cz_runs *r, float lr,
                       float wd);

    /* ---- version 6: the backend's life and the job's streams ---- */
    /* Releases what the backend's open made (cz__compute_close calls it). */
    void (*close)(cz_compute *c);
    /* The first op of every step and the last: step_begin orders what follows after the
     * job's work on the buffers it bound (a GPU backend on a stream of its own makes that
     * stream wait for the job's default streams), step_end orders the job's later work after
     * the step (the default streams wait for the step's last op). Neither blocks the host. */
    void (*step_begin)(cz_compute *c);
    void (*step_end)(cz_compute *c);
} cz_compute_ops;

/* linalg_work of the backend (the caller has checked cz__compute_has_linalg). */
int cz__compute_linalg_work(cz_compute *c, int64_t n, int64_t vn, cz_linalg_work *out,
                            cz_error *err);
/* The work of a rows x cols block or tile of a preconditioner that keeps factors of the sides
 * not longer than max_dim: linalg_work asked for every such side (cz__la_factored_sides), each
 * field the largest (all 0 when no side is factored). */
int cz__compute_linalg_work_block(cz_compute *c, int64_t rows, int64_t cols, int64_t max_dim,
                                  cz_linalg_work *out, cz_error *err);
/* True when the backend has every linear-algebra operation of version 2; else false and
 * *missing names the first absent one. */
bool cz__compute_has_linalg(const cz_compute *c, const char **missing);

struct cz_compute {
    const cz_compute_ops *ops;
    void *impl;
};

/* The compute seam's dispatch (compute.c): opens the backend named `name` ("cpu", or
 * "cuda" through the GPU plugin with its default options), or one a test registered. */
int cz__compute_open(cz_compute *c, const char *name, cz_error *err);
void cz__compute_close(cz_compute *c);
/* Makes a table openable by its name (tests: a recording wrapper around the cpu backend).
 * At most a few; CZ_EINVALID when full. */
int cz__compute_register(const cz_compute_ops *ops);
/* The cpu backend's table, for wrappers. */
extern const cz_compute_ops cz__compute_cpu_ops;

/* ---- communication: control plane and data plane ---- */
/* Element types of the data plane are canzona.h's cz_dtype (cz__dtype_bytes gives sizes). */

typedef enum cz_comm_kind {
    CZ_COMM_SELF = 1, /* one process: every collective is a copy */
    CZ_COMM_MPI = 2,
    CZ_COMM_NCCL = 3, /* device memory, NCCL (comm_nccl.h) */
} cz_comm_kind;

/* The control plane: host scalars the ranks must agree on (plan fingerprints, failure
 * agreement, the step's NaN/Inf verdict), over MPI or whatever bootstraps the job. Blocking;
 * never carries parameter data. */
typedef struct cz_ctrl cz_ctrl;
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
};

/* The data plane: the collectives of the step on backend memory, with size_t counts and a
 * dtype. No v-collectives: uneven reduce-scatter and all-gather take one count per rank over
 * rank-ordered contiguous segments, and the micro-group all-to-all is a group of sends and
 * receives (NCCL's ncclGroupStart/Send/Recv/GroupEnd shape); a backend may map them onto
 * v-collectives inside (MPI does for the reduce-scatter and the all-gather). Versioned like
 * the compute ops. Version 2 appended allreduce_sum (the cooperative Newton-Schulz sums),
 * version 3 iallreduce_sum (its Gram panels). */
#define CZ_DATA_PLANE_VERSION 3
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

/* One-process planes. */
int cz__ctrl_self_open(cz_ctrl *c, cz_error *err);
int cz__plane_self_open(cz_plane *p, cz_error *err);
/* True when this build has MPI and MPI has been initialized. */
bool cz__comm_mpi_available(void);
/* Control and data plane over a duplicate of the MPI_Comm at handle (NULL = MPI_COMM_WORLD).
 * Every wait of them is bounded by timeout_s (cz__exec_mpi_timeout); a data plane takes the
 * limit and the report channel of ctrl, an MPI control plane (mpi_watch.h). */
int cz__ctrl_mpi_open(cz_ctrl *c, const void *handle, double timeout_s, cz_error *err);
int cz__plane_mpi_open(cz_plane *p, const void *handle, const cz_ctrl *ctrl, cz_error *err);
/* What this process is doing, named in the report of a stalled MPI wait (what: a string
 * literal; step: the optimizer step, -1 for none). Nothing without MPI. */
void cz__comm_phase(const char *what, int64_t step);
/* The MPI planes' time limit: cz_exec_config.mpi_timeout_s when > 0 (a config of this
 * version), else the environment's CZ_MPI_TIMEOUT_S when it is a number > 0, else 1800 s. */
double cz__exec_mpi_timeout(const cz_exec_config *cfg, const char *env);
void cz__ctrl_close(cz_ctrl *c);
void cz__plane_close(cz_plane *p);

/* ---- shard layout (shard.c) ---- */
/* Index ranges (along the TP dimension) that TP rank r holds of a parameter, in storage order:
 * one range for a plain split, one per block when the blocks split the TP dimension.
 * Returns the number of ranges written to lo/hi (at most max). Replicated: the whole dim. */
int cz__shard_ranges(const cz_plan_param *p, int tp, int r, int64_t *lo, int64_t *hi, int max);
/* Copies TP rank r's local shard of a full row-major matrix into shard (local_shape). */
void cz__shard_pack(const cz_plan_param *p, int tp, int r, const float *full, float *shard);
/* Writes TP rank r's local shard back into its place in the full matrix. */
void cz__shard_unpack(const cz_plan_param *p, int tp, int r, const float *shard, float *full);

/* A growable host list of copy runs, built at create time into the index maps of the step. */
typedef struct cz_run_list {
    cz_copy_run *v;
    size_t n, cap;
} cz_run_list;
/* Appends one run (merged with the last one when contiguous). CZ_ENOMEM on failure. */
int cz__run_list_add(cz_run_list *l, int64_t dst, int64_t src, int64_t len, cz_error *err);
void cz__run_list_free(cz_run_list *l);
/* Appends the runs that copy TP rank r's shard of p between a full matrix at full_off and a
 * shard at shard_off: full -> shard when !unpack, shard -> full when unpack. */
int cz__shard_runs(const cz_plan_param *p, int tp, int r, int64_t full_off, int64_t shard_off,
                   int unpack, cz_run_list *l, cz_error *err);
/* Checks that the param can be sharded over tp ranks as the plan says (divisible dims,
 * local shape and numel consistent). */
int cz__shard_check(const cz_plan_param *p, int tp, cz_error *err);

/* ---- optimizer math (muon.c, adamw.c) ---- */
typedef struct cz_muon_hparams {
    float lr, momentum, weight_decay, eps, scale_coeff;
    int nesterov, ns_steps;
    cz_muon_scaling scaling;
    const cz_ns_coeffs *coeffs;
} cz_muon_hparams;

typedef struct cz_adamw_hparams {
    float lr, beta1, beta2, eps, weight_decay;
} cz_adamw_hparams;

/* Default Muon learning rates of the two scalings (see cz_exec_config.lr). */
#define CZ_MUON_LR_RMS 1e-3f
#define CZ_MUON_LR_SHAPE 0.02f
int cz__muon_hparams_from_config(cz_muon_hparams *h, const cz_exec_config *cfg, cz_error *err);
/* The scale of the orthogonalized update of a rows x cols block. */
float cz__muon_scale(const cz_muon_hparams *h, int64_t rows, int64_t cols);
void cz__adamw_hparams_from_config(cz_adamw_hparams *h, const cz_exec_config *cfg);

/* One block of a matrix parameter: an independent matrix for the optimizer. */
typedef struct cz_block {
    int64_t r0, c0, rows, cols; /* position and size inside the full matrix */
} cz_block;
/* Blocks of a parameter (one when unblocked). Returns the count written (<= max). */
int cz__param_blocks(const cz_plan_param *p, cz_block *out, int max);

/* ---- regions of a shard (shard.c) ---- */
/* Elements of TP rank r's shard of p that lie inside the rectangle b of the full matrix. */
int64_t cz__shard_region_numel(const cz_plan_param *p, int tp, int r, const cz_block *b);
/* Appends the runs between "the message" (the elements of r's shard of p inside b, in the
 * shard's storage order, packed contiguously at msg_off) and either the region b stored
 * contiguously (b->rows x b->cols, row-major) at other_off, or (other_is_shard) r's shard
 * itself at other_off. to_msg: other -> message, else message -> other. A replicated
 * parameter's shard is the whole matrix, so its message is the region row-major. */
int cz__region_runs(const cz_plan_param *p, int tp, int r, const cz_block *b, int64_t msg_off,
                    int64_t other_off, int other_is_shard, int to_msg, cz_run_list *l,
                    cz_error *err);

/* The part of a task one slot computes (pipeline.c): the task's region of the full matrix, or
 * a cooperative member's slice of it, and the TP slot holding it (under sc: every TP rank;
 * slot 0 names it). */
typedef struct cz_exec_part {
    int param, block, width, member, slot;
    int panels; /* a cooperative task's Gram panels, as the plan records them (1 when hosted) */
    cz_block region; /* the task's region */
    cz_block part;   /* this member's part of it (the region when width == 1) */
} cz_exec_part;
/* The parts of task t of group g (width 1: one part; k: k parts, member order); writes at
 * most max of them and returns their count. */
int cz__exec_task_parts(const cz_plan *plan, const cz_plan_group *g, int t, cz_exec_part *out,
                        int max);
/* One part's Muon momentum, on the rank that holds the part. */
typedef struct cz_momentum_part {
    int param;
    cz_block part;
    float *buf; /* part.rows x part.cols, backend memory */
} cz_momentum_part;
/* The Muon momentum this rank keeps for a part of matrix `param` at the region's origin
 * (r0, c0) (part-sized, backend memory); NULL when it keeps none. */
float *cz__exec_momentum_of(const cz_executor *ex, int param, const cz_block *part);

/* Reference kernels on host memory: the CPU backend's own loops (compute_cpu.c), also used by
 * the tests and by canzona-bench's single-process reference. */
/* buf = mu*buf + g; in = buf, or g + mu*buf with Nesterov. n elements; in may equal g. */
void cz__muon_momentum(const cz_muon_hparams *h, const float *g, float *buf, float *in, int64_t n);
/* The CPU backend's Newton-Schulz (its ns_batched) with the symmetric form forced on (sym = 1:
 * cblas_ssyrk for X X^T and A A, mirrored) or off (sym = 0: cblas_sgemm); ns_batched uses
 * cz__ns_use_syrk. For the tests and canzona-bench ns. */
int cz__cpu_ns(float *x, int batch, int64_t rows, int64_t cols, const cz_ns_coeffs *k, int steps,
               float *work, int sym, cz_error *err);
/* p = p*(1 - lr*wd) - lr*u over n elements. */
void cz__apply_update(float *p, const float *u, int64_t n, float lr, float wd);
/* One AdamW step (t >= 1) over n elements. */
void cz__adamw_step(const cz_adamw_hparams *h, int64_t t, float *p, const float *g, float *m,
                    float *v, int64_t n);
/* bf16 <-> fp32 on the host (round to nearest even; NaN stays NaN). */
uint16_t cz__bf16_from_f32(float f);
float cz__f32_from_bf16(uint16_t b);

/* The AdamW arguments of step t (>= 1). */
void cz__adamw_args_make(cz_adamw_args *a, const cz_adamw_hparams *h, int64_t t);

/* One block of a matrix, as the Newton-Schulz batch sees it. */
typedef struct cz_muon_blk {
    int mat; /* index in the batch of matrices */
    cz_block b;
    int64_t ld;     /* row stride of the full matrix */
    int64_t r, c;   /* oriented shape: r <= c */
    int transposed; /* the block is stored transposed in the NS batch */
} cz_muon_blk;

/* The blocks of a fixed list of matrices, sorted so that same-shape blocks are adjacent (one
 * ns_batched call each), with the batch and work sizes they need. Built once. */
typedef struct cz_muon_prep {
    cz_muon_blk *blks;
    int nblk;
    int64_t batch_n, work_n; /* floats */
} cz_muon_prep;
int cz__muon_prepare(cz_muon_prep *mp, const cz_plan_param *const *params, int n, cz_error *err);
/* The same for tasks: matrix i is params[i]'s whole matrix (blocks[i] == -1, or blocks NULL),
 * with its blocks orthogonalised separately, or its block blocks[i] alone, stored contiguously
 * (the block's rows x cols). */
int cz__muon_prepare_tasks(cz_muon_prep *mp, const cz_plan_param *const *params, const int *blocks,
                           int n, cz_error *err);
void cz__muon_prep_free(cz_muon_prep *mp);
/* Writes the scaled Muon update of every prepared matrix in[i] to out[i] (backend memory),
 * using batch (batch_n floats) and work (work_n floats); calls progress(ctx) (when not NULL)
 * between batches so that communication in flight keeps moving. */
int cz__muon_run(cz_compute *c, const cz_muon_hparams *h, const cz_muon_prep *mp,
                 const float *const *in, float *const *out, float *batch, float *work,
                 void (*progress)(void *), void *ctx, cz_error *err);
/* One batch of cooperative Newton-Schulz tasks of the same shape and slot set, as one member
 * computes it: each of `count` tasks has a rows x cols region (oriented a x b, a = the short
 * side; transposed when the region is tall) of which this member holds the prows x pcols
 * slice along the long side (a x n oriented). */
typedef struct cz_muon_coop {
    int count;
    int panels; /* Gram row panels per iteration, 1 .. min(CZ_COOP_MAX_PANELS, a): the plan's */
    int64_t rows, cols, prows, pcols, a, n;
    int transposed;
} cz_muon_coop;
/* Floats of x, gram (the packed Grams: count * a (a + 1) / 2) and work one batch needs. */
void cz__muon_coop_sizes(const cz_muon_coop *b, int64_t *x_n, int64_t *gram_n, int64_t *work_n);
/* The member's part of the scaled Muon update of every task of the batch: in[i] and out[i]
 * are its slice (prows x pcols, contiguous, backend memory; in already momentum-updated). The
 * sums over the members run on pl (the plane of the k members): one all-reduce of the count
 * sums of squares (doubles), then per iteration the count packed Gram matrices (their upper
 * triangles) in b->panels row panels, each a non-blocking all-reduce overlapped with the
 * computation (ns_coop.h). x, gram, work as cz__muon_coop_sizes; sq holds count backend
 * doubles; ev is a compute event recorded before each all-reduce; reqs holds
 * CZ_COOP_MAX_PANELS requests of pl. progress(ctx) is called between iterations. */
int cz__muon_coop_run(cz_compute *c, cz_plane *pl, const cz_muon_hparams *h, const cz_muon_coop *b,
                      const float *const *in, float *const *out, float *x, float *gram, float *work,
                      double *sq, cz_event *ev, cz_comm_req *const *reqs, void (*progress)(void *),
                      void *ctx, cz_error *err);
/* The same for n matrices, preparing and allocating on the way (not for use in a step). */
int cz__muon_orthogonalize(cz_compute *c, const cz_muon_hparams *h,
                           const cz_plan_param *const *params, const float *const *in,
                           float *const *out, int n, cz_error *err);

/* What values a state tensor can hold, as a checkpoint load checks them: every tensor is
 * finite; a second moment or a sum of squares is >= 0 everywhere; a Gram factor (a sum of
 * G G^T) has a diagonal >= 0. */
typedef enum cz_state_values {
    CZ_STATE_FINITE = 0,
    CZ_STATE_NONNEG = 1,
    CZ_STATE_GRAM = 2,
} cz_state_values;

/* One tensor of a matrix optimizer's state as a checkpoint names it: "<param name>.<suffix>",
 * rows x cols fp32, one contiguous backend buffer. */
typedef struct cz_state_tensor {
    char suffix[64];
    int64_t rows, cols;
    cz_state_values values;
    /* Shampoo's momentum of the direction: its tile's origin in the full matrix. The file
     * holds the reference's momentum, this plus the weight-decay part each rank keeps beside
     * its parameters (cz__shampoo_decay_momentum). */
    bool momentum;
    int64_t r0, c0;
} cz_state_tensor;

/* ---- Shampoo (shampoo.c) ---- */
typedef struct cz_shampoo_hparams {
    float lr, weight_decay, beta1, beta2, eps, momentum, graft_beta2, graft_eps;
    int nesterov, start_step, freq, max_dim, bias_correction;
    cz_shampoo_grafting grafting;
} cz_shampoo_hparams;
/* Default Shampoo learning rate (Distributed Shampoo's). */
#define CZ_SHAMPOO_LR 0.01f
/* Reads and checks Shampoo's settings; freq is the plan's precondition_frequency. */
int cz__shampoo_hparams_from_config(cz_shampoo_hparams *h, const cz_exec_config *cfg, int freq,
                                    cz_error *err);
/* The optimizer state of one whole matrix: its blocks (the plan's) cut into tiles whose sides
 * are at most max_dim, each with its factors L, R, their inverse roots and the diagonal
 * state. Backend memory, allocated at create time. */
typedef struct cz_shampoo_state cz_shampoo_state;
/* Allocates p's state; *work_n and *side_n grow to the work (floats) one cz__shampoo_run on
 * it needs. */
int cz__shampoo_state_create(cz_compute *c, const cz_shampoo_hparams *h, const cz_plan_param *p,
                             cz_shampoo_state **out, int64_t *work_n, cz_error *err);
void cz__shampoo_state_free(cz_compute *c, cz_shampoo_state *s);
/* Bytes of backend memory the state holds (for the memory figures). */
int64_t cz__shampoo_state_bytes(const cz_shampoo_state *s);
/* Writes step t's (t >= 1) Shampoo direction of the whole gradient g into u (both full,
 * row-major, backend memory): p then becomes p*(1 - lr*wd) - lr*u, or without momentum p -
 * lr*u after cz__shampoo_decay_momentum. work holds work_n floats, stats two backend doubles. */
int cz__shampoo_run(cz_compute *c, const cz_shampoo_hparams *h, cz_shampoo_state *s, const float *g,
                    float *u, int64_t t, float *work, double *stats, cz_error *err);
/* Whether step t (>= 1) computes the inverse roots: at the start step, then at every multiple
 * of the frequency after it (Distributed Shampoo's rule). */
bool cz__shampoo_refreshes(const cz_shampoo_hparams *h, int64_t t);
/* Distributed Shampoo adds the decoupled weight decay wd*p to the direction before its
 * momentum: M = mu*M + D + wd*p. The host keeps A = mu*A + D (cz__shampoo_run); the rest,
 * B = mu*B + wd*p, is elementwise, so each rank keeps it for the n elements p of its shard
 * (b, backend memory) and applies it here, before the host's part is applied as p - lr*u:
 * p -= lr*B, or with Nesterov p -= lr*(wd*p + mu*B). Only with momentum: without, the
 * reference's p - lr*(D + wd*p) is the plain decoupled form. */
void cz__shampoo_decay_momentum(cz_compute *c, const cz_shampoo_hparams *h, float *p, float *b,
                                int64_t n, float lr, float wd);

/* The checkpoint tensors of p's Shampoo state, from the settings alone (rank 0 names them
 * without hosting the state): writes the first max of them to out and returns their count.
 * Per tile, named by its origin: shampoo.<r0>_<c0>.{factor_left, factor_right, inv_root_left,
 * inv_root_right[, grafting][, filtered_grad][, momentum]}. */
int64_t cz__shampoo_state_tensors(const cz_shampoo_hparams *h, const cz_plan_param *p,
                                  cz_state_tensor *out, int64_t max);
/* The buffer of tensor k (in that order) of a state; NULL past the end. */
float *cz__shampoo_state_tensor(cz_shampoo_state *s, int64_t k);

/* ---- SOAP (soap.c) ---- */
typedef struct cz_soap_hparams {
    float lr, weight_decay, beta1, beta2, shampoo_beta, eps;
    int freq, max_dim, bias_correction;
} cz_soap_hparams;
/* Default SOAP learning rate (the reference's). */
#define CZ_SOAP_LR 3e-3f
/* Reads and checks SOAP's settings; freq and max_dim are the plan's. */
int cz__soap_hparams_from_config(cz_soap_hparams *h, const cz_exec_config *cfg, int freq,
                                 int max_dim, cz_error *err);
/* One whole matrix's SOAP state (per plan block: Gram factors and eigenbases of the sides
 * <= max_dim, Adam's moments in the eigenbasis). Backend memory, allocated at create time. */
typedef struct cz_soap_state cz_soap_state;
int cz__soap_state_create(cz_compute *c, const cz_soap_hparams *h, const cz_plan_param *p,
                          cz_soap_state **out, int64_t *work_n, cz_error *err);
void cz__soap_state_free(cz_compute *c, cz_soap_state *s);
/* Call k (>= 1) of SOAP on the whole gradient g, writing u (full, backend memory) so that
 * p*(1 - lr*wd) - lr*u is the reference's update followed by its weight decay. The first
 * call only initialises the factors and eigenbases: u = 0, and the caller applies no weight
 * decay that step. */
int cz__soap_run(cz_compute *c, const cz_soap_hparams *h, cz_soap_state *s, const float *g,
                 float *u, int64_t k, float *work, cz_error *err);

/* The same for SOAP: per plan block, soap.<r0>_<c0>.{[GG_left, Q_left,][GG_right, Q_right,]
 * exp_avg, exp_avg_sq}, a side above max_dim without its factor and basis. */
int64_t cz__soap_state_tensors(const cz_soap_hparams *h, const cz_plan_param *p,
                               cz_state_tensor *out, int64_t max);
float *cz__soap_state_tensor(cz_soap_state *s, int64_t k);

/* ---- the executor object ---- */
struct cz_executor {
    const cz_plan *plan;
    cz_plan *owned_plan; /* non-NULL when created from a file */
    cz_exec_config cfg;
    cz_muon_hparams muon;
    cz_adamw_hparams adamw;
    cz_compute compute;
    cz_ctrl ctrl;                     /* control plane over the world */
    cz_plane world, dp_comm, tp_comm; /* data planes; dp and tp are split from world */
    int dp, tp, dp_rank, tp_rank;
    bool sc; /* synchronous compute: every TP rank updates every matrix */
    size_t buffer_numel;
    const cz_rank_schedule *schedule; /* my DP rank's */

    /* Bound buffers (of dtype): per param pointers to its local shard, or the flat ones. */
    cz_dtype dtype;
    void **param_ptr, **grad_ptr;
    bool *bound;
    void *flat_params, *flat_grads; /* NULL when bound per parameter */
    float *scratch;                 /* backend: max bucket range, for the reduce-scatter */

    /* Owned parameters: every kind (ids ascending), and the elementwise ones. A split-layout
     * plan's elementwise parameter is owned in part: the piece of it in my DP range. */
    int *owned, *owned_elem;
    int nowned, nowned_elem;
    int64_t *piece_lo, *piece_len; /* indexed by param id: the owned piece, relative to the
                                      parameter's start (0 and numel for a whole one) */
    double *stats;      /* backend: per owned parameter, sum of squares of its gradient */
    double *stats_host; /* host copy, read back once per step */
    /* Compute events the DP collectives wait for: gradients staged, parameters updated. */
    cz_event *ev_grads, *ev_params;
    /* Optimizer state, backend memory allocated at create time. */
    float **adam_m, **adam_v; /* indexed by param id, NULL when not mine */
    /* Muon momentum: one part-sized buffer per part I hold (a whole matrix, a block, or a
     * cooperative member's slice; see cz__exec_momentum_of). */
    struct cz_momentum_part *mom;
    int nmom;
    cz_shampoo_hparams shampoo;
    bool use_shampoo;                 /* the plan's matrix optimizer is Shampoo */
    cz_shampoo_state **shampoo_state; /* indexed by param id, where I host (Shampoo plans) */
    /* Shampoo with momentum: the weight-decay part of the momentum of my shard of each owned
     * matrix (cz__shampoo_decay_momentum), indexed by param id, numel floats; else NULL. */
    float **shampoo_decay;
    cz_soap_hparams soap;
    bool use_soap;              /* the plan's matrix optimizer is SOAP */
    cz_soap_state **soap_state; /* indexed by param id, where I host (SOAP plans) */

    /* Per-parameter binding: staging copies of the flat layout. */
    /* Staging (per-parameter binding or a dtype other than fp32): the step runs on fp32 flat
     * copies. With bf16, stage_params is the fp32 master copy, loaded at the first step. */
    bool per_param, staged, master_loaded;
    /* The cuda backend under a host-driven plane: buffers are managed memory and the step
     * always stages the job's buffers through them (executor_backend.c). */
    bool host_staged;
    float *stage_params, *stage_grads; /* backend memory, allocated at bind */
    int async_rc;                      /* result of the step started by step_async */
    cz_error async_err;                /* and its message */
    bool async_active;                 /* a step was started and not yet waited for */
    bool bind_agreed;                  /* all ranks confirmed their binding at the first step */

    struct cz_pipeline *pipe; /* micro-group layouts and communication buffers */

    int64_t steps;
    cz_exec_timings last;
    double grad_norm; /* of the last step, before clipping */
};

/* Creates an executor over plan; takes ownership of `owned` (may be NULL, else == plan),
 * which is freed on failure too. A non-zero pre_rc is a failure that happened before (err
 * already describes it, e.g. the plan file did not load): the ranks still meet to agree. */
int cz__executor_create_impl(cz_executor **out, const cz_plan *plan, cz_plan *owned,
                             const cz_exec_config *cfg, int pre_rc, cz_error *err);
/* Plan checks the executor needs (pp, strategies, ranges bounding ownership, schedules). */
int cz__exec_plan_check(const cz_plan *plan, cz_error *err);
/* Fingerprint of the parts of a plan the ranks must agree on. */
uint64_t cz__exec_plan_fingerprint(const cz_plan *plan);
/* Index of the bucket with the given id; -1 when absent. */
int cz__exec_bucket_index(const cz_plan *plan, int id);
/* Precomputes the micro-group layouts of my DP rank's schedule and allocates the pipeline's
 * buffers and the Muon momentum of the matrices this rank hosts (pipeline.c). */
int cz__exec_pipeline_init(cz_executor *ex, cz_error *err);
void cz__exec_pipeline_free(cz_executor *ex);
/* Runs the micro-group pipeline of the owned matrix parameters on flat buffers P, G. */
int cz__exec_matrix_pipeline(cz_executor *ex, float *P, const float *G, cz_error *err);
/* Offset of a parameter's local shard in the flat buffer. */
int64_t cz__exec_param_offset(const cz_executor *ex, int param);
/* The piece of parameter p that DP rank d updates, relative to p's start: the whole shard of
 * an owned parameter, the part in d's range for a fragmented one (split layout), else none.
 * Returns its length (0: none) and sets *lo. */
int64_t cz__exec_param_piece(const cz_plan *plan, const cz_plan_param *p, int d, int64_t *lo);
/* Opens the compute backend cfg->backend names, for the comm backend `comm`
 * (executor_backend.c). */
int cz__exec_open_compute(cz_executor *ex, const cz_exec_config *cfg, const char *comm,
                          cz_error *err);
/* Opens the control plane (MPI) and the world data plane (NCCL) of comm backend "nccl". */
int cz__exec_open_nccl(cz_executor *ex, const cz_exec_config *cfg, cz_error *err);
/* Allocates what the data planes need for the plan's steps, at create (the nccl DP plane's
 * padded-collective scratch), so that a step allocates nothing. */
int cz__exec_reserve_planes(cz_executor *ex, cz_error *err);
/* A data plane over a communicator the job handed in, of the world plane's kind: a pointer to
 * an MPI_Comm (duplicated) or to an ncclComm_t (borrowed). */
int cz__exec_open_plane(cz_executor *ex, const void *handle, cz_plane *out, cz_error *err);
/* Monotonic clock in seconds. */
double cz__exec_now(void);

#endif /* CZ_EXEC_INTERNAL_H */
