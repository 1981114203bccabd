/* canzona-bench --verify: every DP replica holds the same parameters after the all-gather
 * (cz_bench_check_replicas), the full parameters gathered to rank 0 (cz_bench_gather_full, also
 * for --dump-dir), and the single-process reference that recomputes every step on whole tensors
 * and compares (cz_bench_reference_compare). */
#include "bench_run.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One parameter's full tensor into full (malloc'ed by the caller; NULL when it could not be)
 * on rank 0 of row, the TP ranks of one DP rank of its stage. Every rank of row takes part,
 * whatever failed before, so that none is left in the gather. */
static int gather_param(const cz_plan *plan, const bench_place *w, MPI_Comm row, int rank,
                        const cz_plan_param *p, const float *P, float *full, cz_error *err)
{
    int tp = cz_plan_param_tp(plan, p), rc = CZ_OK;
    float *all = rank == 0 ? malloc((size_t)(p->numel * tp) * sizeof(float)) : NULL;
    if (rank == 0 && (!all || !full))
        rc = cz__error_set(err, CZ_ENOMEM, "out of memory gathering '%s'", p->def.name);
    MPI_Request r;
    MPI_Igather(P + cz_bench_param_offset_at(plan, w, p), (int)p->numel, MPI_FLOAT, all,
                (int)p->numel, MPI_FLOAT, 0, row, &r);
    cz_bench_wait(&r, row, "canzona-bench's gather of the parameters");
    if (rank == 0 && !rc) {
        if (p->def.tp_dim < 0)
            memcpy(full, all, (size_t)p->numel * sizeof(float));
        else
            for (int k = 0; k < tp; k++)
                cz__shard_unpack(p, tp, k, all + (size_t)k * (size_t)p->numel, full);
    }
    free(all);
    return rc;
}

/* A full tensor from world rank src (the first rank of the row that gathered it) to world
 * rank 0; n floats. Both ends hold a buffer of n floats (gather_full checks). */
static void stage_to_root(int src, float *buf, int64_t n)
{
    if (src == 0 || (cz_bench_rank != 0 && cz_bench_rank != src))
        return;
    MPI_Request r;
    if (cz_bench_rank == 0)
        MPI_Irecv(buf, (int)n, MPI_FLOAT, src, 7, MPI_COMM_WORLD, &r);
    else
        MPI_Isend(buf, (int)n, MPI_FLOAT, 0, 7, MPI_COMM_WORLD, &r);
    cz_bench_wait(&r, MPI_COMM_WORLD, "canzona-bench's transfer of a later stage's parameters");
}

/* A fully sharded plan's (one stage: the executor runs no other): every parameter's shards
 * from every GPU of the shard group to world rank 0, in world-rank order (GPU k = d * tp + t),
 * then each TP rank's shard put back together from its DP ranks' bands of rows (FSDP2's
 * shards of a TP shard are consecutive bands) and into the full tensor. */
static int gather_fsdp(const cz_plan *plan, const float *P, float **full, cz_error *err)
{
    int world = plan->dp * plan->tp;
    bench_place w =
        cz_bench_place_make(plan, 0, cz_bench_rank / plan->tp, cz_bench_rank % plan->tp);
    int *counts = malloc((size_t)world * sizeof *counts),
        *displs = malloc((size_t)world * sizeof *displs);
    float *all = NULL, *local = NULL;
    int rc = CZ_OK;
    if (!counts || !displs) {
        fprintf(stderr, "canzona-bench: rank %d: out of memory gathering the shards\n",
                cz_bench_rank);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    for (size_t i = 0; i < plan->nparams; i++) {
        const cz_plan_param *p = &plan->params[i];
        int at = 0;
        for (int k = 0; k < world; k++) {
            counts[k] = (int)cz__fsdp_shard_numel(plan, p, k / plan->tp);
            displs[k] = at;
            at += counts[k];
        }
        if (cz_bench_rank == 0 &&
            (!(full[i] = malloc((size_t)cz_bench_full_numel(p) * sizeof(float))) ||
             !(all = malloc((size_t)(at > 0 ? at : 1) * sizeof(float))) ||
             !(local = malloc((size_t)p->numel * sizeof(float))))) {
            fprintf(stderr, "canzona-bench: rank 0: out of memory gathering '%s'\n", p->def.name);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        MPI_Request r;
        MPI_Igatherv(P + cz_bench_param_offset_at(plan, &w, p), counts[cz_bench_rank], MPI_FLOAT,
                     all, counts, displs, MPI_FLOAT, 0, MPI_COMM_WORLD, &r);
        cz_bench_wait(&r, MPI_COMM_WORLD, "canzona-bench's gather of the FSDP2 shards");
        for (int t = 0; cz_bench_rank == 0 && t < plan->tp; t++) {
            for (int d = 0; d < plan->dp; d++) {
                cz_block sh = cz__fsdp_shard_block(plan, p, d);
                memcpy(local + sh.r0 * sh.cols, all + displs[d * plan->tp + t],
                       (size_t)counts[d * plan->tp + t] * sizeof(float));
            }
            /* A TP-replicated parameter: every TP rank's shards must be TP rank 0's. */
            if (t > 0 && p->def.tp_dim < 0 && !rc &&
                memcmp(local, full[i], (size_t)p->numel * sizeof(float)) != 0)
                rc = cz__error_set(err, CZ_EMISMATCH,
                                   "verify: TP rank %d's FSDP2 shards of the TP-replicated '%s' "
                                   "differ from TP rank 0's",
                                   t, p->def.name);
            cz__shard_unpack(p, plan->tp, t, local, full[i]);
        }
        free(all);
        free(local);
        all = local = NULL;
    }
    free(counts);
    free(displs);
    return rc;
}

/* Gathers every parameter's full tensor to world rank 0: each stage's from the TP ranks of its
 * DP rank 0 (after the all-gather every DP replica holds all of its stage's parameters), then
 * a later stage's from that stage's first rank. full[i] is set on rank 0. An allocation failure
 * is fatal here (the transfers have no way to skip a tensor): the bench stops. */
int cz_bench_gather_full(const cz_plan *plan, const bench_place *w, MPI_Comm row, MPI_Comm erow,
                         const float *P, float **full, cz_error *err)
{
    if (cz_plan_is_fsdp(plan))
        return gather_fsdp(plan, P, full, err);
    int rank, erank, rc = CZ_OK, per_stage = plan->dp * plan->tp;
    MPI_Comm_rank(row, &rank);
    MPI_Comm_rank(erow, &erank);
    for (size_t i = 0; i < plan->nparams; i++) {
        const cz_plan_param *p = &plan->params[i];
        bool expert = cz_bench_is_expert(plan, p);
        bool mine = cz_bench_holds(w, p) && (expert ? w->edp_rank == 0 : w->dp_rank == 0);
        int me = expert ? erank : rank;
        /* The row's first rank in the world: local rank 0 of the stage, or the first of EP
         * rank e at expert-DP rank 0 (Megatron-Core's order). */
        int src = p->stage * per_stage + (expert ? p->ep_rank * plan->etp : 0);
        if ((cz_bench_rank == 0 || (mine && me == 0)) &&
            !(full[i] = malloc((size_t)cz_bench_full_numel(p) * sizeof(float)))) {
            fprintf(stderr, "canzona-bench: rank %d: out of memory gathering '%s'\n", cz_bench_rank,
                    p->def.name);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        int prc = mine ? gather_param(plan, w, expert ? erow : row, me, p, P, full[i], err) : CZ_OK;
        rc = rc ? rc : prc;
        stage_to_root(src, full[i], cz_bench_full_numel(p));
    }
    return rc;
}

/* The averaged gradient of p at step s (whole tensor) into g; tmp and tmp2 are scratch of the
 * same size. */
static int avg_grad(const bench_opts *o, const cz_plan *plan, const cz_plan_param *p, int64_t s,
                    float *g, float *tmp, float *tmp2, cz_error *err)
{
    int64_t n = cz_bench_full_numel(p);
    /* A routed expert's gradient is summed over its expert-DP replicas (each rank's: what its
     * EP group routes to it, cz_bench_rank_grad) and scaled by 1/DP, as Megatron-Core's DDP
     * scales expert gradients (and the executor reduces them). */
    float inv = 1.0f / (float)plan->dp;
    int replicas = cz_bench_is_expert(plan, p) ? plan->edp : plan->dp;
    for (int d = 0; d < replicas; d++) {
        int rc = cz_bench_rank_grad(o, plan, p, s, d, tmp, tmp2, err);
        if (rc)
            return rc;
        for (int64_t k = 0; k < n; k++)
            g[k] = d == 0 ? tmp[k] : g[k] + tmp[k];
    }
    for (int64_t k = 0; k < n; k++)
        g[k] *= inv;
    return CZ_OK;
}

/* What the reference's passes share: the inputs, the CPU backend, the optimizers' settings,
 * every step's global gradient norm, three scratch tensors of the largest parameter's size, and
 * the failures counted so far. */
typedef struct reference {
    const bench_opts *o;
    const cz_plan *plan;
    const cz_exec_config *cfg;
    int total_steps;
    cz_compute cpu;
    cz_muon_hparams mh;
    cz_adamw_hparams ah;
    double *norms;
    float *g, *tmp, *tmp2;
    int failures;
} reference;

/* First pass: every step's global gradient norm (summed per parameter in double), against the
 * executor's (ex_norms). */
static int reference_norms(reference *r, const double *ex_norms, cz_error *err)
{
    int rc = CZ_OK;
    for (int64_t s = 0; s < r->total_steps && !rc; s++) {
        double sq = 0.0;
        for (size_t i = 0; i < r->plan->nparams && !rc; i++) {
            const cz_plan_param *p = &r->plan->params[i];
            rc = avg_grad(r->o, r->plan, p, s, r->g, r->tmp, r->tmp2, err);
            double ps = 0.0;
            for (int64_t k = 0; !rc && k < cz_bench_full_numel(p); k++)
                ps += (double)r->g[k] * r->g[k];
            sq += ps;
        }
        r->norms[s] = sqrt(sq);
        double rel = fabs(ex_norms[s] - r->norms[s]) / (r->norms[s] > 0 ? r->norms[s] : 1.0);
        int bad = !(rel <= r->o->tolerance);
        r->failures += bad;
        printf("  gradient norm of step %-3lld executor %.9g reference %.9g rel.err %.3e%s\n",
               (long long)s, ex_norms[s], r->norms[s], rel, bad ? "  FAIL" : "");
    }
    return rc;
}

/* Every step of p on its whole tensor w (its initial values on entry), the optimizer's state in
 * s1 and s2 (zero on entry): the averaged gradient, clipped by the global norm when asked. */
static int reference_steps(reference *r, const cz_plan_param *p, float *w, float *s1, float *s2,
                           cz_error *err)
{
    int rc = CZ_OK;
    int64_t n = cz_bench_full_numel(p);
    float *g = r->g, *tmp = r->tmp;
    for (int64_t s = 0; s < r->total_steps && !rc; s++) {
        rc = avg_grad(r->o, r->plan, p, s, g, tmp, r->tmp2, err);
        if (rc)
            break;
        float max = r->cfg->max_grad_norm;
        if (max > 0.0f && r->norms[s] > (double)max) {
            float f = (float)((double)max / (r->norms[s] + 1e-6));
            for (int64_t k = 0; k < n; k++)
                g[k] = g[k] * f;
        }
        if (p->def.kind == CZ_KIND_ELEMENTWISE) {
            cz_adamw_args aa;
            cz__adamw_args_make(&aa, &r->ah, s + 1);
            cz__cpu_adamw(w, g, s1, s2, n, &aa);
        } else {
            cz__cpu_momentum(g, s1, g, n, r->mh.momentum, r->mh.nesterov);
            const cz_plan_param *ps[1] = {p};
            const float *in[1] = {g};
            float *outp[1] = {tmp};
            rc = cz__muon_orthogonalize(&r->cpu, &r->mh, ps, in, outp, 1, err);
            cz__cpu_apply_update(w, tmp, n, r->mh.lr, r->mh.weight_decay);
        }
        cz_bench_qk_reference(r->o, r->plan, p, s, w);
    }
    return rc;
}

/* The distributed result a of p against the reference's b (w0: the initial values): prints the
 * parameter's line and counts a failure. */
static void reference_report(reference *r, const cz_plan_param *p, const float *a, const float *b,
                             const float *w0, double *worst_update)
{
    int64_t n = cz_bench_full_numel(p);
    double maxd = 0, maxb = 0;
    for (int64_t k = 0; k < n; k++) {
        double d = fabs((double)a[k] - (double)b[k]);
        if (!(d <= maxd))
            maxd = d; /* NaN propagates as a failure */
        if (fabs((double)b[k]) > maxb)
            maxb = fabs((double)b[k]);
    }
    /* The update against the reference's: what changed from the initial values, compared as
     * ||ua - ub|| / ||ub|| (one element whose tiny gradient changes sign under rounding moves a
     * whole AdamW step; a max-based figure would be that). */
    double du2 = 0, ub2 = 0;
    for (int64_t k = 0; k < n; k++) {
        double ub = (double)b[k] - w0[k], du = ((double)a[k] - w0[k]) - ub;
        du2 += du * du;
        ub2 += ub * ub;
    }
    double urel = ub2 > 0 ? sqrt(du2 / ub2) : sqrt(du2);
    double rel = maxb > 0 ? maxd / maxb : maxd;
    int bad = !(rel <= r->o->tolerance) ||
              (r->o->update_tolerance > 0 && !(urel <= r->o->update_tolerance));
    r->failures += bad;
    if (urel > *worst_update)
        *worst_update = urel;
    printf("  %-48s %-11s rel.err %.3e  update rel.err %.3e%s\n", p->def.name,
           p->def.kind == CZ_KIND_MATRIX ? "muon" : "adamw", rel, urel, bad ? "  FAIL" : "");
}

/* The reference: the same steps on whole tensors, gradients averaged over the DP replicas,
 * clipped by the global norm when asked; every parameter and every step's gradient norm
 * compared with the distributed run. */
int cz_bench_reference_compare(const bench_opts *o, const cz_plan *plan, const cz_exec_config *cfg,
                               int total_steps, float *const *dist, const double *ex_norms,
                               double *worst_update, cz_error *err)
{
    int rc = CZ_OK;
    reference r = {.o = o, .plan = plan, .cfg = cfg, .total_steps = total_steps};
    r.norms = calloc((size_t)total_steps, sizeof(double));
    int64_t maxn = 1;
    for (size_t i = 0; i < plan->nparams; i++)
        if (cz_bench_full_numel(&plan->params[i]) > maxn)
            maxn = cz_bench_full_numel(&plan->params[i]);
    r.g = malloc((size_t)maxn * sizeof(float));
    r.tmp = malloc((size_t)maxn * sizeof(float));
    r.tmp2 = malloc((size_t)maxn * sizeof(float));
    rc = cz__compute_open(&r.cpu, "cpu", err);
    /* The reference here is Muon's; a Shampoo run is checked against the independent
     * reference of tests/mpi (shampoo_ref) on its --dump-dir output. */
    if (!rc && plan->settings.optimizer != CZ_OPTIM_MUON)
        rc = cz__error_set(err, CZ_EUNSUPPORTED,
                           "--verify recomputes Muon plans only; this plan's optimizer is '%s' "
                           "(compare --dump-dir output with an independent reference instead)",
                           cz_optimizer_name(plan->settings.optimizer));
    if (!rc)
        rc = cz__muon_hparams_from_config(&r.mh, cfg, err);
    if (!rc && (!r.norms || !r.g || !r.tmp || !r.tmp2))
        rc = cz__error_set(err, CZ_ENOMEM, "out of memory verifying");
    if (rc)
        goto done;
    cz__adamw_hparams_from_config(&r.ah, cfg);
    printf("verify: %d steps on whole tensors, tolerance %g (max|a-b| / max|b|)\n", total_steps,
           o->tolerance);
    if ((rc = reference_norms(&r, ex_norms, err)) != CZ_OK)
        goto done;
    for (size_t i = 0; i < plan->nparams && !rc; i++) {
        const cz_plan_param *p = &plan->params[i];
        int64_t n = cz_bench_full_numel(p);
        float *w = NULL, *w0 = NULL;
        float *s1 = calloc((size_t)n, sizeof(float)), *s2 = calloc((size_t)n, sizeof(float));
        rc = cz_bench_initial_full(o, p, &w, err);
        if (!rc)
            rc = cz_bench_initial_full(o, p, &w0, err);
        if (!rc && (!s1 || !s2))
            rc = cz__error_set(err, CZ_ENOMEM, "out of memory verifying '%s'", p->def.name);
        if (!rc)
            rc = reference_steps(&r, p, w, s1, s2, err);
        if (!rc)
            reference_report(&r, p, dist[i], w, w0, worst_update);
        free(w), free(w0), free(s1), free(s2);
    }
    if (!rc && r.failures)
        rc = cz__error_set(err, CZ_EMISMATCH,
                           "%d value(s) differ from the reference by more "
                           "than %g",
                           r.failures, o->tolerance);
    if (!rc)
        printf("verify: OK (largest update rel.err %.3e)\n", *worst_update);
done:
    cz__compute_close(&r.cpu);
    free(r.norms), free(r.g), free(r.tmp), free(r.tmp2);
    return rc;
}

/* After the parameter all-gather every DP replica must hold bit-identical parameters. Compares
 * a hash of this rank's whole local buffer with the other replicas of its TP rank. */
static uint64_t fnv_bytes(const float *P, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    const unsigned char *bytes = (const unsigned char *)P;
    for (size_t i = 0; i < n * sizeof(float); i++) {
        h ^= bytes[i];
        h *= 1099511628211ull;
    }
    return h;
}

/* Whether the ranks of col all hash to h. */
static bool same_hash(uint64_t h, MPI_Comm col)
{
    uint64_t lo = 0, hi = 0;
    cz_bench_allreduce(&h, &lo, 1, MPI_UINT64_T, MPI_MIN, col, "canzona-bench's replica check");
    cz_bench_allreduce(&h, &hi, 1, MPI_UINT64_T, MPI_MAX, col, "canzona-bench's replica check");
    MPI_Comm_free(&col);
    return lo == hi;
}

/* The dense buffer's replicas are one stage's DP ranks of one TP rank; an expert buffer's, the
 * expert-DP ranks of one stage, EP rank and ETP rank. */
int cz_bench_check_replicas(const cz_plan *plan, const bench_place *w, const float *P, size_t n,
                            cz_error *err)
{
    size_t dense = w->experts ? (size_t)w->expert_base : n;
    MPI_Comm col, ecol;
    cz_bench_split(MPI_COMM_WORLD, w->stage * plan->tp + w->tp_rank, w->dp_rank, &col,
                   "canzona-bench's replica check");
    int ecolor =
        w->experts ? (w->stage * plan->ep + w->ep_rank) * plan->etp + w->etp_rank : cz_bench_rank;
    cz_bench_split(MPI_COMM_WORLD, ecolor, w->edp_rank, &ecol, "canzona-bench's replica check");
    bool dense_ok = same_hash(fnv_bytes(P, dense), col);
    bool expert_ok = same_hash(fnv_bytes(P + dense, n - dense), ecol);
    if (!dense_ok)
        return cz__error_set(err, CZ_EINTERNAL,
                             "the DP replicas of TP rank %d of stage %d hold different parameters "
                             "after the all-gather",
                             w->tp_rank, w->stage);
    if (!expert_ok)
        return cz__error_set(err, CZ_EINTERNAL,
                             "the expert-DP replicas of EP rank %d, ETP rank %d of stage %d hold "
                             "different expert parameters after the all-gather",
                             w->ep_rank, w->etp_rank, w->stage);
    return CZ_OK;
}
