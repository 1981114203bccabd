/*
 * Reading a calibration file (canzona.calibration/1, written by canzona-bench calibrate and the
 * GPU check; canzona.calibration/2, which adds measured collectives). docs/FORMATS.md section 8
 * has the format; schemas/calibration.schema.json the schema. Strict like every reader here:
 * an unknown key, a wrong type, a value out of range, or a GEMM whose tflops does not follow
 * from its seconds is refused with the file, the JSON path and what was expected, since a
 * calibration becomes every cost of the plans made with it.
 */
#include "format_internal.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Far above any measurement grid (the GPU check writes 58 GEMMs and 4 copies), low enough that
 * a hostile file cannot make the cost model's fits slow. */
#define CAL_MAX_ENTRIES 4096
/* Sizes a GPU can hold: 2^40 elements per dimension, 2^50 bytes per collective. */
#define CAL_MAX_DIM ((int64_t)1 << 40)
#define CAL_MAX_BYTES 1.125899906842624e15
/* The writer prints doubles with 17 digits; a relative difference above this is an edit. */
#define CAL_CONSISTENT 1e-6
/* Physical bounds, so that every cost made from a calibration stays a finite number: no
 * measured call of a step takes an hour, no fixed cost a second, no GPU computes more than an
 * exaFLOP/s nor moves more than a PB/s. */
#define CAL_MAX_SECONDS 3600.0
#define CAL_MAX_FIXED_S 1.0
#define CAL_MAX_TFLOPS 1e6
#define CAL_MAX_GBPS 1e6

static const char *const dtype_names[] = {"bf16", "fp32", NULL}; /* cz_gemm_prec order */
static const char *const op_names[] = {"all_reduce", "all_gather", "reduce_scatter", "all_to_all",
                                       NULL};
static const char *const direction_names[] = {"h2d", "d2h", NULL};

const char *cz__cal_op_name(cz_cal_op op)
{
    return op >= CZ_CAL_ALL_REDUCE && op <= CZ_CAL_ALL_TO_ALL ? op_names[op] : NULL;
}

void cz__calibration_free(cz_calibration *cal)
{
    if (!cal)
        return;
    free(cal->source);
    free(cal->device_name);
    free(cal->measured_at);
    free(cal->gemm);
    free(cal->coll);
    free(cal);
}

/* A number of obj at path.key in (0, max] (or [0, max] when zero is allowed). */
static int bounded(const cz_json_ctx *c, const json_t *obj, const char *path, const char *key,
                   bool zero_ok, double max, double *out)
{
    char sub[CZ_JSON_PATH_MAX];
    int rc = cz__json_get_double(c, obj, path, key, true, 0, !zero_ok, out);
    if (rc == CZ_OK && *out > max)
        return cz__json_fail(c, cz__json_path_key(sub, path, key),
                             "%.17g is more than %g: not a measurement of one GPU", *out, max);
    return rc;
}

static int consistent(const cz_json_ctx *c, const char *path, const char *key, double recorded,
                      double derived, const char *how)
{
    if (fabs(recorded - derived) <= CAL_CONSISTENT * fabs(derived))
        return CZ_OK;
    return cz__json_fail(c, path,
                         "%s is %.17g, but %s gives %.17g; a measurement edited by hand must "
                         "change both",
                         key, recorded, how, derived);
}

/* $.schema: either version; another version of the family is CZ_EUNSUPPORTED. */
static int read_schema(const cz_json_ctx *c, const json_t *root, int *version)
{
    const char *s = NULL;
    int rc = cz__json_get_string(c, root, "$", "schema", true, &s);
    if (rc != CZ_OK)
        return rc;
    if (strcmp(s, CZ_CALIBRATION_SCHEMA) == 0 || strcmp(s, CZ_CALIBRATION_SCHEMA_2) == 0) {
        *version = s[strlen(s) - 1] - '0';
        return CZ_OK;
    }
    if (strncmp(s, "canzona.calibration/", 20) == 0)
        return cz__error_set(c->err, CZ_EUNSUPPORTED,
                             "%s: $.schema: unsupported schema version \"%s\"; this build reads "
                             "\"%s\" and \"%s\"",
                             c->file, s, CZ_CALIBRATION_SCHEMA, CZ_CALIBRATION_SCHEMA_2);
    return cz__json_fail(c, "$.schema", "expected \"%s\" or \"%s\", found \"%s\"",
                         CZ_CALIBRATION_SCHEMA, CZ_CALIBRATION_SCHEMA_2, s);
}

/* $.generator and $.device: who measured, on what. Only the device name and the time are kept
 * (a plan records them); the rest is checked for its type and range. */
static int read_device(const cz_json_ctx *c, const json_t *root, cz_calibration *cal)
{
    static const char *const gen_keys[] = {"name", "version", NULL};
    static const char *const dev_keys[] = {
        "name",   "compute_capability", "sm_count", "memory_gib",  "driver_cuda", "cuda_runtime",
        "cublas", "cusolver",           "nccl",     "measured_at", NULL};
    static const char *const versions[] = {"driver_cuda", "cuda_runtime", "cublas",
                                           "cusolver",    "nccl",         NULL};
    const json_t *gen, *dev;
    const char *s = NULL, *D = "$.device";
    int n, rc;
    double x;
    if ((rc = cz__json_get_object(c, root, "$", "generator", true, gen_keys, &gen)) != CZ_OK ||
        (rc = cz__json_get_string(c, gen, "$.generator", "name", true, &s)) != CZ_OK ||
        (rc = cz__json_get_string(c, gen, "$.generator", "version", true, &s)) != CZ_OK ||
        (rc = cz__json_get_object(c, root, "$", "device", true, dev_keys, &dev)) != CZ_OK ||
        (rc = cz__json_get_string(c, dev, D, "compute_capability", true, &s)) != CZ_OK)
        return rc;
    /* "9.0": digits, one dot, digits. */
    size_t dot = strspn(s, "0123456789");
    if (dot == 0 || s[dot] != '.' || strspn(s + dot + 1, "0123456789") == 0 ||
        s[dot + 1 + strspn(s + dot + 1, "0123456789")] != '\0')
        return cz__json_fail(c, "$.device.compute_capability",
                             "expected a version like \"9.0\", found \"%s\"", s);
    if ((rc = cz__json_get_int(c, dev, D, "sm_count", true, 1, INT_MAX, &n)) != CZ_OK ||
        (rc = cz__json_get_double(c, dev, D, "memory_gib", true, 0, true, &x)) != CZ_OK)
        return rc;
    for (int i = 0; versions[i]; i++)
        if ((rc = cz__json_get_int(c, dev, D, versions[i], true, 0, INT_MAX, &n)) != CZ_OK)
            return rc;
    if ((rc = cz__json_get_string(c, dev, D, "name", true, &s)) != CZ_OK ||
        !(cal->device_name = cz__strdup(s)) ||
        (rc = cz__json_get_string(c, dev, D, "measured_at", true, &s)) != CZ_OK ||
        !(cal->measured_at = cz__strdup(s)))
        return rc != CZ_OK ? rc : cz__error_set(c->err, CZ_ENOMEM, "%s: out of memory", c->file);
    return CZ_OK;
}

static int read_gemm(const cz_json_ctx *c, const json_t *v, const char *path, cz_cal_gemm *g)
{
    static const char *const keys[] = {"m", "n", "k", "batch", "dtype", "seconds", "tflops", NULL};
    int prec = 0, rc;
    double tflops;
    if ((rc = cz__json_check_object(c, v, path, keys)) != CZ_OK ||
        (rc = cz__json_get_int64(c, v, path, "m", true, 1, CAL_MAX_DIM, &g->m)) != CZ_OK ||
        (rc = cz__json_get_int64(c, v, path, "n", true, 1, CAL_MAX_DIM, &g->n)) != CZ_OK ||
        (rc = cz__json_get_int64(c, v, path, "k", true, 1, CAL_MAX_DIM, &g->k)) != CZ_OK ||
        (rc = cz__json_get_int(c, v, path, "batch", true, 1, 1 << 20, &g->batch)) != CZ_OK ||
        (rc = cz__json_get_enum(c, v, path, "dtype", true, dtype_names, &prec)) != CZ_OK ||
        (rc = bounded(c, v, path, "seconds", false, CAL_MAX_SECONDS, &g->seconds)) != CZ_OK ||
        (rc = bounded(c, v, path, "tflops", false, CAL_MAX_TFLOPS, &tflops)) != CZ_OK)
        return rc;
    g->prec = (cz_gemm_prec)prec;
    double flops = 2.0 * (double)g->m * (double)g->n * (double)g->k * g->batch;
    return consistent(c, path, "tflops", tflops, flops / g->seconds * 1e-12,
                      "2 m n k batch / seconds");
}

static int read_copy(const cz_json_ctx *c, const json_t *v, const char *path)
{
    static const char *const keys[] = {"direction", "pinned", "bytes", "seconds", "gb_per_s", NULL};
    int dir = 0, rc;
    bool pinned;
    int64_t bytes = 0;
    double seconds, gbps;
    if ((rc = cz__json_check_object(c, v, path, keys)) != CZ_OK ||
        (rc = cz__json_get_enum(c, v, path, "direction", true, direction_names, &dir)) != CZ_OK ||
        (rc = cz__json_get_bool(c, v, path, "pinned", true, &pinned)) != CZ_OK ||
        (rc = cz__json_get_int64(c, v, path, "bytes", true, 1, INT64_MAX, &bytes)) != CZ_OK ||
        (rc = bounded(c, v, path, "seconds", false, CAL_MAX_SECONDS, &seconds)) != CZ_OK ||
        (rc = bounded(c, v, path, "gb_per_s", false, CAL_MAX_GBPS, &gbps)) != CZ_OK)
        return rc;
    return consistent(c, path, "gb_per_s", gbps, (double)bytes / seconds * 1e-9, "bytes / seconds");
}

static int read_coll(const cz_json_ctx *c, const json_t *v, const char *path, cz_cal_coll *k)
{
    static const char *const keys[] = {"op", "ranks", "inter_node", "bytes", "seconds", NULL};
    int op = 0, rc;
    bool inter = false;
    int64_t bytes = 0;
    if ((rc = cz__json_check_object(c, v, path, keys)) != CZ_OK ||
        (rc = cz__json_get_enum(c, v, path, "op", true, op_names, &op)) != CZ_OK ||
        (rc = cz__json_get_int(c, v, path, "ranks", true, 2, 1 << 20, &k->ranks)) != CZ_OK ||
        (rc = cz__json_get_bool(c, v, path, "inter_node", true, &inter)) != CZ_OK ||
        (rc = cz__json_get_int64(c, v, path, "bytes", true, 1, (int64_t)CAL_MAX_BYTES, &bytes)) !=
            CZ_OK ||
        (rc = bounded(c, v, path, "seconds", false, CAL_MAX_SECONDS, &k->seconds)) != CZ_OK)
        return rc;
    k->op = (cz_cal_op)op;
    k->inter_node = inter;
    k->bytes = (double)bytes;
    return CZ_OK;
}

static int coll_cmp(const void *x, const void *y)
{
    const cz_cal_coll *a = x, *b = y;
    if (a->op != b->op)
        return a->op < b->op ? -1 : 1;
    if (a->inter_node != b->inter_node)
        return a->inter_node < b->inter_node ? -1 : 1;
    if (a->ranks != b->ranks)
        return a->ranks < b->ranks ? -1 : 1;
    return (a->bytes > b->bytes) - (a->bytes < b->bytes);
}

/* $.collectives (version 2): measured collectives, kept sorted so that the cost model's lookup
 * is a scan of one (op, inter_node, ranks) run; two entries of one size are refused, since the
 * model could not tell which to use. */
static int read_collectives(const cz_json_ctx *c, const json_t *root, cz_calibration *cal)
{
    const json_t *arr = NULL;
    char path[CZ_JSON_PATH_MAX];
    int rc;
    if (cal->version < 2) {
        if (json_object_get(root, "collectives"))
            return cz__json_fail(c, "$.collectives",
                                 "measured collectives need schema \"%s\"; this file says \"%s\"",
                                 CZ_CALIBRATION_SCHEMA_2, CZ_CALIBRATION_SCHEMA);
        return CZ_OK;
    }
    if ((rc = cz__json_get_array(c, root, "$", "collectives", true, 1, &arr)) != CZ_OK)
        return rc;
    size_t n = json_array_size(arr);
    if (n > CAL_MAX_ENTRIES)
        return cz__json_fail(c, "$.collectives", "%zu entries; at most %d are read", n,
                             CAL_MAX_ENTRIES);
    if (!(cal->coll = calloc(n, sizeof *cal->coll)))
        return cz__error_set(c->err, CZ_ENOMEM, "%s: out of memory", c->file);
    for (size_t i = 0; i < n; i++)
        if ((rc = read_coll(c, json_array_get(arr, i),
                            cz__json_path_index(path, "$.collectives", i), &cal->coll[i])) != CZ_OK)
            return rc;
    cal->ncoll = n;
    qsort(cal->coll, n, sizeof *cal->coll, coll_cmp);
    for (size_t i = 1; i < n; i++)
        if (coll_cmp(&cal->coll[i - 1], &cal->coll[i]) == 0)
            return cz__json_fail(c, "$.collectives",
                                 "two measurements of %s over %d ranks (%s) of %.0f bytes; keep "
                                 "one (the median of its repetitions)",
                                 op_names[cal->coll[i].op], cal->coll[i].ranks,
                                 cal->coll[i].inter_node ? "across nodes" : "inside a node",
                                 cal->coll[i].bytes);
    return CZ_OK;
}

static int read_measurements(const cz_json_ctx *c, const json_t *root, cz_calibration *cal)
{
    static const char *const ns_keys[] = {"fp32", "bf16", NULL};
    const json_t *arr = NULL, *ns = NULL;
    char path[CZ_JSON_PATH_MAX];
    int rc;
    if ((rc = cz__json_get_array(c, root, "$", "gemm", true, 0, &arr)) != CZ_OK)
        return rc;
    size_t n = json_array_size(arr);
    if (n > CAL_MAX_ENTRIES)
        return cz__json_fail(c, "$.gemm", "%zu entries; at most %d are read", n, CAL_MAX_ENTRIES);
    if (n && !(cal->gemm = calloc(n, sizeof *cal->gemm)))
        return cz__error_set(c->err, CZ_ENOMEM, "%s: out of memory", c->file);
    for (size_t i = 0; i < n; i++)
        if ((rc = read_gemm(c, json_array_get(arr, i), cz__json_path_index(path, "$.gemm", i),
                            &cal->gemm[i])) != CZ_OK)
            return rc;
    cal->ngemm = n;
    if ((rc = bounded(c, root, "$", "launch_overhead_s", true, CAL_MAX_FIXED_S, &cal->launch_s)) !=
            CZ_OK ||
        (rc = cz__json_get_object(c, root, "$", "ns_iteration_overhead_s", true, ns_keys, &ns)) !=
            CZ_OK ||
        (rc = bounded(c, ns, "$.ns_iteration_overhead_s", "bf16", true, CAL_MAX_FIXED_S,
                      &cal->ns_iteration_s[CZ_GEMM_BF16])) != CZ_OK ||
        (rc = bounded(c, ns, "$.ns_iteration_overhead_s", "fp32", true, CAL_MAX_FIXED_S,
                      &cal->ns_iteration_s[CZ_GEMM_FP32])) != CZ_OK ||
        (rc = cz__json_get_array(c, root, "$", "copy", true, 0, &arr)) != CZ_OK)
        return rc;
    if (json_array_size(arr) > CAL_MAX_ENTRIES)
        return cz__json_fail(c, "$.copy", "%zu entries; at most %d are read", json_array_size(arr),
                             CAL_MAX_ENTRIES);
    for (size_t i = 0; i < json_array_size(arr); i++)
        if ((rc = read_copy(c, json_array_get(arr, i), cz__json_path_index(path, "$.copy", i))) !=
            CZ_OK)
            return rc;
    return read_collectives(c, root, cal);
}

static int from_json(cz_calibration **out, const json_t *root, const char *name, const char *sha,
                     cz_error *err)
{
    static const char *const keys_v1[] = {
        "schema", "generator", "device", "gemm", "launch_overhead_s", "ns_iteration_overhead_s",
        "copy",   NULL};
    static const char *const keys_v2[] = {"schema", "generator",         "device",
                                          "gemm",   "launch_overhead_s", "ns_iteration_overhead_s",
                                          "copy",   "collectives",       NULL};
    cz_json_ctx c = {name, err};
    cz_calibration *cal = calloc(1, sizeof *cal);
    int rc;
    if (!cal)
        return cz__error_set(err, CZ_ENOMEM, "%s: out of memory", name);
    if ((rc = read_schema(&c, root, &cal->version)) != CZ_OK)
        goto done;
    /* A version 1 file with "collectives" is named by read_collectives, with the reason. */
    if ((rc = cz__json_check_object(
             &c, root, "$",
             cal->version >= 2 || json_object_get(root, "collectives") ? keys_v2 : keys_v1)) !=
            CZ_OK ||
        (rc = read_device(&c, root, cal)) != CZ_OK ||
        (rc = read_measurements(&c, root, cal)) != CZ_OK)
        goto done;
    if (!(cal->source = cz__strdup(name))) {
        rc = cz__error_set(err, CZ_ENOMEM, "%s: out of memory", name);
        goto done;
    }
    memcpy(cal->sha256, sha, sizeof cal->sha256);
    *out = cal;
    cal = NULL;
done:
    cz__calibration_free(cal);
    return rc;
}

int cz__calibration_parse(cz_calibration **out, const char *text, size_t len, const char *name,
                          cz_error *err)
{
    json_error_t jerr;
    char sha[65];
    *out = NULL;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return cz__error_set(err, CZ_EPARSE, "%s:%d:%d: invalid JSON: %s", name, jerr.line,
                             jerr.column, jerr.text);
    int rc;
    if (!json_is_object(root)) {
        rc = cz__error_set(err, CZ_EINVALID, "%s: $: expected a JSON object", name);
    } else if ((rc = cz__json_canonical_sha256(root, sha, err)) == CZ_OK) {
        rc = from_json(out, root, name, sha, err);
    }
    json_decref(root);
    return rc;
}

int cz__calibration_load(cz_calibration **out, const char *path, cz_error *err)
{
    json_t *root = NULL;
    char sha[65];
    *out = NULL;
    int rc;
    if ((rc = cz__json_load_file(&root, sha, path, err)) != CZ_OK)
        goto done;
    rc = from_json(out, root, path, sha, err);
done:
    json_decref(root);
    return rc;
}
