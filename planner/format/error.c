/* Error reports and small allocation helpers shared by every module. */
#include "cz_format.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void cz_error_clear(cz_error *err)
{
    if (!err)
        return;
    err->code = CZ_OK;
    err->message[0] = '\0';
}

/* In the format library so that both shared libraries carry and export it (as cz_version). */
const char *cz_error_code_name(int code)
{
    switch (code) {
    case CZ_OK:
        return "CZ_OK";
    case CZ_EIO:
        return "CZ_EIO";
    case CZ_EPARSE:
        return "CZ_EPARSE";
    case CZ_EINVALID:
        return "CZ_EINVALID";
    case CZ_ENOMEM:
        return "CZ_ENOMEM";
    case CZ_EMISMATCH:
        return "CZ_EMISMATCH";
    case CZ_EUNSUPPORTED:
        return "CZ_EUNSUPPORTED";
    case CZ_EINTERNAL:
        return "CZ_EINTERNAL";
    case CZ_ETIMEOUT:
        return "CZ_ETIMEOUT";
    }
    /* Not NULL: a caller prints it as is. */
    return "CZ_E?";
}

int cz__error_set(cz_error *err, int code, const char *fmt, ...)
{
    if (!err)
        return code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
    err->code = code;
    return code;
}

char *cz__strdup(const char *s)
{
    if (!s)
        return NULL;
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d)
        memcpy(d, s, n);
    return d;
}
