/* .npy format 1.0/2.0: magic, version, little-endian header length, a Python dict literal
 * header padded with spaces to a multiple of 64 bytes and ended by '\n', then the data. */
#include "npy.h"
#include "cz_types.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cz_npy_write(const char *path, const float *data, int ndim, int64_t rows, int64_t cols,
                 cz_error *err)
{
    char dict[256];
    int n =
        ndim == 1
            ? snprintf(dict, sizeof dict,
                       "{'descr': '<f4', 'fortran_order': False, 'shape': (%" PRId64 ",), }", rows)
            : snprintf(dict, sizeof dict,
                       "{'descr': '<f4', 'fortran_order': False, 'shape': (%" PRId64 ", %" PRId64
                       "), }",
                       rows, cols);
    size_t total = 10 + (size_t)n + 1;
    size_t pad = (64 - total % 64) % 64;
    uint16_t hlen = (uint16_t)(n + pad + 1);
    FILE *f = fopen(path, "wb");
    if (!f)
        return cz_error_set(err, CZ_EIO, "%s: cannot open for writing", path);
    unsigned char head[10] = {0x93,
                              'N',
                              'U',
                              'M',
                              'P',
                              'Y',
                              1,
                              0,
                              (unsigned char)(hlen & 0xff),
                              (unsigned char)(hlen >> 8)};
    size_t count = (size_t)(rows * (ndim == 1 ? 1 : cols));
    int ok = fwrite(head, 1, 10, f) == 10 && fwrite(dict, 1, (size_t)n, f) == (size_t)n;
    for (size_t i = 0; ok && i < pad; i++)
        ok = fputc(' ', f) != EOF;
    ok = ok && fputc('\n', f) != EOF && fwrite(data, sizeof(float), count, f) == count;
    if (fclose(f) != 0)
        ok = 0;
    return ok ? CZ_OK : cz_error_set(err, CZ_EIO, "%s: write failed", path);
}

int cz_npy_read(const char *path, int ndim, int64_t rows, int64_t cols, float **out, cz_error *err)
{
    int rc = CZ_OK;
    char *hdr = NULL;
    float *data = NULL;
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f)
        return cz_error_set(err, CZ_EIO, "%s: cannot open", path);
    unsigned char head[12];
    if (fread(head, 1, 10, f) != 10 || memcmp(head, "\x93NUMPY", 6) != 0) {
        rc = cz_error_set(err, CZ_EPARSE, "%s: not a .npy file (bad magic)", path);
        goto done;
    }
    size_t hlen = (size_t)head[8] | ((size_t)head[9] << 8);
    if (head[6] >= 2) {
        if (fread(head + 10, 1, 2, f) != 2) {
            rc = cz_error_set(err, CZ_EPARSE, "%s: truncated header", path);
            goto done;
        }
        hlen |= ((size_t)head[10] << 16) | ((size_t)head[11] << 24);
    }
    if (hlen > 1 << 20) {
        rc = cz_error_set(err, CZ_EPARSE, "%s: header of %zu bytes is too long", path, hlen);
        goto done;
    }
    hdr = calloc(hlen + 1, 1);
    if (!hdr || fread(hdr, 1, hlen, f) != hlen) {
        rc = cz_error_set(err, CZ_EPARSE, "%s: truncated header", path);
        goto done;
    }
    if (!strstr(hdr, "'descr': '<f4'") || !strstr(hdr, "'fortran_order': False")) {
        rc = cz_error_set(err, CZ_EINVALID, "%s: expected dtype '<f4' in C order, header is %s",
                          path, hdr);
        goto done;
    }
    const char *sh = strstr(hdr, "'shape': (");
    long long d0 = -1, d1 = -1;
    int got = sh ? sscanf(sh, "'shape': (%lld, %lld", &d0, &d1) : 0;
    int want_ok = ndim == 1 ? (got >= 1 && d0 == rows && (got == 1 || d1 < 0))
                            : (got == 2 && d0 == rows && d1 == cols);
    if (ndim == 1 && got == 2)
        want_ok = 0;
    if (!want_ok) {
        char want[64];
        if (ndim == 1)
            snprintf(want, sizeof want, "(%lld,)", (long long)rows);
        else
            snprintf(want, sizeof want, "(%lld, %lld)", (long long)rows, (long long)cols);
        rc = cz_error_set(err, CZ_EMISMATCH, "%s: header shape %s; expected %s", path,
                          sh ? sh + 9 : "(none)", want);
        goto done;
    }
    size_t count = (size_t)(rows * (ndim == 1 ? 1 : cols));
    data = malloc((count ? count : 1) * sizeof(float));
    if (!data || fread(data, sizeof(float), count, f) != count) {
        rc = cz_error_set(err, CZ_EIO, "%s: expected %zu float32 values of data", path, count);
        goto done;
    }
    *out = data;
    data = NULL;
done:
    free(hdr);
    free(data);
    fclose(f);
    return rc;
}
