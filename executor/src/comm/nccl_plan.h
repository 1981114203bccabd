/*
 * nccl_plan.h — the NCCL calls of the data plane's uneven collectives, decided in plain C so
 * that the CPU tests check them (tests/exec/test_nccl_plan.c): which form an uneven
 * reduce-scatter or all-gather takes, and the list of calls (with roots, counts and offsets)
 * that comm_nccl.c replays.
 *
 * NCCL has no v-collectives. An uneven reduce-scatter (all-gather) over P ranks with counts
 * c_0..c_{P-1}, N = sum c_r, m = max c_r, s bytes per element, is built either
 *   rooted: one ncclReduce (ncclBroadcast) per rank r of its c_r elements with root r, all in
 *           one ncclGroupStart/End; no extra memory;
 *   padded: the segments copied into P slots of m elements, one ncclReduceScatter
 *           (ncclAllGather) of m per rank, the result copied out; P*m + m elements of scratch.
 * The alpha-beta model (alpha: latency of one pipelined ring/chain step sequence, beta:
 * seconds per byte of one link) gives
 *   T_rooted = P alpha + N s beta      (every link carries every segment once; the P rooted
 *                                       operations of a group each pay one start-up latency)
 *   T_padded = (P-1) alpha + (P-1) m s beta   (ring reduce-scatter of P m elements)
 * so padded is chosen when (P-1) m s beta - N s beta < alpha, i.e. when the bytes the padding
 * adds, (P-1) m - N elements, cost less than one latency. Even counts always pick padded
 * ((P-1) N/P < N); a skewed plan (one rank with most of a bucket) picks rooted.
 */
#ifndef CZ_NCCL_PLAN_H
#define CZ_NCCL_PLAN_H

#include "canzona_format.h"

#include <stddef.h>

/* Model constants: defaults for NVLink-class links; CZ_NCCL_ALPHA_US and CZ_NCCL_GBPS override
 * them in comm_nccl.c. */
#define CZ_NCCL_DEFAULT_ALPHA_S 10e-6
#define CZ_NCCL_DEFAULT_BYTES_PER_S 100e9

typedef enum cz_nccl_form {
    CZ_NCCL_ROOTED = 0,
    CZ_NCCL_PADDED = 1,
} cz_nccl_form;

/* The form of an uneven collective over P = n ranks of `counts` (elements of elem_bytes), for
 * latency alpha_s (seconds) and bandwidth bytes_per_s. */
cz_nccl_form cz__nccl_choose(const size_t *counts, int n, size_t elem_bytes, double alpha_s,
                             double bytes_per_s);
/* The model's times of both forms (seconds), for the docs and the tests. */
double cz__nccl_time(cz_nccl_form f, const size_t *counts, int n, size_t elem_bytes, double alpha_s,
                     double bytes_per_s);

typedef enum cz_nccl_call_kind {
    CZ_NCCL_COPY = 1,       /* device copy of count elements, src -> dst (comm stream) */
    CZ_NCCL_REDUCE,         /* ncclReduce(src, dst, count, sum, root) */
    CZ_NCCL_BROADCAST,      /* ncclBroadcast(src, dst, count, root) */
    CZ_NCCL_REDUCE_SCATTER, /* ncclReduceScatter(src, dst, count per rank, sum) */
    CZ_NCCL_ALL_GATHER,     /* ncclAllGather(src, dst, count per rank) */
} cz_nccl_call_kind;

typedef enum cz_nccl_buf {
    CZ_NCCL_BUF_SEND = 0, /* the caller's send buffer (all-gather: the in-place buffer) */
    CZ_NCCL_BUF_RECV = 1, /* the caller's receive buffer */
    CZ_NCCL_BUF_SCRATCH = 2,
} cz_nccl_buf;

typedef struct cz_nccl_call {
    cz_nccl_call_kind kind;
    int root; /* REDUCE, BROADCAST */
    size_t count;
    cz_nccl_buf src_buf, dst_buf;
    size_t src_off, dst_off; /* elements */
    int grouped;             /* inside the one ncclGroupStart/End of the list */
} cz_nccl_call;

/* The address a call's operand names: buffer b's base + off elements of elem_bytes. What the
 * NCCL plane hands NCCL and cudaMemcpyAsync. */
void *cz__nccl_call_ptr(cz_nccl_buf b, size_t off, size_t elem_bytes, void *send, void *recv,
                        void *scratch);

/* The calls of an uneven sum-reduce-scatter on rank `me`: the r-th segment of send (counts in
 * rank order) summed into recv on rank r. At most 2 n + 1 calls; returns their count. Zero
 * counts make no call. *scratch_elems is the scratch the calls need (0 when rooted). */
int cz__nccl_plan_reduce_scatter(cz_nccl_call *out, const size_t *counts, int n, int me,
                                 cz_nccl_form f, size_t *scratch_elems);
/* The calls of an uneven in-place all-gather on rank `me` (buffer = SEND). */
int cz__nccl_plan_all_gather(cz_nccl_call *out, const size_t *counts, int n, int me, cz_nccl_form f,
                             size_t *scratch_elems);

/* The model's time of a step's DP collectives (every bucket's reduce-scatter and all-gather
 * over the plan's DP ranges, elem_bytes per element) when every bucket is rooted, every one
 * padded, or each as cz__nccl_choose picks; *npadded counts the buckets the rule makes padded. */
typedef enum cz_nccl_policy {
    CZ_NCCL_ALL_ROOTED = 0,
    CZ_NCCL_ALL_PADDED = 1,
    CZ_NCCL_BY_RULE = 2,
} cz_nccl_policy;
struct cz_plan;
double cz__nccl_step_time(const struct cz_plan *plan, cz_nccl_policy policy, size_t elem_bytes,
                          double alpha_s, double bytes_per_s, int *npadded);

/* The most scratch (elements) any of a step's DP collectives needs: over every bucket of the
 * plan (counts = its DP ranges), the reduce-scatter's and the all-gather's scratch in the form
 * cz__nccl_choose picks with these constants (padded: P m + m and P m; rooted: 0). The scratch
 * does not depend on the calling rank. The nccl plane allocates this much when the executor
 * is created, so a step never allocates. */
size_t cz__nccl_plan_scratch(const struct cz_plan *plan, size_t elem_bytes, double alpha_s,
                             double bytes_per_s);
/* The bytes of scratch the nccl plane reserves: the step's DP collectives go in fp32 or bf16
 * (wire.c), and the form a collective takes depends on its bytes, so the larger of
 * cz__nccl_plan_scratch's need in either dtype times its element size. */
size_t cz__nccl_plan_scratch_bytes(const struct cz_plan *plan, double alpha_s, double bytes_per_s);

/* ---- communicator creation: non-blocking NCCL, polled with a time limit ----
 * Communicators are created non-blocking (ncclConfig_t.blocking = 0): ncclCommInitRankConfig
 * and ncclCommSplit return ncclInProgress and the communicator's state is polled with
 * ncclCommGetAsyncError until it is ncclSuccess, an error, or the time limit passes; so is
 * any later call on such a communicator that returns ncclInProgress (ncclGroupEnd, a
 * collective outside a group). The polling loop is plain C over callbacks, so that the CPU
 * tests drive it with a fake communicator and a fake clock. */
typedef enum cz_nccl_state {
    CZ_NCCL_STATE_READY = 0,   /* ncclSuccess */
    CZ_NCCL_STATE_PENDING = 1, /* ncclInProgress */
    CZ_NCCL_STATE_FAILED = 2,  /* any error, or the query itself failed */
} cz_nccl_state;

typedef enum cz_nccl_wait {
    CZ_NCCL_WAIT_OK = 0,
    CZ_NCCL_WAIT_FAILED = 1,
    CZ_NCCL_WAIT_TIMEOUT = 2,
} cz_nccl_wait;

typedef struct cz_nccl_poller {
    cz_nccl_state (*poll)(void *ctx); /* one ncclCommGetAsyncError */
    double (*now)(void *ctx);         /* a monotonic clock, seconds */
    void (*pause)(void *ctx);         /* between two polls (a short sleep) */
    void *ctx;
} cz_nccl_poller;

/* Polls until the state is READY (OK) or FAILED (FAILED); TIMEOUT when the state is still
 * PENDING once timeout_s have passed since the first poll. Always polls at least once, so a
 * communicator that is already ready never times out; never pauses after the last poll.
 * *npolls (may be NULL) counts the polls. */
cz_nccl_wait cz__nccl_poll_until(const cz_nccl_poller *p, double timeout_s, int *npolls);

/* ---- the NCCL library found at run time ----
 * The plugin loads libnccl.so.2 itself (nccl/nccl_api.c). The oldest NCCL it runs on: 2.18,
 * which brought ncclCommSplit. */
#define CZ_NCCL_MIN_VERSION 21800
/* 1 when the loaded NCCL (runtime, ncclGetVersion's code) can run a plane built against the
 * header of version `built` (NCCL_VERSION_CODE): the same major version, and not older than
 * CZ_NCCL_MIN_VERSION; else 0 and why (len bytes) says which versions were found. A runtime
 * older than the header but not than 2.18 is accepted: the plane calls nothing newer. */
int cz__nccl_version_usable(int runtime, int built, char *why, size_t len);

/* ---- a rank's exchange with itself ----
 * In a group of sends and receives (a micro-group's gather or scatter), the part a rank sends
 * to itself does not go through NCCL: NCCL's send to self moves data through its peer-to-peer
 * machinery, far slower than a device copy, and at TP 1 it is the whole gather and scatter.
 * The plane keeps the group's self-send and self-receive and, after ncclGroupEnd, copies one
 * into the other on its stream. The seam allows one send and one receive per peer, so the
 * two must carry the same count: returns the elements to copy (0: no exchange with itself), or
 * -1 when only one of them was posted or the counts differ (the caller's bug). */
int64_t cz__nccl_self_copy(size_t sent, int has_send, size_t received, int has_recv);

/* ---- teardown ----
 * A plane's close first drains its communication stream, polled with the plane's time limit
 * (the stream's last event, and the communicator's asynchronous error): a peer that died
 * leaves NCCL kernels that never finish, and a plain stream synchronize would hang
 * cz_executor_free. Then, by what the drain found: */
typedef enum cz_nccl_close_step {
    CZ_NCCL_CLOSE_LEAVE,    /* already aborted, or the job's communicator drained: nothing */
    CZ_NCCL_CLOSE_FINALIZE, /* ours, drained: ncclCommFinalize (polled), ncclCommDestroy */
    CZ_NCCL_CLOSE_ABORT,    /* not drained in time, or failed: ncclCommAbort ends its kernels */
} cz_nccl_close_step;
cz_nccl_close_step cz__nccl_close_step_of(cz_nccl_wait drained, int aborted, int borrowed);

/* Every rank's verdict on a collective creation step (local_rc: this rank's result), agreed
 * over the control plane (one min-reduction): CZ_OK when every rank succeeded; this rank's
 * own local_rc when it failed (its message kept); else CZ_EIO naming the lowest failed rank.
 * Every rank calls it, whatever its own result, so that none is left waiting in a
 * communicator a peer has given up on; on any failure the caller aborts its communicator. */
struct cz_ctrl;
int cz__nccl_agree(struct cz_ctrl *ctrl, int local_rc, const char *what, cz_error *err);

/* Seconds a communicator creation or a host wait on NCCL work may last before the plane aborts
 * the communicator: cz_exec_config.nccl_timeout_s when > 0, else the environment's
 * CZ_NCCL_TIMEOUT_S when > 0, else CZ_NCCL_DEFAULT_TIMEOUT_S. env may be NULL. */
#define CZ_NCCL_DEFAULT_TIMEOUT_S 300.0
double cz__nccl_timeout(double configured_s, const char *env);

#endif /* CZ_NCCL_PLAN_H */
