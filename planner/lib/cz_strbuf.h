/*
 * cz_strbuf.h — the planner's one growing string (strbuf.c), for the text it generates: the SVG
 * and HTML renderings (render.c) and the model descriptions import-hf writes (import_hf.c).
 *
 * Appending never fails loudly: the first allocation failure sets `failed`, every later append
 * is then a no-op, and the caller checks once at the end (a document is built by hundreds of
 * appends; checking each would bury the drawing code). The text is NUL-terminated after every
 * append that succeeded; data stays NULL until the first.
 */
#ifndef CZ_STRBUF_H
#define CZ_STRBUF_H

#include <stddef.h>

typedef struct cz_strbuf {
    char *data; /* malloc'ed, NUL-terminated; NULL before the first append */
    size_t len; /* bytes before the NUL */
    size_t cap; /* bytes allocated */
    int failed; /* 1 once an allocation failed: the text is incomplete */
} cz_strbuf;

#define CZ_STRBUF_INIT                                                                             \
    {                                                                                              \
        NULL, 0, 0, 0                                                                              \
    }

/* Appends n bytes of s. */
void cz__strbuf_put(cz_strbuf *b, const char *s, size_t n);
/* Appends the string s. */
void cz__strbuf_puts(cz_strbuf *b, const char *s);
/* Appends printf-formatted text. */
void cz__strbuf_printf(cz_strbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Releases the text and resets b to CZ_STRBUF_INIT. */
void cz__strbuf_free(cz_strbuf *b);

#endif /* CZ_STRBUF_H */
