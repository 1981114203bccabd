/*
 * Optimizer-state checkpoints: every parameter's optimizer state as full, unsharded fp32 tensors
 * in one safetensors file, keyed by parameter name, so that a checkpoint saved under one plan
 * loads under any plan of the same model (another DP/TP shape or strategy).
 *
 *   <name>.momentum    Muon momentum of a matrix parameter (full shape)
 *   <name>.exp_avg     AdamW first moment of an elementwise parameter (full shape)
 *   <name>.exp_avg_sq  AdamW second moment
 *   __metadata__       {"format": "canzona.optim/1", "step": "<steps taken>"}
 *
 * Saving gathers every tensor on world rank 0 over the data plane (a matrix's momentum from the
 * lowest rank that hosts it, an elementwise parameter's moments from the TP ranks of its owning
 * DP rank, unpacked into the full tensor) and rank 0 writes the file atomically (temporary file
 * in the same folder, synced, renamed over the old one), so a crash mid-write leaves the
 * previous checkpoint whole. Loading reads the file on rank 0, checks every tensor against the
 * plan and sends each full tensor to the TP ranks of its owning DP rank, which keep what they
 * hold. Both are collective; every rank returns the same verdict. Rank 0 holds the whole file
 * in memory while writing or reading it.
 */
#include "exec_internal.h"
#include "file_io.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#define CZ_OPTIM_FORMAT "canzona.optim/1"
/* Largest checkpoint rank 0 reads (1 TiB): a bound on the file, not a memory reservation. */
#define CZ_STATE_MAX_BYTES ((size_t)1 << 40)

static int64_t full_numel(const cz_plan_param *p)
{
    return p->ndim == 1 ? p->shape[0] : p->shape[0] * p->shape[1];
}

/* Number of tensors the state of p has: one momentum, or two AdamW moments. */
static int state_count(const cz_plan_param *p)
{
    return p->kind == CZ_KIND_MATRIX ? 1 : 2;
}

static const char *state_suffix(const cz_plan_param *p, int k)
{
    if (p->kind == CZ_KIND_MATRIX)
        return "momentum";
    return k == 0 ? "exp_avg" : "exp_avg_sq";
}

/* Every rank learns whether any rank failed: my own code when I failed, else CZ_EMISMATCH
 * naming the lowest failing rank. */
static int agree(cz_executor *ex, int rc, const char *what, cz_error *err)
{
    int64_t v = rc ? ex->ctrl.rank : INT64_MAX;
    cz_error tmp;
    int crc = ex->ctrl.ops->allreduce_min_i64(&ex->ctrl, &v, 1, &tmp);
    if (crc) {
        if (!rc && err)
            *err = tmp;
        return rc ? rc : crc;
    }
    if (rc)
        return rc;
    if (v != INT64_MAX)
        return cz_error_set(err, CZ_EMISMATCH, "rank %lld failed to %s (see its message)",
                            (long long)v, what);
    return CZ_OK;
}

/* One point-to-point transfer of n floats from world rank src to world rank dst, or a local
 * copy when both are this rank. Ranks that are neither do nothing. */
static int transfer(cz_executor *ex, cz_comm_req *req, const float *send, float *recv, int64_t n,
                    int src, int dst, cz_error *err)
{
    int me = ex->world.rank;
    if (src == dst) {
        if (me == src && send != recv)
            memcpy(recv, send, (size_t)n * sizeof *recv);
        return CZ_OK;
    }
    if (me != src && me != dst)
        return CZ_OK;
    const cz_plane_ops *o = ex->world.ops;
    int rc = o->group_start(&ex->world, req, NULL, err);
    if (rc)
        return rc;
    if (me == src)
        o->send(&ex->world, req, send, (size_t)n, CZ_DTYPE_FP32, dst);
    else
        o->recv(&ex->world, req, recv, (size_t)n, CZ_DTYPE_FP32, src);
    rc = o->group_end(&ex->world, req, err);
    return rc ? rc : o->wait(&ex->world, req, err);
}

/* World rank of every (dp_rank, tp_rank) place: the job may hand in communicators whose world
 * order is not dp_rank * tp + tp_rank. grid has dp * tp entries. */
static int grid_build(cz_executor *ex, int64_t *grid, cz_error *err)
{
    int n = ex->dp * ex->tp;
    for (int i = 0; i < n; i++)
        grid[i] = INT64_MAX;
    grid[ex->dp_rank * ex->tp + ex->tp_rank] = ex->world.rank;
    return ex->ctrl.ops->allreduce_min_i64(&ex->ctrl, grid, n, err);
}

/* Checks shared by save and load: no step in flight, state in host memory. */
static int check_usable(cz_executor *ex, const char *what, cz_error *err)
{
    if (ex->async_active)
        return cz_error_set(err, CZ_EINVALID,
                            "%s: a step started with cz_executor_step_async was not waited for",
                            what);
    if (!(ex->compute.ops->caps & CZ_COMPUTE_CAP_HOST_MEMORY))
        return cz_error_set(err, CZ_EUNSUPPORTED,
                            "%s: the %s backend keeps optimizer state in device memory; "
                            "checkpoints need a backend whose memory is host memory (cpu)",
                            what, ex->compute.ops->name);
    return CZ_OK;
}

/* Largest full and local element counts of the plan's parameters. */
static void max_sizes(const cz_plan *plan, int64_t *full, int64_t *local)
{
    *full = *local = 0;
    for (size_t i = 0; i < plan->nparams; i++) {
        if (full_numel(&plan->params[i]) > *full)
            *full = full_numel(&plan->params[i]);
        if (plan->params[i].numel > *local)
            *local = plan->params[i].numel;
    }
}

/* ---- save ---- */

/* The safetensors header of the plan's state with tensors laid out back to back in parameter
 * order, padded with spaces to a multiple of 8 bytes; *data_bytes gets the size of the data. */
static int header_build(const cz_plan *plan, int64_t steps, char **out, size_t *len,
                        size_t *data_bytes, cz_error *err)
{
    int rc = CZ_ENOMEM;
    char *text = NULL;
    json_t *root = json_object();
    if (!root)
        goto out;
    size_t off = 0;
    for (size_t i = 0; i < plan->nparams; i++) {
        const cz_plan_param *p = &plan->params[i];
        for (int k = 0; k < state_count(p); k++) {
            size_t bytes = (size_t)full_numel(p) * sizeof(float);
            json_t *shape =
                p->ndim == 1 ? json_pack("[I]", (json_int_t)p->shape[0])
                             : json_pack("[I,I]", (json_int_t)p->shape[0], (json_int_t)p->shape[1]);
            json_t *t = json_pack("{s:s,s:o,s:[I,I]}", "dtype", "F32", "shape", shape,
                                  "data_offsets", (json_int_t)off, (json_int_t)(off + bytes));
            char key[1024];
            snprintf(key, sizeof key, "%s.%s", p->name, state_suffix(p, k));
            if (!t || json_object_set_new(root, key, t))
                goto out;
            off += bytes;
        }
    }
    char step[32];
    snprintf(step, sizeof step, "%lld", (long long)steps);
    if (json_object_set_new(root, "__metadata__",
                            json_pack("{s:s,s:s}", "format", CZ_OPTIM_FORMAT, "step", step)))
        goto out;
    text = json_dumps(root, JSON_COMPACT | JSON_SORT_KEYS);
    if (!text)
        goto out;
    size_t n = strlen(text), padded = (n + 7) / 8 * 8;
    char *h = malloc(padded);
    if (!h)
        goto out;
    memcpy(h, text, n);
    memset(h + n, ' ', padded - n);
    *out = h;
    *len = padded;
    *data_bytes = off;
    rc = CZ_OK;
out:
    free(text);
    json_decref(root);
    if (rc)
        cz_error_set(err, rc, "save_state: out of memory building the checkpoint header");
    return rc;
}

int cz_executor_save_state(cz_executor *ex, const char *path, cz_error *err)
{
    if (!ex)
        return cz_error_set(err, CZ_EINVALID, "save_state: executor is NULL");
    const cz_plan *plan = ex->plan;
    bool root = ex->world.rank == 0;
    char *header = NULL, *file = NULL;
    float *shards = NULL;
    int64_t *holder = NULL, *grid = NULL;
    cz_comm_req *req = NULL;
    size_t hlen = 0, data_bytes = 0, total = 0;
    int64_t max_full, max_local;
    max_sizes(plan, &max_full, &max_local);

    int rc = check_usable(ex, "save_state", err);
    if (!rc && root && (!path || !*path))
        rc = cz_error_set(err, CZ_EINVALID, "save_state: no checkpoint path given");
    /* Which world rank sends each matrix's momentum: the lowest that hosts it. */
    holder = calloc(plan->nparams ? plan->nparams : 1, sizeof *holder);
    grid = calloc((size_t)(ex->dp * ex->tp), sizeof *grid);
    req = ex->world.ops->req_create(&ex->world);
    if (!rc && (!holder || !grid || !req))
        rc = cz_error_set(err, CZ_ENOMEM, "save_state: out of memory");
    if (!rc && root) {
        rc = header_build(plan, ex->steps, &header, &hlen, &data_bytes, err);
        total = 8 + hlen + data_bytes;
        if (!rc && (!(file = malloc(total)) ||
                    !(shards = malloc((size_t)(max_local ? max_local : 1) * sizeof *shards))))
            rc = cz_error_set(err, CZ_ENOMEM,
                              "save_state: out of memory for a %zu-byte checkpoint on rank 0",
                              total);
    }
    rc = agree(ex, rc, "prepare the checkpoint", err);
    if (rc)
        goto out;
    for (size_t i = 0; i < plan->nparams; i++)
        holder[i] = ex->momentum[i] ? ex->world.rank : INT64_MAX;
    rc = ex->ctrl.ops->allreduce_min_i64(&ex->ctrl, holder, (int)plan->nparams, err);
    if (!rc)
        rc = grid_build(ex, grid, err);
    if (rc)
        goto out;

    if (root) {
        for (int b = 0; b < 8; b++)
            file[b] = (char)((uint64_t)hlen >> (8 * b) & 0xff); /* little-endian length */
        memcpy(file + 8, header, hlen);
    }
    size_t off = 8 + hlen;
    for (size_t i = 0; i < plan->nparams && !rc; i++) {
        const cz_plan_param *p = &plan->params[i];
        int64_t n = full_numel(p);
        if (p->kind == CZ_KIND_MATRIX) {
            if (holder[i] == INT64_MAX) {
                rc = cz_error_set(err, CZ_EINTERNAL,
                                  "save_state: no rank holds the momentum of '%s'", p->name);
                break;
            }
            rc = transfer(ex, req, ex->momentum[i], root ? (float *)(file + off) : NULL, n,
                          (int)holder[i], 0, err);
            off += (size_t)n * sizeof(float);
            continue;
        }
        for (int k = 0; k < 2 && !rc; k++) {
            float *state = k == 0 ? ex->adam_m[i] : ex->adam_v[i];
            for (int t = 0; t < ex->tp && !rc; t++) {
                /* Each DP rank's piece (the whole shard from its owner, or in a split layout
                 * the pieces of the elementwise buffer's slices) lands at its place. */
                for (int d = 0; d < ex->dp && !rc; d++) {
                    int64_t lo, len = cz_exec_param_piece(plan, p, d, &lo);
                    if (len > 0)
                        rc = transfer(ex, req, state, root ? shards + lo : NULL, len,
                                      (int)grid[d * ex->tp + t], 0, err);
                }
                if (!rc && root)
                    cz_shard_unpack(p, ex->tp, t, shards, (float *)(file + off));
            }
            off += (size_t)n * sizeof(float);
        }
    }
    if (!rc && root)
        rc = cz_file_write(path, file, total, err);
    rc = agree(ex, rc, "save the optimizer-state checkpoint", err);
out:
    if (req)
        ex->world.ops->req_free(&ex->world, req);
    free(holder);
    free(grid);
    free(shards);
    free(file);
    free(header);
    return rc;
}

/* ---- load ---- */

/* Reads a non-negative integer from a JSON array element. */
static int get_size(json_t *a, size_t i, int64_t *out)
{
    json_t *v = json_array_get(a, i);
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return -1;
    *out = (int64_t)json_integer_value(v);
    return 0;
}

/* Checks the checkpoint at data (len bytes, read by rank 0) against the plan: every tensor the
 * plan's state needs, F32, full shape, inside the file; nothing else. Fills offs (absolute byte
 * offsets, in the order of the parameters and their state tensors) and *steps. */
static int parse_checkpoint(const cz_plan *plan, const char *path, const char *data, size_t len,
                            size_t *offs, int64_t *steps, cz_error *err)
{
    if (len < 8)
        return cz_error_set(err, CZ_EINVALID,
                            "%s: not a safetensors file (%zu bytes, shorter than its header size)",
                            path, len);
    uint64_t hlen = 0;
    for (int b = 0; b < 8; b++)
        hlen |= (uint64_t)(unsigned char)data[b] << (8 * b);
    if (hlen > len - 8)
        return cz_error_set(err, CZ_EINVALID,
                            "%s: header of %llu bytes does not fit in the %zu-byte file", path,
                            (unsigned long long)hlen, len);
    json_error_t jerr;
    json_t *root = json_loadb(data + 8, (size_t)hlen, 0, &jerr);
    if (!json_is_object(root)) {
        json_decref(root);
        return cz_error_set(err, CZ_EPARSE, "%s: safetensors header is not a JSON object: %s", path,
                            jerr.text);
    }
    int rc = CZ_OK;
    size_t base = 8 + (size_t)hlen, expected = 1, k = 0;
    json_t *meta = json_object_get(root, "__metadata__");
    const char *format = json_string_value(json_object_get(meta, "format"));
    const char *step = json_string_value(json_object_get(meta, "step"));
    char *end = NULL;
    if (!format || strcmp(format, CZ_OPTIM_FORMAT) != 0) {
        rc =
            cz_error_set(err, CZ_EINVALID,
                         "%s: __metadata__.format is %s%s%s, expected \"" CZ_OPTIM_FORMAT
                         "\" (not a canzona optimizer-state checkpoint)",
                         path, format ? "\"" : "", format ? format : "missing", format ? "\"" : "");
        goto out;
    }
    long long s = step ? strtoll(step, &end, 10) : -1;
    if (!step || *end || s < 0) {
        rc = cz_error_set(err, CZ_EINVALID,
                          "%s: __metadata__.step must be a non-negative integer string", path);
        goto out;
    }
    *steps = s;
    for (size_t i = 0; i < plan->nparams; i++) {
        const cz_plan_param *p = &plan->params[i];
        for (int j = 0; j < state_count(p); j++, k++) {
            char key[1024];
            snprintf(key, sizeof key, "%s.%s", p->name, state_suffix(p, j));
            json_t *t = json_object_get(root, key);
            if (!t) {
                rc = cz_error_set(err, CZ_EMISMATCH,
                                  "%s: no tensor '%s': the checkpoint belongs to another model "
                                  "or optimizer assignment",
                                  path, key);
                goto out;
            }
            const char *dtype = json_string_value(json_object_get(t, "dtype"));
            json_t *shape = json_object_get(t, "shape"),
                   *offsets = json_object_get(t, "data_offsets");
            int64_t d0 = 0, d1 = 1, b = 0, e = 0;
            bool shape_ok = json_is_array(shape) && (int)json_array_size(shape) == p->ndim &&
                            !get_size(shape, 0, &d0) && (p->ndim == 1 || !get_size(shape, 1, &d1));
            if (!dtype || strcmp(dtype, "F32") != 0) {
                rc = cz_error_set(err, CZ_EINVALID, "%s: '%s': dtype %s, expected F32", path, key,
                                  dtype ? dtype : "missing");
                goto out;
            }
            if (!shape_ok || d0 != p->shape[0] || (p->ndim == 2 && d1 != p->shape[1])) {
                char want[64];
                if (p->ndim == 1)
                    snprintf(want, sizeof want, "[%lld]", (long long)p->shape[0]);
                else
                    snprintf(want, sizeof want, "[%lld, %lld]", (long long)p->shape[0],
                             (long long)p->shape[1]);
                rc = cz_error_set(err, CZ_EMISMATCH, "%s: '%s': shape differs from the plan's %s",
                                  path, key, want);
                goto out;
            }
            if (!json_is_array(offsets) || json_array_size(offsets) != 2 ||
                get_size(offsets, 0, &b) || get_size(offsets, 1, &e) ||
                e - b != full_numel(p) * (int64_t)sizeof(float) || (uint64_t)e > len - base) {
                rc =
                    cz_error_set(err, CZ_EINVALID,
                                 "%s: '%s': data_offsets must span its %lld floats inside the file",
                                 path, key, (long long)full_numel(p));
                goto out;
            }
            offs[k] = base + (size_t)b;
            expected++;
        }
    }
    if (json_object_size(root) != expected) {
        const char *key;
        json_t *v;
        json_object_foreach(root, key, v)
        {
            const char *dot = strrchr(key, '.');
            bool known = strcmp(key, "__metadata__") == 0;
            for (size_t i = 0; i < plan->nparams && !known && dot; i++) {
                const cz_plan_param *p = &plan->params[i];
                for (int j = 0; j < state_count(p) && !known; j++)
                    known = strlen(p->name) == (size_t)(dot - key) &&
                            strncmp(key, p->name, (size_t)(dot - key)) == 0 &&
                            strcmp(dot + 1, state_suffix(p, j)) == 0;
            }
            if (!known) {
                rc = cz_error_set(err, CZ_EMISMATCH,
                                  "%s: tensor '%s' is not part of this plan's optimizer state",
                                  path, key);
                goto out;
            }
        }
    }
out:
    json_decref(root);
    return rc;
}

int cz_executor_load_state(cz_executor *ex, const char *path, cz_error *err)
{
    if (!ex)
        return cz_error_set(err, CZ_EINVALID, "load_state: executor is NULL");
    const cz_plan *plan = ex->plan;
    bool root = ex->world.rank == 0;
    char *data = NULL;
    size_t len = 0, ntensors = 0, *offs = NULL;
    float *full = NULL, *shard = NULL;
    int64_t *grid = NULL;
    cz_comm_req *req = NULL;
    int64_t steps = INT64_MAX, max_full, max_local;
    max_sizes(plan, &max_full, &max_local);
    for (size_t i = 0; i < plan->nparams; i++)
        ntensors += (size_t)state_count(&plan->params[i]);

    int rc = check_usable(ex, "load_state", err);
    full = malloc((size_t)(max_full ? max_full : 1) * sizeof *full);
    shard = malloc((size_t)(max_local ? max_local : 1) * sizeof *shard);
    offs = calloc(ntensors ? ntensors : 1, sizeof *offs);
    grid = calloc((size_t)(ex->dp * ex->tp), sizeof *grid);
    req = ex->world.ops->req_create(&ex->world);
    if (!rc && (!full || !shard || !offs || !grid || !req))
        rc = cz_error_set(err, CZ_ENOMEM, "load_state: out of memory");
    if (!rc && root) {
        if (!path || !*path)
            rc = cz_error_set(err, CZ_EINVALID, "load_state: no checkpoint path given");
        else
            rc = cz_file_read_all(path, CZ_STATE_MAX_BYTES, &data, &len, err);
        if (!rc)
            rc = parse_checkpoint(plan, path, data, len, offs, &steps, err);
    }
    rc = agree(ex, rc, "read the optimizer-state checkpoint", err);
    if (rc)
        goto out;
    /* Rank 0's step count to everyone (the others hold INT64_MAX). */
    rc = ex->ctrl.ops->allreduce_min_i64(&ex->ctrl, &steps, 1, err);
    if (!rc)
        rc = grid_build(ex, grid, err);
    if (rc)
        goto out;

    size_t k = 0;
    for (size_t i = 0; i < plan->nparams && !rc; i++) {
        const cz_plan_param *p = &plan->params[i];
        int64_t n = full_numel(p);
        for (int j = 0; j < state_count(p) && !rc; j++, k++) {
            if (root) /* the file's data need not be aligned for floats: copy it out */
                memcpy(full, data + offs[k], (size_t)n * sizeof *full);
            /* Every TP rank of each DP rank holding a piece gets the full tensor and keeps its
             * part (the owner of a whole parameter, or in a split layout every DP rank whose
             * slice of the elementwise buffer holds a piece of it). */
            for (int d = 0; d < ex->dp && !rc; d++) {
                int64_t lo, len = cz_exec_param_piece(plan, p, d, &lo);
                if (len == 0)
                    continue;
                for (int t = 0; t < ex->tp && !rc; t++) {
                    int dst = (int)grid[d * ex->tp + t];
                    rc = transfer(ex, req, full, full, n, 0, dst, err);
                    if (rc || ex->world.rank != dst)
                        continue;
                    if (p->kind == CZ_KIND_MATRIX) {
                        if (ex->momentum[i])
                            memcpy(ex->momentum[i], full, (size_t)n * sizeof *full);
                        continue;
                    }
                    float *state = j == 0 ? ex->adam_m[i] : ex->adam_v[i];
                    if (len == p->numel) {
                        cz_shard_pack(p, ex->tp, ex->tp_rank, full, state);
                    } else {
                        cz_shard_pack(p, ex->tp, ex->tp_rank, full, shard);
                        memcpy(state, shard + lo, (size_t)len * sizeof *state);
                    }
                }
            }
        }
    }
    rc = agree(ex, rc, "load the optimizer-state checkpoint", err);
    if (!rc)
        ex->steps = steps;
out:
    if (req)
        ex->world.ops->req_free(&ex->world, req);
    free(offs);
    free(grid);
    free(full);
    free(shard);
    free(data);
    return rc;
}
