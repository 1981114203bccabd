/* .npy format 1.0/2.0/3.0: magic, version, little-endian header length, a Python dict literal
 * header padded with spaces to a multiple of 64 bytes and ended by '\n', then the data.
 *
 * The reader parses the dict (it does not search it for substrings: "'<f4'" or "False" may
 * appear under another key) and accepts exactly what the writer writes: dtype '<f4', C order,
 * the expected shape, then exactly that many finite values and nothing after them. */
#include "npy.h"
#include "cz_format.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cz_npy_write(const char *path, const float *data, int ndim, int64_t rows, int64_t cols,
                 cz_error *err)
{
    char dict[256];
    int n =
        ndim == 1
            ? snprintf(dict, sizeof dict,
                       "{'descr': '<f4', 'fortran_order': False, 'shape': (%" PRId64 ",), }", rows)
            : snprintf(dict, sizeof dict,
                       "{'descr': '<f4', 'fortran_order': False, 'shape': (%" PRId64 ", %" PRId64
                       "), }",
                       rows, cols);
    size_t head = 10 + (size_t)n + 1;
    size_t pad = (64 - head % 64) % 64;
    uint16_t hlen = (uint16_t)(n + pad + 1);
    size_t bytes = (size_t)(rows * (ndim == 1 ? 1 : cols)) * sizeof(float);
    /* The whole file in memory, written by the planner's writer: a temporary file beside path,
     * synced and renamed over it, so that a full disk leaves the old file (or none), never a
     * truncated one, and the message says which file and why. */
    unsigned char *f = malloc(head + pad + bytes);
    if (!f)
        return cz__error_set(err, CZ_ENOMEM, "%s: out of memory for %zu bytes", path,
                             head + pad + bytes);
    static const unsigned char magic[8] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0};
    memcpy(f, magic, sizeof magic);
    f[8] = (unsigned char)(hlen & 0xff);
    f[9] = (unsigned char)(hlen >> 8);
    memcpy(f + 10, dict, (size_t)n);
    memset(f + 10 + n, ' ', pad);
    f[10 + (size_t)n + pad] = '\n';
    memcpy(f + head + pad, data, bytes);
    int rc = cz__file_write(path, f, head + pad + bytes, err);
    free(f);
    return rc;
}

int cz_npy_param_path(const char *dir, const char *name, char **out, cz_error *err)
{
    *out = NULL;
    /* ".npy" is appended, so "." and ".." would name files "..npy" and "...npy"; refused all
     * the same: they are no parameter names. */
    if (!name[0] || !strcmp(name, ".") || !strcmp(name, "..") || strchr(name, '/'))
        return cz__error_set(err, CZ_EINVALID,
                             "parameter name '%s' cannot be a file name inside %s: it is empty, "
                             "'.', '..' or holds '/' (rename the parameter in the model)",
                             name, dir);
    size_t n = strlen(dir) + strlen(name) + 6;
    *out = malloc(n);
    if (!*out)
        return cz__error_set(err, CZ_ENOMEM, "out of memory");
    snprintf(*out, n, "%s/%s.npy", dir, name);
    return CZ_OK;
}

/* ---- reading -------------------------------------------------------------------------- */

/* A cursor over the header text (not NUL-terminated: a header may hold any byte). */
typedef struct hdr_cursor {
    const char *s;
    size_t n, i;
} hdr_cursor;

static void skip_ws(hdr_cursor *c)
{
    while (c->i < c->n &&
           (c->s[c->i] == ' ' || c->s[c->i] == '\t' || c->s[c->i] == '\n' || c->s[c->i] == '\r'))
        c->i++;
}

static int eat(hdr_cursor *c, char ch)
{
    skip_ws(c);
    if (c->i < c->n && c->s[c->i] == ch) {
        c->i++;
        return 1;
    }
    return 0;
}

/* A Python string literal in ' or " without escapes (keys and dtypes need none). */
static int read_str(hdr_cursor *c, char *out, size_t cap)
{
    skip_ws(c);
    if (c->i >= c->n || (c->s[c->i] != '\'' && c->s[c->i] != '"'))
        return 0;
    char q = c->s[c->i++];
    size_t k = 0;
    while (c->i < c->n && c->s[c->i] != q) {
        if (c->s[c->i] == '\\' || k + 1 >= cap)
            return 0;
        out[k++] = c->s[c->i++];
    }
    if (c->i >= c->n)
        return 0;
    c->i++;
    out[k] = '\0';
    return 1;
}

/* A word made of letters (True, False). */
static int read_word(hdr_cursor *c, char *out, size_t cap)
{
    skip_ws(c);
    size_t k = 0;
    while (c->i < c->n &&
           ((c->s[c->i] >= 'a' && c->s[c->i] <= 'z') || (c->s[c->i] >= 'A' && c->s[c->i] <= 'Z'))) {
        if (k + 1 >= cap)
            return 0;
        out[k++] = c->s[c->i++];
    }
    out[k] = '\0';
    return k > 0;
}

/* A tuple of non-negative decimal integers: (), (n,), (a, b), (a, b,), ... A one-element tuple
 * needs its comma, as in Python ("(5)" is an int). Returns the number of dimensions or -1. */
static int read_shape(hdr_cursor *c, int64_t *dims, int cap)
{
    if (!eat(c, '('))
        return -1;
    int n = 0, comma = 0;
    for (;;) {
        skip_ws(c);
        if (eat(c, ')'))
            return (n == 1 && !comma) ? -1 : n;
        if (n > 0 && !comma)
            return -1;
        skip_ws(c);
        if (c->i >= c->n || c->s[c->i] < '0' || c->s[c->i] > '9')
            return -1;
        int64_t v = 0;
        while (c->i < c->n && c->s[c->i] >= '0' && c->s[c->i] <= '9') {
            int d = c->s[c->i++] - '0';
            if (v > (INT64_MAX - d) / 10)
                return -1;
            v = v * 10 + d;
        }
        if (n < cap)
            dims[n] = v;
        if (n == INT32_MAX)
            return -1;
        n++;
        comma = eat(c, ',');
    }
}

static void shape_text(char *buf, size_t cap, const int64_t *dims, int n)
{
    size_t k = (size_t)snprintf(buf, cap, "(");
    for (int i = 0; i < n && k < cap; i++)
        k += (size_t)snprintf(buf + k, cap - k, "%s%" PRId64, i ? ", " : "", dims[i]);
    if (k < cap)
        snprintf(buf + k, cap - k, n == 1 ? ",)" : ")");
}

/* Parses the header dict: exactly the keys 'descr', 'fortran_order' and 'shape', in any order,
 * then only whitespace. Checks dtype, order and shape against the expected ones. */
static int parse_header(const char *path, const char *text, size_t n, int ndim, int64_t rows,
                        int64_t cols, cz_error *err)
{
    hdr_cursor c = {text, n, 0};
    char key[32], descr[32] = "", word[16];
    int have_descr = 0, have_order = 0, have_shape = 0, fortran = 0, nd = -1;
    int64_t dims[8];
    if (!eat(&c, '{'))
        return cz__error_set(err, CZ_EPARSE, "%s: header is not a Python dict literal", path);
    while (!eat(&c, '}')) {
        if (!read_str(&c, key, sizeof key) || !eat(&c, ':'))
            return cz__error_set(err, CZ_EPARSE,
                                 "%s: header dict: expected a quoted key and ':' at byte %zu", path,
                                 c.i);
        if (!strcmp(key, "descr") && !have_descr) {
            have_descr = 1;
            if (!read_str(&c, descr, sizeof descr))
                return cz__error_set(err, CZ_EPARSE, "%s: header 'descr': expected a string", path);
        } else if (!strcmp(key, "fortran_order") && !have_order) {
            have_order = 1;
            if (!read_word(&c, word, sizeof word) ||
                (strcmp(word, "True") != 0 && strcmp(word, "False") != 0))
                return cz__error_set(err, CZ_EPARSE,
                                     "%s: header 'fortran_order': expected True or False", path);
            fortran = !strcmp(word, "True");
        } else if (!strcmp(key, "shape") && !have_shape) {
            have_shape = 1;
            if ((nd = read_shape(&c, dims, 8)) < 0)
                return cz__error_set(err, CZ_EPARSE,
                                     "%s: header 'shape': expected a tuple of integers", path);
        } else {
            return cz__error_set(
                err, CZ_EPARSE,
                "%s: header has key '%s' %s; expected exactly 'descr', "
                "'fortran_order' and 'shape'",
                path, key,
                (!strcmp(key, "descr") || !strcmp(key, "fortran_order") || !strcmp(key, "shape"))
                    ? "twice"
                    : "(unknown)");
        }
        if (!eat(&c, ',')) {
            if (eat(&c, '}'))
                break;
            return cz__error_set(err, CZ_EPARSE, "%s: header dict: expected ',' or '}' at byte %zu",
                                 path, c.i);
        }
    }
    skip_ws(&c);
    if (c.i != n)
        return cz__error_set(err, CZ_EPARSE,
                             "%s: header has bytes after the dict (at byte %zu); expected only "
                             "spaces and a newline",
                             path, c.i);
    if (!have_descr || !have_order || !have_shape)
        return cz__error_set(err, CZ_EPARSE, "%s: header lacks '%s'", path,
                             !have_descr   ? "descr"
                             : !have_order ? "fortran_order"
                                           : "shape");
    if (strcmp(descr, "<f4") != 0)
        return cz__error_set(err, CZ_EINVALID,
                             "%s: dtype '%s'; expected '<f4' (little-endian float32)", path, descr);
    if (fortran)
        return cz__error_set(err, CZ_EINVALID,
                             "%s: fortran_order is True; expected False (C order; save with "
                             "numpy.ascontiguousarray)",
                             path);
    int64_t want[2] = {rows, cols};
    int ok = nd == ndim && nd <= 8;
    for (int i = 0; ok && i < nd; i++)
        ok = dims[i] == want[i];
    if (!ok) {
        char found[160], expected[64];
        if (nd <= 8)
            shape_text(found, sizeof found, dims, nd);
        else
            snprintf(found, sizeof found, "with %d dimensions", nd);
        shape_text(expected, sizeof expected, want, ndim);
        return cz__error_set(err, CZ_EMISMATCH, "%s: header shape %s; expected %s", path, found,
                             expected);
    }
    return CZ_OK;
}

int cz_npy_read(const char *path, int ndim, int64_t rows, int64_t cols, float **out, cz_error *err)
{
    int rc = CZ_OK;
    char *hdr = NULL;
    float *data = NULL;
    *out = NULL;
    int64_t count64;
    if (ndim < 1 || ndim > 2 || rows < 0 || cols < 0 ||
        __builtin_mul_overflow(rows, ndim == 1 ? 1 : cols, &count64) ||
        (uint64_t)count64 > SIZE_MAX / sizeof(float))
        return cz__error_set(err, CZ_EINVALID, "%s: cannot read a %d-D array of %lld x %lld", path,
                             ndim, (long long)rows, (long long)cols);
    size_t count = (size_t)count64;
    FILE *f = fopen(path, "rb");
    if (!f)
        return cz__error_set(err, CZ_EIO, "%s: cannot open: %s", path, strerror(errno));
    unsigned char head[12];
    if (fread(head, 1, 10, f) != 10 || memcmp(head, "\x93NUMPY", 6) != 0) {
        rc = cz__error_set(err, CZ_EPARSE, "%s: not a .npy file (bad magic)", path);
        goto done;
    }
    if (head[6] < 1 || head[6] > 3 || head[7] != 0) {
        rc = cz__error_set(err, CZ_EUNSUPPORTED,
                           "%s: .npy format version %d.%d; expected 1.0, 2.0 "
                           "or 3.0",
                           path, head[6], head[7]);
        goto done;
    }
    size_t hlen = (size_t)head[8] | ((size_t)head[9] << 8);
    if (head[6] >= 2) {
        if (fread(head + 10, 1, 2, f) != 2) {
            rc = cz__error_set(err, CZ_EPARSE, "%s: truncated header", path);
            goto done;
        }
        hlen |= ((size_t)head[10] << 16) | ((size_t)head[11] << 24);
    }
    if (hlen > 1 << 20) {
        rc = cz__error_set(err, CZ_EPARSE, "%s: header of %zu bytes is too long", path, hlen);
        goto done;
    }
    hdr = malloc(hlen + 1);
    if (!hdr) {
        rc = cz__error_set(err, CZ_ENOMEM, "%s: out of memory", path);
        goto done;
    }
    if (fread(hdr, 1, hlen, f) != hlen) {
        rc = cz__error_set(err, CZ_EPARSE, "%s: truncated header", path);
        goto done;
    }
    rc = parse_header(path, hdr, hlen, ndim, rows, cols, err);
    if (rc)
        goto done;
    data = malloc((count ? count : 1) * sizeof(float));
    if (!data) {
        rc = cz__error_set(err, CZ_ENOMEM, "%s: out of memory for %zu values", path, count);
        goto done;
    }
    size_t got = fread(data, sizeof(float), count, f);
    if (got != count) {
        rc = cz__error_set(err, CZ_EPARSE,
                           "%s: truncated data: expected %zu float32 values, found %zu", path,
                           count, got);
        goto done;
    }
    if (fgetc(f) != EOF) {
        rc = cz__error_set(err, CZ_EPARSE,
                           "%s: trailing bytes after the %zu float32 values the header declares",
                           path, count);
        goto done;
    }
    for (size_t i = 0; i < count; i++)
        if (!isfinite(data[i])) {
            size_t c = ndim == 1 ? 1 : (size_t)cols;
            rc = cz__error_set(err, CZ_EINVALID,
                               "%s: element %zu (row %zu, column %zu) is %s; initial values must "
                               "be finite",
                               path, i, i / c, i % c, isnan(data[i]) ? "NaN" : "infinite");
            goto done;
        }
    *out = data;
    data = NULL;
done:
    free(hdr);
    free(data);
    fclose(f);
    return rc;
}
