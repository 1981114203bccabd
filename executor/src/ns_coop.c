/* Packing of the cooperative Gram matrix on the host (see ns_coop.h for the layout). */
#include "ns_coop.h"

#include <string.h>

void cz_ns_sym_pack(float *packed, const float *full, int batch, int64_t a)
{
    int64_t pl = cz_ns_packed_len(a);
    for (int m = 0; m < batch; m++) {
        const float *f = full + (int64_t)m * a * a;
        float *p = packed + (int64_t)m * pl;
        for (int64_t i = 0; i < a; i++)
            memcpy(p + cz_ns_packed_row(a, i), f + i * a + i, (size_t)(a - i) * sizeof(float));
    }
}

void cz_ns_sym_unpack(float *full, const float *packed, int batch, int64_t a)
{
    int64_t pl = cz_ns_packed_len(a);
    for (int m = 0; m < batch; m++) {
        float *f = full + (int64_t)m * a * a;
        const float *p = packed + (int64_t)m * pl;
        for (int64_t i = 0; i < a; i++) {
            const float *row = p + cz_ns_packed_row(a, i);
            for (int64_t j = i; j < a; j++)
                f[i * a + j] = f[j * a + i] = row[j - i];
        }
    }
}
