/* The device bytes of one optimizer step, pass by pass (step_bytes.h). Every figure counts each
 * operand of a pass read once and each result written once, in the dtype the executor keeps it
 * in (fp32 buffers, the job's dtype at the binding, the wire's dtype in the DP buffers), so the
 * total over a GPU's memory bandwidth is a lower bound on the step's time there: caches do not
 * lower it and GEMM tiles that re-read their operands only raise it. The elements come from the
 * executor's own layouts: the buckets' DP ranges and pieces (shard.h), the pipeline's run maps
 * (cz__exec_pipeline_probe) and the Newton-Schulz batches (ns_workload.h). */
#include "step_bytes.h"

#include "alloc.h"
#include "compute.h"
#include "compute_probe.h"
#include "executor_impl.h"
#include "model_rank.h"
#include "ns_workload.h"
#include "shard.h"

#include <stdbool.h>
#include <stddef.h>
#include <string.h>

static const char *const NAMES[CZ_NPASSES] = {
    [CZ_PASS_STAGE_IN] = "stage in: gradients to fp32",
    [CZ_PASS_RS_NARROW] = "reduce-scatter: narrow to bf16",
    [CZ_PASS_RS_WIRE] = "reduce-scatter: send and receive",
    [CZ_PASS_RS_AVERAGE] = "reduce-scatter: widen and average",
    [CZ_PASS_GRAD_NORM] = "gradient norm",
    [CZ_PASS_ELEMENTWISE] = "elementwise update (AdamW)",
    [CZ_PASS_GATHER_PACK] = "micro-group gather: pack",
    [CZ_PASS_UNPACK] = "micro-group gather: unpack",
    [CZ_PASS_MOMENTUM] = "momentum",
    [CZ_PASS_NS_LOAD] = "Newton-Schulz: load",
    [CZ_PASS_NS_GEMM] = "Newton-Schulz: GEMM operands",
    [CZ_PASS_NS_STORE] = "Newton-Schulz: store",
    [CZ_PASS_SCATTER_PACK] = "micro-group scatter: pack",
    [CZ_PASS_APPLY] = "update apply",
    [CZ_PASS_AG_NARROW] = "all-gather: narrow to bf16",
    [CZ_PASS_AG_WIRE] = "all-gather: send and receive",
    [CZ_PASS_AG_WIDEN] = "all-gather: widen",
    [CZ_PASS_MASTER_OUT] = "master copy to bf16 parameters",
};

const char *cz__step_pass_name(cz_step_pass p)
{
    return p >= 0 && p < CZ_NPASSES ? NAMES[p] : "?";
}

static void add(cz_step_bytes *b, cz_step_pass p, int64_t read, int64_t write)
{
    b->read[p] += read;
    b->write[p] += write;
}

/* What the model does not cover, refused by name. */
static int check_plan(const cz_plan *plan, int dp_rank, int tp_rank, cz_dtype dtype, cz_error *err)
{
    if (dtype != CZ_DTYPE_FP32 && dtype != CZ_DTYPE_BF16)
        return cz__error_set(err, CZ_EINVALID, "the byte model takes fp32 or bf16 jobs");
    if (plan->pp != 1 || cz_plan_has_experts(plan))
        return cz__error_set(err, CZ_EUNSUPPORTED,
                             "the byte model covers dense one-stage plans (this one has %s)",
                             plan->pp != 1 ? "pipeline stages" : "expert groups");
    return cz__model_rank_check(plan, dp_rank, tp_rank, "the byte model", err);
}

/* The DP passes over the buckets: staging, reduce-scatter, all-gather, master copy. At DP 1 no
 * bucket goes on the wire (cz__wire_exchanged): staging and the master copy only. */
static void buckets(const cz_plan *plan, int d, cz_dtype dtype, cz_step_bytes *b)
{
    int64_t jd = cz__dtype_bytes(dtype), w = jd; /* the wire carries the job's dtype */
    bool bf16 = dtype == CZ_DTYPE_BF16;
    for (size_t k = 0; k < plan->nbuckets; k++) {
        const cz_plan_bucket *bk = &plan->buckets[k];
        int64_t n = bk->size, r = bk->ranges[2 * d + 1] - bk->ranges[2 * d];
        b->buffer += n;
        b->ranges += r;
        if (bf16) {
            add(b, CZ_PASS_STAGE_IN, jd * n, 4 * n);
            add(b, CZ_PASS_MASTER_OUT, 4 * n, jd * n);
        }
        if (cz__exec_plane_local(plan->dp))
            continue;
        if (bf16) {
            add(b, CZ_PASS_RS_NARROW, 4 * n, 2 * n);
            /* widen into my range, then scale it in place */
            add(b, CZ_PASS_RS_AVERAGE, 2 * r + 4 * r, 4 * r + 4 * r);
            add(b, CZ_PASS_AG_NARROW, 4 * r, 2 * r);
            add(b, CZ_PASS_AG_WIDEN, 2 * (n - r), 4 * (n - r));
        } else {
            add(b, CZ_PASS_RS_AVERAGE, 4 * r, 4 * r); /* scale from the scratch */
        }
        /* The collectives read what they send and write what they receive, once. */
        add(b, CZ_PASS_RS_WIRE, w * n, w * r);
        add(b, CZ_PASS_AG_WIRE, w * r, w * n);
    }
}

/* The owned pieces: the gradient norm over all, AdamW over the elementwise ones (own_params in
 * executor.c). */
static void pieces(const cz_plan *plan, int d, cz_step_bytes *b)
{
    for (size_t i = 0; i < plan->nparams; i++) {
        const cz_plan_param *p = &plan->params[i];
        int64_t lo, len = cz__param_piece(plan, p, d, &lo);
        if (len == 0 && p->dp_owner != d)
            continue;
        add(b, CZ_PASS_GRAD_NORM, 4 * len, 0);
        /* p, g, m, v read; p, m, v written */
        if (p->def.kind != CZ_KIND_MATRIX)
            add(b, CZ_PASS_ELEMENTWISE, 16 * len, 12 * len);
    }
}

/* The matrix pipeline: its copies from the run maps, Muon on the parts it computes. */
static int matrix(const cz_plan *plan, int d, int tp_rank, int ns_steps, cz_dtype dtype,
                  cz_step_bytes *b, cz_error *err)
{
    int64_t *off = cz__exec_calloc(plan->nparams + 1, sizeof *off);
    cz_ns_workload w = {0}; /* the matrix optimizer's blocks */
    cz_exec_pipeline_sizes z = {0};
    cz_compute c = {.ops = cz__compute_probe_ops()};
    int rc = CZ_OK;
    if (!off)
        return cz__error_set(err, CZ_ENOMEM, "out of memory for the byte model");
    for (size_t i = 0; i < plan->nparams; i++) {
        int k = cz__bucket_index(plan, plan->params[i].bucket);
        off[i] = k < 0 ? 0 : plan->buckets[k].offset + plan->params[i].offset;
    }
    if ((rc = cz__exec_pipeline_probe(plan, cz_plan_rank_schedule(plan, 0, d), plan->tp, tp_rank,
                                      plan->settings.tp == CZ_TP_SC, off, &c, &z, err)) != CZ_OK ||
        (rc = cz__ns_workload_make(&w, plan, d, tp_rank, ns_steps, 1.0, err)) != CZ_OK)
        goto done;
    /* copies read and write fp32 once; the update reads p and u and writes p */
    add(b, CZ_PASS_GATHER_PACK, 4 * z.gather_pack, 4 * z.gather_pack);
    add(b, CZ_PASS_UNPACK, 4 * z.unpack, 4 * z.unpack);
    add(b, CZ_PASS_SCATTER_PACK, 4 * z.scatter_pack, 4 * z.scatter_pack);
    add(b, CZ_PASS_APPLY, 8 * z.apply, 4 * z.apply);
    b->hosted = z.hosted;
    /* The matrix optimizer's own passes, its model's (a bf16 job's GPU path runs Newton-Schulz
     * in bf16; its conversions are not counted). */
    int64_t rd[4], wr[4];
    if ((rc = cz__ns_workload_bytes(plan, &w, ns_steps, z.hosted, dtype == CZ_DTYPE_BF16 ? 2 : 4,
                                    rd, wr, err)) != CZ_OK)
        goto done;
    static const cz_step_pass MINE[4] = {CZ_PASS_MOMENTUM, CZ_PASS_NS_LOAD, CZ_PASS_NS_GEMM,
                                         CZ_PASS_NS_STORE};
    for (int k = 0; k < 4; k++)
        add(b, MINE[k], rd[k], wr[k]);
    b->ns_elems = wr[3] / 4;
done:
    cz__ns_workload_free(&w);
    cz__exec_free(off);
    return rc;
}

int cz__step_bytes(const cz_plan *plan, int dp_rank, int tp_rank, cz_dtype dtype, int ns_steps,
                   cz_step_bytes *out, cz_error *err)
{
    cz_step_bytes b;
    memset(&b, 0, sizeof b);
    int rc = check_plan(plan, dp_rank, tp_rank, dtype, err);
    if (rc == CZ_OK) {
        buckets(plan, dp_rank, dtype, &b);
        pieces(plan, dp_rank, &b);
        rc = matrix(plan, dp_rank, tp_rank, ns_steps, dtype, &b, err);
    }
    if (rc != CZ_OK)
        return rc;
    for (int p = 0; p < CZ_NPASSES; p++) {
        b.total_read += b.read[p];
        b.total_write += b.write[p];
    }
    *out = b;
    return CZ_OK;
}
