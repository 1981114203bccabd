/* canzona-bench's tensors: where this rank's shards of the plan's parameters are (its place in
 * the grid), their initial values and each step's gradients (generated from the seed, or read
 * from --init-dir and --grad-dir), and the files the bench writes (--dump-grads, --dump-dir). */
#include "bench_run.h"
#include "npy.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int64_t cz_bench_full_numel(const cz_plan_param *p)
{
    return p->def.shape[0] * (p->def.ndim == 1 ? 1 : p->def.shape[1]);
}

static int64_t param_offset(const cz_plan *plan, const cz_plan_param *p)
{
    return plan->buckets[cz__bucket_index(plan, p->bucket)].offset + p->offset;
}

bench_place cz_bench_place_make(const cz_plan *plan, int stage, int dp_rank, int tp_rank)
{
    bench_place w = {.stage = stage, .dp_rank = dp_rank, .tp_rank = tp_rank};
    if (cz_plan_has_experts(plan)) {
        int local = dp_rank * plan->tp + tp_rank;
        w.experts = true;
        w.etp_rank = local % plan->etp;
        w.ep_rank = local / plan->etp % plan->ep;
        w.edp_rank = local / (plan->etp * plan->ep);
    }
    for (size_t b = 0; b < plan->nbuckets; b++)
        if (plan->buckets[b].stage == stage && !plan->buckets[b].expert)
            w.expert_base += plan->buckets[b].size;
    return w;
}

bool cz_bench_is_expert(const cz_plan *plan, const cz_plan_param *p)
{
    return cz_plan_has_experts(plan) && p->expert;
}

/* Whether this rank holds p (its stage's, and its EP rank's expert). */
bool cz_bench_holds(const bench_place *w, const cz_plan_param *p)
{
    return p->stage == w->stage && (!w->experts || !p->expert || p->ep_rank == w->ep_rank);
}

/* This rank's place in the group that splits p: TP, or ETP for a routed expert. */
static int split_rank(const bench_place *w, const cz_plan *plan, const cz_plan_param *p)
{
    return cz_bench_is_expert(plan, p) ? w->etp_rank : w->tp_rank;
}

/* dst = scale times DP rank d's FSDP2 rows of TP rank r's shard (of n) of the full tensor. */
static int fsdp_band(const cz_plan *plan, const cz_plan_param *p, int n, int r, int d,
                     const float *full, float scale, float *dst, cz_error *err)
{
    float *local = malloc((size_t)p->numel * sizeof(float));
    if (!local)
        return cz__error_set(err, CZ_ENOMEM, "out of memory for '%s'", p->def.name);
    cz__shard_pack(p, n, r, full, local);
    cz_block sh = cz__fsdp_shard_block(plan, p, d);
    for (int64_t k = 0; k < sh.rows * sh.cols; k++)
        dst[k] = local[sh.r0 * sh.cols + k] * scale;
    free(local);
    return CZ_OK;
}

/* A fully sharded plan's buffer is the rank's FSDP2 shards of its stage's parameters in plan
 * order, unpadded (the executor's layout, docs/EXECUTOR.md "The fully sharded step"). */
static int64_t fsdp_offset(const cz_plan *plan, const bench_place *w, const cz_plan_param *p)
{
    int64_t off = 0;
    for (int i = 0; i < p->id; i++)
        if (plan->params[i].stage == w->stage)
            off += cz__fsdp_shard_numel(plan, &plan->params[i], w->dp_rank);
    return off;
}

int64_t cz_bench_param_offset_at(const cz_plan *plan, const bench_place *w, const cz_plan_param *p)
{
    if (cz_plan_is_fsdp(plan))
        return fsdp_offset(plan, w, p);
    return (cz_bench_is_expert(plan, p) ? w->expert_base : 0) + param_offset(plan, p);
}

/* Initial full tensor of a parameter: from --init-dir or generated. */
int cz_bench_initial_full(const bench_opts *o, const cz_plan_param *p, float **out, cz_error *err)
{
    if (o->init_dir) {
        char *path = NULL;
        int rc = cz_npy_param_path(o->init_dir, p->def.name, &path, err);
        if (rc)
            return rc;
        rc = cz_npy_read(path, p->def.ndim, p->def.shape[0], p->def.shape[1], out, err);
        free(path);
        return rc;
    }
    *out = malloc((size_t)cz_bench_full_numel(p) * sizeof(float));
    if (!*out)
        return cz__error_set(err, CZ_ENOMEM, "out of memory for '%s'", p->def.name);
    cz_bench_fill_shard(p, 1, 0, o->seed, 0, 0, 0, CZ_BENCH_PARAM_SCALE, *out);
    return CZ_OK;
}

/* This rank's parameter shards: those of its pipeline stage and EP rank (its buffer holds no
 * other). */
int cz_bench_fill_params(const bench_opts *o, const cz_plan *plan, const bench_place *w, float *P,
                         cz_error *err)
{
    for (size_t i = 0; i < plan->nparams; i++) {
        const cz_plan_param *p = &plan->params[i];
        if (!cz_bench_holds(w, p))
            continue;
        float *dst = P + cz_bench_param_offset_at(plan, w, p);
        int n = cz_plan_param_tp(plan, p), r = split_rank(w, plan, p);
        if (cz_plan_is_fsdp(plan)) {
            /* This DP rank's rows of its TP shard, as fully_shard leaves them. */
            float *full = NULL;
            int rc = cz_bench_initial_full(o, p, &full, err);
            if (!rc)
                rc = fsdp_band(plan, p, n, r, w->dp_rank, full, 1.0f, dst, err);
            free(full);
            if (rc)
                return rc;
            continue;
        }
        if (!o->init_dir) {
            cz_bench_fill_shard(p, n, r, o->seed, 0, 0, 0, CZ_BENCH_PARAM_SCALE, dst);
            continue;
        }
        float *full = NULL;
        int rc = cz_bench_initial_full(o, p, &full, err);
        if (rc)
            return rc;
        cz__shard_pack(p, n, r, full, dst);
        free(full);
    }
    return CZ_OK;
}

/* Creates dir and any missing parent (as mkdir -p). */
static int make_dirs(const char *dir, cz_error *err)
{
    char path[4096];
    size_t n = strlen(dir);
    if (n == 0 || n >= sizeof path)
        return cz__error_set(err, CZ_EINVALID, "directory name '%s' is empty or too long", dir);
    memcpy(path, dir, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (path[i] != '/' && path[i] != '\0')
            continue;
        char c = path[i];
        path[i] = '\0';
        struct stat st;
        if (mkdir(path, 0777) != 0 && errno != EEXIST)
            return cz__error_set(err, CZ_EIO, "%s: cannot create directory: %s", path,
                                 strerror(errno));
        if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
            return cz__error_set(err, CZ_EIO, "%s: exists and is not a directory", path);
        path[i] = c;
    }
    return CZ_OK;
}

/* Gradient files: DIR/step<S>/dp<D>/<param name>.npy in *out (malloc'd); the name is checked as
 * for --init-dir, so that it cannot reach outside the folder. */
static int grad_path(const char *dir, int64_t step, int dp, const char *name, char **out,
                     cz_error *err)
{
    char sub[4200];
    int n = snprintf(sub, sizeof sub, "%s/step%lld/dp%d", dir, (long long)step, dp);
    if (n < 0 || (size_t)n >= sizeof sub)
        return cz__error_set(err, CZ_EINVALID, "gradient folder name '%s' is too long", dir);
    return cz_npy_param_path(sub, name, out, err);
}

/* The full gradient of p that DP replica dp sees at step: from --grad-dir or generated. */
int cz_bench_full_grad(const bench_opts *o, const cz_plan_param *p, int64_t step, int dp,
                       float *out, cz_error *err)
{
    if (!o->grad_dir) {
        cz_bench_fill_shard(p, 1, 0, o->seed, 1, step, dp, 1.0f, out);
        return CZ_OK;
    }
    char *path = NULL;
    float *tmp = NULL;
    int rc = grad_path(o->grad_dir, step, dp, p->def.name, &path, err);
    if (!rc)
        rc = cz_npy_read(path, p->def.ndim, p->def.shape[0], p->def.shape[1], &tmp, err);
    if (!rc)
        memcpy(out, tmp, (size_t)cz_bench_full_numel(p) * sizeof(float));
    free(tmp);
    free(path);
    return rc;
}

int cz_bench_grad_sources(const cz_plan *plan, const cz_plan_param *p, int replica, int *first)
{
    if (!cz_bench_is_expert(plan, p)) {
        *first = replica;
        return 1;
    }
    int lo = replica * plan->ep * plan->etp, hi = lo + plan->ep * plan->etp;
    *first = lo / plan->tp;
    return (hi - 1) / plan->tp - *first + 1;
}

float cz_bench_grad_weight(const cz_plan *plan, const cz_plan_param *p, int replica, int dp)
{
    if (!cz_bench_is_expert(plan, p))
        return 1.0f;
    int lo = replica * plan->ep * plan->etp, hi = lo + plan->ep * plan->etp;
    int a = dp * plan->tp > lo ? dp * plan->tp : lo,
        b = (dp + 1) * plan->tp < hi ? (dp + 1) * plan->tp : hi;
    return (float)(b - a) / (float)plan->tp;
}

int cz_bench_rank_grad(const bench_opts *o, const cz_plan *plan, const cz_plan_param *p,
                       int64_t step, int replica, float *out, float *tmp, cz_error *err)
{
    int first, n = cz_bench_grad_sources(plan, p, replica, &first);
    int64_t numel = cz_bench_full_numel(p);
    for (int k = 0; k < n; k++) {
        float w = cz_bench_grad_weight(plan, p, replica, first + k);
        int rc = cz_bench_full_grad(o, p, step, first + k, k ? tmp : out, err);
        if (rc)
            return rc;
        /* A weight of 1 and a single source leave the file's values as they are. */
        for (int64_t x = 0; w != 1.0f && x < numel; x++)
            (k ? tmp : out)[x] *= w;
        for (int64_t x = 0; k && x < numel; x++)
            out[x] += tmp[x];
    }
    return CZ_OK;
}

/* Writes the generated gradients of every step and replica in --grad-dir's layout (rank 0). */
int cz_bench_dump_grads(const bench_opts *o, const cz_plan *plan, int total, cz_error *err)
{
    int rc = CZ_OK;
    int64_t maxn = 1;
    for (size_t i = 0; i < plan->nparams; i++)
        if (cz_bench_full_numel(&plan->params[i]) > maxn)
            maxn = cz_bench_full_numel(&plan->params[i]);
    float *buf = malloc((size_t)maxn * sizeof(float));
    char dir[4200];
    if (!buf)
        return cz__error_set(err, CZ_ENOMEM, "out of memory");
    for (int s = 0; s < total && !rc; s++)
        for (int d = 0; d < plan->dp && !rc; d++) {
            snprintf(dir, sizeof dir, "%s/step%d/dp%d", o->dump_grads, s, d);
            rc = make_dirs(dir, err);
            for (size_t i = 0; i < plan->nparams && !rc; i++) {
                const cz_plan_param *p = &plan->params[i];
                cz_bench_fill_shard(p, 1, 0, o->seed, 1, s, d, 1.0f, buf);
                char *path = NULL;
                rc = grad_path(o->dump_grads, s, d, p->def.name, &path, err);
                if (!rc)
                    rc =
                        cz_npy_write(path, buf, p->def.ndim, p->def.shape[0], p->def.shape[1], err);
                free(path);
            }
        }
    free(buf);
    return rc;
}

/* A fully sharded plan's gradient shard of p: what FSDP2's reduce-scatter gives DP rank d,
 * this rank's rows of its TP shard of the DP replicas' average (summed in replica order, then
 * scaled by 1/DP, as the reference averages). */
static int fsdp_grad(const bench_opts *o, const cz_plan *plan, const bench_place *w,
                     const cz_plan_param *p, int64_t step, float *dst, cz_error *err)
{
    int64_t n = cz_bench_full_numel(p);
    float *sum = malloc((size_t)n * sizeof(float)), *tmp = malloc((size_t)n * sizeof(float));
    int rc =
        sum && tmp ? CZ_OK : cz__error_set(err, CZ_ENOMEM, "out of memory for '%s'", p->def.name);
    for (int d = 0; d < plan->dp && !rc; d++) {
        rc = cz_bench_full_grad(o, p, step, d, d ? tmp : sum, err);
        for (int64_t k = 0; !rc && d && k < n; k++)
            sum[k] += tmp[k];
    }
    if (!rc)
        rc = fsdp_band(plan, p, cz_plan_param_tp(plan, p), split_rank(w, plan, p), w->dp_rank, sum,
                       1.0f / (float)plan->dp, dst, err);
    free(sum);
    free(tmp);
    return rc;
}

/* This rank's gradient shards of one step: generated shard by shard, or cut from the full
 * tensors of --grad-dir (the same values when the files hold the generated ones). */
int cz_bench_fill_grads(const bench_opts *o, const cz_plan *plan, const bench_place *w,
                        int64_t step, float *G, cz_error *err)
{
    int rc = CZ_OK;
    for (size_t i = 0; i < plan->nparams && !rc; i++) {
        const cz_plan_param *p = &plan->params[i];
        if (!cz_bench_holds(w, p))
            continue;
        float *dst = G + cz_bench_param_offset_at(plan, w, p);
        int n = cz_plan_param_tp(plan, p), r = split_rank(w, plan, p);
        if (cz_plan_is_fsdp(plan)) {
            rc = fsdp_grad(o, plan, w, p, step, dst, err);
            continue;
        }
        /* A routed expert's replicas are its expert-DP group's ranks, each holding what its
         * EP group's replicas route to it (cz_bench_rank_grad). */
        int replica = cz_bench_is_expert(plan, p) ? w->edp_rank : w->dp_rank, first;
        if (!o->grad_dir && cz_bench_grad_sources(plan, p, replica, &first) == 1 &&
            cz_bench_grad_weight(plan, p, replica, first) == 1.0f) {
            cz_bench_fill_shard(p, n, r, o->seed, 1, step, first, 1.0f, dst);
            continue;
        }
        size_t bytes = (size_t)cz_bench_full_numel(p) * sizeof(float);
        float *full = malloc(bytes), *tmp = malloc(bytes);
        rc = full && tmp ? cz_bench_rank_grad(o, plan, p, step, replica, full, tmp, err)
                         : cz__error_set(err, CZ_ENOMEM, "out of memory for '%s'", p->def.name);
        if (!rc)
            cz__shard_pack(p, n, r, full, dst);
        free(full);
        free(tmp);
    }
    return rc;
}

int cz_bench_dump_params(const bench_opts *o, const cz_plan *plan, float *const *full,
                         cz_error *err)
{
    int rc = make_dirs(o->dump_dir, err);
    for (size_t i = 0; i < plan->nparams && !rc; i++) {
        const cz_plan_param *p = &plan->params[i];
        char *path = NULL;
        rc = cz_npy_param_path(o->dump_dir, p->def.name, &path, err);
        if (!rc)
            rc = cz_npy_write(path, full[i], p->def.ndim, p->def.shape[0], p->def.shape[1], err);
        free(path);
    }
    return rc;
}
