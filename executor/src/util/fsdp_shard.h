/*
 * fsdp_shard.h — where a GPU's FSDP2 shard of a parameter lies, for a fully sharded plan
 * (cz_plan_is_fsdp; fsdp_shard.c). GPU k = d * tp + t of the stage's shard group (DP rank d,
 * TP rank t) holds rows [d * chunk, d * chunk + n) of its TP shard of every parameter (the
 * plan's local_shape; the whole matrix at TP 1 or for a TP-replicated one), all of its
 * columns, row-major, where chunk is torch.chunk's ceil(local rows / dp) and
 * n = cz__fsdp_rows(local rows, dp, d) (0 past the rows): what fully_shard over a 2-D mesh
 * leaves a rank of a DTensor TP parameter. The same contract as shard.h's region functions,
 * which the micro-group pipeline calls for the other layouts, so that the pipeline packs and
 * unpacks FSDP shards with the same index maps.
 */
#ifndef CZ_FSDP_SHARD_H
#define CZ_FSDP_SHARD_H

#include "cz_format.h"
#include "shard.h"

#include <stdbool.h>
#include <stdint.h>

/* DP rank d's shard of p as a rectangle of its TP shard (rows 0 when it holds none); the same
 * for every TP rank of d. */
cz_block cz__fsdp_shard_block(const cz_plan *plan, const cz_plan_param *p, int d);
/* Elements of DP rank d's shard of p. */
int64_t cz__fsdp_shard_numel(const cz_plan *plan, const cz_plan_param *p, int d);
/* Whether GPU k sends its shard of matrix p to p's owner: all do, but of a TP-replicated
 * matrix, which the TP ranks of a DP rank hold alike, only TP rank 0. */
bool cz__fsdp_gathers_from(const cz_plan *plan, const cz_plan_param *p, int k);
/* Elements of GPU k's shard of p inside the rectangle b of the full matrix. */
int64_t cz__fsdp_region_numel(const cz_plan *plan, const cz_plan_param *p, int k,
                              const cz_block *b);
/* cz__region_runs for GPU k's FSDP shard: the runs between the message (the elements of k's
 * shard inside b, in the shard's storage order, packed at msg_off) and either the region b
 * stored row-major at other_off or (other_is_shard) k's shard itself at other_off; to_msg:
 * other -> message, else message -> other. */
int cz__fsdp_region_runs(const cz_plan *plan, const cz_plan_param *p, int k, const cz_block *b,
                         int64_t msg_off, int64_t other_off, int other_is_shard, int to_msg,
                         cz_run_list *l, cz_error *err);

#endif /* CZ_FSDP_SHARD_H */
