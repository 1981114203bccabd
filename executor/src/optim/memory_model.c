/* The executor's backend memory for one GPU of a plan, by kind (memory_model.h). Each figure is
 * the allocation the executor makes, with the same rounding: the executor's own buffers take
 * max(n, 1) elements (executor.c, binding.c, wire.c, adamw.c), the pipeline's and Muon's n + 1
 * (pipeline.c, muon.c), so that a zero-sized buffer is still a pointer. The sizes come from the
 * executor's own layouts: the buckets' DP ranges and pieces (shard.h), the pipeline's buffers and
 * run maps and buffers (cz__exec_pipeline_probe: pipeline_open's layout code and list of
 * buffers, through a backend that only counts) and the Newton-Schulz batches (ns_workload.h, which
 * lists the parts a rank computes as the pipeline does and sizes their batches with Muon's own
 * cz__muon_prepare_parts, as muon_group_add does; exec.test_memory holds the whole to the
 * executor's record). */
#include "memory_model.h"

#include "alloc.h"
#include "compute.h"
#include "compute_probe.h"
#include "executor_impl.h"
#include "model_rank.h"
#include "ns_workload.h"
#include "shard.h"

#include <string.h>

static int64_t at_least_1(int64_t n)
{
    return n > 0 ? n : 1;
}

/* What the model does not cover, refused by name. */
static int check_plan(const cz_plan *plan, int dp_rank, int tp_rank, const cz_exec_mem_job *job,
                      cz_error *err)
{
    if (job->dtype != CZ_DTYPE_FP32 && job->dtype != CZ_DTYPE_BF16)
        return cz__error_set(err, CZ_EINVALID, "the memory model takes fp32 or bf16 jobs");
    if (plan->pp != 1 || cz_plan_has_experts(plan) || cz_plan_is_fsdp(plan))
        return cz__error_set(err, CZ_EUNSUPPORTED,
                             "the memory model covers dense one-stage plans (this one has %s)",
                             plan->pp != 1               ? "pipeline stages"
                             : cz_plan_has_experts(plan) ? "expert groups"
                                                         : "fully sharded parameters");
    if (job->normuon)
        return cz__error_set(err, CZ_EUNSUPPORTED,
                             "the memory model does not count NorMuon's second moments and work");
    if (plan->settings.optimizer != CZ_OPTIM_MUON)
        return cz__error_set(err, CZ_EUNSUPPORTED,
                             "the memory model covers Muon plans (this one's matrix optimizer is "
                             "SOAP or Shampoo, whose state the model does not count yet)");
    return cz__model_rank_check(plan, dp_rank, tp_rank, "the memory model", err);
}

/* alloc_tables (executor.c), the binding's copies (binding.c) and the bf16 wire (wire.c): the
 * scratch and the bf16 copies only where the buckets go on the wire, DP above 1 (every bucket of
 * a dense plan is on the DP plane; cz__wire_exchanged). */
static void buckets(const cz_plan *plan, int d, const cz_exec_mem_job *job, int64_t *m)
{
    bool wire = !cz__exec_plane_local(plan->dp);
    int64_t numel = 0, maxrange = 1, ranges = 0;
    for (size_t k = 0; k < plan->nbuckets; k++) {
        const cz_plan_bucket *bk = &plan->buckets[k];
        int64_t r = bk->ranges[2 * d + 1] - bk->ranges[2 * d];
        numel += bk->size;
        ranges += r;
        maxrange = r > maxrange ? r : maxrange;
    }
    /* the per-parameter sums of squares (double) and the reduce-scatter's scratch */
    m[CZ_EXEC_MEM_OTHER] += at_least_1((int64_t)plan->nparams) * (int64_t)sizeof(double);
    m[CZ_EXEC_MEM_DP] += wire ? maxrange * 4 : 0;
    if (job->staged) {
        m[CZ_EXEC_MEM_PARAMS] += at_least_1(numel) * 4;
        m[CZ_EXEC_MEM_GRADS] += at_least_1(numel) * 4;
    }
    if (wire && job->dtype == CZ_DTYPE_BF16) {
        m[CZ_EXEC_MEM_DP] += at_least_1(numel) * 2; /* the narrowed bucket */
        if (!job->grad_reduce_in_fp32)
            m[CZ_EXEC_MEM_DP] += at_least_1(ranges) * 2; /* my ranges received in bf16 */
    }
}

/* AdamW's moments of the owned elementwise pieces (own_params in executor.c, adamw.c). */
static void pieces(const cz_plan *plan, int d, int64_t *m)
{
    for (size_t i = 0; i < plan->nparams; i++) {
        const cz_plan_param *p = &plan->params[i];
        int64_t lo, len = cz__param_piece(plan, p, d, &lo);
        if ((len == 0 && p->dp_owner != d) || p->def.kind == CZ_KIND_MATRIX)
            continue;
        m[CZ_EXEC_MEM_STATE] += 2 * at_least_1(len) * 4;
    }
}

/* The pipeline (pipeline_open) and Muon (muon_group_add, muon_work_create). */
static int matrix(const cz_plan *plan, int d, int tp_rank, int64_t *m, cz_error *err)
{
    int64_t *off = cz__exec_calloc(plan->nparams + 1, sizeof *off);
    cz_ns_workload w = {0};
    cz_exec_pipeline_sizes z = {0};
    cz_compute c = {.ops = cz__compute_probe_ops()};
    int rc = CZ_OK;
    if (!off)
        return cz__error_set(err, CZ_ENOMEM, "out of memory for the memory model");
    for (size_t i = 0; i < plan->nparams; i++) {
        int k = cz__bucket_index(plan, plan->params[i].bucket);
        off[i] = k < 0 ? 0 : plan->buckets[k].offset + plan->params[i].offset;
    }
    if ((rc = cz__exec_pipeline_probe(plan, cz_plan_rank_schedule(plan, 0, d), plan->tp, tp_rank,
                                      plan->settings.tp == CZ_TP_SC, off, &c, &z, err)) != CZ_OK ||
        /* the iteration count and the GEMM constant weigh the flops only, not the batches */
        (rc = cz__ns_workload_make(&w, plan, d, tp_rank, 5, 1.0, err)) != CZ_OK)
        goto done;
    /* the exchange buffers (none on a plane of one rank, one set for a single group) and
     * full_g and full_u, as the probe counted pipeline_open's list of them */
    m[CZ_EXEC_MEM_EXCHANGE] += c.mem[CZ_EXEC_MEM_EXCHANGE];
    m[CZ_EXEC_MEM_FULL] += c.mem[CZ_EXEC_MEM_FULL];
    m[CZ_EXEC_MEM_INDEX] += c.mem[CZ_EXEC_MEM_INDEX];
    /* a momentum of rows x cols + 1 floats per part computed here */
    m[CZ_EXEC_MEM_STATE] += 4 * (z.hosted + z.nhosted);
    /* the largest batch and work of any group (n + 1 floats); without cooperative tasks the
     * Gram panels and the sums are empty (1 float, 1 double), and so is NorMuon's work */
    m[CZ_EXEC_MEM_NS] += 4 * (w.batch_n + 1) + 4 * (w.work_n + 1) + 4 + 8 + 8;
done:
    cz__ns_workload_free(&w);
    cz__exec_free(off);
    return rc;
}

int cz__exec_memory_predict(const cz_plan *plan, int dp_rank, int tp_rank,
                            const cz_exec_mem_job *job, cz_exec_mem_usage *out, cz_error *err)
{
    int64_t m[CZ_EXEC_MEM_NKINDS];
    memset(m, 0, sizeof m);
    int rc = check_plan(plan, dp_rank, tp_rank, job, err);
    if (rc == CZ_OK) {
        buckets(plan, dp_rank, job, m);
        pieces(plan, dp_rank, m);
        rc = matrix(plan, dp_rank, tp_rank, m, err);
    }
    if (rc != CZ_OK)
        return rc;
    cz__exec_mem_usage_of(m, out);
    return CZ_OK;
}
