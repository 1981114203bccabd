/*
 * Optimizer-state checkpoints, the container: the safetensors file that holds every
 * parameter's optimizer state as full fp32 tensors keyed by parameter name (checkpoint.c moves
 * them between the ranks and this file on rank 0).
 *
 *   <name>.momentum    Muon momentum of a matrix parameter (full shape)
 *   <name>.exp_avg     AdamW first moment of an elementwise parameter (full shape)
 *   <name>.exp_avg_sq  AdamW second moment
 *   <name>.shampoo.<r0>_<c0>.<field>  Shampoo state of the tile at (r0, c0) (shampoo.c)
 *   <name>.soap.<r0>_<c0>.<field>     SOAP state of the block at (r0, c0) (soap.c)
 *   __metadata__       {"format": "canzona.optim/1", "step": "<steps taken>"}
 *
 * Writing builds the header of the plan's tensor list with the data back to back in list
 * order; reading checks the file against that list (every tensor F32, of the plan's shape, its
 * values ones the optimizer can hold, nothing else, the data tiled as safetensors requires).
 * It lives in core/, not util/: it reads and writes the plan's state list (ck_entry, the
 * optimizer's rules for its values), not any safetensors file.
 */
#include "checkpoint_file.h"
#include "cz_format.h"

#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define CZ_OPTIM_FORMAT "canzona.optim/1"
/* Most steps a checkpoint may record: the optimizers take the step count as a double for their
 * bias corrections, exact up to 2^53, and a step must still be able to add one. */
#define CZ_STATE_MAX_STEPS ((int64_t)1 << 53)
/* Header bytes allowed per tensor beyond six times its name (every character escaped as \uXXXX)
 * and for the metadata: what any writer's formatting of dtype, shape and offsets needs. */
#define CZ_HEADER_PER_TENSOR 256
#define CZ_HEADER_SLACK 65536

/* The safetensors header of the tensors e with their data back to back in list order, padded
 * with spaces to a multiple of 8 bytes; *data_bytes gets the size of the data. */
int cz__ckpt_header_build(const cz_plan *plan, const ck_entry *e, size_t ne, int64_t steps,
                          char **out, size_t *len, size_t *data_bytes, cz_error *err)
{
    int rc = CZ_ENOMEM;
    char *text = NULL;
    json_t *root = json_object();
    if (!root)
        goto done;
    size_t off = 0;
    for (size_t i = 0; i < ne; i++) {
        size_t bytes = (size_t)e[i].n * sizeof(float);
        json_t *shape = e[i].ndim == 1 ? json_pack("[I]", (json_int_t)e[i].shape[0])
                                       : json_pack("[I,I]", (json_int_t)e[i].shape[0],
                                                   (json_int_t)e[i].shape[1]);
        json_t *t = json_pack("{s:s,s:o,s:[I,I]}", "dtype", "F32", "shape", shape, "data_offsets",
                              (json_int_t)off, (json_int_t)(off + bytes));
        char key[1024];
        snprintf(key, sizeof key, "%s.%s", plan->params[e[i].param].def.name, e[i].suffix);
        if (!t || json_object_set_new(root, key, t))
            goto done;
        off += bytes;
    }
    char step[32];
    snprintf(step, sizeof step, "%lld", (long long)steps);
    if (json_object_set_new(root, "__metadata__",
                            json_pack("{s:s,s:s}", "format", CZ_OPTIM_FORMAT, "step", step)))
        goto done;
    text = json_dumps(root, JSON_COMPACT | JSON_SORT_KEYS);
    if (!text)
        goto done;
    size_t n = strlen(text), padded = (n + 7) / 8 * 8;
    char *h = malloc(padded);
    if (!h)
        goto done;
    memcpy(h, text, n);
    memset(h + n, ' ', padded - n);
    *out = h;
    *len = padded;
    *data_bytes = off;
    rc = CZ_OK;
done:
    free(text);
    json_decref(root);
    if (rc)
        cz__error_set(err, rc, "save_state: out of memory building the checkpoint header");
    return rc;
}

/* The file's first bytes: the header's length (8 bytes, little-endian), then the header. */
void cz__ckpt_header_put(char *file, const char *header, size_t hlen)
{
    for (int k = 0; k < 8; k++)
        file[k] = (char)((uint64_t)hlen >> (8 * k) & 0xff); /* little-endian length */
    memcpy(file + 8, header, hlen);
}

/* Reads a non-negative integer from a JSON array element. */
static int get_size(json_t *a, size_t i, int64_t *out)
{
    json_t *v = json_array_get(a, i);
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return -1;
    *out = (int64_t)json_integer_value(v);
    return 0;
}

/* The key of tensor e in the file: "<param name>.<suffix>". */
static void entry_key(const cz_plan *plan, const ck_entry *e, char *key, size_t cap)
{
    snprintf(key, cap, "%s.%s", plan->params[e->param].def.name, e->suffix);
}

/* Names the first tensor of root that is not in the list (nor __metadata__). */
static int find_foreign(const cz_plan *plan, const ck_entry *e, size_t ne, json_t *root,
                        const char *path, cz_error *err)
{
    json_t *known = json_object();
    if (!known)
        return cz__error_set(err, CZ_ENOMEM, "load_state: out of memory");
    int rc = CZ_OK;
    char key[1024];
    for (size_t i = 0; i < ne; i++) {
        entry_key(plan, &e[i], key, sizeof key);
        if (json_object_set_new(known, key, json_true())) {
            rc = cz__error_set(err, CZ_ENOMEM, "load_state: out of memory");
            goto done;
        }
    }
    const char *k;
    json_t *v;
    json_object_foreach(root, k, v)
    {
        if (strcmp(k, "__metadata__") != 0 && !json_object_get(known, k)) {
            rc = cz__error_set(err, CZ_EMISMATCH,
                               "%s: tensor '%s' is not part of this plan's optimizer state", path,
                               k);
            goto done;
        }
    }
done:
    json_decref(known);
    return rc;
}

/* The largest file a checkpoint of this list can be: the plan fixes the tensor data exactly;
 * the header is bounded by its tensors' names (see CZ_HEADER_PER_TENSOR). *data gets the
 * data's size. */
static size_t checkpoint_cap(const cz_plan *plan, const ck_entry *e, size_t ne, size_t *data)
{
    size_t header = CZ_HEADER_SLACK;
    *data = 0;
    for (size_t i = 0; i < ne; i++) {
        char key[1024];
        entry_key(plan, &e[i], key, sizeof key);
        header += 6 * strlen(key) + CZ_HEADER_PER_TENSOR;
        *data += (size_t)e[i].n * sizeof(float);
    }
    return 8 + header + *data;
}

/* The step count of __metadata__.step: decimal digits only (no sign, no spaces), at most
 * CZ_STATE_MAX_STEPS. */
static int parse_steps(const char *step, const char *path, int64_t *out, cz_error *err)
{
    int64_t v = 0;
    bool ok = step && *step;
    for (const char *c = step; ok && *c; c++) {
        ok = *c >= '0' && *c <= '9';
        if (ok)
            v = v * 10 + (*c - '0');
        ok = ok && v <= CZ_STATE_MAX_STEPS; /* checked per digit: v * 10 cannot overflow */
    }
    if (!ok)
        return cz__error_set(err, CZ_EINVALID,
                             "%s: __metadata__.step is %s%s%s; expected a string of decimal digits "
                             "from \"0\" to \"%lld\" (the steps taken)",
                             path, step ? "\"" : "", step ? step : "missing", step ? "\"" : "",
                             (long long)CZ_STATE_MAX_STEPS);
    *out = v;
    return CZ_OK;
}

/* __metadata__: an object of strings (the safetensors format) with our format and the step. */
static int parse_metadata(json_t *root, const char *path, int64_t *steps, cz_error *err)
{
    json_t *meta = json_object_get(root, "__metadata__");
    const char *k;
    json_t *v;
    if (!json_is_object(meta))
        return cz__error_set(
            err, CZ_EINVALID,
            "%s: no __metadata__ object (not a canzona optimizer-state checkpoint)", path);
    json_object_foreach(meta, k, v)
    {
        if (!json_is_string(v))
            return cz__error_set(err, CZ_EINVALID,
                                 "%s: __metadata__.%s is not a string; safetensors metadata maps "
                                 "strings to strings",
                                 path, k);
    }
    const char *format = json_string_value(json_object_get(meta, "format"));
    if (!format || strcmp(format, CZ_OPTIM_FORMAT) != 0)
        return cz__error_set(err, CZ_EINVALID,
                             "%s: __metadata__.format is %s%s%s, expected \"" CZ_OPTIM_FORMAT
                             "\" (not a canzona optimizer-state checkpoint)",
                             path, format ? "\"" : "", format ? format : "missing",
                             format ? "\"" : "");
    return parse_steps(json_string_value(json_object_get(meta, "step")), path, steps, err);
}

/* Tensor i of the list in the header: an object of exactly dtype "F32", the plan's shape and
 * data_offsets spanning its bytes. Sets offs[i] (relative to the data). */
static int parse_tensor(const cz_plan *plan, const ck_entry *e, json_t *root, const char *path,
                        size_t *offs, cz_error *err)
{
    char key[1024];
    entry_key(plan, e, key, sizeof key);
    json_t *t = json_object_get(root, key);
    if (!t)
        return cz__error_set(err, CZ_EMISMATCH,
                             "%s: no tensor '%s': the checkpoint belongs to another model, "
                             "optimizer assignment or optimizer settings (Shampoo's and SOAP's "
                             "tensors follow max_dim and the kept state)",
                             path, key);
    if (!json_is_object(t))
        return cz__error_set(err, CZ_EINVALID, "%s: '%s' is not an object", path, key);
    const char *k;
    json_t *v;
    json_object_foreach(t, k, v)
    {
        if (strcmp(k, "dtype") != 0 && strcmp(k, "shape") != 0 && strcmp(k, "data_offsets") != 0)
            return cz__error_set(err, CZ_EINVALID,
                                 "%s: '%s': unknown member '%s'; a safetensors tensor has dtype, "
                                 "shape and data_offsets",
                                 path, key, k);
    }
    const char *dtype = json_string_value(json_object_get(t, "dtype"));
    json_t *shape = json_object_get(t, "shape"), *offsets = json_object_get(t, "data_offsets");
    int64_t d0 = 0, d1 = 1, b = 0, f = 0;
    bool shape_ok = json_is_array(shape) && (int)json_array_size(shape) == e->ndim &&
                    !get_size(shape, 0, &d0) && (e->ndim == 1 || !get_size(shape, 1, &d1));
    if (!dtype || strcmp(dtype, "F32") != 0)
        return cz__error_set(err, CZ_EINVALID, "%s: '%s': dtype %s, expected F32", path, key,
                             dtype ? dtype : "missing");
    if (!shape_ok || d0 != e->shape[0] || (e->ndim == 2 && d1 != e->shape[1])) {
        char want[64];
        if (e->ndim == 1)
            snprintf(want, sizeof want, "[%lld]", (long long)e->shape[0]);
        else
            snprintf(want, sizeof want, "[%lld, %lld]", (long long)e->shape[0],
                     (long long)e->shape[1]);
        return cz__error_set(err, CZ_EMISMATCH, "%s: '%s': shape differs from the plan's %s", path,
                             key, want);
    }
    if (!json_is_array(offsets) || json_array_size(offsets) != 2 || get_size(offsets, 0, &b) ||
        get_size(offsets, 1, &f) || f < b || f - b != e->n * (int64_t)sizeof(float))
        return cz__error_set(err, CZ_EINVALID,
                             "%s: '%s': data_offsets must be [begin, end] spanning its %lld floats "
                             "(%lld bytes)",
                             path, key, (long long)e->n,
                             (long long)e->n * (long long)sizeof(float));
    offs[0] = (size_t)b;
    return CZ_OK;
}

typedef struct span {
    size_t begin;
    size_t entry;
} span;

static int span_cmp(const void *a, const void *b)
{
    const span *x = a, *y = b;
    return x->begin < y->begin ? -1 : x->begin > y->begin;
}

/* The tensors' data must tile the data section exactly, as the reference safetensors loader
 * requires: sorted by offset, each begins where the one before ends, the first at 0, the last
 * ends with the file. So no two overlap (one tensor's bytes read as another's), none starts
 * unaligned (every size is a multiple of 4), and nothing follows the last. */
static int check_tiling(const cz_plan *plan, const ck_entry *e, size_t ne, const size_t *offs,
                        size_t data_len, const char *path, cz_error *err)
{
    span *v = calloc(ne ? ne : 1, sizeof *v);
    if (!v)
        return cz__error_set(err, CZ_ENOMEM, "load_state: out of memory");
    for (size_t i = 0; i < ne; i++)
        v[i] = (span){offs[i], i};
    qsort(v, ne, sizeof *v, span_cmp);
    int rc = CZ_OK;
    size_t at = 0;
    char key[1024], prev[1024] = "";
    for (size_t i = 0; i < ne; i++) {
        const ck_entry *x = &e[v[i].entry];
        entry_key(plan, x, key, sizeof key);
        if (v[i].begin != at) {
            rc = cz__error_set(err, CZ_EINVALID,
                               "%s: '%s': data_offsets begin at byte %zu of the data, but %s%s%s "
                               "ends at %zu; safetensors tensors lie back to back from byte 0, "
                               "without gaps or overlaps",
                               path, key, v[i].begin, i ? "the tensor before it, '" : "",
                               i ? prev : "the header", i ? "'," : "", at);
            goto done;
        }
        at = v[i].begin + (size_t)x->n * sizeof(float);
        memcpy(prev, key, sizeof prev);
    }
    if (at > data_len)
        rc = cz__error_set(err, CZ_EINVALID,
                           "%s: the tensors' data_offsets end at byte %zu of the data but the file "
                           "holds %zu bytes of data (truncated)",
                           path, at, data_len);
    else if (at < data_len)
        rc = cz__error_set(err, CZ_EINVALID,
                           "%s: %zu bytes follow the last tensor's data; a safetensors file ends "
                           "with its last tensor",
                           path, data_len - at);
done:
    free(v);
    return rc;
}

/* Every value of tensor e (at data, possibly unaligned) is one the optimizer can hold: finite,
 * and >= 0 where it is a second moment (everywhere) or a Gram factor (its diagonal). */
static int check_values(const cz_plan *plan, const ck_entry *e, const char *data, const char *path,
                        cz_error *err)
{
    int64_t cols = e->ndim == 1 ? 1 : e->shape[1];
    for (int64_t k = 0; k < e->n; k++) {
        float x;
        memcpy(&x, data + (size_t)k * sizeof x, sizeof x);
        int64_t r = k / cols, c = k % cols;
        const char *why = NULL;
        if (!isfinite(x))
            why = "a non-finite value";
        else if (x < 0.0f && e->values == CZ_STATE_NONNEG)
            why = "a negative value in a sum of squares";
        else if (x < 0.0f && e->values == CZ_STATE_GRAM && r == c)
            why = "a negative diagonal value in a Gram factor (a sum of G G^T)";
        if (why) {
            char key[1024];
            entry_key(plan, e, key, sizeof key);
            return cz__error_set(err, CZ_EINVALID,
                                 "%s: '%s' holds %s (%g) at [%lld, %lld]; the optimizer state "
                                 "cannot hold it, the checkpoint is damaged",
                                 path, key, why, (double)x, (long long)r, (long long)c);
        }
    }
    return CZ_OK;
}

/* Checks the checkpoint at data (len bytes, read by rank 0) against the list: every tensor the
 * plan's state needs, F32, its shape, its values; nothing else, and the data laid out as
 * safetensors requires. Fills offs (absolute byte offsets, in list order) and *steps. */
int cz__ckpt_parse(const cz_plan *plan, const ck_entry *e, size_t ne, const char *path,
                   const char *data, size_t len, size_t *offs, int64_t *steps, cz_error *err)
{
    if (len < 8)
        return cz__error_set(err, CZ_EINVALID,
                             "%s: not a safetensors file (%zu bytes, shorter than its header size)",
                             path, len);
    uint64_t hlen = 0;
    for (int b = 0; b < 8; b++)
        hlen |= (uint64_t)(unsigned char)data[b] << (8 * b);
    if (hlen > len - 8)
        return cz__error_set(err, CZ_EINVALID,
                             "%s: header of %llu bytes does not fit in the %zu-byte file", path,
                             (unsigned long long)hlen, len);
    json_error_t jerr;
    /* Two members of one name would leave it to the parser which one counts. */
    json_t *root = json_loadb(data + 8, (size_t)hlen, JSON_REJECT_DUPLICATES, &jerr);
    if (!json_is_object(root)) {
        json_decref(root);
        return cz__error_set(err, CZ_EPARSE, "%s: safetensors header is not a JSON object: %s",
                             path, root ? "another JSON value" : jerr.text);
    }
    size_t base = 8 + (size_t)hlen;
    int rc;
    if ((rc = parse_metadata(root, path, steps, err)) != CZ_OK)
        goto done;
    for (size_t i = 0; i < ne; i++)
        if ((rc = parse_tensor(plan, &e[i], root, path, &offs[i], err)) != CZ_OK)
            goto done;
    if (json_object_size(root) != ne + 1 &&
        (rc = find_foreign(plan, e, ne, root, path, err)) != CZ_OK)
        goto done;
    if ((rc = check_tiling(plan, e, ne, offs, len - base, path, err)) != CZ_OK)
        goto done;
    for (size_t i = 0; i < ne; i++) {
        offs[i] += base;
        if ((rc = check_values(plan, &e[i], data + offs[i], path, err)) != CZ_OK)
            goto done;
    }
done:
    json_decref(root);
    return rc;
}

/* Reads the file on rank 0, never more than a checkpoint of this plan can hold: a pipe that
 * does not end is cut off there. */
int cz__ckpt_read(const cz_plan *plan, const ck_entry *e, size_t ne, const char *path, char **data,
                  size_t *len, cz_error *err)
{
    size_t data_bytes, cap = checkpoint_cap(plan, e, ne, &data_bytes);
    int rc = cz__file_read_all(path, cap, data, len, err);
    if (rc == CZ_EINVALID) {
        char why[sizeof err->message];
        memcpy(why, err->message, sizeof why);
        cz__error_set(err, rc,
                      "%s (this plan's optimizer state is %zu bytes of tensor data and a header "
                      "of a few bytes per tensor)",
                      why, data_bytes);
    }
    return rc;
}
