/* Newton-Schulz coefficient sets for Muon's orthogonalization. */
#include "ns_coeffs.h"

#include <string.h>

/* "jordan": the quintic of Keller Jordan's Muon (a, b, c) = (3.4445, -4.7750, 2.0315), which
 * pushes singular values into roughly [0.7, 1.2] in 5 steps. "cubic": the classic Newton-Schulz
 * iteration X = 1.5 X - 0.5 X X^T X (b = -0.5, c = 0), which converges to exactly 1 but needs
 * more steps from small singular values. */
static const cz_ns_coeffs cz_ns_table[] = {
    {"jordan", 3.4445, -4.7750, 2.0315},
    {"cubic", 1.5, -0.5, 0.0},
};

const cz_ns_coeffs *cz__ns_coeffs_find(const char *name)
{
    if (!name)
        return &cz_ns_table[0];
    for (size_t i = 0; i < sizeof cz_ns_table / sizeof cz_ns_table[0]; i++)
        if (strcmp(cz_ns_table[i].name, name) == 0)
            return &cz_ns_table[i];
    return NULL;
}

const char *cz__ns_coeffs_names(void)
{
    return "jordan, cubic";
}
