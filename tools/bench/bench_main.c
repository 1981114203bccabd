/* canzona-bench: runs a plan with libcanzona-exec on MPI ranks, times each phase, and checks
 * the distributed result against a single-process optimizer on whole tensors (--verify).
 *
 *   mpirun -np DP*TP canzona-bench --plan P --model M [options]
 *
 * main parses the options, runs the phases below (each agreed across ranks: a rank that fails
 * stops every rank) and reports; bench_run.h lists the files of the other concepts. */
#include "bench_run.h"
#include "bench_gpu.h"
#include "cz_exec_testing_mpi.h"
#include "ns_bench.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void to_bf16(uint16_t *dst, const float *src, size_t n)
{
    for (size_t k = 0; k < n; k++)
        dst[k] = cz__bf16_from_f32(src[k]);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* The step's phases as the executor's host clock saw them (cz_exec_timings), their sum, and
 * the step's wall time until its last work on the device is done (see run_step). */
enum { NPHASES = 6 };

static int write_json(const bench_opts *o, const cz_plan *plan, const double med[NPHASES],
                      double *const per[NPHASES], int n, json_t *memory, cz_error *err)
{
    static const char *names[NPHASES] = {"reduce_scatter", "elementwise", "matrix",
                                         "all_gather",     "total",       "wall"};
    json_t *root = json_object(), *m = json_object(), *steps = json_object();
    json_object_set_new(root, "schema", json_string("canzona.bench/1"));
    json_object_set_new(root, "plan", json_string(o->plan));
    json_object_set_new(root, "model", json_string(plan->model_name ? plan->model_name : ""));
    json_object_set_new(root, "dp", json_integer(plan->dp));
    json_object_set_new(root, "tp", json_integer(plan->tp));
    json_object_set_new(root, "dp_strategy", json_string(cz_dp_strategy_name(plan->settings.dp)));
    json_object_set_new(root, "tp_strategy", json_string(cz_tp_strategy_name(plan->settings.tp)));
    json_object_set_new(root, "backend", json_string(o->backend));
    json_object_set_new(root, "comm", json_string(o->comm));
    json_object_set_new(root, "steps", json_integer(n));
    json_object_set_new(root, "warmup", json_integer(o->warmup));
    for (int k = 0; k < NPHASES; k++) {
        json_object_set_new(m, names[k], json_real(med[k]));
        json_t *a = json_array();
        for (int s = 0; s < n; s++)
            json_array_append_new(a, json_real(per[k][s]));
        json_object_set_new(steps, names[k], a);
    }
    json_object_set_new(root, "median_s", m);
    json_object_set_new(root, "per_step_s", steps);
    json_object_set_new(root, "memory", memory);
    /* Through the planner's writer: replaced atomically, errors named with their reason. */
    int rc = cz_bench_write_json(o->json, root, err);
    json_decref(root);
    return rc;
}

/* ms milliseconds standing for backward compute: a sleep, the host idle as under a GPU's
 * backward pass, and no MPI call inside, as a backward pass makes none on the executor's
 * communicators. */
static double g_slept; /* seconds slept by sleep_ms in this step, measured */

static void sleep_ms(double ms)
{
    if (ms <= 0)
        return;
    double t0 = MPI_Wtime();
    struct timespec ts = {(time_t)(ms / 1e3), (long)(fmod(ms, 1e3) * 1e6)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
    /* What it really took (a sleep overshoots): the exposed step subtracts this. */
    g_slept += MPI_Wtime() - t0;
}

/* The k-th of the n buckets this rank declares (k < n), in --bucket-order's order: backward
 * (bucket 0 first, as a backward pass finishes them), reverse, or rotated (from the middle
 * one on, then from bucket 0), each on --order-rank only (every rank by default). */
static size_t declared_at(const bench_opts *o, size_t k, size_t n)
{
    if (o->order_rank >= 0 && o->order_rank != cz_bench_rank)
        return k;
    return o->bucket_order == 1 ? n - 1 - k : o->bucket_order == 2 ? (k + n / 2) % n : k;
}

/* One step the way a job overlapping it with its passes drives it: each bucket declared ready
 * as a backward pass would finish it (bucket 0, the last layers, first; --delay-bucket's last;
 * --bucket-order's order), the step finished, and each bucket's parameters waited for in the
 * order a forward pass would read them (the first layers' bucket, the highest index, first). */
static int overlap_step(const bench_opts *o, cz_executor *ex, int step, cz_error *err)
{
    size_t nb = cz_executor_bucket_count(ex);
    int world = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    bool last_rank = cz_bench_rank == world - 1;
    bool none = o->declare_nothing == step && cz_bench_rank == 0;
    int rc;
    for (size_t k = 0; k < nb && !none; k++) {
        size_t b = declared_at(o, k, nb);
        if (!cz_executor_bucket_held(ex, b) || (int)b == o->delay_bucket ||
            ((int)b == o->skip_bucket && last_rank))
            continue;
        sleep_ms(o->compute_ms);
        if ((rc = cz_executor_bucket_ready(ex, b, err)) != CZ_OK)
            return rc;
        if ((int)b == o->repeat_bucket && (rc = cz_executor_bucket_ready(ex, b, err)) != CZ_OK)
            return rc;
    }
    if (!none && o->delay_bucket >= 0 && cz_executor_bucket_held(ex, (size_t)o->delay_bucket)) {
        sleep_ms(o->compute_ms);
        if ((rc = cz_executor_bucket_ready(ex, (size_t)o->delay_bucket, err)) != CZ_OK)
            return rc;
    }
    if ((rc = cz_executor_step_finish(ex, err)) != CZ_OK)
        return rc;
    for (size_t b = nb; b-- > 0;)
        if (cz_executor_bucket_held(ex, b) && (rc = cz_executor_bucket_wait(ex, b, err)) != CZ_OK)
            return rc;
    return CZ_OK;
}

/* One run: the options, the executor and its inputs, this rank's buffers (P, G the job's fp32
 * view; Pb, Gb their bf16 copies when bound in bf16; gpu their device copies with --backend
 * cuda), the per-step figures, and the communicators the bench made. */
typedef struct bench_run {
    bench_opts o;
    cz_exec_config cfg;
    cz_error err;
    cz_plan *plan;
    cz_model *model;
    cz_executor *ex;
    bench_place place;
    bool cuda, bf16;
    size_t n, bytes; /* elements of this rank's buffer, and bytes of a bound one */
    float *P, *G, **full;
    uint16_t *Pb, *Gb;
    void *hostP, *hostG; /* what is bound or copied to the device: P/G, or Pb/Gb with bf16 */
    bench_gpu gpu;
    int total;     /* warm-up and timed steps */
    double *norms; /* every step's gradient norm, as the executor computed it */
    double *per[NPHASES];
    uint64_t max_allocs, max_dev, all_early;
    /* This rank's executor memory after create and the first bind (cz_executor_memory_usage),
     * and with --backend cuda the device's free memory before create (free0), after it, after
     * the job's buffers, after the bind, and around the first step (cudaMemGetInfo). */
    cz_exec_mem_usage mem;
    size_t free0, free_created, free_buffers, free_bound, free_step0, free_step1;
    bool dev_mem;       /* every free_* above was read */
    int64_t qk_clipped; /* --qk-clip: (layer, head) pairs clipped over every step */
    /* The DP exchanges' dtypes and the most bytes one rank posted per step (gradients,
     * parameters; cz_executor_wire). */
    cz_exec_wire wire;
    uint64_t wire_max[4];
    bool stalled; /* a step stopped for a stall and the run ends itself (--end-after-stall) */
    /* cfg.dp_comm and cfg.tp_comm point here: they live as long as the executor */
    MPI_Comm row, erow, own_dp, own_tp, world_comm;
} bench_run;

/* The DP and TP communicators split here and handed in, as a job would: the grid is read from
 * the plan's topology, TP innermost, PP outermost (rank / tp is then stage * dp + dp_rank). */
static void own_comms(bench_run *r)
{
    cz_plan *tmp = NULL;
    int tp = 1, dp = 1, me = cz_bench_rank;
    if (cz_plan_read(&tmp, r->o.plan, &r->err) == 0) {
        tp = tmp->tp;
        dp = tmp->dp;
    }
    cz_plan_free(tmp);
    cz_bench_split(MPI_COMM_WORLD, me / (dp * tp) * tp + me % tp, me % (dp * tp) / tp, &r->own_dp,
                   "canzona-bench's DP communicator");
    cz_bench_split(MPI_COMM_WORLD, me / tp, me % tp, &r->own_tp, "canzona-bench's TP communicator");
    r->cfg.dp_comm = r->o.bad_dp_comm ? (const void *)&r->world_comm : (const void *)&r->own_dp;
    r->cfg.tp_comm = &r->own_tp;
}

/* The plan, the model and the check that the plan is the model's (this rank's outcome). The
 * executor sees only the plan; a plan edited with its content hash recomputed would otherwise
 * run, and --verify, which reads the same plan, would not notice. */
static int load_inputs(bench_run *r)
{
    int rc;
    if ((rc = cz_plan_read(&r->plan, r->o.plan, &r->err)) != CZ_OK ||
        (rc = cz_model_load(&r->model, r->o.model, &r->err)) != CZ_OK)
        return rc;
    return cz__plan_check_model(r->plan, r->model, &r->err);
}

/* The executor, created from the plan on every rank (it reads and checks the plan and agrees
 * on failure across ranks), and the inputs. Returns 0 to go on. */
static int run_create(bench_run *r)
{
    cz_bench_config(&r->o, &r->cfg);
    r->cuda = strcmp(r->o.backend, "cuda") == 0;
    if (r->o.own_comms || r->o.bad_dp_comm)
        own_comms(r);
    if (r->cuda)
        cz_bench_barrier(MPI_COMM_WORLD, "canzona-bench's barrier before selecting the GPU");
    if (r->cuda && cz_bench_any_failed(bench_gpu_select(&r->err), &r->err, "selecting the GPU"))
        return 1;
    r->dev_mem = r->cuda && bench_gpu_free_bytes(&r->free0, &r->err) == CZ_OK;
    int rc = cz_executor_create(&r->ex, r->o.create_from ? r->o.create_from : r->o.plan, &r->cfg,
                                &r->err);
    cz_bench_stop_if_stalled(rc, &r->err);
    if (rc == CZ_OK && r->dev_mem)
        r->dev_mem = bench_gpu_free_bytes(&r->free_created, &r->err) == CZ_OK;
    if (rc == CZ_OK && r->o.early)
        rc = cz_executor_set_early_updates(r->ex, 1, &r->err);
    if (rc) {
        fprintf(stderr, "canzona-bench: rank %d: %s\n", cz_bench_rank, r->err.message);
        return 1;
    }
    if (cz_bench_any_failed(load_inputs(r), &r->err, "loading the plan and model"))
        return 1;
    r->place = cz_bench_place_make(r->plan, cz_executor_pp_rank(r->ex), cz_executor_dp_rank(r->ex),
                                   cz_executor_tp_rank(r->ex));
    return cz_bench_any_failed(cz_bench_qk_setup(&r->o, r->plan, r->ex, &r->err), &r->err,
                               "setting QK-clip up");
}

/* This rank's buffers: allocated, filled with the initial parameters, copied to bf16 and to
 * the device as the run asks, and bound (this rank's outcome). */
static int prepare_buffers(bench_run *r)
{
    size_t n = r->n = cz_executor_buffer_numel(r->ex);
    /* The job's view is fp32 (P, G); with bf16 the bound buffers are bf16 copies of them. */
    r->bf16 = cz_executor_dtype(r->ex) == CZ_DTYPE_BF16;
    r->P = calloc(n ? n : 1, sizeof(float));
    r->G = calloc(n ? n : 1, sizeof(float));
    if (r->bf16) {
        r->Pb = calloc(n ? n : 1, sizeof(uint16_t));
        r->Gb = calloc(n ? n : 1, sizeof(uint16_t));
    }
    if (!r->P || !r->G || (r->bf16 && (!r->Pb || !r->Gb)))
        return cz__error_set(&r->err, CZ_ENOMEM, "out of memory for %zu elements", n);
    int rc;
    if ((rc = cz_bench_fill_params(&r->o, r->plan, &r->place, r->P, &r->err)) != CZ_OK)
        return rc;
    /* With --backend cuda the bound buffers are device copies of P/Pb and G/Gb. */
    r->bytes = n * (r->bf16 ? sizeof(uint16_t) : sizeof(float));
    r->hostP = r->bf16 ? (void *)r->Pb : (void *)r->P;
    r->hostG = r->bf16 ? (void *)r->Gb : (void *)r->G;
    if (r->bf16)
        to_bf16(r->Pb, r->P, n);
    if (r->cuda && ((rc = bench_gpu_alloc(&r->gpu, r->bytes, &r->err)) != CZ_OK ||
                    (rc = bench_gpu_copy(r->gpu.params, r->hostP, r->bytes, 1, &r->err)) != CZ_OK))
        return rc;
    if (r->dev_mem)
        r->dev_mem = bench_gpu_free_bytes(&r->free_buffers, &r->err) == CZ_OK;
    rc = cz_executor_bind_typed(r->ex, r->cuda ? r->gpu.params : r->hostP,
                                r->cuda ? r->gpu.grads : r->hostG, n,
                                r->bf16 ? CZ_DTYPE_BF16 : CZ_DTYPE_FP32, &r->err);
    if (rc == CZ_OK && r->dev_mem)
        r->dev_mem = bench_gpu_free_bytes(&r->free_bound, &r->err) == CZ_OK;
    /* The bind's copies are the last allocations before the steps (a step makes none). */
    cz_executor_memory_usage(r->ex, &r->mem);
    return rc;
}

/* The buffers, the optimizer state to resume from, the gradient files to write, and the
 * per-step figures' arrays. Returns 0 to go on. */
static int run_buffers(bench_run *r)
{
    if (cz_bench_any_failed(prepare_buffers(r), &r->err, "preparing the buffers"))
        return 1;
    int rc = r->o.load_state ? cz_executor_load_state(r->ex, r->o.load_state, &r->err) : CZ_OK;
    if (cz_bench_any_failed(rc, &r->err, "loading the optimizer state"))
        return 1;
    r->total = r->o.warmup + r->o.steps;
    rc = (cz_bench_rank == 0 && r->o.dump_grads)
             ? cz_bench_dump_grads(&r->o, r->plan, r->total, &r->err)
             : CZ_OK;
    if (cz_bench_any_failed(rc, &r->err, "writing the gradients"))
        return 1;
    r->norms = calloc((size_t)r->total, sizeof(double));
    bool ok = r->norms != NULL;
    for (int k = 0; k < NPHASES && ok; k++)
        ok = (r->per[k] = calloc((size_t)r->o.steps, sizeof(double))) != NULL;
    if (!ok) {
        fprintf(stderr, "canzona-bench: rank %d: out of memory\n", cz_bench_rank);
        return 1;
    }
    return 0;
}

/* --inject-nan (testing): a NaN in the named parameter's gradient on rank 0, first step. */
static void inject_nan(bench_run *r)
{
    const cz_plan *plan = r->plan;
    size_t i = 0;
    while (i < plan->nparams && strcmp(plan->params[i].def.name, r->o.inject_nan) != 0)
        i++;
    if (i < plan->nparams && cz_bench_holds(&r->place, &plan->params[i]))
        r->G[cz_bench_param_offset_at(plan, &r->place, &plan->params[i])] = NAN;
    else if (i < plan->nparams)
        fprintf(stderr, "canzona-bench: --inject-nan: '%s' is not in rank 0's stage\n",
                r->o.inject_nan);
    else
        fprintf(stderr, "canzona-bench: --inject-nan: no parameter '%s'\n", r->o.inject_nan);
}

/* Step s (0-based, warm-up included): its gradients in, the step timed, its phases' times (the
 * slowest rank's) kept after the warm-up. Returns 0 to go on. */
static int run_step(bench_run *r, int s)
{
    const bench_opts *o = &r->o;
    cz_bench_set_step(s + 1);
    cz_bench_set_phase("canzona-bench, reading the step's gradients", s + 1);
    /* --same-grads: step 0's gradients, generated and converted once, in every step (on the
     * cpu backend the bound buffer as the step before left it). */
    bool fresh = !o->same_grads || s == 0;
    int rc = fresh ? cz_bench_fill_grads(o, r->plan, &r->place, s, r->G, &r->err) : CZ_OK;
    if (rc == CZ_OK)
        rc = cz_bench_qk_hand(o, r->plan, &r->place, r->ex, s, &r->err);
    if (cz_bench_any_failed(rc, &r->err, "reading the gradients and QK-clip maxima"))
        return 1;
    if (o->inject_nan && s == 0 && cz_bench_rank == 0)
        inject_nan(r);
    if (r->bf16 && fresh)
        to_bf16(r->Gb, r->G, r->n);
    if (r->cuda && cz_bench_any_failed(bench_gpu_copy(r->gpu.grads, r->hostG, r->bytes, 1, &r->err),
                                       &r->err, "uploading the gradients"))
        return 1;
    cz_bench_set_phase("canzona-bench, before the step", s + 1);
    cz_bench_barrier(MPI_COMM_WORLD, "canzona-bench's barrier before a step");
    size_t held = 0;
    for (size_t b = 0; b < cz_executor_bucket_count(r->ex); b++)
        held += (size_t)cz_executor_bucket_held(r->ex, b);
    if (!o->overlap)
        sleep_ms(o->compute_ms * (double)held);
    g_slept = 0.0;
    /* The executor's timings are host times: on a GPU its step returns with work still queued
     * on the device, so the wall time waits for the device before the clock stops. With
     * --overlap it is the iteration's wall time less the sleeps standing for backward compute
     * inside overlap_step: the exposed step. */
    double w0 = MPI_Wtime();
    rc = o->overlap ? overlap_step(o, r->ex, s + 1, &r->err) : cz_executor_step(r->ex, &r->err);
    if (!rc && r->cuda)
        rc = bench_gpu_sync(&r->err);
    double wall = MPI_Wtime() - w0 - g_slept;
    if (rc && o->end_after_stall && cz__mpi_watch_broken()) {
        /* The job ends itself as one that handles errors would: the failed step cancelled
         * (step_cancel, as after any fault of a bucket-wise step), then main frees the executor
         * and calls MPI_Finalize. */
        fprintf(stderr, "canzona-bench: rank %d: %s\n", cz_bench_rank, r->err.message);
        cz_error tmp;
        if (o->overlap && cz_executor_step_cancel(r->ex, &tmp) != CZ_OK)
            fprintf(stderr, "canzona-bench: rank %d: step_cancel: %s\n", cz_bench_rank,
                    tmp.message);
        cz__mpi_watch_settle();
        r->stalled = true;
        return 1;
    }
    cz_bench_stop_if_stalled(rc, &r->err);
    if (rc) {
        fprintf(stderr, "canzona-bench: rank %d: %s\n", cz_bench_rank, r->err.message);
        return 1;
    }
    r->norms[s] = cz_executor_grad_norm(r->ex);
    r->qk_clipped += cz_executor_qk_clipped(r->ex);
    if (s < o->warmup)
        return 0;
    cz_exec_timings t;
    cz_executor_timings(r->ex, &t);
    double v[NPHASES] = {t.reduce_scatter, t.elementwise, t.matrix, t.all_gather, t.total, wall},
           mx[NPHASES];
    /* A step lasts as long as its slowest rank. */
    cz_bench_set_phase("canzona-bench, timing the step", s + 1);
    cz_bench_allreduce(v, mx, NPHASES, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD,
                       "canzona-bench's step timings");
    for (int k = 0; k < NPHASES; k++)
        r->per[k][s - o->warmup] = mx[k];
    return 0;
}

/* Every step, then what the steps leave: the parameters back from the device and from bf16,
 * the allocation counts of steps 2.. (every rank's largest), the micro-groups updated early,
 * the optimizer state saved. Returns 0 to go on. */
static int run_steps(bench_run *r)
{
    uint64_t allocs_after_first = 0, dev_after_first = 0;
    for (int s = 0; s < r->total; s++) {
        if (s == 1) {
            allocs_after_first = cz__exec_alloc_count();
            dev_after_first = bench_gpu_alloc_count();
        }
        if (s == 0 && r->dev_mem)
            r->dev_mem = bench_gpu_free_bytes(&r->free_step0, &r->err) == CZ_OK;
        if (run_step(r, s))
            return 1;
        if (s == 0 && r->dev_mem) /* run_step waited for the device */
            r->dev_mem = bench_gpu_free_bytes(&r->free_step1, &r->err) == CZ_OK;
    }
    int rc = r->cuda ? bench_gpu_copy(r->hostP, r->gpu.params, r->bytes, 0, &r->err) : CZ_OK;
    if (cz_bench_any_failed(rc, &r->err, "downloading the parameters"))
        return 1;
    if (r->bf16)
        for (size_t k = 0; k < r->n; k++)
            r->P[k] = cz__f32_from_bf16(r->Pb[k]);
    /* Steps after the first must allocate nothing (every executor allocation is counted). */
    uint64_t step_allocs = r->total > 1 ? cz__exec_alloc_count() - allocs_after_first : 0;
    cz_bench_set_phase("canzona-bench, after the steps", -1);
    cz_bench_allreduce(&step_allocs, &r->max_allocs, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD,
                       "canzona-bench's allocation count");
    /* And no device allocation (cudaMalloc and kin, counted by the GPU plugin). */
    uint64_t dev_allocs = r->total > 1 ? bench_gpu_alloc_count() - dev_after_first : 0;
    cz_bench_allreduce(&dev_allocs, &r->max_dev, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD,
                       "canzona-bench's device allocation count");
    uint64_t early = (uint64_t)cz_executor_early_groups(r->ex);
    cz_bench_allreduce(&early, &r->all_early, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD,
                       "canzona-bench's early micro-group count");
    cz_executor_wire(r->ex, &r->wire);
    uint64_t per_step[4] = {0, 0, 0, 0};
    if (r->total > 0) {
        per_step[0] = (uint64_t)r->wire.grad_bytes / (uint64_t)r->total;
        per_step[1] = (uint64_t)r->wire.param_bytes / (uint64_t)r->total;
        per_step[2] = (uint64_t)r->wire.tp_bytes / (uint64_t)r->total;
        per_step[3] = (uint64_t)r->wire.etp_bytes / (uint64_t)r->total;
    }
    cz_bench_allreduce(per_step, r->wire_max, 4, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD,
                       "canzona-bench's wire byte count");
    /* After the count: a checkpoint allocates, a step must not. */
    rc = r->o.save_state ? cz_executor_save_state(r->ex, r->o.save_state, &r->err) : CZ_OK;
    return cz_bench_any_failed(rc, &r->err, "saving the optimizer state");
}

/* Rank 0's executor memory: what it recorded, the model's prediction for its GPU (when the
 * model covers the plan), and on a GPU what cudaMemGetInfo saw go (the executor's allocations
 * plus what the backend keeps for itself, in the allocator's granularity). */
static void report_memory(const bench_run *r)
{
    cz_bench_memory_print("executor memory (recorded, rank 0, after create and the first bind):",
                          &r->mem);
    /* The bench binds flat buffers: the executor stages them through its fp32 copies for a bf16
     * job, and on a device under a host-driven plane (mpi, self: managed memory). */
    cz_exec_mem_job job = {r->bf16 ? CZ_DTYPE_BF16 : CZ_DTYPE_FP32,
                           r->bf16 || (r->cuda && strcmp(r->o.comm, "nccl") != 0),
                           r->cfg.grad_reduce_in_fp32 != 0, r->cfg.normuon.mode != CZ_NORMUON_NONE};
    cz_exec_mem_usage want;
    cz_error e;
    cz_error_clear(&e);
    if (cz__exec_memory_predict(r->plan, cz_executor_dp_rank(r->ex), cz_executor_tp_rank(r->ex),
                                &job, &want, &e) == CZ_OK) {
        int64_t got = r->mem.model_states + r->mem.beyond, pred = want.model_states + want.beyond;
        int same = 1;
        for (int k = 0; k < CZ_EXEC_MEM_NKINDS; k++)
            same &= r->mem.bytes[k] == want.bytes[k];
        printf("executor memory predicted for this GPU: %lld bytes (beyond the model states "
               "%lld), %s\n",
               (long long)pred, (long long)want.beyond,
               same          ? "equal to the recorded bytes, kind by kind"
               : got == pred ? "the same total, not kind by kind"
                             : "NOT the recorded bytes");
    } else {
        printf("executor memory: not predicted: %s\n", e.message);
    }
    if (r->dev_mem) {
        /* Signed: the device's other users can free memory meanwhile. */
        long long create = (long long)r->free0 - (long long)r->free_created;
        long long bind = (long long)r->free_buffers - (long long)r->free_bound;
        long long step = (long long)r->free_step0 - (long long)r->free_step1;
        printf("device memory taken (cudaMemGetInfo, rank 0): create %lld bytes, first bind %lld, "
               "together %lld (%.2f%% over the recorded %lld); first step %lld\n",
               create, bind, create + bind,
               r->mem.model_states + r->mem.beyond > 0
                   ? 100.0 *
                         ((double)(create + bind) / (double)(r->mem.model_states + r->mem.beyond) -
                          1.0)
                   : 0.0,
               (long long)(r->mem.model_states + r->mem.beyond), step);
    }
}

/* Rank 0's executor memory for --json: the record by kind and, with --backend cuda, the device
 * memory taken around create, the first bind and the first step (as report_memory prints). */
static json_t *memory_json(const bench_run *r)
{
    json_t *m = cz_bench_memory_json(&r->mem);
    if (r->dev_mem)
        json_object_set_new(
            m, "device_taken",
            json_pack("{sIsIsI}", "create", (json_int_t)r->free0 - (json_int_t)r->free_created,
                      "bind", (json_int_t)r->free_buffers - (json_int_t)r->free_bound, "first_step",
                      (json_int_t)r->free_step0 - (json_int_t)r->free_step1));
    return m;
}

/* The medians of the timed steps, printed on rank 0. */
static void report(const bench_run *r, const double med[NPHASES])
{
    const bench_opts *o = &r->o;
    const cz_plan *plan = r->plan;
    char pp_text[32] = "";
    if (plan->pp > 1)
        snprintf(pp_text, sizeof pp_text, " pp=%d", plan->pp);
    printf("canzona-bench: %s on dp=%d tp=%d%s (dp %s, tp %s), %d steps after %d warm-up\n",
           plan->model_name ? plan->model_name : "?", plan->dp, plan->tp, pp_text,
           cz_dp_strategy_name(plan->settings.dp), cz_tp_strategy_name(plan->settings.tp), o->steps,
           o->warmup);
    printf("median seconds per step (slowest rank): reduce-scatter %.6f  elementwise %.6f  "
           "matrix %.6f  all-gather %.6f  total %.6f\n",
           med[0], med[1], med[2], med[3], med[4]);
    printf("median step wall time (slowest rank; from the call until the device is done): "
           "%.6f\n",
           med[5]);
    if (o->overlap || o->compute_ms > 0)
        printf("exposed step (the step's wall time, with --overlap from the first "
               "bucket_ready to the last bucket_wait less the sleeps for --compute-ms %g per "
               "bucket; slowest rank): median %.6f s\n",
               o->compute_ms, med[5]);
    if (o->early)
        printf("micro-groups updated early in the last step (before step_finish; every "
               "rank's, summed): %llu\n",
               (unsigned long long)r->all_early);
    if (o->qk_tau > 0.0)
        printf("qk-clip: %lld (layer, head) pairs above tau = %g in the %d steps\n",
               (long long)r->qk_clipped, o->qk_tau, r->total);
    printf("DP wire per step (most on one rank): gradients %s %llu bytes, parameters %s %llu "
           "bytes\n",
           cz_dtype_name(r->wire.grad_dtype), (unsigned long long)r->wire_max[0],
           cz_dtype_name(r->wire.param_dtype), (unsigned long long)r->wire_max[1]);
    printf("TP wire per step (most on one rank): micro-groups fp32 %llu bytes, expert "
           "micro-groups fp32 %llu bytes\n",
           (unsigned long long)r->wire_max[2], (unsigned long long)r->wire_max[3]);
    printf("executor allocations in steps 2..%d (most on one rank): %llu\n", r->total,
           (unsigned long long)r->max_allocs);
    if (r->cuda)
        printf("device allocations in steps 2..%d (most on one rank): %llu\n", r->total,
               (unsigned long long)r->max_dev);
    report_memory(r);
}

/* The full parameters gathered to rank 0, then written (--dump-dir) and checked against the
 * reference (--verify) there (rank 0's outcome; the gather's on the others). */
static int gather_and_check(bench_run *r)
{
    const cz_plan *plan = r->plan;
    const bench_place *w = &r->place;
    cz_bench_split(MPI_COMM_WORLD, w->stage * plan->dp + w->dp_rank, w->tp_rank, &r->row,
                   "canzona-bench's parameter gather");
    /* The ETP ranks of one expert rank (stage, expert-DP rank, EP rank); without expert groups
     * each rank alone (unused). */
    cz_bench_split(
        MPI_COMM_WORLD,
        w->experts ? (w->stage * plan->edp + w->edp_rank) * plan->ep + w->ep_rank : cz_bench_rank,
        w->experts ? w->etp_rank : 0, &r->erow, "canzona-bench's expert parameter gather");
    r->full = calloc(plan->nparams ? plan->nparams : 1, sizeof *r->full);
    int rc = r->full ? cz_bench_gather_full(plan, w, r->row, r->erow, r->P, r->full, &r->err)
                     : cz__error_set(&r->err, CZ_ENOMEM, "out of memory");
    if (rc || cz_bench_rank != 0)
        return rc;
    if (r->o.dump_dir && (rc = cz_bench_dump_params(&r->o, plan, r->full, &r->err)) != CZ_OK)
        return rc;
    double worst_update = 0;
    return r->o.verify ? cz_bench_reference_compare(&r->o, plan, &r->cfg, r->total, r->full,
                                                    r->norms, &worst_update, &r->err)
                       : CZ_OK;
}

/* The report, the timings file, and with --verify or --dump-dir the checks and the files.
 * Returns 0 when all went well. */
static int run_outputs(bench_run *r)
{
    const bench_opts *o = &r->o;
    double med[NPHASES];
    for (int k = 0; k < NPHASES; k++) {
        double *tmp = malloc((size_t)o->steps * sizeof(double));
        memcpy(tmp, r->per[k], (size_t)o->steps * sizeof(double));
        med[k] = median(tmp, o->steps);
        free(tmp);
    }
    if (cz_bench_rank == 0)
        report(r, med);
    int rc = (cz_bench_rank == 0 && o->json)
                 ? write_json(o, r->plan, med, r->per, o->steps, memory_json(r), &r->err)
                 : CZ_OK;
    if (cz_bench_any_failed(rc, &r->err, "writing the timings"))
        return 1;
    if (o->verify && cz_plan_is_fsdp(r->plan)) {
        /* FSDP2 keeps one copy of each row: there are no replicas to compare. */
        if (cz_bench_rank == 0)
            printf("verify: fully sharded: each rank holds its own rows (no DP replicas)\n");
    } else if (o->verify) {
        if (o->corrupt_replica && r->place.dp_rank == 1 && r->n > 0)
            r->P[r->n - 1] += 1.0f; /* (testing) what a broken all-gather would leave behind */
        rc = cz_bench_check_replicas(r->plan, &r->place, r->P, r->n, &r->err);
        if (cz_bench_any_failed(rc, &r->err, "verifying"))
            return 1;
        if (cz_bench_rank == 0)
            printf("verify: every DP replica holds identical parameters\n");
    }
    if (!o->dump_dir && !o->verify)
        return 0;
    return cz_bench_any_failed(gather_and_check(r), &r->err, o->verify ? "verifying" : "dumping");
}

static void run_free(bench_run *r)
{
    if (r->full && r->plan)
        for (size_t i = 0; i < r->plan->nparams; i++)
            free(r->full[i]);
    free(r->full);
    free(r->norms);
    for (int k = 0; k < NPHASES; k++)
        free(r->per[k]);
    MPI_Comm *comms[] = {&r->row, &r->erow, &r->own_dp, &r->own_tp};
    for (size_t k = 0; k < sizeof comms / sizeof comms[0]; k++)
        if (*comms[k] != MPI_COMM_NULL)
            MPI_Comm_free(comms[k]);
    cz_executor_free(r->ex);
    bench_gpu_free(&r->gpu);
    cz_plan_free(r->plan);
    cz_model_free(r->model);
    free(r->P);
    free(r->G);
    free(r->Pb);
    free(r->Gb);
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "ns") == 0)
        return cz_bench_ns_main(argc - 1, argv + 1); /* one GPU, no MPI */
    if (argc > 1 && strcmp(argv[1], "coll") == 0)
        return cz_bench_coll_main(argc - 1, argv + 1); /* a model, no MPI */
    if (argc > 1 && strcmp(argv[1], "calibrate") == 0)
        return cz_bench_calibrate_main(argc - 1, argv + 1); /* one GPU, no MPI */
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--dry-run") == 0)
            return cz_bench_dry_run_main(argc, argv); /* a model of the step, no MPI */
    cz_bench_ranks_open(&argc, &argv);
    bench_run run = {0};
    bench_run *r = &run;
    cz_error_clear(&r->err);
    r->row = r->erow = r->own_dp = r->own_tp = MPI_COMM_NULL;
    r->world_comm = MPI_COMM_WORLD;
    int status = 1;
    char opt_msg[sizeof r->err.message] = "";
    int prc = cz_bench_parse(argc, argv, &r->o, opt_msg, sizeof opt_msg);
    if (!cz_bench_agree_options(&r->o, prc, opt_msg)) {
        status = 2;
    } else if (prc == 1) {
        if (cz_bench_rank == 0)
            cz_bench_usage(stdout);
        status = 0;
    } else if (!run_create(r) && !run_buffers(r) && !run_steps(r) && !run_outputs(r)) {
        status = 0;
    }
    bool stalled = r->stalled;
    run_free(r);
    /* A job that goes on after the failure makes MPI calls of its own, in which MPI progresses
     * whatever is still posted: a second of them, so that an operation left in flight into
     * freed memory shows here (under the sanitizers) rather than by chance in MPI_Finalize. */
    for (double t0 = MPI_Wtime(); stalled && MPI_Wtime() - t0 < 1.0;) {
        int flag = 0;
        MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE);
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    cz_bench_ranks_close();
    if (stalled) /* what --end-after-stall's test looks for: freed and finalized, no crash */
        fprintf(stderr,
                "canzona-bench: rank %d: ended after the stall: executor freed, MPI "
                "finalized\n",
                cz_bench_rank);
    return status;
}
