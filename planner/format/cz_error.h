/* Setting the caller's cz_error (error.c): the one way library code reports a failure. Part of
 * cz_format.h, which includes it; its own header so that cz_assert.h can be compiled twice
 * (tests/unit/test_assert.c builds both forms). */
#ifndef CZ_ERROR_H
#define CZ_ERROR_H

#include "canzona_format.h"

/* Fills err (if not NULL) with code and a printf-style message; returns code. */
int cz__error_set(cz_error *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Allocation helpers (error.c): abort-free; return NULL on failure. */
char *cz__strdup(const char *s);

#endif
