/*
 * json_stream.h — a JSON writer that produces, in one pass over a document, the file's text as
 * jansson's json_dumps writes it with JSON_PRESERVE_ORDER | JSON_INDENT(1) |
 * JSON_REAL_PRECISION(17), and the SHA-256 of its canonical form (compact, keys sorted, reals
 * with 17 significant digits: docs/FORMATS.md section 5) — without building a jansson tree.
 *
 * The plan writer used to build the whole plan as a jansson tree, dump it compactly with sorted
 * keys to hash it, dump it again indented, and free the tree: at 8,192 GPUs two thirds of the
 * planning time. Here each value is formatted once and written to both forms. Keys must be
 * sorted in the canonical form while the file keeps the writer's order, so each open object
 * keeps its members' canonical text where it was written and reorders it, when the object
 * closes, only when the members were not written in sorted order; the top-level object's
 * members are fed to the hash in sorted order instead of being reordered.
 *
 * Errors: the first failure (out of memory, a string that is not UTF-8, a container nested too
 * deep, a call out of order) is kept in `rc` with a message in `why`; later calls do nothing,
 * and the caller checks once at the end. Keys must stay valid until their object ends (the
 * callers pass string literals).
 */
#ifndef CZ_JSON_STREAM_H
#define CZ_JSON_STREAM_H

#include "format_internal.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CZ_JW_MAX_DEPTH 16

typedef struct cz_jmember {
    const char *key;
    size_t klen;
    size_t off, len; /* the member's canonical text "key":value in the writer's c buffer */
} cz_jmember;

typedef struct cz_jframe {
    int object;    /* 1 object, 0 array */
    size_t n;      /* members or elements written so far */
    size_t cstart; /* where the container's canonical text starts (its opening bracket) */
    int sorted;    /* the members so far were written in sorted key order */
    cz_jmember *m; /* object members (reused between frames of the same depth) */
    size_t mcap;
} cz_jframe;

typedef struct cz_jstream {
    char *f; /* the file's text */
    size_t flen, fcap;
    char *c; /* the canonical text of the open containers */
    size_t clen, ccap;
    char *tmp; /* scratch for reordering an object's members */
    size_t tcap;
    cz_jframe st[CZ_JW_MAX_DEPTH];
    int depth; /* open containers */
    cz_sha256 sha;
    int done; /* the top-level container was closed */
    int rc;   /* CZ_OK, or the first failure */
    char why[160];
} cz_jstream;

void cz__jw_init(cz_jstream *w);
/* Frees the buffers (the file text too, unless taken with cz__jw_take). */
void cz__jw_free(cz_jstream *w);

/* Each value call takes the member's key inside an object, NULL inside an array or for the
 * top-level value. */
void cz__jw_begin_object(cz_jstream *w, const char *key);
void cz__jw_begin_array(cz_jstream *w, const char *key);
/* Closes the innermost container. Closing the top-level one finishes the canonical hash. */
void cz__jw_end(cz_jstream *w);
/* Closes the top-level object after adding a last member `key` whose value is the string of the
 * 64 hexadecimal digits of the canonical hash of everything before it (which *hash receives):
 * the member is in the file only, as the content hash's definition requires. */
void cz__jw_end_with_hash(cz_jstream *w, const char *key, char hash[65]);
void cz__jw_int(cz_jstream *w, const char *key, int64_t v);
/* A finite real, as jansson writes it with 17 significant digits ("%.17g", ".0" appended when
 * that prints neither '.' nor 'e', the exponent without '+' or leading zeros). A NaN or an
 * infinity is a failure (JSON has no such number). */
void cz__jw_real(cz_jstream *w, const char *key, double v);
/* A UTF-8 string: '"', '\\' and control characters escaped as jansson does; invalid UTF-8 is a
 * failure. */
void cz__jw_string(cz_jstream *w, const char *key, const char *s);
void cz__jw_bool(cz_jstream *w, const char *key, bool v);
void cz__jw_null(cz_jstream *w, const char *key);
/* A newline after the finished document (the file only): text files end with one. */
void cz__jw_newline(cz_jstream *w);
/* Records a failure of the caller's (the first one wins). */
void cz__jw_fail(cz_jstream *w, int rc, const char *why);

/* The file text written so far (*len bytes, NUL-terminated), handed to the caller, who frees
 * it; NULL after a failure. */
char *cz__jw_take(cz_jstream *w, size_t *len);

#endif /* CZ_JSON_STREAM_H */
