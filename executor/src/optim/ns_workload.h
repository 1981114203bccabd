/*
 * ns_workload.h — the Newton-Schulz work one GPU does in a step of a plan: the same-shape
 * batches of the micro-groups it hosts (as the pipeline batches them) and their FLOPs. Plain C,
 * for canzona-bench's single-GPU micro-benchmark (`canzona-bench ns`) and its CPU tests.
 */
#ifndef CZ_NS_WORKLOAD_H
#define CZ_NS_WORKLOAD_H

#include "cz_format.h"

#include <stdint.h>

/* `count` blocks of rows x cols (oriented: rows <= cols) in micro-group `group`: one
 * ns_batched call of the pipeline. */
typedef struct cz_ns_batch {
    int group;
    int64_t rows, cols;
    int count;
} cz_ns_batch;

typedef struct cz_ns_workload {
    int dp_rank, tp_rank;
    cz_ns_batch *batches;
    int nbatches, nblocks;
    double flops;            /* of `steps` iterations over every block */
    int64_t batch_n, work_n; /* floats the largest batch needs (x and work) */
} cz_ns_workload;

/* The work of GPU (dp_rank, tp_rank): the matrix tasks it hosts (every task under sc; a block
 * task's one block; its own heads of a TP-local per-head task; cooperative tasks, which do not
 * run through ns_batched, left out), per
 * micro-group of its DP rank's schedule, for `steps` iterations of coefficient c (0 = no A A
 * product). */
int cz__ns_workload_make(cz_ns_workload *w, const cz_plan *plan, int dp_rank, int tp_rank,
                         int steps, double c, cz_error *err);
void cz__ns_workload_free(cz_ns_workload *w);
/* The GPU with the most Newton-Schulz FLOPs (the lowest dp, then tp rank on ties). */
int cz__ns_workload_busiest(const cz_plan *plan, int steps, double c, int *dp_rank, int *tp_rank,
                            cz_error *err);

/* The device bytes of Muon's share of a step on that GPU (the step's byte model, step_bytes.h):
 * momentum over the `hosted` elements of the parts it computes (g and buf read, buf and the
 * input written: [0]), the load of every block of w (read twice, for its norm and its copy,
 * written once: [1]), w's `steps` iterations' GEMM operands in elements of gemm_bytes (A = X X^T
 * reads X and writes A; B = b A + c A A reads A three times and writes B; X = a X + B X reads B
 * and X twice and writes X: [2]) and the store ([3]), each operand read once. CZ_EUNSUPPORTED
 * when the plan's matrix optimizer is not Muon. */
int cz__ns_workload_bytes(const cz_plan *plan, const cz_ns_workload *w, int steps, int64_t hosted,
                          int64_t gemm_bytes, int64_t read[4], int64_t write[4], cz_error *err);

#endif /* CZ_NS_WORKLOAD_H */
