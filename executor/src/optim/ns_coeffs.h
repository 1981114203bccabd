/*
 * ns_coeffs.h — the Newton-Schulz coefficient sets (ns_coeffs.c): the quintic iteration
 * X = a X + (b A + c A A) X, A = X X^T, that orthogonalizes a matrix, named so that a
 * configuration picks one ("jordan", "cubic").
 */
#ifndef CZ_NS_COEFFS_H
#define CZ_NS_COEFFS_H

#include <stddef.h>

typedef struct cz_ns_coeffs {
    const char *name;
    double a, b, c;
} cz_ns_coeffs;

/* Looks a coefficient set up by name; NULL when unknown. */
const cz_ns_coeffs *cz__ns_coeffs_find(const char *name);
/* Comma-separated list of the known names, for messages. */
const char *cz__ns_coeffs_names(void);

#endif /* CZ_NS_COEFFS_H */
