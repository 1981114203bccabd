/* The streaming JSON writer of json_stream.h: the file text and the canonical hash in one pass.
 * The byte-for-byte agreement with jansson's dumps is what keeps plan files and their content
 * hashes as they were; tests/unit/test_json_stream.c checks it against the jansson the build
 * links. */
#include "json_stream.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void cz__jw_fail(cz_jstream *w, int rc, const char *why)
{
    if (w->rc != CZ_OK)
        return;
    w->rc = rc;
    snprintf(w->why, sizeof w->why, "%s", why);
}

void cz__jw_init(cz_jstream *w)
{
    memset(w, 0, sizeof *w);
    cz__sha256_init(&w->sha);
}

void cz__jw_free(cz_jstream *w)
{
    free(w->f);
    free(w->c);
    free(w->tmp);
    for (int i = 0; i < CZ_JW_MAX_DEPTH; i++)
        free(w->st[i].m);
    memset(w, 0, sizeof *w);
}

char *cz__jw_take(cz_jstream *w, size_t *len)
{
    if (w->rc != CZ_OK || !w->f)
        return NULL;
    char *out = w->f;
    *len = w->flen;
    w->f = NULL;
    w->flen = w->fcap = 0;
    return out;
}

/* Room for n more bytes and a NUL in a buffer; false (and the failure recorded) when none. */
static bool grow(cz_jstream *w, char **buf, size_t *cap, size_t len, size_t n)
{
    if (len + n + 1 <= *cap)
        return true;
    size_t want = *cap ? *cap : 4096;
    while (want < len + n + 1) {
        if (want > SIZE_MAX / 2) {
            cz__jw_fail(w, CZ_ENOMEM, "the document is larger than memory allows");
            return false;
        }
        want *= 2;
    }
    char *nb = realloc(*buf, want);
    if (!nb) {
        cz__jw_fail(w, CZ_ENOMEM, "out of memory");
        return false;
    }
    *buf = nb;
    *cap = want;
    return true;
}

static void put_f(cz_jstream *w, const char *s, size_t n)
{
    if (!grow(w, &w->f, &w->fcap, w->flen, n))
        return;
    memcpy(w->f + w->flen, s, n);
    w->flen += n;
    w->f[w->flen] = '\0';
}

static void put_c(cz_jstream *w, const char *s, size_t n)
{
    if (!grow(w, &w->c, &w->ccap, w->clen, n))
        return;
    memcpy(w->c + w->clen, s, n);
    w->clen += n;
}

static void put_both(cz_jstream *w, const char *s, size_t n)
{
    put_f(w, s, n);
    put_c(w, s, n);
}

/* A newline and `depth` spaces (JSON_INDENT(1)). */
static void indent_f(cz_jstream *w, int depth)
{
    if (!grow(w, &w->f, &w->fcap, w->flen, (size_t)depth + 1))
        return;
    w->f[w->flen++] = '\n';
    memset(w->f + w->flen, ' ', (size_t)depth);
    w->flen += (size_t)depth;
    w->f[w->flen] = '\0';
}

/* Length of the UTF-8 sequence starting at s (at most n bytes), 0 when it is not valid UTF-8
 * (jansson's utf8_check_first / utf8_check_full: no overlong forms, no surrogates, nothing above
 * U+10FFFF); its code point in *cp. */
static size_t utf8_seq(const unsigned char *s, size_t n, uint32_t *cp)
{
    unsigned char u = s[0];
    size_t len;
    uint32_t v;
    if (u < 0x80) {
        *cp = u;
        return 1;
    }
    if (u < 0xC2 || u > 0xF4)
        return 0;
    if (u < 0xE0)
        len = 2, v = u & 0x1F;
    else if (u < 0xF0)
        len = 3, v = u & 0x0F;
    else
        len = 4, v = u & 0x07;
    if (len > n)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        v = (v << 6) | (s[i] & 0x3F);
    }
    if ((len == 3 && v < 0x800) || (len == 4 && v < 0x10000) || v > 0x10FFFF ||
        (v >= 0xD800 && v <= 0xDFFF))
        return 0;
    *cp = v;
    return len;
}

/* Writes s quoted and escaped as jansson's dump_string does without JSON_ENSURE_ASCII or
 * JSON_ESCAPE_SLASH, to both texts. */
static void put_string(cz_jstream *w, const char *str, size_t n)
{
    const unsigned char *s = (const unsigned char *)str;
    size_t run = 0, i = 0;
    put_both(w, "\"", 1);
    while (i < n) {
        uint32_t cp;
        size_t len = utf8_seq(s + i, n - i, &cp);
        if (len == 0) {
            cz__jw_fail(w, CZ_EINVALID, "a string is not valid UTF-8");
            return;
        }
        if (cp != '"' && cp != '\\' && cp >= 0x20) {
            i += len;
            continue;
        }
        put_both(w, str + run, i - run);
        char esc[8];
        const char *e = esc;
        switch (cp) {
        case '"':
            e = "\\\"";
            break;
        case '\\':
            e = "\\\\";
            break;
        case '\b':
            e = "\\b";
            break;
        case '\f':
            e = "\\f";
            break;
        case '\n':
            e = "\\n";
            break;
        case '\r':
            e = "\\r";
            break;
        case '\t':
            e = "\\t";
            break;
        default:
            snprintf(esc, sizeof esc, "\\u%04X", (unsigned)cp);
        }
        put_both(w, e, strlen(e));
        i += len;
        run = i;
    }
    put_both(w, str + run, n - run);
    put_both(w, "\"", 1);
}

/* jansson's compare_keys: bytes, then length. */
static int key_cmp(const char *a, size_t alen, const char *b, size_t blen)
{
    int r = memcmp(a, b, alen < blen ? alen : blen);
    if (r)
        return r;
    return alen < blen ? -1 : alen > blen;
}

/* Separators and the key before a value; false when the value must not be written. */
static bool before_value(cz_jstream *w, const char *key)
{
    if (w->rc != CZ_OK)
        return false;
    if (w->done) {
        cz__jw_fail(w, CZ_EINTERNAL, "a value after the document's end");
        return false;
    }
    if (w->depth == 0) {
        if (key) {
            cz__jw_fail(w, CZ_EINTERNAL, "a key outside any object");
            return false;
        }
        return true;
    }
    cz_jframe *fr = &w->st[w->depth - 1];
    if (fr->object != (key != NULL)) {
        cz__jw_fail(w, CZ_EINTERNAL,
                    fr->object ? "an object member without a key" : "a key inside an array");
        return false;
    }
    if (fr->n > 0)
        put_f(w, ",", 1);
    indent_f(w, w->depth);
    if (fr->n > 0)
        put_c(w, ",", 1);
    if (fr->object) {
        size_t klen = strlen(key);
        if (fr->n == fr->mcap) {
            size_t ncap = fr->mcap ? 2 * fr->mcap : 16;
            cz_jmember *nm = realloc(fr->m, ncap * sizeof *nm);
            if (!nm) {
                cz__jw_fail(w, CZ_ENOMEM, "out of memory");
                return false;
            }
            fr->m = nm;
            fr->mcap = ncap;
        }
        if (fr->n > 0) {
            cz_jmember *prev = &fr->m[fr->n - 1];
            prev->len = w->clen - 1 - prev->off; /* the comma just written is not its text */
            if (key_cmp(prev->key, prev->klen, key, klen) > 0)
                fr->sorted = 0;
        }
        fr->m[fr->n] = (cz_jmember){key, klen, w->clen, 0};
        put_string(w, key, klen);
        put_f(w, ": ", 2);
        put_c(w, ":", 1);
    }
    fr->n++;
    return w->rc == CZ_OK;
}

static void begin(cz_jstream *w, const char *key, int object)
{
    if (!before_value(w, key))
        return;
    if (w->depth == CZ_JW_MAX_DEPTH) {
        cz__jw_fail(w, CZ_EINTERNAL, "containers nested too deep");
        return;
    }
    cz_jframe *fr = &w->st[w->depth++];
    fr->object = object;
    fr->n = 0;
    fr->sorted = 1;
    fr->cstart = w->clen;
    put_both(w, object ? "{" : "[", 1);
}

void cz__jw_begin_object(cz_jstream *w, const char *key)
{
    begin(w, key, 1);
}

void cz__jw_begin_array(cz_jstream *w, const char *key)
{
    begin(w, key, 0);
}

static int member_cmp(const void *a, const void *b)
{
    const cz_jmember *x = a, *y = b;
    return key_cmp(x->key, x->klen, y->key, y->klen);
}

/* The canonical text of the object closing in frame fr, members in sorted order: hashed when it
 * is the top-level value, else written back in place of the members' text. */
static void close_object_c(cz_jstream *w, cz_jframe *fr, bool top)
{
    if (fr->n > 0) {
        cz_jmember *last = &fr->m[fr->n - 1];
        last->len = w->clen - last->off;
    }
    if (!fr->sorted)
        qsort(fr->m, fr->n, sizeof *fr->m, member_cmp);
    if (top) {
        cz__sha256_update(&w->sha, "{", 1);
        for (size_t i = 0; i < fr->n; i++) {
            if (i > 0)
                cz__sha256_update(&w->sha, ",", 1);
            cz__sha256_update(&w->sha, w->c + fr->m[i].off, fr->m[i].len);
        }
        cz__sha256_update(&w->sha, "}", 1);
        w->clen = fr->cstart;
        return;
    }
    if (!fr->sorted) {
        /* The members' texts and their commas keep their total length: reordered through the
         * scratch buffer into the same place. */
        size_t span = w->clen - fr->cstart - 1, at = 0;
        if (!grow(w, &w->tmp, &w->tcap, 0, span))
            return;
        for (size_t i = 0; i < fr->n; i++) {
            if (i > 0)
                w->tmp[at++] = ',';
            memcpy(w->tmp + at, w->c + fr->m[i].off, fr->m[i].len);
            at += fr->m[i].len;
        }
        if (at != span) {
            cz__jw_fail(w, CZ_EINTERNAL, "an object's canonical text lost its length");
            return;
        }
        memcpy(w->c + fr->cstart + 1, w->tmp, span);
    }
    put_c(w, "}", 1);
}

static void end(cz_jstream *w)
{
    if (w->rc != CZ_OK)
        return;
    if (w->depth == 0) {
        cz__jw_fail(w, CZ_EINTERNAL, "a container closed that was not open");
        return;
    }
    cz_jframe *fr = &w->st[--w->depth];
    if (fr->n > 0)
        indent_f(w, w->depth);
    put_f(w, fr->object ? "}" : "]", 1);
    bool top = w->depth == 0;
    if (fr->object) {
        close_object_c(w, fr, top);
    } else if (top) {
        put_c(w, "]", 1);
        cz__sha256_update(&w->sha, w->c + fr->cstart, w->clen - fr->cstart);
        w->clen = fr->cstart;
    } else {
        put_c(w, "]", 1);
    }
    if (top)
        w->done = 1;
}

void cz__jw_end(cz_jstream *w)
{
    end(w);
}

void cz__jw_end_with_hash(cz_jstream *w, const char *key, char hash[65])
{
    hash[0] = '\0';
    if (w->rc != CZ_OK)
        return;
    if (w->depth != 1 || !w->st[0].object) {
        cz__jw_fail(w, CZ_EINTERNAL, "the content hash closes the top-level object only");
        return;
    }
    cz_jframe *fr = &w->st[0];
    /* The canonical form is finished before the member is added: the hash does not cover it. */
    w->depth = 0;
    close_object_c(w, fr, true);
    cz__sha256_final(&w->sha, hash);
    if (fr->n > 0)
        put_f(w, ",", 1);
    indent_f(w, 1);
    put_string(w, key, strlen(key));
    put_f(w, ": ", 2);
    put_string(w, hash, 64);
    indent_f(w, 0);
    put_f(w, "}", 1);
    /* put_string wrote the hash member to the canonical buffer too; it is not hashed. */
    w->clen = 0;
    w->done = 1;
}

void cz__jw_newline(cz_jstream *w)
{
    if (w->rc != CZ_OK)
        return;
    if (!w->done || w->depth != 0) {
        cz__jw_fail(w, CZ_EINTERNAL, "the document is not finished");
        return;
    }
    put_f(w, "\n", 1);
}

/* Decimal digits of v into buf (at least 21 bytes); returns the length. */
static size_t fmt_int(char *buf, int64_t v)
{
    char tmp[24];
    size_t n = 0, len = 0;
    uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    do {
        tmp[n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0)
        buf[len++] = '-';
    while (n)
        buf[len++] = tmp[--n];
    return len;
}

void cz__jw_int(cz_jstream *w, const char *key, int64_t v)
{
    if (!before_value(w, key))
        return;
    char buf[24];
    put_both(w, buf, fmt_int(buf, v));
}

/* jansson's jsonp_dtostr with precision 17 (the snprintf form its releases build). */
static size_t fmt_real(char *buf, size_t size, double v)
{
    int ret = snprintf(buf, size, "%.17g", v);
    if (ret < 0 || (size_t)ret >= size)
        return 0;
    size_t len = (size_t)ret;
    if (!strchr(buf, '.') && !strchr(buf, 'e')) {
        if (len + 3 >= size)
            return 0;
        buf[len++] = '.';
        buf[len++] = '0';
        buf[len] = '\0';
    }
    char *start = strchr(buf, 'e');
    if (start) {
        start++;
        char *stop = start + 1;
        if (*start == '-')
            start++;
        while (*stop == '0')
            stop++;
        if (stop != start) {
            memmove(start, stop, len - (size_t)(stop - buf) + 1);
            len -= (size_t)(stop - start);
        }
    }
    return len;
}

void cz__jw_real(cz_jstream *w, const char *key, double v)
{
    if (w->rc != CZ_OK)
        return;
    if (!isfinite(v)) {
        cz__jw_fail(w, CZ_EINTERNAL, "a number is not finite");
        return;
    }
    if (!before_value(w, key))
        return;
    char buf[32];
    size_t n = fmt_real(buf, sizeof buf, v);
    if (n == 0) {
        cz__jw_fail(w, CZ_EINTERNAL, "a number could not be formatted");
        return;
    }
    put_both(w, buf, n);
}

void cz__jw_string(cz_jstream *w, const char *key, const char *s)
{
    if (!before_value(w, key))
        return;
    put_string(w, s, strlen(s));
}

void cz__jw_bool(cz_jstream *w, const char *key, bool v)
{
    if (!before_value(w, key))
        return;
    put_both(w, v ? "true" : "false", v ? 4 : 5);
}

void cz__jw_null(cz_jstream *w, const char *key)
{
    if (!before_value(w, key))
        return;
    put_both(w, "null", 4);
}
