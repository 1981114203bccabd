/*
 * json_util.h — strict unpacking of jansson values with JSON-path error messages.
 *
 * Every reader of a canzona format goes through these helpers so that all messages share one
 * shape: "<file>: <json path>: <problem>; expected <what>, found <what>" (parse errors:
 * "<file>:<line>:<column>: invalid JSON: <text>"). A cz_json_ctx carries the file name shown in
 * messages and the error report to fill. Each getter returns CZ_OK or the error code it set.
 *
 * Paths are plain strings built by the caller with cz__json_path_key / cz__json_path_index into
 * fixed buffers (CZ_JSON_PATH_MAX); an over-long path is truncated, never overflowed.
 */
#ifndef CZ_JSON_UTIL_H
#define CZ_JSON_UTIL_H

#include "cz_format.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#define CZ_JSON_PATH_MAX 256

typedef struct cz_json_ctx {
    const char *file; /* as shown in messages */
    cz_error *err;
} cz_json_ctx;

/* Reads path (CZ_EIO with strerror when unreadable), parses it (CZ_EPARSE with line and
 * column; duplicate keys are parse errors), requires a top-level object (CZ_EINVALID) and, when
 * sha256 is not NULL, hashes the canonical dump (sorted keys, compact). *out is a new reference. */
int cz__json_load_file(json_t **out, char sha256[65], const char *path, cz_error *err);

/* Canonical SHA-256 of a JSON value: json_dumps(JSON_SORT_KEYS | JSON_COMPACT), hashed. */
int cz__json_canonical_sha256(const json_t *root, char out[65], cz_error *err);

/* dst = parent + "." + key, or parent + "[" + index + "]". Both return dst. */
char *cz__json_path_key(char dst[CZ_JSON_PATH_MAX], const char *parent, const char *key);
char *cz__json_path_index(char dst[CZ_JSON_PATH_MAX], const char *parent, size_t index);

/* Sets CZ_EINVALID with "<file>: <path>: <message>" and returns it. */
int cz__json_fail(const cz_json_ctx *c, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* A short description of a value for "found ..." (a number, a quoted string, "an array", ...). */
void cz__json_describe(const json_t *v, char *buf, size_t n);

/* Fails unless v is an object whose keys are all in the NULL-terminated list allowed. Keys are
 * checked in sorted order so the reported key does not depend on the file's key order. */
int cz__json_check_object(const cz_json_ctx *c, const json_t *v, const char *path,
                          const char *const *allowed);

/* ---- values (v may be NULL: reported as missing) ---- */
/* Integer in [min, max]. */
int cz__json_as_int64(const cz_json_ctx *c, const json_t *v, const char *path, int64_t min,
                      int64_t max, int64_t *out);
int cz__json_as_int(const cz_json_ctx *c, const json_t *v, const char *path, int min, int max,
                    int *out);
/* Number (integer or real) >= min; strict > min when exclusive. */
int cz__json_as_double(const cz_json_ctx *c, const json_t *v, const char *path, double min,
                       bool exclusive, double *out);
/* Array; with min_len > 0 an empty array is refused. */
int cz__json_as_array(const cz_json_ctx *c, const json_t *v, const char *path, size_t min_len,
                      const json_t **out);

/* ---- object members: key missing and required -> error; missing and optional -> CZ_OK with
 * *out untouched (so the caller presets the default) ---- */
int cz__json_get_string(const cz_json_ctx *c, const json_t *obj, const char *path, const char *key,
                        bool required, const char **out);
int cz__json_get_int64(const cz_json_ctx *c, const json_t *obj, const char *path, const char *key,
                       bool required, int64_t min, int64_t max, int64_t *out);
int cz__json_get_int(const cz_json_ctx *c, const json_t *obj, const char *path, const char *key,
                     bool required, int min, int max, int *out);
int cz__json_get_double(const cz_json_ctx *c, const json_t *obj, const char *path, const char *key,
                        bool required, double min, bool exclusive, double *out);
int cz__json_get_bool(const cz_json_ctx *c, const json_t *obj, const char *path, const char *key,
                      bool required, bool *out);
int cz__json_get_array(const cz_json_ctx *c, const json_t *obj, const char *path, const char *key,
                       bool required, size_t min_len, const json_t **out);
int cz__json_get_object(const cz_json_ctx *c, const json_t *obj, const char *path, const char *key,
                        bool required, const char *const *allowed, const json_t **out);
int cz__json_get_enum(const cz_json_ctx *c, const json_t *obj, const char *path, const char *key,
                      bool required, const char *const *names, int *out);

/* Checks a "schema" member: exactly want -> CZ_OK; same family ("canzona.model/") with another
 * version -> CZ_EUNSUPPORTED; anything else -> CZ_EINVALID. */
int cz__json_check_schema(const cz_json_ctx *c, const json_t *root, const char *want);

#endif /* CZ_JSON_UTIL_H */
