/* Setting the caller's cz_error (error.c): the one way library code reports a failure. Part of
 * cz_format.h, which includes it; its own header so that cz_assert.h can be compiled twice
 * (tests/unit/test_assert.c builds both forms). */
#ifndef CZ_ERROR_H
#define CZ_ERROR_H

#include "canzona_format.h"

#include <stddef.h>

/* Fills err (if not NULL) with code and a printf-style message; returns code. */
int cz__error_set(cz_error *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Versioned options structs (options.c). The check: CZ_OK for a version from 1 to current,
 * else CZ_EUNSUPPORTED naming both (type is the struct's name, e.g. "cz_sim_options"; how the
 * way to initialize it, NULL = "<type>_init() or its _INIT macro"). */
int cz__options_version_check(int version, int current, const char *type, const char *how,
                              cz_error *err);
/* Reads the caller's struct src of any version from 1 to current into dst, which holds this
 * build's defaults: the first ends[v - 1] bytes of src (CZ__OPTIONS_END of version v's last
 * field), then dst's version is set to current. Nothing is copied on failure. */
int cz__options_read(void *dst, const void *src, const size_t *ends, int current, const char *type,
                     cz_error *err);
/* The end of a struct's field: where the fields of the version that added it end. */
#define CZ__OPTIONS_END(type, field) (offsetof(type, field) + sizeof(((type *)0)->field))

/* Allocation helpers (error.c): abort-free; return NULL on failure. */
char *cz__strdup(const char *s);

#endif
