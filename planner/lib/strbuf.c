/* The planner's growing string (cz_strbuf.h). */
#include "cz_strbuf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Room for extra more bytes and the NUL: 4 KiB first, then doubling, so that a document of n
 * bytes costs O(log n) reallocations. */
static int strbuf_grow(cz_strbuf *b, size_t extra)
{
    if (b->failed)
        return 0;
    if (b->len + extra + 1 <= b->cap)
        return 1;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + extra + 1)
        cap *= 2;
    char *d = realloc(b->data, cap);
    if (!d) {
        b->failed = 1;
        return 0;
    }
    b->data = d;
    b->cap = cap;
    return 1;
}

void cz__strbuf_put(cz_strbuf *b, const char *s, size_t n)
{
    if (!strbuf_grow(b, n))
        return;
    memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = '\0';
}

void cz__strbuf_puts(cz_strbuf *b, const char *s)
{
    cz__strbuf_put(b, s, strlen(s));
}

void cz__strbuf_printf(cz_strbuf *b, const char *fmt, ...)
{
    if (b->failed)
        return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) {
        b->failed = 1;
        return;
    }
    if (!strbuf_grow(b, (size_t)n))
        return;
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

void cz__strbuf_free(cz_strbuf *b)
{
    free(b->data);
    *b = (cz_strbuf)CZ_STRBUF_INIT;
}
