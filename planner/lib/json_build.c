/* Helpers that build the JSON reports (cz_json_build.h). */
#include "cz_json_build.h"

#include <math.h>

int cz__json_put(json_t *obj, const char *key, json_t *v)
{
    return v ? json_object_set_new(obj, key, v) : -1;
}

int cz__json_push(json_t *arr, json_t *v)
{
    return v ? json_array_append_new(arr, v) : -1;
}

json_t *cz__json_num(double x)
{
    return isfinite(x) ? json_real(x) : json_null();
}

const char *cz__str_or_unknown(const char *s)
{
    return s ? s : "?";
}
