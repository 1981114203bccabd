/*
 * muon.h — Muon (muon.c): momentum, Newton-Schulz orthogonalization of every block (same-shape
 * blocks batched), the update's scale, cooperative Newton-Schulz over the members of a task.
 */
#ifndef CZ_MUON_H
#define CZ_MUON_H

#include "canzona_exec.h"
#include "comm.h"
#include "compute.h"
#include "cz_format.h"
#include "optimizer.h"
#include "shard.h"

#include <stdint.h>

typedef struct cz_muon_hparams {
    float lr, momentum, weight_decay, eps, scale_coeff;
    int nesterov, ns_steps;
    cz_muon_scaling scaling;
    cz_ns_coeffs coeffs; /* one triple per iteration (a table), or one for all */
    /* NorMuon (cz_normuon_config): CZ_NORMUON_NONE for plain Muon. */
    cz_normuon_mode normuon;
    float nm_beta2, nm_eps;
} cz_muon_hparams;

/* Default Muon learning rates of the two scalings (see cz_exec_config.lr). */
#define CZ_MUON_LR_RMS 1e-3f
#define CZ_MUON_LR_SHAPE 0.02f
int cz__muon_hparams_from_config(cz_muon_hparams *h, const cz_exec_config *cfg, cz_error *err);
/* The scale of the orthogonalized update of a rows x cols block. */
float cz__muon_scale(const cz_muon_hparams *h, int64_t rows, int64_t cols);

/* Muon as the executor runs it on the matrix parameters (optimizer.h): its momentum per part
 * a rank holds (a whole matrix, a block, a cooperative member's slice), the hosted parts
 * orthogonalized in same-shape batches, the cooperative ones with their members. */
extern const cz_optimizer_ops cz__muon_ops;
/* The settings a Muon optimizer of cz__muon_ops runs with (tests: the reference). */
const cz_muon_hparams *cz__muon_hparams_of(const cz_optim *o);

/* One block of a matrix, as the Newton-Schulz batch sees it. */
typedef struct cz_muon_blk {
    int mat; /* index in the batch of matrices */
    cz_block b;
    int64_t ld;     /* row stride of the full matrix */
    int64_t r, c;   /* oriented shape: r <= c */
    int transposed; /* the block is stored transposed in the NS batch */
    /* NorMuon: the unit's second-moment EMA, one float per line (a row of the block, or a
     * column: cz_muon_hparams.normuon) at v, v + vs, ...; NULL under plain Muon. */
    float *v;
    int64_t vs;
} cz_muon_blk;

/* The blocks of a fixed list of matrices, sorted so that same-shape blocks are adjacent (one
 * ns_batched call each), with the batch and work sizes they need. Built once. */
typedef struct cz_muon_prep {
    cz_muon_blk *blks;
    int nblk;
    int64_t batch_n, work_n; /* floats */
} cz_muon_prep;
int cz__muon_prepare(cz_muon_prep *mp, const cz_plan_param *const *params, int n, cz_error *err);
/* The most floats one batched Newton-Schulz call takes in batch and work together (32 Mi
 * floats, 128 MiB): a run of same-shape blocks larger than that is cut into calls of
 * cz__muon_batch_cap blocks each, so that the workspace is bounded by the larger of this and
 * one block's need, not by how many same-shape blocks a micro-group holds (docs/EXECUTOR.md,
 * "Memory"). A block of 1024 x 1024 still goes 8 to a call, enough to fill a GPU. */
#define CZ_MUON_BATCH_FLOATS ((int64_t)32 << 20)
/* How many r x c blocks (r <= c) one batched call takes: at least 1. */
int64_t cz__muon_batch_cap(int64_t r, int64_t c);
/* The end (exclusive) of the batched call that starts at block s of mp: the run of blocks of
 * s's shape, cut at cz__muon_batch_cap blocks. */
int cz__muon_batch_end(const cz_muon_prep *mp, int s);
/* The same for tasks: matrix i is params[i]'s whole matrix (blocks[i] == -1, or blocks NULL),
 * with its blocks orthogonalised separately, or its block blocks[i] alone, stored contiguously
 * (the block's rows x cols). */
int cz__muon_prepare_tasks(cz_muon_prep *mp, const cz_plan_param *const *params, const int *blocks,
                           int n, cz_error *err);
/* The same with parts: where regions[i].rows >= 0 (regions may be NULL), matrix i is that
 * region of params[i]'s per-head matrix (a TP-local part: whole heads), stored contiguously,
 * each of its heads orthogonalised separately. */
int cz__muon_prepare_parts(cz_muon_prep *mp, const cz_plan_param *const *params, const int *blocks,
                           const cz_block *regions, int n, cz_error *err);
void cz__muon_prep_free(cz_muon_prep *mp);
/* Writes the scaled Muon update of every prepared matrix in[i] to out[i] (backend memory),
 * using batch (batch_n floats) and work (work_n floats); calls progress(ctx) (when not NULL)
 * between batches so that communication in flight keeps moving. Under NorMuon every block
 * with a v is normalized between Newton-Schulz and the scale, with nwork (2 max(r, c) + 1
 * backend doubles over the blocks: cz__muon_normuon_work). */
int cz__muon_run(cz_compute *c, const cz_muon_hparams *h, const cz_muon_prep *mp,
                 const float *const *in, float *const *out, float *batch, float *work,
                 double *nwork, void (*progress)(void *), void *ctx, cz_error *err);
/* The doubles of nwork NorMuon needs for mp's blocks. */
int64_t cz__muon_normuon_work(const cz_muon_prep *mp);
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

#endif /* CZ_MUON_H */
