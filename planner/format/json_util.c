/* Strict unpacking of jansson values with JSON-path error messages (see json_util.h). */
#include "format_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Files larger than this are not model, cluster or plan files; refuse before reading them. */
#define CZ_JSON_MAX_FILE_BYTES ((size_t)1 << 30)

int cz__json_canonical_sha256(const json_t *root, char out[65], cz_error *err)
{
    char *dump = json_dumps(root, JSON_SORT_KEYS | JSON_COMPACT | JSON_ENCODE_ANY);
    if (!dump)
        return cz__error_set(err, CZ_ENOMEM, "out of memory while hashing JSON");
    cz__sha256_hex(dump, strlen(dump), out);
    free(dump);
    return CZ_OK;
}

int cz__json_load_file(json_t **out, char sha256[65], const char *path, cz_error *err)
{
    char *buf = NULL;
    size_t len = 0;
    json_t *root = NULL;
    json_error_t jerr;
    int rc = cz__file_read_all(path, CZ_JSON_MAX_FILE_BYTES, &buf, &len, err);
    if (rc != CZ_OK)
        return rc;
    root = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) {
        rc = cz__error_set(err, CZ_EPARSE, "%s:%d:%d: invalid JSON: %s", path, jerr.line,
                           jerr.column, jerr.text);
        goto done;
    }
    if (!json_is_object(root)) {
        char found[96];
        cz__json_describe(root, found, sizeof found);
        rc =
            cz__error_set(err, CZ_EINVALID, "%s: $: expected a JSON object, found %s", path, found);
        goto done;
    }
    if (sha256) {
        rc = cz__json_canonical_sha256(root, sha256, err);
        if (rc != CZ_OK)
            goto done;
    }
    *out = root;
    root = NULL;
done:
    json_decref(root);
    free(buf);
    return rc;
}

char *cz__json_path_key(char dst[CZ_JSON_PATH_MAX], const char *parent, const char *key)
{
    snprintf(dst, CZ_JSON_PATH_MAX, "%s.%s", parent, key);
    return dst;
}

char *cz__json_path_index(char dst[CZ_JSON_PATH_MAX], const char *parent, size_t index)
{
    snprintf(dst, CZ_JSON_PATH_MAX, "%s[%zu]", parent, index);
    return dst;
}

static int fail_v(const cz_json_ctx *c, int code, const char *path, const char *fmt, va_list ap)
{
    char msg[768];
    vsnprintf(msg, sizeof msg, fmt, ap);
    return cz__error_set(c->err, code, "%s: %s: %s", c->file, path, msg);
}

int cz__json_fail(const cz_json_ctx *c, const char *path, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = fail_v(c, CZ_EINVALID, path, fmt, ap);
    va_end(ap);
    return rc;
}

/* cz__json_fail with an explicit code (e.g. CZ_EUNSUPPORTED). */
static int json_fail_code(const cz_json_ctx *c, int code, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int json_fail_code(const cz_json_ctx *c, int code, const char *path, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = fail_v(c, code, path, fmt, ap);
    va_end(ap);
    return rc;
}

void cz__json_describe(const json_t *v, char *buf, size_t n)
{
    if (!v) {
        snprintf(buf, n, "nothing");
        return;
    }
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        snprintf(buf, n, "an object");
        break;
    case JSON_ARRAY:
        snprintf(buf, n, "an array");
        break;
    case JSON_STRING: {
        const char *s = json_string_value(v);
        if (strlen(s) > 40)
            snprintf(buf, n, "\"%.37s...\"", s);
        else
            snprintf(buf, n, "\"%s\"", s);
        break;
    }
    case JSON_INTEGER:
        snprintf(buf, n, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        break;
    case JSON_REAL:
        snprintf(buf, n, "%.17g", json_real_value(v));
        break;
    case JSON_TRUE:
        snprintf(buf, n, "true");
        break;
    case JSON_FALSE:
        snprintf(buf, n, "false");
        break;
    default:
        snprintf(buf, n, "null");
        break;
    }
}

static int fail_found(const cz_json_ctx *c, const json_t *v, const char *path, const char *expected)
{
    char found[96];
    if (!v)
        return cz__json_fail(c, path, "missing; expected %s", expected);
    cz__json_describe(v, found, sizeof found);
    return cz__json_fail(c, path, "expected %s, found %s", expected, found);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

int cz__json_check_object(const cz_json_ctx *c, const json_t *v, const char *path,
                          const char *const *allowed)
{
    if (!json_is_object(v))
        return fail_found(c, v, path, "an object");
    size_t n = json_object_size(v);
    if (n == 0 || !allowed)
        return CZ_OK;
    const char **keys = malloc(n * sizeof *keys);
    if (!keys)
        return cz__error_set(c->err, CZ_ENOMEM, "%s: out of memory", c->file);
    size_t k = 0;
    const char *key;
    json_t *val;
    json_object_foreach((json_t *)v, key, val)
    {
        (void)val;
        keys[k++] = key;
    }
    qsort(keys, k, sizeof *keys, cmp_str);
    int rc = CZ_OK;
    for (size_t i = 0; i < k && rc == CZ_OK; i++) {
        bool ok = false;
        for (const char *const *a = allowed; *a; a++)
            ok = ok || strcmp(*a, keys[i]) == 0;
        if (ok)
            continue;
        char list[512];
        size_t used = 0;
        list[0] = '\0';
        for (const char *const *a = allowed; *a && used < sizeof list; a++) {
            int w = snprintf(list + used, sizeof list - used, "%s%s", a == allowed ? "" : ", ", *a);
            used += w > 0 ? (size_t)w : 0;
        }
        rc = cz__json_fail(c, path, "unknown key \"%s\"; expected one of: %s", keys[i], list);
    }
    free(keys);
    return rc;
}

static int json_as_string(const cz_json_ctx *c, const json_t *v, const char *path, const char **out)
{
    if (!json_is_string(v))
        return fail_found(c, v, path, "a string");
    *out = json_string_value(v);
    return CZ_OK;
}

int cz__json_as_int64(const cz_json_ctx *c, const json_t *v, const char *path, int64_t min,
                      int64_t max, int64_t *out)
{
    char expected[96];
    if (min == 1 && max == INT64_MAX)
        snprintf(expected, sizeof expected, "a positive integer");
    else if (min == 0 && max == INT64_MAX)
        snprintf(expected, sizeof expected, "a non-negative integer");
    else if (max == INT64_MAX)
        snprintf(expected, sizeof expected, "an integer >= %" PRId64, min);
    else
        snprintf(expected, sizeof expected, "an integer in [%" PRId64 ", %" PRId64 "]", min, max);
    if (!json_is_integer(v))
        return fail_found(c, v, path, expected);
    json_int_t x = json_integer_value(v);
    if (x < min || x > max)
        return fail_found(c, v, path, expected);
    *out = (int64_t)x;
    return CZ_OK;
}

int cz__json_as_int(const cz_json_ctx *c, const json_t *v, const char *path, int min, int max,
                    int *out)
{
    int64_t x = 0;
    int rc = cz__json_as_int64(c, v, path, min, max == INT_MAX ? INT64_MAX : max, &x);
    if (rc != CZ_OK)
        return rc;
    if (x > INT_MAX)
        return cz__json_fail(c, path, "expected an integer <= %d, found %" PRId64, INT_MAX, x);
    *out = (int)x;
    return CZ_OK;
}

int cz__json_as_double(const cz_json_ctx *c, const json_t *v, const char *path, double min,
                       bool exclusive, double *out)
{
    char expected[96];
    if (min == 0.0)
        snprintf(expected, sizeof expected, "a %s number", exclusive ? "positive" : "non-negative");
    else
        snprintf(expected, sizeof expected, "a number %s %.17g", exclusive ? ">" : ">=", min);
    if (!json_is_number(v))
        return fail_found(c, v, path, expected);
    double x = json_number_value(v);
    if (!isfinite(x) || x < min || (exclusive && x == min))
        return fail_found(c, v, path, expected);
    *out = x;
    return CZ_OK;
}

static int json_as_bool(const cz_json_ctx *c, const json_t *v, const char *path, bool *out)
{
    if (!json_is_boolean(v))
        return fail_found(c, v, path, "true or false");
    *out = json_is_true(v);
    return CZ_OK;
}

int cz__json_as_array(const cz_json_ctx *c, const json_t *v, const char *path, size_t min_len,
                      const json_t **out)
{
    if (!json_is_array(v))
        return fail_found(c, v, path, min_len ? "a non-empty array" : "an array");
    if (json_array_size(v) < min_len) {
        if (min_len == 1)
            return cz__json_fail(c, path, "expected a non-empty array, found an empty array");
        return cz__json_fail(c, path, "expected an array of at least %zu elements, found %zu",
                             min_len, json_array_size(v));
    }
    *out = v;
    return CZ_OK;
}

/* String that must be one of the NULL-terminated names; *out = its index. */
static int json_as_enum(const cz_json_ctx *c, const json_t *v, const char *path,
                        const char *const *names, int *out)
{
    char expected[512];
    size_t used = 0;
    expected[0] = '\0';
    for (const char *const *a = names; *a && used < sizeof expected; a++) {
        int w = snprintf(expected + used, sizeof expected - used, "%s\"%s\"",
                         a == names ? "one of " : ", ", *a);
        used += w > 0 ? (size_t)w : 0;
    }
    if (json_is_string(v)) {
        for (int i = 0; names[i]; i++)
            if (strcmp(names[i], json_string_value(v)) == 0) {
                *out = i;
                return CZ_OK;
            }
    }
    return fail_found(c, v, path, expected);
}

/* Looks up a member; returns 1 when present, 0 when absent and optional, or an error. */
static int member(const cz_json_ctx *c, const json_t *obj, const char *path, const char *key,
                  bool required, char sub[CZ_JSON_PATH_MAX], const json_t **v)
{
    *v = json_object_get(obj, key);
    cz__json_path_key(sub, path, key);
    if (*v)
        return 1;
    if (required)
        return cz__json_fail(c, path, "missing required key \"%s\"", key);
    return 0;
}

#define GET_MEMBER(call)                                                                           \
    char sub[CZ_JSON_PATH_MAX];                                                                    \
    const json_t *v;                                                                               \
    int present = member(c, obj, path, key, required, sub, &v);                                    \
    if (present <= 0)                                                                              \
        return present;                                                                            \
    return call

int cz__json_get_string(const cz_json_ctx *c, const json_t *obj, const char *path, const char *key,
                        bool required, const char **out)
{
    GET_MEMBER(json_as_string(c, v, sub, out));
}

int cz__json_get_int64(const cz_json_ctx *c, const json_t *obj, const char *path, const char *key,
                       bool required, int64_t min, int64_t max, int64_t *out)
{
    GET_MEMBER(cz__json_as_int64(c, v, sub, min, max, out));
}

int cz__json_get_int(const cz_json_ctx *c, const json_t *obj, const char *path, const char *key,
                     bool required, int min, int max, int *out)
{
    GET_MEMBER(cz__json_as_int(c, v, sub, min, max, out));
}

int cz__json_get_double(const cz_json_ctx *c, const json_t *obj, const char *path, const char *key,
                        bool required, double min, bool exclusive, double *out)
{
    GET_MEMBER(cz__json_as_double(c, v, sub, min, exclusive, out));
}

int cz__json_get_bool(const cz_json_ctx *c, const json_t *obj, const char *path, const char *key,
                      bool required, bool *out)
{
    GET_MEMBER(json_as_bool(c, v, sub, out));
}

int cz__json_get_array(const cz_json_ctx *c, const json_t *obj, const char *path, const char *key,
                       bool required, size_t min_len, const json_t **out)
{
    GET_MEMBER(cz__json_as_array(c, v, sub, min_len, out));
}

int cz__json_get_object(const cz_json_ctx *c, const json_t *obj, const char *path, const char *key,
                        bool required, const char *const *allowed, const json_t **out)
{
    char sub[CZ_JSON_PATH_MAX];
    const json_t *v;
    int present = member(c, obj, path, key, required, sub, &v);
    if (present <= 0)
        return present;
    int rc = cz__json_check_object(c, v, sub, allowed);
    if (rc == CZ_OK)
        *out = v;
    return rc;
}

int cz__json_get_enum(const cz_json_ctx *c, const json_t *obj, const char *path, const char *key,
                      bool required, const char *const *names, int *out)
{
    GET_MEMBER(json_as_enum(c, v, sub, names, out));
}

int cz__json_check_schema(const cz_json_ctx *c, const json_t *root, const char *want)
{
    const char *s = NULL;
    int rc = cz__json_get_string(c, root, "$", "schema", true, &s);
    if (rc != CZ_OK)
        return rc;
    if (strcmp(s, want) == 0)
        return CZ_OK;
    /* "canzona.model/1" -> family "canzona.model/" */
    size_t family = (size_t)(strrchr(want, '/') - want) + 1;
    if (strncmp(s, want, family) == 0 && s[family] >= '0' && s[family] <= '9')
        return json_fail_code(c, CZ_EUNSUPPORTED, "$.schema",
                              "unsupported schema version \"%s\"; this build reads \"%s\"", s,
                              want);
    return cz__json_fail(c, "$.schema", "expected \"%s\", found \"%s\"", want, s);
}
