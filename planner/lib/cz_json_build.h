/*
 * cz_json_build.h — building the JSON reports of inspect, diff and import-hf (json_build.c).
 *
 * A report is built by dozens of calls; each helper turns every jansson failure (a constructor
 * that returned NULL for want of memory, a set or append that failed) into -1, so that a builder
 * chains them with || and reports one out-of-memory error. Values are stolen, as by jansson's
 * *_new functions, also when the call fails.
 */
#ifndef CZ_JSON_BUILD_H
#define CZ_JSON_BUILD_H

#include <jansson.h>

/* obj[key] = v; -1 when v is NULL or the set fails. */
int cz__json_put(json_t *obj, const char *key, json_t *v);
/* Appends v to arr; -1 when v is NULL or the append fails. */
int cz__json_push(json_t *arr, json_t *v);
/* x as a JSON real, or null for NaN and infinities, which JSON cannot hold (a plan's figures
 * are finite; this guards odd input). */
json_t *cz__json_num(double x);
/* s, or "?" for a missing name (a plan built in memory may lack one). */
const char *cz__str_or_unknown(const char *s);

#endif /* CZ_JSON_BUILD_H */
