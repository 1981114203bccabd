/* Packing of the cooperative Gram's row panels on the host (see ns_coop.h for the layout). */
#include "ns_coop.h"

#include <string.h>

void cz__ns_rows_pack(float *out, const float *full, int batch, int64_t a, int64_t r0, int64_t r1)
{
    int64_t pl = cz_ns_panel_len(a, r0, r1), base = cz_coop_packed_before(a, r0);
    for (int m = 0; m < batch; m++) {
        const float *f = full + (int64_t)m * a * a;
        float *p = out + (int64_t)m * pl;
        for (int64_t i = r0; i < r1; i++)
            memcpy(p + (cz_coop_packed_before(a, i) - base), f + i * a + i,
                   (size_t)(a - i) * sizeof(float));
    }
}

void cz__ns_rows_unpack(float *full, const float *in, int batch, int64_t a, int64_t r0, int64_t r1)
{
    int64_t pl = cz_ns_panel_len(a, r0, r1), base = cz_coop_packed_before(a, r0);
    for (int m = 0; m < batch; m++) {
        float *f = full + (int64_t)m * a * a;
        const float *p = in + (int64_t)m * pl;
        for (int64_t i = r0; i < r1; i++) {
            const float *row = p + (cz_coop_packed_before(a, i) - base);
            for (int64_t j = i; j < a; j++)
                f[i * a + j] = f[j * a + i] = row[j - i];
        }
    }
}
