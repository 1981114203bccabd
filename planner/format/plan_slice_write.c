/* Writing a split plan folder (canzona plan --split DIR; docs/FORMATS.md section 9): the whole
 * plan cut into the pieces one rank reads, so that a rank's start-up reads bytes in proportion
 * to its own part, not to the cluster's. The pieces are cut from the whole plan's JSON as
 * written, member by member, so that each means what it meant there:
 *
 *   header.json      everything but params, buckets, schedules and metrics, plus the whole
 *                    plan's schema and content hash;
 *   stage-S.parts    one JSON line per piece of stage S: first a slice per EP rank E (the
 *                    stage's dense parameters and buckets with E's expert parameters and
 *                    buckets, renumbered; one slice without expert groups), then the stage's
 *                    DP ranks' schedules, then its expert ranks' (expert-DP rank major, as in
 *                    the whole plan);
 *   stage-S.index    fixed-width records (CZ_SLICE_INDEX_RECORD bytes), one per line of
 *                    stage-S.parts in its order: where the line starts and how long it is, so
 *                    that a rank reads its three lines and nothing else.
 *
 * Each piece carries the whole plan's content hash ("plan_sha256") and a content hash of its
 * own ("content_sha256", computed as a plan's), so that a piece edited, or one of another
 * plan, is refused by the rank that reads it. Three files per stage keep the folder small for
 * a file system and for the writer (each file is written atomically, with an fsync). */
#include "format_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define CONTENT_FLAGS (JSON_COMPACT | JSON_SORT_KEYS | JSON_REAL_PRECISION(17))

/* The growable text of one file. */
typedef struct text {
    char *s;
    size_t len, cap;
} text;

static int text_add(text *t, const char *s, size_t n, cz_error *err)
{
    if (t->len + n + 1 > t->cap) {
        size_t cap = t->cap ? t->cap : 4096;
        while (cap < t->len + n + 1)
            cap *= 2;
        char *g = realloc(t->s, cap);
        if (!g)
            return cz__error_set(err, CZ_ENOMEM, "out of memory writing a split plan");
        t->s = g, t->cap = cap;
    }
    memcpy(t->s + t->len, s, n);
    t->len += n;
    t->s[t->len] = '\0';
    return CZ_OK;
}

static int64_t geti(const json_t *o, const char *key, int64_t dflt)
{
    const json_t *v = json_object_get(o, key);
    return json_is_integer(v) ? json_integer_value(v) : dflt;
}

/* Sets obj's plan_sha256, then its content_sha256 over the rest; the compact text with a
 * newline into *out (malloc'ed). */
static int seal(json_t *obj, const char *plan_sha, char **out, cz_error *err)
{
    char sha[65];
    int rc;
    if (json_object_set_new(obj, "plan_sha256", json_string(plan_sha)) != 0)
        return cz__error_set(err, CZ_ENOMEM, "out of memory writing a split plan");
    if ((rc = cz__plan_json_content_hash(obj, sha, err)) != CZ_OK)
        return rc;
    if (json_object_set_new(obj, CZ_CONTENT_KEY, json_string(sha)) != 0)
        return cz__error_set(err, CZ_ENOMEM, "out of memory writing a split plan");
    char *s = json_dumps(obj, CONTENT_FLAGS);
    size_t n = s ? strlen(s) : 0;
    char *line = s ? realloc(s, n + 2) : NULL;
    if (!line) {
        free(s);
        return cz__error_set(err, CZ_ENOMEM, "out of memory writing a split plan");
    }
    line[n] = '\n', line[n + 1] = '\0';
    *out = line;
    return CZ_OK;
}

static int write_text(const char *dir, const char *name, const char *s, size_t n, cz_error *err)
{
    char path[4096];
    if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, name) >= sizeof path)
        return cz__error_set(err, CZ_EINVALID, "%s: split plan folder path too long", dir);
    return cz__file_write(path, s, n, err);
}

static int write_obj(const char *dir, const char *name, json_t *obj, const char *plan_sha,
                     cz_error *err)
{
    char *s = NULL;
    int rc;
    if ((rc = seal(obj, plan_sha, &s, err)) != CZ_OK)
        goto done;
    rc = write_text(dir, name, s, strlen(s), err);
done:
    free(s);
    return rc;
}

/* header.json: the whole plan's root less what grows with the parameters or the GPUs. */
static int write_header(const char *dir, const json_t *root, const char *plan_sha, cz_error *err)
{
    static const char *const drop[] = {"params",  "buckets",      "tp_schedule", "expert_schedule",
                                       "metrics", CZ_CONTENT_KEY, "schema",      NULL};
    json_t *h = json_copy((json_t *)root);
    int rc = CZ_OK;
    if (!h)
        return cz__error_set(err, CZ_ENOMEM, "out of memory writing a split plan");
    for (int i = 0; drop[i]; i++)
        json_object_del(h, drop[i]);
    if (json_object_set_new(h, "schema", json_string(CZ_PLAN_HEADER_SCHEMA)) != 0 ||
        json_object_set(h, "plan_schema", json_object_get(root, "schema")) != 0) {
        rc = cz__error_set(err, CZ_ENOMEM, "out of memory writing a split plan");
        goto done;
    }
    rc = write_obj(dir, "header.json", h, plan_sha, err);
done:
    json_decref(h);
    return rc;
}

/* The stage and EP rank (-1: dense) of each parameter and bucket, read once; for the buckets
 * also their all-gather keys (gather_keys_read). */
typedef struct owners {
    int *stage, *ep;
    int64_t *key;
} owners;

static int owners_read(owners *o, const json_t *arr, cz_error *err)
{
    size_t n = json_array_size(arr);
    o->stage = malloc((n + 1) * sizeof *o->stage);
    o->ep = malloc((n + 1) * sizeof *o->ep);
    if (!o->stage || !o->ep)
        return cz__error_set(err, CZ_ENOMEM, "out of memory writing a split plan");
    for (size_t i = 0; i < n; i++) {
        const json_t *x = json_array_get(arr, i);
        o->stage[i] = (int)geti(x, "stage", -1);
        o->ep[i] = (int)geti(x, "ep_rank", -1);
    }
    return CZ_OK;
}

static void owners_free(owners *o)
{
    free(o->stage);
    free(o->ep);
    free(o->key);
}

/* The whole plan's all-gather key of every bucket (cz_gather_key_raise over every group of
 * every DP and expert rank's schedule), which no slice could compute: a group's tasks are its
 * slots' entries, a parameter id or {"param": id, ...}, a cooperative task once per member. */
static int gather_keys_read(owners *bo, const json_t *root, cz_error *err)
{
    const json_t *params = json_object_get(root, "params");
    size_t nb = json_array_size(json_object_get(root, "buckets")), cap = 0;
    int64_t *tb = NULL;
    int rc = CZ_OK;
    if (!(bo->key = malloc((nb + 1) * sizeof *bo->key)))
        return cz__error_set(err, CZ_ENOMEM, "out of memory writing a split plan");
    for (size_t b = 0; b < nb; b++)
        bo->key[b] = (int64_t)b;
    static const char *const lists[] = {"tp_schedule", "expert_schedule"};
    for (int l = 0; l < 2 && rc == CZ_OK; l++) {
        const json_t *scheds = json_object_get(root, lists[l]);
        for (size_t r = 0; r < json_array_size(scheds) && rc == CZ_OK; r++) {
            const json_t *groups = json_object_get(json_array_get(scheds, r), "groups");
            for (size_t g = 0; g < json_array_size(groups) && rc == CZ_OK; g++) {
                const json_t *slots = json_object_get(json_array_get(groups, g), "slots");
                size_t n = 0;
                for (size_t k = 0; k < json_array_size(slots); k++)
                    n += json_array_size(json_array_get(slots, k));
                if (n > cap) {
                    int64_t *m = realloc(tb, n * sizeof *tb);
                    if (!m) {
                        rc = cz__error_set(err, CZ_ENOMEM, "out of memory writing a split plan");
                        break;
                    }
                    tb = m, cap = n;
                }
                n = 0;
                for (size_t k = 0; k < json_array_size(slots); k++) {
                    const json_t *slot = json_array_get(slots, k);
                    for (size_t t = 0; t < json_array_size(slot); t++) {
                        const json_t *x = json_array_get(slot, t);
                        int64_t id =
                            json_is_integer(x) ? json_integer_value(x) : geti(x, "param", -1);
                        int64_t b = id >= 0 && (size_t)id < json_array_size(params)
                                        ? geti(json_array_get(params, (size_t)id), "bucket", -1)
                                        : -1;
                        if (b < 0 || (size_t)b >= nb) {
                            rc = cz__error_set(err, CZ_EINVALID,
                                               "$.%s[%zu].groups[%zu]: a task of parameter %" PRId64
                                               " has no bucket of the plan; the plan cannot be "
                                               "split",
                                               lists[l], r, g, id);
                            break;
                        }
                        tb[n++] = b;
                    }
                    if (rc != CZ_OK)
                        break;
                }
                if (rc == CZ_OK && n > 0)
                    cz_gather_key_raise(bo->key, tb, (int)n);
            }
        }
    }
    free(tb);
    return rc;
}

/* The parts file and its index, as they grow. */
typedef struct parts {
    text lines, index;
} parts;

static int parts_add(parts *t, json_t *obj, const char *plan_sha, cz_error *err)
{
    char *line = NULL, rec[CZ_SLICE_INDEX_RECORD + 1];
    int rc = seal(obj, plan_sha, &line, err);
    if (rc == CZ_OK) {
        size_t n = strlen(line);
        snprintf(rec, sizeof rec, "%019zu %019zu\n", t->lines.len, n);
        if ((rc = text_add(&t->lines, line, n, err)) == CZ_OK)
            rc = text_add(&t->index, rec, CZ_SLICE_INDEX_RECORD, err);
    }
    free(line);
    return rc;
}

/* The slice of (stage s, EP rank e): its buckets and parameters renumbered in order, with each
 * parameter's id in the whole plan. */
static int add_slice(parts *t, const json_t *root, const owners *bo, const owners *po, int s, int e,
                     const char *plan_sha, int *bucket_local, cz_error *err)
{
    const json_t *buckets = json_object_get(root, "buckets"),
                 *params = json_object_get(root, "params");
    json_t *o = json_object(), *bs = json_array(), *ps = json_array(), *gids = json_array();
    int rc = CZ_OK, nb = 0, np = 0;
    if (!o || !bs || !ps || !gids || json_object_set_new(o, "stage", json_integer(s)) != 0 ||
        json_object_set_new(o, "ep_rank", json_integer(e)) != 0 ||
        json_object_set(o, "buckets", bs) != 0 || json_object_set(o, "params", ps) != 0 ||
        json_object_set(o, "global_ids", gids) != 0) {
        rc = cz__error_set(err, CZ_ENOMEM, "out of memory writing a split plan");
        goto done;
    }
    for (size_t b = 0; b < json_array_size(buckets); b++)
        bucket_local[b] = bo->stage[b] != s || (bo->ep[b] >= 0 && bo->ep[b] != e) ? -1 : nb++;
    for (size_t b = 0; b < json_array_size(buckets); b++) {
        if (bucket_local[b] < 0)
            continue;
        /* A key is a bucket of the same stage and buffer (a group's tasks are), so it is in
         * the slice; renumbering keeps the order, and so the keys' comparisons. */
        int64_t key = bucket_local[bo->key[b]];
        if (key < bucket_local[b]) {
            rc = cz__error_set(err, CZ_EINVALID,
                               "$.buckets[%zu]: its all-gather key, bucket %" PRId64
                               ", is not of its stage and buffer; the plan cannot be split",
                               b, bo->key[b]);
            goto done;
        }
        json_t *c = json_copy(json_array_get(buckets, b));
        if (!c || json_object_set_new(c, "id", json_integer(bucket_local[b])) != 0 ||
            json_object_set_new(c, "gather_key", json_integer(key)) != 0 ||
            json_array_append_new(bs, c) != 0) {
            json_decref(c);
            rc = cz__error_set(err, CZ_ENOMEM, "out of memory writing a split plan");
            goto done;
        }
    }
    for (size_t i = 0; i < json_array_size(params); i++) {
        if (po->stage[i] != s || (po->ep[i] >= 0 && po->ep[i] != e))
            continue;
        const json_t *q = json_array_get(params, i);
        int64_t b = geti(q, "bucket", -1);
        if (b < 0 || (size_t)b >= json_array_size(buckets) || bucket_local[b] < 0) {
            rc = cz__error_set(err, CZ_EINVALID,
                               "$.params[%zu]: its bucket %" PRId64
                               " is not of its stage and buffer; the plan cannot be split",
                               i, b);
            goto done;
        }
        json_t *c = json_copy((json_t *)q);
        if (!c || json_object_set_new(c, "id", json_integer(np++)) != 0 ||
            json_object_set_new(c, "bucket", json_integer(bucket_local[b])) != 0 ||
            json_array_append_new(ps, c) != 0 ||
            json_array_append_new(gids, json_integer((json_int_t)i)) != 0) {
            json_decref(c);
            rc = cz__error_set(err, CZ_ENOMEM, "out of memory writing a split plan");
            goto done;
        }
    }
    rc = parts_add(t, o, plan_sha, err);
done:
    json_decref(o);
    json_decref(bs);
    json_decref(ps);
    json_decref(gids);
    return rc;
}

/* Stage s's pieces: its slices, then its DP ranks' schedule entries, then its expert ranks'. */
static int write_stage(const char *dir, const json_t *root, const owners *bo, const owners *po,
                       int s, int ep, size_t dp, size_t xr, const char *plan_sha, int *bucket_local,
                       cz_error *err)
{
    const json_t *ts = json_object_get(root, "tp_schedule"),
                 *es = json_object_get(root, "expert_schedule");
    parts t = {{0}, {0}};
    int rc = CZ_OK;
    for (int e = 0; e < ep && rc == CZ_OK; e++)
        rc = add_slice(&t, root, bo, po, s, e, plan_sha, bucket_local, err);
    for (size_t k = 0; k < dp + xr && rc == CZ_OK; k++) {
        const json_t *x = k < dp ? json_array_get(ts, (size_t)s * dp + k)
                                 : json_array_get(es, (size_t)s * xr + (k - dp));
        json_t *c = x ? json_copy((json_t *)x) : NULL;
        if (!c) {
            rc = cz__error_set(err, CZ_EINVALID, "stage %d: schedule %zu missing from the plan", s,
                               k);
            break;
        }
        rc = parts_add(&t, c, plan_sha, err);
        json_decref(c);
    }
    char name[64];
    if (rc == CZ_OK) {
        snprintf(name, sizeof name, "stage-%d.parts", s);
        rc = write_text(dir, name, t.lines.s ? t.lines.s : "", t.lines.len, err);
    }
    if (rc == CZ_OK) {
        snprintf(name, sizeof name, "stage-%d.index", s);
        rc = write_text(dir, name, t.index.s ? t.index.s : "", t.index.len, err);
    }
    free(t.lines.s);
    free(t.index.s);
    return rc;
}

int cz__plan_split_write(const char *plan_path, const char *dir, cz_error *err)
{
    json_t *root = NULL;
    int *bucket_local = NULL;
    char sha[65];
    int rc;
    if (mkdir(dir, 0777) != 0 && errno != EEXIST)
        return cz__error_set(err, CZ_EIO, "%s: cannot create the split plan folder: %s", dir,
                             strerror(errno));
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return cz__error_set(err, CZ_EIO, "%s: not a folder; --split needs a folder", dir);
    if ((rc = cz__json_load_file(&root, NULL, plan_path, err)) != CZ_OK)
        return rc;
    /* The pieces carry the hash the whole plan records; it must be that plan's. */
    const char *rec = json_string_value(json_object_get(root, CZ_CONTENT_KEY));
    if ((rc = cz__plan_json_content_hash(root, sha, err)) != CZ_OK)
        goto done;
    if (!rec || strcmp(rec, sha) != 0) {
        rc = cz__error_set(err, CZ_EINVALID,
                           "%s: the plan's content does not match its content_sha256; only a "
                           "plan as canzona plan wrote it can be split",
                           plan_path);
        goto done;
    }
    /* A rank's part is its DP rank's buckets and schedule; a fully sharded plan has neither,
     * and the executor that would read the parts does not run it. */
    const char *schema = json_string_value(json_object_get(root, "schema"));
    if (schema && strcmp(schema, CZ_PLAN_SCHEMA_FSDP) == 0) {
        rc = cz__error_set(err, CZ_EUNSUPPORTED,
                           "%s: a fully sharded plan (\"%s\") cannot be split into per-rank "
                           "parts: it has no buckets or per-DP-rank schedules, and the executor "
                           "does not run it yet; leave out --split",
                           plan_path, CZ_PLAN_SCHEMA_FSDP);
        goto done;
    }
    const json_t *topo = json_object_get(root, "topology");
    int64_t dp = geti(topo, "dp", 0), pp = geti(topo, "pp", 0), ep = geti(topo, "ep", 0),
            edp = geti(topo, "edp", 0);
    size_t xr = ep > 0 && edp > 0 ? (size_t)(ep * edp) : 0;
    bucket_local =
        malloc((json_array_size(json_object_get(root, "buckets")) + 1) * sizeof *bucket_local);
    if (!bucket_local) {
        rc = cz__error_set(err, CZ_ENOMEM, "out of memory writing a split plan");
        goto done;
    }
    owners bo = {0}, po = {0};
    if ((rc = owners_read(&bo, json_object_get(root, "buckets"), err)) == CZ_OK &&
        (rc = owners_read(&po, json_object_get(root, "params"), err)) == CZ_OK &&
        (rc = gather_keys_read(&bo, root, err)) == CZ_OK &&
        (rc = write_header(dir, root, sha, err)) == CZ_OK)
        for (int s = 0; s < pp && rc == CZ_OK; s++)
            rc = write_stage(dir, root, &bo, &po, s, ep > 0 ? (int)ep : 1, (size_t)dp, xr, sha,
                             bucket_local, err);
    owners_free(&bo);
    owners_free(&po);
done:
    free(bucket_local);
    json_decref(root);
    return rc;
}
