/*
 * wire.h — the DP exchanges of the step as they go on the wire (wire.c; docs/EXECUTOR.md, "On
 * the wire"): a bucket's gradient reduce-scatter and parameter all-gather in the dtype the job
 * and cz_exec_config.grad_reduce_in_fp32 choose, the bf16 copies they travel in, and the bytes
 * posted (cz_executor_wire). The plain step (step.c) and the bucket-wise one (bucket_step.c)
 * post through here alike, so that both send the same bytes and get the same bits.
 */
#ifndef CZ_WIRE_H
#define CZ_WIRE_H

#include "comm.h"
#include "executor_impl.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct cz_wire cz_wire;

/* The plane a bucket is reduced and gathered over, its size and this rank's place in it, and
 * where the bucket starts in the flat buffers: the DP plane for the dense buffer; for an
 * expert bucket, the expert-DP plane and the expert buffer. */
typedef struct cz_bucket_plane {
    cz_plane *plane;
    int n, me;
    int64_t base;
} cz_bucket_plane;
cz_bucket_plane cz__wire_bucket_plane(cz_executor *ex, const cz_plan_bucket *bk);
/* Whether a bucket on plane bp goes on the wire: not on a plane of one rank (unless
 * cz__exec_exchange_one_rank, for a test), where its
 * reduce-scatter is the identity on this rank's gradients (a sum of one; the average's 1/DP is
 * still applied, wire.c) and its all-gather brings no other range. Such a bucket posts nothing
 * and needs no scratch, receive range or bf16 copy; its bytes count as posted all the same
 * (cz_executor_wire). */
bool cz__wire_exchanged(const cz_bucket_plane *bp);

/* Decides the dtypes from the bound dtype and the config and, for a bf16 exchange, allocates
 * its backend buffers (a bf16 copy of the held buckets, and of this rank's range of each),
 * at create. Freed with the executor (cz__wire_free; NULL allowed). */
int cz__wire_init(cz_executor *ex, cz_error *err);
void cz__wire_free(cz_executor *ex);

/* Posts bucket b's gradient reduce-scatter: from G's bucket, this rank's range summed into
 * recv (fp32, its range's length) for an fp32 exchange, into the wire's own bf16 range for a
 * bf16 one. req NULL: the blocking form; else the non-blocking one, completed through req. */
int cz__wire_reduce_scatter(cz_executor *ex, size_t b, const float *G, float *recv,
                            cz_comm_req *req, cz_error *err);
/* After it completed: this rank's range of the summed bucket averaged (x 1/DP) into G. */
void cz__wire_reduced(cz_executor *ex, size_t b, float *G, const float *recv);

/* Posts bucket b's parameter all-gather from P (this rank's range, updated), req as above, and
 * after it completed (cz__wire_gathered) the other ranks' ranges in P. */
int cz__wire_all_gather(cz_executor *ex, size_t b, float *P, cz_comm_req *req, cz_error *err);
void cz__wire_gathered(cz_executor *ex, size_t b, float *P);

#endif /* CZ_WIRE_H */
