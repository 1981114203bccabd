/*
 * shard.h — where a rank's pieces of a parameter lie, from the plan alone (shard.c): a TP
 * rank's local shard in the full matrix, a DP rank's piece of the bucket, the host run lists
 * the step's index maps are built from, the blocks of a parameter, the regions of a shard a
 * task covers, and the parts a task is cut into among its slots.
 */
#ifndef CZ_SHARD_H
#define CZ_SHARD_H

#include "compute.h"
#include "cz_format.h"

#include <stddef.h>
#include <stdint.h>

/* TP rank r's index ranges along the TP dimension: cz__shard_ranges (cz_format.h). */
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

/* Index of the bucket with the given id; -1 when absent. */
int cz__bucket_index(const cz_plan *plan, int id);
/* The piece of parameter p that DP rank d updates, relative to p's start: the whole shard of
 * an owned parameter, the part in d's range for a fragmented one (split layout), d's FSDP2
 * rows of an elementwise parameter of a fully sharded plan (fsdp_shard.h), else none.
 * Returns its length (0: none) and sets *lo. */
int64_t cz__param_piece(const cz_plan *plan, const cz_plan_param *p, int d, int64_t *lo);

/* One block of a matrix parameter: an independent matrix for the optimizer. */
typedef struct cz_block {
    int64_t r0, c0, rows, cols; /* position and size inside the full matrix */
} cz_block;
/* Blocks of a parameter (one when unblocked). Returns the count written (<= max). */
int cz__param_blocks(const cz_plan_param *p, cz_block *out, int max);

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

/* The same for the band [lo, hi) of TP rank r's shard storage (whole rows of the local
 * shard: a fully sharded plan's FSDP2 rows of it, fsdp_shard.h), the band standing for the
 * shard: its elements inside b, and with other_is_shard the band itself at other_off. */
int64_t cz__band_region_numel(const cz_plan_param *p, int tp, int r, int64_t lo, int64_t hi,
                              const cz_block *b);
int cz__band_region_runs(const cz_plan_param *p, int tp, int r, int64_t lo, int64_t hi,
                         const cz_block *b, int64_t msg_off, int64_t other_off, int other_is_shard,
                         int to_msg, cz_run_list *l, cz_error *err);

/* The part of a task one slot computes: the task's region of the full matrix, or
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
int cz__task_parts(const cz_plan *plan, const cz_plan_group *g, int t, cz_exec_part *out, int max);

#endif /* CZ_SHARD_H */
