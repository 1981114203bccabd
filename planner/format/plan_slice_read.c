/* Reading one rank's part of a split plan folder (docs/FORMATS.md section 9; the writer is
 * plan_slice_write.c): the header, then three lines of the stage's parts file found through its
 * fixed-width index: the rank's slice (its stage's dense parameters and buckets, its EP rank's
 * experts), its DP rank's schedule and its expert rank's. One parse of the header and of each
 * line, of its own bytes only, so that a rank's start-up reads in proportion to its part. Every
 * piece is checked against its own content hash and must carry the header's plan hash: a piece
 * edited, or one of another plan, is refused with the file's name and the rank whose part it is.
 * The members are read by the whole plan's readers (plan_io.c), so that they mean what they mean
 * there. */
#include "format_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

bool cz__plan_path_is_folder(const char *path)
{
    struct stat st;
    return path && stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* The part being read, for messages. */
typedef struct part {
    const char *dir;
    int rank, stage, dp_rank, ep_rank, edp_rank, experts;
    char plan_sha[65];
} part;

static int piece_path(char out[4096], const part *w, const char *name, cz_error *err)
{
    if ((size_t)snprintf(out, 4096, "%s/%s", w->dir, name) >= 4096)
        return cz__error_set(err, CZ_EINVALID, "%s: split plan folder path too long", w->dir);
    return CZ_OK;
}

/* Checks a piece's own content hash, and that it is of the header's plan (w->plan_sha; empty
 * for the header itself, which then sets it). */
static int check_piece(const cz_json_ctx *c, const json_t *root, part *w)
{
    const char *rec = NULL, *plan = NULL;
    char actual[65];
    int rc;
    if ((rc = cz__json_get_string(c, root, "$", CZ_CONTENT_KEY, true, &rec)) != CZ_OK ||
        (rc = cz__json_get_string(c, root, "$", "plan_sha256", true, &plan)) != CZ_OK ||
        (rc = cz__plan_json_content_hash(root, actual, c->err)) != CZ_OK)
        return rc;
    if (strcmp(rec, actual) != 0)
        return cz__json_fail(c, "$." CZ_CONTENT_KEY,
                             "content hash mismatch: the file was edited after canzona plan "
                             "--split wrote it; re-run canzona plan --split");
    if (strlen(plan) != 64)
        return cz__json_fail(c, "$.plan_sha256", "expected 64 hexadecimal digits");
    if (!w->plan_sha[0]) {
        memcpy(w->plan_sha, plan, 65);
        return CZ_OK;
    }
    if (strcmp(plan, w->plan_sha) != 0)
        return cz__json_fail(c, "$.plan_sha256",
                             "is %.12s..., but the folder's header.json is of plan %.12s...: the "
                             "folder mixes files of two plans; re-run canzona plan --split",
                             plan, w->plan_sha);
    return CZ_OK;
}

/* header.json: the plan's settings, topology and origin; the rank's place in the grid. */
static int read_header(part *w, cz_plan *p, cz_error *err)
{
    static const char *const keys[] = {
        "schema",   "plan_schema",    "plan_sha256",   "generator", "inputs",       "settings",
        "topology", "buckets_config", "solver_result", "dtype",     CZ_CONTENT_KEY, NULL};
    char path[4096];
    json_t *root = NULL;
    int rc;
    if ((rc = piece_path(path, w, "header.json", err)) != CZ_OK ||
        (rc = cz__json_load_file(&root, NULL, path, err)) != CZ_OK)
        return rc;
    cz_json_ctx cc = {path, err}, *c = &cc;
    const char *schema = NULL;
    if ((rc = cz__json_check_schema(c, root, CZ_PLAN_HEADER_SCHEMA)) != CZ_OK ||
        (rc = cz__json_check_object(c, root, "$", keys)) != CZ_OK ||
        (rc = check_piece(c, root, w)) != CZ_OK ||
        (rc = cz__json_get_string(c, root, "$", "plan_schema", true, &schema)) != CZ_OK)
        goto done;
    p->schema_version = !strcmp(schema, CZ_PLAN_SCHEMA)          ? 1
                        : !strcmp(schema, CZ_PLAN_SCHEMA_SPLIT)  ? 2
                        : !strcmp(schema, CZ_PLAN_SCHEMA_EXPERT) ? 3
                                                                 : 0;
    if (!p->schema_version) {
        rc = cz__json_fail(c, "$.plan_schema", "expected \"%s\", \"%s\" or \"%s\", found \"%.80s\"",
                           CZ_PLAN_SCHEMA, CZ_PLAN_SCHEMA_SPLIT, CZ_PLAN_SCHEMA_EXPERT, schema);
        goto done;
    }
    if ((rc = cz__plan_read_origin(c, root, p)) != CZ_OK ||
        (rc = cz__plan_read_settings(c, root, p)) != CZ_OK ||
        (rc = cz__plan_read_solver_result(c, root, p)) != CZ_OK ||
        (rc = cz__plan_read_shape(c, root, p)) != CZ_OK)
        goto done;
    int64_t per_stage = (int64_t)p->dp * p->tp, gpus = per_stage * p->pp;
    if (w->rank < 0 || w->rank >= gpus) {
        rc = cz__error_set(err, CZ_EMISMATCH,
                           "%s: world rank %d is outside the plan's %" PRId64 " ranks (dp*tp*pp = "
                           "%d*%d*%d)",
                           path, w->rank, gpus, p->dp, p->tp, p->pp);
        goto done;
    }
    int local = (int)(w->rank % per_stage);
    w->stage = (int)(w->rank / per_stage);
    w->dp_rank = local / p->tp;
    w->experts = cz_plan_has_experts(p);
    if (w->experts) {
        w->ep_rank = local / p->etp % p->ep;
        w->edp_rank = local / (p->etp * p->ep);
    }
done:
    json_decref(root);
    return rc;
}

static int read_global_ids(const cz_json_ctx *c, const json_t *root, cz_plan *p)
{
    const json_t *ids;
    int rc = cz__json_get_array(c, root, "$", "global_ids", true, 0, &ids);
    if (rc != CZ_OK)
        return rc;
    if (json_array_size(ids) != p->nparams)
        return cz__json_fail(c, "$.global_ids", "expected %zu ids (one per parameter), found %zu",
                             p->nparams, json_array_size(ids));
    p->slice.global_ids = calloc(p->nparams + 1, sizeof *p->slice.global_ids);
    if (!p->slice.global_ids)
        return cz__error_set(c->err, CZ_ENOMEM, "%s: out of memory", c->file);
    for (size_t i = 0; i < p->nparams; i++) {
        char el[CZ_JSON_PATH_MAX];
        int lo = i ? p->slice.global_ids[i - 1] + 1 : 0;
        if ((rc = cz__json_as_int(c, json_array_get(ids, i),
                                  cz__json_path_index(el, "$.global_ids", i), lo, INT_MAX - 1,
                                  &p->slice.global_ids[i])) != CZ_OK)
            return rc;
    }
    return CZ_OK;
}

/* Line k of stage-S.parts, through record k of stage-S.index, parsed into *out; *where names
 * it for messages ("DIR/stage-S.parts (part k)"). */
static int read_part(const part *w, size_t k, json_t **out, char *where, size_t wn, cz_error *err);

/* A slice's bucket: a plan's bucket plus its all-gather key ("gather_key", written by canzona
 * plan --split from the whole plan's schedules; a folder written before it has none: -1, and
 * the bucket-wise step refuses it). The key is read apart so that a whole plan's bucket keeps
 * refusing the member. */
static int read_slice_bucket(const cz_json_ctx *c, const json_t *e, const char *path, size_t i,
                             size_t n, const cz_plan *p, cz_plan_bucket *b)
{
    json_t *copy = json_copy((json_t *)e);
    if (!copy)
        return cz__error_set(c->err, CZ_ENOMEM, "%s: out of memory", c->file);
    json_object_del(copy, "gather_key");
    int rc = cz__plan_read_bucket(c, copy, path, i, p, b);
    json_decref(copy);
    b->gather_key = -1;
    if (rc != CZ_OK || !json_object_get(e, "gather_key"))
        return rc;
    /* At least its own index (a key only rises), within the slice's buckets. */
    return cz__json_get_int64(c, e, path, "gather_key", true, (int64_t)i, (int64_t)n - 1,
                              &b->gather_key);
}

/* The slice line: the slice's buckets, then its parameters (which refer to them). */
static int read_slice_line(part *w, cz_plan *p, cz_error *err)
{
    static const char *const keys[] = {"stage",  "ep_rank",    "plan_sha256",  "buckets",
                                       "params", "global_ids", CZ_CONTENT_KEY, NULL};
    char where[4200], el[CZ_JSON_PATH_MAX];
    json_t *root = NULL;
    const json_t *params, *buckets;
    int rc, s = 0, e = 0;
    int want_e = w->experts ? w->ep_rank : 0;
    if ((rc = read_part(w, (size_t)want_e, &root, where, sizeof where, err)) != CZ_OK)
        return rc;
    cz_json_ctx cc = {where, err}, *c = &cc;
    if ((rc = cz__json_check_object(c, root, "$", keys)) != CZ_OK ||
        (rc = check_piece(c, root, w)) != CZ_OK ||
        (rc = cz__json_get_int(c, root, "$", "stage", true, w->stage, w->stage, &s)) != CZ_OK ||
        (rc = cz__json_get_int(c, root, "$", "ep_rank", true, want_e, want_e, &e)) != CZ_OK ||
        (rc = cz__json_get_array(c, root, "$", "params", true, 1, &params)) != CZ_OK ||
        (rc = cz__json_get_array(c, root, "$", "buckets", true, 0, &buckets)) != CZ_OK)
        goto done;
    if (json_array_size(params) > (size_t)CZ_MODEL_MAX_PARAMS ||
        json_array_size(buckets) > (size_t)INT_MAX) {
        rc = cz__json_fail(c, "$", "too many parameters or buckets");
        goto done;
    }
    if (!(p->buckets = calloc(json_array_size(buckets) + 1, sizeof *p->buckets)) ||
        !(p->params = calloc(json_array_size(params), sizeof *p->params))) {
        rc = cz__error_set(err, CZ_ENOMEM, "%s: out of memory", where);
        goto done;
    }
    for (size_t i = 0; i < json_array_size(buckets); i++) {
        p->nbuckets++;
        if ((rc = read_slice_bucket(c, json_array_get(buckets, i),
                                    cz__json_path_index(el, "$.buckets", i), i,
                                    json_array_size(buckets), p, &p->buckets[i])) != CZ_OK)
            goto done;
    }
    for (size_t i = 0; i < json_array_size(params); i++) {
        p->nparams++;
        if ((rc = cz__plan_read_param(c, json_array_get(params, i),
                                      cz__json_path_index(el, "$.params", i), i, p,
                                      &p->params[i])) != CZ_OK)
            goto done;
    }
    rc = read_global_ids(c, root, p);
done:
    json_decref(root);
    return rc;
}

/* The slice's index of the parameter whose id in the whole plan is gid; -1 if none. */
static int local_id(const cz_plan *p, json_int_t gid)
{
    size_t lo = 0, hi = p->nparams;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (p->slice.global_ids[mid] < gid)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < p->nparams && p->slice.global_ids[lo] == gid ? (int)lo : -1;
}

/* A schedule line names parameters by their ids in the whole plan: each becomes the slice's
 * index, so that the whole plan's group reader checks the tasks against the slice. */
static int localize(const cz_json_ctx *c, json_t *groups, const cz_plan *p, const part *w)
{
    char el[CZ_JSON_PATH_MAX];
    for (size_t g = 0; g < json_array_size(groups); g++) {
        json_t *slots = json_object_get(json_array_get(groups, g), "slots");
        for (size_t k = 0; k < json_array_size(slots); k++) {
            json_t *list = json_array_get(slots, k);
            for (size_t i = 0; i < json_array_size(list); i++) {
                json_t *v = json_array_get(list, i);
                json_t *id = json_is_object(v) ? json_object_get(v, "param") : v;
                if (!json_is_integer(id))
                    continue; /* the group reader names what is wrong with it */
                int x = local_id(p, json_integer_value(id));
                if (x < 0) {
                    snprintf(el, sizeof el, "$.groups[%zu].slots[%zu][%zu]", g, k, i);
                    return cz__json_fail(c, el,
                                         "parameter %" JSON_INTEGER_FORMAT
                                         " is not in the slice of stage %d, EP rank %d",
                                         json_integer_value(id), w->stage,
                                         w->experts ? w->ep_rank : 0);
                }
                json_integer_set(id, x);
            }
        }
    }
    return CZ_OK;
}

/* Record k of the stage's index: where line k of its parts starts and how long it is. */
static int read_index(const part *w, size_t k, size_t *off, size_t *len, cz_error *err)
{
    char path[4096], name[64], rec[CZ_SLICE_INDEX_RECORD + 1];
    snprintf(name, sizeof name, "stage-%d.index", w->stage);
    int rc = piece_path(path, w, name, err);
    if (rc != CZ_OK)
        return rc;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return cz__error_set(err, CZ_EIO, "%s: cannot open: %s", path, strerror(errno));
    ssize_t n = pread(fd, rec, CZ_SLICE_INDEX_RECORD, (off_t)(k * CZ_SLICE_INDEX_RECORD));
    close(fd);
    rec[n > 0 ? n : 0] = '\0';
    unsigned long long a, b;
    char nl = 0;
    if (n != CZ_SLICE_INDEX_RECORD || sscanf(rec, "%19llu %19llu%c", &a, &b, &nl) != 3 ||
        nl != '\n' || b == 0 || b > ((size_t)1 << 30))
        return cz__error_set(err, CZ_EINVALID,
                             "%s: record %zu (bytes %zu to %zu) is missing or not \"OFFSET "
                             "LENGTH\"; the index is truncated or of another plan: re-run "
                             "canzona plan --split",
                             path, k, k * CZ_SLICE_INDEX_RECORD, (k + 1) * CZ_SLICE_INDEX_RECORD);
    *off = (size_t)a, *len = (size_t)b;
    return CZ_OK;
}

static int read_part(const part *w, size_t k, json_t **out, char *where, size_t wn, cz_error *err)
{
    char path[4096], name[64];
    size_t off = 0, len = 0;
    char *buf = NULL;
    int rc, fd = -1;
    *out = NULL;
    snprintf(name, sizeof name, "stage-%d.parts", w->stage);
    if ((rc = piece_path(path, w, name, err)) != CZ_OK)
        return rc;
    snprintf(where, wn, "%s (part %zu)", path, k);
    if ((rc = read_index(w, k, &off, &len, err)) != CZ_OK)
        return rc;
    if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0) {
        rc = cz__error_set(err, CZ_EIO, "%s: cannot open: %s", path, strerror(errno));
        goto done;
    }
    if (!(buf = malloc(len))) {
        rc = cz__error_set(err, CZ_ENOMEM, "%s: out of memory", path);
        goto done;
    }
    if (pread(fd, buf, len, (off_t)off) != (ssize_t)len) {
        rc = cz__error_set(err, CZ_EINVALID,
                           "%s: bytes %zu to %zu, which stage-%d.index gives for part %zu, are "
                           "not in the file: re-run canzona plan --split",
                           path, off, off + len, w->stage, k);
        goto done;
    }
    json_error_t je;
    json_t *root = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &je);
    if (!root || !json_is_object(root)) {
        json_decref(root);
        rc = cz__error_set(err, CZ_EPARSE, "%s: invalid JSON: %s", where,
                           root ? "not an object" : je.text);
        goto done;
    }
    *out = root;
done:
    if (fd >= 0)
        close(fd);
    free(buf);
    return rc;
}

/* The DP rank's schedule line (with expert: the expert rank's) into *rs. */
static int read_schedule(part *w, cz_plan *p, bool expert, cz_rank_schedule *rs, cz_error *err)
{
    static const char *const keys[] = {"stage",       "dp_rank",      "groups",
                                       "plan_sha256", CZ_CONTENT_KEY, NULL};
    static const char *const ekeys[] = {"stage",       "ep_rank",      "edp_rank", "groups",
                                        "plan_sha256", CZ_CONTENT_KEY, NULL};
    char where[4200], sub[CZ_JSON_PATH_MAX];
    /* The stage's slices come first (one per EP rank, or one), then its DP ranks' schedules,
     * then its expert ranks'. */
    size_t first = w->experts ? (size_t)p->ep : 1;
    size_t k =
        first + (expert ? (size_t)p->dp + (size_t)w->edp_rank * (size_t)p->ep + (size_t)w->ep_rank
                        : (size_t)w->dp_rank);
    json_t *root = NULL;
    const json_t *groups;
    int rc;
    if ((rc = read_part(w, k, &root, where, sizeof where, err)) != CZ_OK)
        return rc;
    cz_json_ctx cc = {where, err}, *c = &cc;
    if ((rc = cz__json_check_object(c, root, "$", expert ? ekeys : keys)) != CZ_OK ||
        (rc = check_piece(c, root, w)) != CZ_OK ||
        (rc = cz__json_get_int(c, root, "$", "stage", true, w->stage, w->stage, &rs->stage)) !=
            CZ_OK)
        goto done;
    if (expert) {
        if ((rc = cz__json_get_int(c, root, "$", "ep_rank", true, w->ep_rank, w->ep_rank,
                                   &rs->ep_rank)) != CZ_OK ||
            (rc = cz__json_get_int(c, root, "$", "edp_rank", true, w->edp_rank, w->edp_rank,
                                   &rs->dp_rank)) != CZ_OK)
            goto done;
    } else if ((rc = cz__json_get_int(c, root, "$", "dp_rank", true, w->dp_rank, w->dp_rank,
                                      &rs->dp_rank)) != CZ_OK) {
        goto done;
    }
    if ((rc = cz__json_get_array(c, root, "$", "groups", true, 0, &groups)) != CZ_OK ||
        (rc = localize(c, (json_t *)groups, p, w)) != CZ_OK)
        goto done;
    bool split = p->schema_version >= 2;
    int group = expert ? p->etp : p->tp;
    int nslots = (p->settings.tp == CZ_TP_SC || group == 1) ? 1 : group;
    size_t ng = json_array_size(groups);
    if (ng > p->nparams * (split ? (size_t)CZ_MAX_BLOCKS : 1)) {
        rc = cz__json_fail(c, "$.groups",
                           "has %zu groups, more than the slice's %zu parameters "
                           "allow",
                           ng, p->nparams);
        goto done;
    }
    if (!(rs->groups = calloc(ng ? ng : 1, sizeof *rs->groups))) {
        rc = cz__error_set(err, CZ_ENOMEM, "%s: out of memory", where);
        goto done;
    }
    for (size_t g = 0; g < ng; g++) {
        rs->ngroups++;
        if ((rc = cz__plan_read_group(c, json_array_get(groups, g),
                                      cz__json_path_index(sub, "$.groups", g), p, nslots, split,
                                      &rs->groups[g])) != CZ_OK)
            goto done;
    }
done:
    json_decref(root);
    return rc;
}

/* A failure's message gains whose part it was: another rank may read the same folder fine. */
static int name_rank(int rc, const part *w, cz_error *err)
{
    if (rc == CZ_OK || !err)
        return rc;
    char tail[160];
    if (w->stage < 0)
        snprintf(tail, sizeof tail, " (reading the part of world rank %d)", w->rank);
    else if (w->experts)
        snprintf(tail, sizeof tail,
                 " (reading the part of world rank %d: stage %d, DP rank %d, EP rank %d, "
                 "expert-DP rank %d)",
                 w->rank, w->stage, w->dp_rank, w->ep_rank, w->edp_rank);
    else
        snprintf(tail, sizeof tail, " (reading the part of world rank %d: stage %d, DP rank %d)",
                 w->rank, w->stage, w->dp_rank);
    size_t n = strlen(err->message);
    snprintf(err->message + n, sizeof err->message - n, "%s", tail);
    return rc;
}

int cz__plan_read_slice(cz_plan **out, const char *dir, int world_rank, cz_error *err)
{
    part w = {.dir = dir, .rank = world_rank, .stage = -1};
    cz_plan *p = calloc(1, sizeof *p);
    int rc;
    *out = NULL;
    if (!p)
        return cz__error_set(err, CZ_ENOMEM, "%s: out of memory", dir);
    if ((rc = read_header(&w, p, err)) != CZ_OK || (rc = read_slice_line(&w, p, err)) != CZ_OK)
        goto done;
    if (!(p->schedules = calloc(1, sizeof *p->schedules))) {
        rc = cz__error_set(err, CZ_ENOMEM, "%s: out of memory", dir);
        goto done;
    }
    p->nschedules = 1;
    if ((rc = read_schedule(&w, p, false, &p->schedules[0], err)) != CZ_OK)
        goto done;
    if (w.experts) {
        if (!(p->expert_schedules = calloc(1, sizeof *p->expert_schedules))) {
            rc = cz__error_set(err, CZ_ENOMEM, "%s: out of memory", dir);
            goto done;
        }
        p->nexpert_schedules = 1;
        if ((rc = read_schedule(&w, p, true, &p->expert_schedules[0], err)) != CZ_OK)
            goto done;
    }
    p->slice.on = 1;
    p->slice.world_rank = world_rank;
    p->slice.stage = w.stage;
    p->slice.dp_rank = w.dp_rank;
    p->slice.ep_rank = w.ep_rank;
    p->slice.edp_rank = w.edp_rank;
    /* Every piece matched its own hash and names the header's plan hash: the slice is what
     * canzona plan cut from the plan of that hash. */
    memcpy(p->content_sha256, w.plan_sha, 65);
    p->content_hash_ok = 1;
    *out = p;
    p = NULL;
done:
    cz_plan_free(p);
    return name_rank(rc, &w, err);
}
