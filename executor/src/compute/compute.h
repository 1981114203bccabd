/*
 * compute.h — the compute seam: cz_compute_ops, every operation on parameter, gradient and
 * optimizer-state data, on memory the backend owns (cpu: host memory; cuda: device memory),
 * ordered on one stream with events. The step, the pipeline and the optimizers touch data
 * only through it (tests/exec/seam_only.py checks it). Its dispatch, compute.c, opens a
 * backend by name: "cpu" (compute_cpu.c), "cuda" (the GPU plugin, gpu_plugin.h) or a table a
 * test registered.
 */
#ifndef CZ_COMPUTE_H
#define CZ_COMPUTE_H

#include "canzona_exec.h"
#include "cz_format.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The compute seam, versioned like sqlite3_io_methods: a backend fills a cz_compute_ops of
 * CZ_COMPUTE_OPS_VERSION; fields are appended (version 5 is the one exception, see there), and
 * the executor refuses a table whose version it does not know. Every operation on parameter,
 * gradient or optimizer-state data goes through it: step.c, pipeline.c, muon.c and adamw.c never
 * touch data themselves. All pointers below are backend memory (from alloc, or bound buffers the
 * backend accepts), except where a parameter says host. */
#define CZ_COMPUTE_OPS_VERSION 8
/* Version 8 appended normuon (NorMuon's normalization, optional: a table without it still runs
 * every optimizer, and NorMuon is refused at create naming the backend). */
/* Version 7 changed two signatures, not the layout: ns_batched's coefficients are a set with
 * one triple per iteration (cz_ns_coeffs, a table or one triple repeated), and ns_poly_end takes
 * the one triple of the iteration it ends. */
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
     * rows <= cols, in place: `steps` iterations of A = X X^T, B = b A + c A A, X = a X + B X,
     * iteration t with the triple cz__ns_coeffs_at(k, t).
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
                        int64_t rows, int64_t cols, const cz_ns_triple *k);
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

    /* ---- version 8: NorMuon (optional, see above) ---- */
    /* NorMuon's normalization of the rows x cols matrix x (contiguous, row-major) in place.
     * Its lines are its rows (per_col 0) or its columns (per_col 1), n of them, and v holds
     * their second-moment EMA (n floats at v, v + vs, ..., backend memory). For each line i:
     * s = mean of x^2 over it (double), v_i = v_i + (1 - beta2) (s - v_i), d_i = 1 / (sqrt(v_i)
     * + eps); then x_line *= d_i * ||x||_F / max(||x d||_F, 1e-8), both norms from the lines'
     * sums of squares. work holds 2 n + 1 backend doubles. */
    void (*normuon)(cz_compute *c, float *x, int64_t rows, int64_t cols, int per_col, float *v,
                    int64_t vs, float beta2, float eps, double *work);
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
/* CZ_OK when the backend has them all; else CZ_EUNSUPPORTED naming `what` (an optimizer) as
 * what needs them, the backend and the first operation it lacks (and, for the cpu backend's
 * eigensolver, the missing LAPACKE). */
int cz__compute_require_linalg(const cz_compute *c, const char *what, cz_error *err);

struct cz_compute {
    const cz_compute_ops *ops;
    void *impl;
    /* Bytes allocated through cz__compute_alloc, by kind (cz_executor_memory_usage). */
    int64_t mem[CZ_EXEC_MEM_NKINDS];
};
/* c->ops->alloc, recording the bytes under kind: every allocation of backend memory the
 * executor makes goes through it, so that cz_executor_memory_usage can be set against the
 * prediction (memory_model.h). */
void *cz__compute_alloc(cz_compute *c, cz_exec_mem_kind kind, size_t bytes);
/* Records n run-list entries under CZ_EXEC_MEM_INDEX (the pipeline's runs_create calls). */
void cz__compute_note_runs(cz_compute *c, size_t n);

/* The compute seam's dispatch (compute.c): opens the backend named `name` ("cpu", or
 * "cuda" through the GPU plugin with its default options), or one a test registered. */
int cz__compute_open(cz_compute *c, const char *name, cz_error *err);
/* What a job asks of its compute backend (cz_exec_config's backend, stream, memory and the
 * parameters' dtype) and what the data plane needs of it. */
typedef struct cz_compute_want {
    const char *name;      /* NULL: "cpu" */
    void *stream;          /* the job's stream, NULL: the backend's own */
    cz_exec_memory memory; /* where the job's buffers live */
    int dtype;             /* the parameters' cz_dtype (a GPU backend's Newton-Schulz precision) */
    const char *plane;     /* the data plane's backend, for messages */
    bool host_plane;       /* the data plane reads and writes backend memory from the host */
} cz_compute_want;
/* Opens the backend w names with what it takes from the job (a GPU backend: the stream, the
 * precision, and managed memory under a host-driven plane). *staged: the step stages the
 * job's buffers through the executor's own (a device backend under a host-driven plane). */
int cz__compute_open_for(cz_compute *c, const cz_compute_want *w, bool *staged, cz_error *err);
void cz__compute_close(cz_compute *c);
/* Makes a table openable by its name (tests: a recording wrapper around the cpu backend).
 * At most a few; CZ_EINVALID when full. */
int cz__compute_register(const cz_compute_ops *ops);

#endif /* CZ_COMPUTE_H */
