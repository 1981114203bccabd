/* Where a TP rank's local shard sits inside a full matrix (its ranges along the TP dimension:
 * cz__shard_ranges, planner/format/shard_ranges.c, shared with the simulator), and copies
 * between the two. */
#include "alloc.h"
#include "compute.h"
#include "cz_format.h"
#include "shard.h"

#include <stdint.h>
#include <string.h>

/* Copies between shard and full: dir 0 packs (full -> shard), 1 unpacks. */
static void shard_copy(const cz_plan_param *p, int tp, int r, float *full, float *shard, int dir)
{
    int64_t rows = p->def.shape[0], cols = p->def.ndim == 1 ? 1 : p->def.shape[1];
    if (p->def.tp_dim < 0 || tp == 1) {
        if (dir == 0)
            memcpy(shard, full, (size_t)(rows * cols) * sizeof(float));
        else
            memcpy(full, shard, (size_t)(rows * cols) * sizeof(float));
        return;
    }
    int64_t lo[CZ_MAX_BLOCKS], hi[CZ_MAX_BLOCKS];
    int n = cz__shard_ranges(p, tp, r, lo, hi, CZ_MAX_BLOCKS);
    if (p->def.tp_dim == 0) {
        /* Row ranges: contiguous runs of whole rows. */
        float *s = shard;
        for (int k = 0; k < n; k++) {
            size_t len = (size_t)((hi[k] - lo[k]) * cols);
            float *f = full + lo[k] * cols;
            if (dir == 0)
                memcpy(s, f, len * sizeof(float));
            else
                memcpy(f, s, len * sizeof(float));
            s += len;
        }
        return;
    }
    /* Column ranges: within every row, the column runs in order. */
    int64_t lcols = 0;
    for (int k = 0; k < n; k++)
        lcols += hi[k] - lo[k];
    for (int64_t i = 0; i < rows; i++) {
        float *s = shard + i * lcols;
        for (int k = 0; k < n; k++) {
            size_t len = (size_t)(hi[k] - lo[k]);
            float *f = full + i * cols + lo[k];
            if (dir == 0)
                memcpy(s, f, len * sizeof(float));
            else
                memcpy(f, s, len * sizeof(float));
            s += len;
        }
    }
}

void cz__shard_pack(const cz_plan_param *p, int tp, int r, const float *full, float *shard)
{
    shard_copy(p, tp, r, (float *)full, shard, 0);
}

void cz__shard_unpack(const cz_plan_param *p, int tp, int r, const float *shard, float *full)
{
    shard_copy(p, tp, r, full, (float *)shard, 1);
}

int cz__run_list_add(cz_run_list *l, int64_t dst, int64_t src, int64_t len, cz_error *err)
{
    if (len <= 0)
        return CZ_OK;
    if (l->n > 0) {
        cz_copy_run *last = &l->v[l->n - 1];
        if (last->dst + last->len == dst && last->src + last->len == src) {
            last->len += len;
            return CZ_OK;
        }
    }
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 16;
        cz_copy_run *v = cz__exec_malloc(cap * sizeof *v);
        if (!v)
            return cz__error_set(err, CZ_ENOMEM, "out of memory for %zu copy runs", cap);
        if (l->n)
            memcpy(v, l->v, l->n * sizeof *v);
        cz__exec_free(l->v);
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = (cz_copy_run){dst, src, len};
    return CZ_OK;
}

void cz__run_list_free(cz_run_list *l)
{
    cz__exec_free(l->v);
    *l = (cz_run_list){0};
}

/* Adds one copy between full offset f and shard offset s in the direction asked. */
static int add_dir(cz_run_list *l, int unpack, int64_t f, int64_t s, int64_t len, cz_error *err)
{
    return unpack ? cz__run_list_add(l, f, s, len, err) : cz__run_list_add(l, s, f, len, err);
}

int cz__shard_runs(const cz_plan_param *p, int tp, int r, int64_t full_off, int64_t shard_off,
                   int unpack, cz_run_list *l, cz_error *err)
{
    int64_t rows = p->def.shape[0], cols = p->def.ndim == 1 ? 1 : p->def.shape[1];
    if (p->def.tp_dim < 0 || tp == 1)
        return add_dir(l, unpack, full_off, shard_off, rows * cols, err);
    int64_t lo[CZ_MAX_BLOCKS], hi[CZ_MAX_BLOCKS];
    int n = cz__shard_ranges(p, tp, r, lo, hi, CZ_MAX_BLOCKS), rc = CZ_OK;
    int64_t s = shard_off;
    if (p->def.tp_dim == 0) {
        for (int k = 0; k < n && !rc; k++) {
            rc = add_dir(l, unpack, full_off + lo[k] * cols, s, (hi[k] - lo[k]) * cols, err);
            s += (hi[k] - lo[k]) * cols;
        }
        return rc;
    }
    for (int64_t i = 0; i < rows && !rc; i++)
        for (int k = 0; k < n && !rc; k++) {
            rc = add_dir(l, unpack, full_off + i * cols + lo[k], s, hi[k] - lo[k], err);
            s += hi[k] - lo[k];
        }
    return rc;
}

int cz__shard_check(const cz_plan_param *p, int tp, cz_error *err)
{
    int64_t rows = p->def.shape[0], cols = p->def.ndim == 1 ? 1 : p->def.shape[1];
    int64_t lr = rows, lc = cols;
    /* The plan reader accepts any positive int64 dimension; every size below is a product. */
    if (rows < 1 || cols < 1 || rows > INT64_MAX / cols)
        return cz__error_set(err, CZ_EINVALID,
                             "param '%s': shape [%lld, %lld] has more than %lld elements or a "
                             "dimension < 1",
                             p->def.name, (long long)rows, (long long)cols, (long long)INT64_MAX);
    if (p->def.ndim == 1 && p->def.tp_dim == 1)
        return cz__error_set(err, CZ_EINVALID,
                             "param '%s' is 1-D but has tp_dim 1 (only 0 or null allowed)",
                             p->def.name);
    if (p->def.tp_dim >= 0) {
        int d = p->def.tp_dim;
        int64_t full = p->def.shape[d];
        if (full % tp != 0)
            return cz__error_set(err, CZ_EINVALID,
                                 "param '%s': shape[%d] = %lld is not divisible by tp = %d",
                                 p->def.name, d, (long long)full, tp);
        if (p->def.nblocks > 0 && p->def.block_dim == d) {
            if (p->def.nblocks > CZ_MAX_BLOCKS)
                return cz__error_set(err, CZ_EUNSUPPORTED, CZ_BLOCKS_LIMIT_FMT, p->def.name,
                                     p->def.nblocks, CZ_MAX_BLOCKS);
            for (int b = 0; b < p->def.nblocks; b++)
                if (p->def.block_sizes[b] % tp != 0)
                    return cz__error_set(err, CZ_EINVALID,
                                         "param '%s': block %d size %lld along the TP dimension "
                                         "is not divisible by tp = %d",
                                         p->def.name, b, (long long)p->def.block_sizes[b], tp);
        }
        if (d == 0)
            lr = rows / tp;
        else
            lc = cols / tp;
    }
    if (p->def.nblocks > 0) {
        if (p->def.block_dim < 0 || p->def.block_dim >= (p->def.ndim == 1 ? 1 : 2))
            return cz__error_set(err, CZ_EINVALID,
                                 "param '%s': blocks along dim %d of a %d-D shape", p->def.name,
                                 p->def.block_dim, p->def.ndim);
        int64_t sum = 0, full = p->def.shape[p->def.block_dim];
        for (int b = 0; b < p->def.nblocks; b++) {
            /* Compared before adding: the sizes are arbitrary int64 values from the file. */
            if (p->def.block_sizes[b] < 1 || p->def.block_sizes[b] > full - sum)
                return cz__error_set(err, CZ_EINVALID,
                                     "param '%s': block %d size %lld does not fit in dim %d of "
                                     "size %lld after blocks summing to %lld",
                                     p->def.name, b, (long long)p->def.block_sizes[b],
                                     p->def.block_dim, (long long)full, (long long)sum);
            sum += p->def.block_sizes[b];
        }
        if (sum != full)
            return cz__error_set(err, CZ_EINVALID,
                                 "param '%s': blocks along dim %d sum to %lld, expected %lld",
                                 p->def.name, p->def.block_dim, (long long)sum, (long long)full);
    }
    int64_t plr = p->local_shape[0], plc = p->def.ndim == 1 ? 1 : p->local_shape[1];
    if (plr != lr || plc != lc)
        return cz__error_set(err, CZ_EMISMATCH,
                             "param '%s': plan local_shape [%lld, %lld] but shape [%lld, %lld] "
                             "split over tp = %d (tp_dim %d) gives [%lld, %lld]",
                             p->def.name, (long long)plr, (long long)plc, (long long)rows,
                             (long long)cols, tp, p->def.tp_dim, (long long)lr, (long long)lc);
    if (p->numel != lr * lc)
        return cz__error_set(err, CZ_EMISMATCH,
                             "param '%s': plan numel %lld but local shape [%lld, %lld] holds %lld",
                             p->def.name, (long long)p->numel, (long long)lr, (long long)lc,
                             (long long)(lr * lc));
    return CZ_OK;
}

/* Calls fn for every contiguous run of TP rank r's shard of p that lies inside the rectangle b
 * of the full matrix, in the shard's storage order: (full row, first full column, index in the
 * shard, length). Replicated: the shard is the whole matrix. */
typedef int (*region_fn)(void *ctx, int64_t fr, int64_t fc, int64_t shard_idx, int64_t len,
                         cz_error *err);

static int region_walk(const cz_plan_param *p, int tp, int r, const cz_block *b, region_fn fn,
                       void *ctx, cz_error *err)
{
    int64_t cols = p->def.ndim == 1 ? 1 : p->def.shape[1];
    int64_t rend = b->r0 + b->rows, cend = b->c0 + b->cols;
    int rc = CZ_OK;
    if (p->def.tp_dim < 0 || tp == 1) {
        for (int64_t i = b->r0; i < rend && !rc; i++)
            rc = fn(ctx, i, b->c0, i * cols + b->c0, b->cols, err);
        return rc;
    }
    int64_t lo[CZ_MAX_BLOCKS], hi[CZ_MAX_BLOCKS];
    int n = cz__shard_ranges(p, tp, r, lo, hi, CZ_MAX_BLOCKS);
    if (p->def.tp_dim == 0) {
        /* Shard rows are the ranges' full rows, in range order. */
        int64_t off = 0;
        for (int k = 0; k < n && !rc; k++) {
            int64_t s = lo[k] > b->r0 ? lo[k] : b->r0, e = hi[k] < rend ? hi[k] : rend;
            for (int64_t i = s; i < e && !rc; i++)
                rc = fn(ctx, i, b->c0, (off + i - lo[k]) * cols + b->c0, b->cols, err);
            off += hi[k] - lo[k];
        }
        return rc;
    }
    /* Shard columns are the ranges' full columns, in range order, in every row. */
    int64_t lcols = 0;
    for (int k = 0; k < n; k++)
        lcols += hi[k] - lo[k];
    for (int64_t i = b->r0; i < rend && !rc; i++) {
        int64_t off = 0;
        for (int k = 0; k < n && !rc; k++) {
            int64_t s = lo[k] > b->c0 ? lo[k] : b->c0, e = hi[k] < cend ? hi[k] : cend;
            if (e > s)
                rc = fn(ctx, i, s, i * lcols + off + s - lo[k], e - s, err);
            off += hi[k] - lo[k];
        }
    }
    return rc;
}

/* region_walk over the elements [lo, hi) of the shard's storage only (a band of its rows:
 * a fully sharded plan's FSDP2 rows of a TP shard), each run's shard index counted from lo:
 * the band is then the shard the callback sees. */
typedef struct clip_ctx {
    int64_t lo, hi;
    region_fn fn;
    void *ctx;
} clip_ctx;

static int clip_run(void *arg, int64_t fr, int64_t fc, int64_t shard_idx, int64_t len,
                    cz_error *err)
{
    clip_ctx *c = arg;
    int64_t s = shard_idx > c->lo ? shard_idx : c->lo;
    int64_t e = shard_idx + len < c->hi ? shard_idx + len : c->hi;
    /* A run lies in one row of the full matrix: a shift in the shard is one in its columns. */
    return e > s ? c->fn(c->ctx, fr, fc + (s - shard_idx), s - c->lo, e - s, err) : CZ_OK;
}

static int band_walk(const cz_plan_param *p, int tp, int r, const cz_block *b, int64_t lo,
                     int64_t hi, region_fn fn, void *ctx, cz_error *err)
{
    clip_ctx c = {lo, hi, fn, ctx};
    return region_walk(p, tp, r, b, clip_run, &c, err);
}

static int count_run(void *ctx, int64_t fr, int64_t fc, int64_t shard_idx, int64_t len,
                     cz_error *err)
{
    (void)fr, (void)fc, (void)shard_idx, (void)err;
    *(int64_t *)ctx += len;
    return CZ_OK;
}

int64_t cz__shard_region_numel(const cz_plan_param *p, int tp, int r, const cz_block *b)
{
    int64_t n = 0;
    region_walk(p, tp, r, b, count_run, &n, NULL);
    return n;
}

int64_t cz__band_region_numel(const cz_plan_param *p, int tp, int r, int64_t lo, int64_t hi,
                              const cz_block *b)
{
    int64_t n = 0;
    band_walk(p, tp, r, b, lo, hi, count_run, &n, NULL);
    return n;
}

typedef struct region_ctx {
    const cz_block *b;
    cz_run_list *l;
    int64_t msg, other;
    int other_is_shard, to_msg;
} region_ctx;

static int add_region_run(void *arg, int64_t fr, int64_t fc, int64_t shard_idx, int64_t len,
                          cz_error *err)
{
    region_ctx *c = arg;
    int64_t o =
        c->other + (c->other_is_shard ? shard_idx : (fr - c->b->r0) * c->b->cols + (fc - c->b->c0));
    int rc = c->to_msg ? cz__run_list_add(c->l, c->msg, o, len, err)
                       : cz__run_list_add(c->l, o, c->msg, len, err);
    c->msg += len;
    return rc;
}

int cz__region_runs(const cz_plan_param *p, int tp, int r, const cz_block *b, int64_t msg_off,
                    int64_t other_off, int other_is_shard, int to_msg, cz_run_list *l,
                    cz_error *err)
{
    region_ctx c = {b, l, msg_off, other_off, other_is_shard, to_msg};
    return region_walk(p, tp, r, b, add_region_run, &c, err);
}

int cz__band_region_runs(const cz_plan_param *p, int tp, int r, int64_t lo, int64_t hi,
                         const cz_block *b, int64_t msg_off, int64_t other_off, int other_is_shard,
                         int to_msg, cz_run_list *l, cz_error *err)
{
    region_ctx c = {b, l, msg_off, other_off, other_is_shard, to_msg};
    return band_walk(p, tp, r, b, lo, hi, add_region_run, &c, err);
}

int cz__bucket_index(const cz_plan *plan, int id)
{
    if (id >= 0 && (size_t)id < plan->nbuckets && plan->buckets[id].id == id)
        return id;
    for (size_t i = 0; i < plan->nbuckets; i++)
        if (plan->buckets[i].id == id)
            return (int)i;
    return -1;
}

int64_t cz__param_piece(const cz_plan *plan, const cz_plan_param *p, int d, int64_t *lo)
{
    *lo = 0;
    /* A fully sharded plan (TP 1): an elementwise parameter is updated by every DP rank on its
     * FSDP2 rows, a matrix whole by its owner. */
    if (cz_plan_is_fsdp(plan) && p->def.kind != CZ_KIND_MATRIX) {
        /* fsdp_shard.h's rows, from the torch.chunk sizes (fsdp_shard.c calls this file). */
        int64_t rows = cz__fsdp_rows(p->local_shape[0], plan->dp, d);
        int64_t cols = p->def.ndim == 1 ? 1 : p->local_shape[1];
        *lo = rows > 0 ? (int64_t)d * cz__fsdp_chunk_rows(p->local_shape[0], plan->dp) * cols : 0;
        return rows * cols;
    }
    if (cz_plan_is_fsdp(plan))
        return p->dp_owner == d ? p->numel : 0;
    if (!cz_plan_param_fragmented(plan, p))
        return p->dp_owner == d ? p->numel : 0;
    const int64_t *rg = plan->buckets[cz__bucket_index(plan, p->bucket)].ranges;
    int64_t s = p->offset > rg[2 * d] ? p->offset : rg[2 * d];
    int64_t e = p->offset + p->numel < rg[2 * d + 1] ? p->offset + p->numel : rg[2 * d + 1];
    if (e <= s)
        return 0;
    *lo = s - p->offset;
    return e - s;
}

int cz__param_blocks(const cz_plan_param *p, cz_block *out, int max)
{
    int64_t rows = p->def.shape[0], cols = p->def.ndim == 1 ? 1 : p->def.shape[1];
    if (p->def.nblocks <= 0) {
        if (max < 1)
            return 0;
        out[0] = (cz_block){0, 0, rows, cols};
        return 1;
    }
    int n = 0;
    int64_t off = 0;
    for (int b = 0; b < p->def.nblocks && n < max; b++) {
        int64_t s = p->def.block_sizes[b];
        if (p->def.block_dim == 0)
            out[n++] = (cz_block){off, 0, s, cols};
        else
            out[n++] = (cz_block){0, off, rows, s};
        off += s;
    }
    return n;
}

int cz__task_parts(const cz_plan *plan, const cz_plan_group *g, int t, cz_exec_part *out, int max)
{
    const cz_plan_param *p = &plan->params[g->task_param[t]];
    int b = cz_group_task_block(g, t), k = cz_group_task_width(g, t);
    cz_block reg;
    cz_task_region(&p->def, b, &reg.r0, &reg.c0, &reg.rows, &reg.cols);
    /* Sliced along the long side: rows of a tall region, columns otherwise (Muon's a x b); a
     * TP-local task along the TP dimension, member j's slice being TP rank j's share of the
     * region (whole heads: cz_task_local_fits), so that it gathers from no other rank. */
    bool local = cz_task_is_local(&p->def, k);
    bool tall = local ? p->def.tp_dim == 0 : reg.rows > reg.cols;
    for (int j = 0; j < k && j < max; j++) {
        cz_exec_part *o = &out[j];
        *o = (cz_exec_part){.param = g->task_param[t],
                            .block = b,
                            .width = k,
                            .panels = cz_group_task_panels(g, t),
                            .member = j,
                            .slot = g->task_slot[t] + j,
                            .region = reg,
                            .part = reg};
        if (k > 1) {
            int64_t s, n;
            cz_coop_slice(tall ? reg.rows : reg.cols, k, j, &s, &n);
            if (tall)
                o->part.r0 += s, o->part.rows = n;
            else
                o->part.c0 += s, o->part.cols = n;
        }
    }
    return k;
}
