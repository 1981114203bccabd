/*
 * The list a structural check writes its findings into (cz_plan_checks): where the check is
 * (a JSON path into the plan file) and each violation with its code. validate reports all of
 * them; the executor refuses on the first. Its own file so that every checker (plan_structure.c,
 * fsdp_structure.c) calls it without calling each other.
 */
#include "cz_format.h"

#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>

#define CZ_VALIDATE_RTOL 1e-9

void cz__plan_checks_at(cz_plan_checks *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->path, sizeof c->path, fmt, ap);
    va_end(ap);
}

void cz__plan_checks_fail(cz_plan_checks *c, const char *code, const char *fmt, ...)
{
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    json_t *v = json_pack("{s:s, s:s, s:s}", "code", code, "path", c->path, "message", msg);
    if (!v || json_array_append_new(c->out, v) != 0)
        c->oom = 1;
}

int cz__close_rel(double a, double b)
{
    if (isnan(a) || isnan(b))
        return 0;
    return fabs(a - b) <= CZ_VALIDATE_RTOL * fmax(fabs(a), fabs(b));
}
