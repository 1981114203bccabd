/* QK-clip (MuonClip, Kimi K2) in the step: the job's description of which rows of which
 * parameters are which attention heads' queries and keys (cz_executor_set_qk_clip), the
 * per-head maxima it hands each step (cz_executor_qk_logits), their agreement across ranks
 * with the step's statistics (one extra control-plane reduction, only in a step that clips),
 * and the scaling of the rows each rank owns after the updates, before the all-gathers take
 * them to every replica. Data is touched only through the compute ops (the scale op), so the
 * same code runs on every backend; the maxima are host scalars. */
#include "qk_clip.h"

#include "alloc.h"
#include "canzona_exec.h"
#include "compute.h"
#include "cz_format.h"
#include "executor_impl.h"
#include "shard.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* At most this many (layer, head) maxima: the control plane reduces an int count of them. */
#define QK_MAX_HEADS (1 << 24)

/* One run of rows, resolved against the plan; factor: the agreed step's scale (1: none). */
typedef struct qk_run {
    int param;
    int64_t row0, rows;
    int32_t layer, head0, heads;
    float power, factor;
} qk_run;

struct cz_qk_clip {
    float tau;
    int32_t nlayers, heads;
    size_t n; /* nlayers * heads */
    qk_run *runs;
    size_t nruns;
    int64_t fingerprint; /* >= 0: compared across ranks as min(f) == -min(-f) */
    float *mine;         /* the maxima this rank handed for the coming step */
    int64_t *wire;       /* n + 2: the reduction's buffer, allocated with the description */
    bool armed, clips;   /* clips: the agreed step scales some run */
    int64_t pending;     /* (layer, head) pairs above tau in the agreed maxima */
    int64_t clipped;     /* the same, of the last step that applied them (0: refused) */
};

static void qk_free(cz_qk_clip *q)
{
    if (!q)
        return;
    cz__exec_free(q->runs);
    cz__exec_free(q->mine);
    cz__exec_free(q->wire);
    cz__exec_free(q);
}

void cz__qk_clip_free(cz_executor *ex)
{
    qk_free(ex->clip.qk);
    ex->clip.qk = NULL;
}

bool cz__qk_clip_armed(const cz_executor *ex)
{
    return ex->clip.qk && ex->clip.qk->armed;
}

int64_t cz_executor_qk_clipped(const cz_executor *ex)
{
    if (!ex)
        return -1;
    return ex->clip.qk ? ex->clip.qk->clipped : 0;
}

static uint64_t fnv(uint64_t h, const void *data, size_t n)
{
    const unsigned char *b = data;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 1099511628211ULL;
    return h;
}

/* The plan's parameters by name, for the runs' lookups (O(log n) each: a model of thousands
 * of heads describes tens of thousands of runs). */
typedef struct qk_name {
    const char *name;
    int id;
} qk_name;

static int by_name(const void *a, const void *b)
{
    return strcmp(((const qk_name *)a)->name, ((const qk_name *)b)->name);
}

static int find_param(const qk_name *sorted, size_t n, const char *name)
{
    qk_name key = {name, -1};
    const qk_name *hit = bsearch(&key, sorted, n, sizeof key, by_name);
    return hit ? hit->id : -1;
}

static int by_rows(const void *a, const void *b)
{
    const qk_run *x = a, *y = b;
    if (x->param != y->param)
        return x->param < y->param ? -1 : 1;
    return x->row0 < y->row0 ? -1 : x->row0 > y->row0;
}

/* Resolves and checks run i of spec into *r. */
static int resolve_run(const cz_executor *ex, const cz_qk_clip_spec *spec, const qk_name *sorted,
                       size_t i, qk_run *r, cz_error *err)
{
    const cz_qk_clip_rows *in = &spec->rows[i];
    if (!in->param)
        return cz__error_set(err, CZ_EINVALID, "set_qk_clip: rows[%zu]: param is NULL", i);
    int id = find_param(sorted, ex->plan->nparams, in->param);
    if (id < 0)
        return cz__error_set(err, CZ_EINVALID,
                             "set_qk_clip: rows[%zu]: the plan has no parameter named '%s'", i,
                             in->param);
    const cz_plan_param *p = &ex->plan->params[id];
    if (p->def.ndim != 2 || p->expert)
        return cz__error_set(err, CZ_EINVALID,
                             "set_qk_clip: rows[%zu]: '%s' is %s; query and key rows are those "
                             "of an attention projection, a 2-D dense parameter",
                             i, in->param, p->expert ? "a routed expert's" : "not 2-D");
    if (in->rows <= 0 || in->row0 < 0 || in->row0 > p->def.shape[0] - in->rows)
        return cz__error_set(err, CZ_EINVALID,
                             "set_qk_clip: rows[%zu]: rows %lld + %lld of '%s', which has %lld "
                             "rows (expected 0 <= row0, rows >= 1, row0 + rows <= %lld)",
                             i, (long long)in->row0, (long long)in->rows, in->param,
                             (long long)p->def.shape[0], (long long)p->def.shape[0]);
    if (in->layer < 0 || in->layer >= spec->nlayers || in->heads < 1 || in->head0 < 0 ||
        in->head0 > spec->heads_per_layer - in->heads)
        return cz__error_set(err, CZ_EINVALID,
                             "set_qk_clip: rows[%zu] ('%s'): layer %d, heads %d + %d: expected a "
                             "layer in 0 .. %d and heads within 0 .. %d",
                             i, in->param, in->layer, in->head0, in->heads, spec->nlayers - 1,
                             spec->heads_per_layer - 1);
    if (!isfinite(in->power) || in->power <= 0.0f)
        return cz__error_set(err, CZ_EINVALID,
                             "set_qk_clip: rows[%zu] ('%s'): power %g: expected a finite value "
                             "> 0 (1/2 for each of a head's query and key rows)",
                             i, in->param, (double)in->power);
    *r = (qk_run){id, in->row0, in->rows, in->layer, in->head0, in->heads, in->power, 1.0f};
    return CZ_OK;
}

/* Runs of one parameter must not overlap: a row scaled twice is no head's rule. */
static int check_overlaps(const cz_executor *ex, const qk_run *runs, size_t n, cz_error *err)
{
    qk_run *s = cz__exec_malloc((n ? n : 1) * sizeof *s);
    if (!s)
        return cz__error_set(err, CZ_ENOMEM, "set_qk_clip: out of memory");
    if (n)
        memcpy(s, runs, n * sizeof *s);
    qsort(s, n, sizeof *s, by_rows);
    int rc = CZ_OK;
    for (size_t i = 1; i < n && rc == CZ_OK; i++)
        if (s[i].param == s[i - 1].param && s[i].row0 < s[i - 1].row0 + s[i - 1].rows)
            rc = cz__error_set(err, CZ_EINVALID,
                               "set_qk_clip: rows %lld + %lld and %lld + %lld of '%s' overlap "
                               "(each row belongs to one head's run)",
                               (long long)s[i - 1].row0, (long long)s[i - 1].rows,
                               (long long)s[i].row0, (long long)s[i].rows,
                               ex->plan->params[s[i].param].def.name);
    cz__exec_free(s);
    return rc;
}

static int64_t fingerprint(const cz_qk_clip *q)
{
    uint64_t h = 1469598103934665603ULL;
    h = fnv(h, &q->tau, sizeof q->tau);
    h = fnv(h, &q->nlayers, sizeof q->nlayers);
    h = fnv(h, &q->heads, sizeof q->heads);
    for (size_t i = 0; i < q->nruns; i++) {
        const qk_run *r = &q->runs[i];
        h = fnv(h, &r->param, sizeof r->param);
        h = fnv(h, &r->row0, sizeof r->row0);
        h = fnv(h, &r->rows, sizeof r->rows);
        h = fnv(h, &r->layer, sizeof r->layer);
        h = fnv(h, &r->head0, sizeof r->head0);
        h = fnv(h, &r->heads, sizeof r->heads);
        h = fnv(h, &r->power, sizeof r->power);
    }
    return (int64_t)(h >> 2); /* >= 0, and its negation too */
}

static int check_spec(const cz_qk_clip_spec *spec, cz_error *err)
{
    if (!isfinite(spec->tau) || spec->tau <= 0.0f)
        return cz__error_set(err, CZ_EINVALID,
                             "set_qk_clip: tau %g: expected a finite logit bound > 0 (Kimi K2 "
                             "uses 100)",
                             (double)spec->tau);
    if (spec->nlayers < 1 || spec->heads_per_layer < 1 ||
        (int64_t)spec->nlayers * spec->heads_per_layer > QK_MAX_HEADS)
        return cz__error_set(err, CZ_EINVALID,
                             "set_qk_clip: %d layers of %d heads: expected at least one of each "
                             "and at most %d in all",
                             spec->nlayers, spec->heads_per_layer, QK_MAX_HEADS);
    if (spec->nrows && !spec->rows)
        return cz__error_set(err, CZ_EINVALID, "set_qk_clip: %zu rows but rows is NULL",
                             spec->nrows);
    return CZ_OK;
}

/* A new description from spec, checked against ex's plan (*out NULL on failure). */
static int qk_create(const cz_executor *ex, const cz_qk_clip_spec *spec, cz_qk_clip **out,
                     cz_error *err)
{
    const cz_plan *plan = ex->plan;
    int rc = check_spec(spec, err);
    qk_name *sorted = NULL;
    cz_qk_clip *q = NULL;
    *out = NULL;
    if (rc != CZ_OK)
        return rc;
    size_t n = (size_t)spec->nlayers * (size_t)spec->heads_per_layer;
    sorted = cz__exec_malloc((plan->nparams ? plan->nparams : 1) * sizeof *sorted);
    q = cz__exec_calloc(1, sizeof *q);
    if (!sorted || !q ||
        !(q->runs = cz__exec_calloc(spec->nrows ? spec->nrows : 1, sizeof *q->runs)) ||
        !(q->mine = cz__exec_malloc(n * sizeof *q->mine)) ||
        !(q->wire = cz__exec_malloc((n + 2) * sizeof *q->wire))) {
        rc = cz__error_set(err, CZ_ENOMEM, "set_qk_clip: out of memory for %zu runs of rows",
                           spec->nrows);
        goto done;
    }
    for (size_t i = 0; i < plan->nparams; i++)
        sorted[i] = (qk_name){plan->params[i].def.name, (int)i};
    qsort(sorted, plan->nparams, sizeof *sorted, by_name);
    q->tau = spec->tau;
    q->nlayers = spec->nlayers;
    q->heads = spec->heads_per_layer;
    q->n = n;
    q->nruns = spec->nrows;
    for (size_t i = 0; i < spec->nrows; i++)
        if ((rc = resolve_run(ex, spec, sorted, i, &q->runs[i], err)) != CZ_OK)
            goto done;
    if ((rc = check_overlaps(ex, q->runs, q->nruns, err)) != CZ_OK)
        goto done;
    q->fingerprint = fingerprint(q);
    *out = q;
    q = NULL;
done:
    cz__exec_free(sorted);
    qk_free(q);
    return rc;
}

int cz__qk_clip_set(cz_executor *ex, const cz_qk_clip_spec *spec, cz_error *err)
{
    if (!spec) {
        cz__qk_clip_free(ex);
        return CZ_OK;
    }
    cz_qk_clip *q = NULL;
    int rc = qk_create(ex, spec, &q, err);
    if (rc != CZ_OK)
        return rc;
    cz__qk_clip_free(ex);
    ex->clip.qk = q;
    return CZ_OK;
}

int cz_executor_qk_logits(cz_executor *ex, const float *max_logits, size_t n, cz_error *err)
{
    if (!ex)
        return cz__error_set(err, CZ_EINVALID, "qk_logits: executor is NULL");
    cz_qk_clip *q = ex->clip.qk;
    if (!q)
        return cz__error_set(err, CZ_EINVALID,
                             "qk_logits: no QK-clip description is set (cz_executor_set_qk_clip "
                             "first)");
    q->armed = false; /* a refused call drops what an earlier one handed for this step */
    if (!max_logits || n != q->n)
        return cz__error_set(err, CZ_EINVALID,
                             "qk_logits: %zu maxima%s; the description has %d layers of %d "
                             "heads, so %zu (layer-major, -inf for a head this rank did not "
                             "compute)",
                             n, max_logits ? "" : " (NULL)", q->nlayers, q->heads, q->n);
    for (size_t i = 0; i < n; i++)
        if (isnan(max_logits[i]) || max_logits[i] == INFINITY)
            return cz__error_set(err, CZ_EINVALID,
                                 "qk_logits: layer %zu, head %zu: the maximum logit is %s; "
                                 "nothing is clipped from it (the forward overflowed?)",
                                 i / (size_t)q->heads, i % (size_t)q->heads,
                                 isnan(max_logits[i]) ? "NaN" : "+Inf");
    memcpy(q->mine, max_logits, n * sizeof *q->mine);
    q->armed = true;
    return CZ_OK;
}

/* An int64 that orders as the double it encodes (IEEE 754: flip a negative's magnitude bits),
 * so that a MAX of floats is a MIN of negated codes on the control plane, exactly. */
static int64_t order_code(double x)
{
    int64_t i;
    memcpy(&i, &x, sizeof i);
    return i < 0 ? i ^ INT64_MAX : i;
}

static double order_decode(int64_t i)
{
    double x;
    i = i < 0 ? i ^ INT64_MAX : i;
    memcpy(&x, &i, sizeof x);
    return x;
}

/* The agreed maxima (q->wire, negated codes after the reduction) into the runs' factors. */
static void agree_factors(cz_qk_clip *q)
{
    q->pending = 0;
    q->clips = false;
    for (size_t i = 0; i < q->n; i++)
        q->pending += order_decode(-q->wire[i]) > (double)q->tau;
    for (size_t k = 0; k < q->nruns; k++) {
        qk_run *r = &q->runs[k];
        size_t at = (size_t)r->layer * (size_t)q->heads + (size_t)r->head0;
        double s = -INFINITY;
        for (int32_t h = 0; h < r->heads; h++) {
            double v = order_decode(-q->wire[at + (size_t)h]);
            s = v > s ? v : s;
        }
        /* Only a maximum above tau > 0 scales: a non-positive one is never clipped (and never
         * divides), so no NaN can come of it. */
        r->factor = s > (double)q->tau ? (float)pow((double)q->tau / s, (double)r->power) : 1.0f;
        q->clips |= r->factor != 1.0f;
    }
}

int cz__qk_clip_agree(cz_executor *ex, double armed, cz_error *err)
{
    cz_qk_clip *q = ex->clip.qk;
    bool mine = q && q->armed;
    if (q) {
        q->armed = false;
        q->clips = false;
        q->clipped = q->pending = 0;
    }
    if (armed <= 0.0)
        return CZ_OK;
    int rc;
    if (armed < (double)ex->ctrl.size) {
        int64_t lowest = mine ? INT64_MAX : ex->ctrl.rank;
        if ((rc = ex->ctrl.ops->allreduce_min_i64(&ex->ctrl, &lowest, 1, err)) != CZ_OK)
            return rc;
        return cz__error_set(err, CZ_EINVALID,
                             "step %lld: %.0f of %d ranks handed QK-clip maxima "
                             "(cz_executor_qk_logits), rank %lld did not (or was refused: its "
                             "message says why); every rank hands them for a step that clips, "
                             "none for one that does not; no parameter was changed",
                             (long long)(ex->steps + 1), armed, ex->ctrl.size, (long long)lowest);
    }
    /* Every rank handed maxima, so every rank has a description of the same length? Not
     * necessarily: the fingerprints compare, but the reduction's length must match first. The
     * maxima count travels ahead, in the fingerprint's pair, on a short reduction. */
    int64_t shape[2] = {(int64_t)q->n, -(int64_t)q->n};
    if ((rc = ex->ctrl.ops->allreduce_min_i64(&ex->ctrl, shape, 2, err)) != CZ_OK)
        return rc;
    if (shape[0] != -shape[1])
        return cz__error_set(err, CZ_EMISMATCH,
                             "step %lld: the ranks' QK-clip descriptions have different numbers "
                             "of heads (every rank sets the same description); no parameter was "
                             "changed",
                             (long long)(ex->steps + 1));
    for (size_t i = 0; i < q->n; i++)
        q->wire[i] = -order_code((double)q->mine[i]);
    q->wire[q->n] = q->fingerprint;
    q->wire[q->n + 1] = -q->fingerprint;
    if ((rc = ex->ctrl.ops->allreduce_min_i64(&ex->ctrl, q->wire, (int)q->n + 2, err)) != CZ_OK)
        return rc;
    if (q->wire[q->n] != -q->wire[q->n + 1])
        return cz__error_set(err, CZ_EMISMATCH,
                             "step %lld: the ranks set different QK-clip descriptions (tau, "
                             "heads or runs of rows; every rank sets the same); no parameter was "
                             "changed",
                             (long long)(ex->steps + 1));
    agree_factors(q);
    return CZ_OK;
}

/* Scales the rows [a, b) of p's whole matrix that lie in local rows [la, la + (hi - lo)) of
 * this rank's shard, where the shard holds whole rows [lo, hi), and in [own_lo, own_hi) of the
 * shard's elements (what this rank owns of its bucket). */
static void scale_rows(cz_executor *ex, float *shard, int64_t cols, int64_t a, int64_t b,
                       int64_t lo, int64_t hi, int64_t la, int64_t own_lo, int64_t own_hi, float f)
{
    a = a > lo ? a : lo;
    b = b < hi ? b : hi;
    if (a >= b)
        return;
    int64_t e0 = (la + a - lo) * cols, e1 = (la + b - lo) * cols;
    e0 = e0 > own_lo ? e0 : own_lo;
    e1 = e1 < own_hi ? e1 : own_hi;
    if (e0 < e1)
        ex->compute.ops->scale(&ex->compute, shard + e0, shard + e0, e1 - e0, f);
}

void cz__qk_clip_apply(cz_executor *ex, float *P)
{
    cz_qk_clip *q = ex->clip.qk;
    if (!q)
        return;
    q->clipped = q->pending;
    for (size_t k = 0; q->clips && k < q->nruns; k++) {
        const qk_run *r = &q->runs[k];
        const cz_plan_param *p = &ex->plan->params[r->param];
        if (r->factor == 1.0f || !cz__exec_holds(ex, p))
            continue;
        /* What this rank owns of its bucket is what its all-gather sends: scaled here, it
         * reaches every replica, and the master copy is what is scaled. A dense bucket (runs
         * are never an expert's): over DP, from its own offset. */
        const cz_plan_bucket *bk = &ex->plan->buckets[p->bucket];
        int me = ex->grid.dp_rank;
        int64_t start = ex->held.param_off[r->param];
        int64_t own_lo = bk->offset + bk->ranges[2 * me] - start;
        int64_t own_hi = bk->offset + bk->ranges[2 * me + 1] - start;
        int64_t cols = p->local_shape[1];
        float *shard = P + start;
        if (p->def.tp_dim != 0) { /* every row of the whole matrix is local */
            scale_rows(ex, shard, cols, r->row0, r->row0 + r->rows, 0, p->def.shape[0], 0, own_lo,
                       own_hi, r->factor);
            continue;
        }
        /* Split by rows: this TP rank's ranges of whole rows (one per declared block when
         * the blocks split dim 0), stacked in its shard in that order. */
        int64_t lo[CZ_MAX_BLOCKS], hi[CZ_MAX_BLOCKS], la = 0;
        int n = cz__shard_ranges(p, ex->grid.tp, ex->grid.tp_rank, lo, hi, CZ_MAX_BLOCKS);
        for (int j = 0; j < n; la += hi[j] - lo[j], j++)
            scale_rows(ex, shard, cols, r->row0, r->row0 + r->rows, lo[j], hi[j], la, own_lo,
                       own_hi, r->factor);
    }
}
