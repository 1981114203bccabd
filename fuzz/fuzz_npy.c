/*
 * Harness: the .npy reader of canzona-bench (tools/bench/npy.c).
 *
 * Input layout: byte 0 picks the expected rank (even: 1-D, odd: 2-D), byte 1 the expected
 * shape (rows = high nibble, cols = low nibble), the rest is the file. The reader is called as
 * the benchmark calls it, with the shape the plan expects.
 *
 * Properties beyond "no crash, leak or undefined behaviour": a file the reader accepts holds
 * exactly the data of the expected shape after its header (no missing and no trailing bytes),
 * and an accepted file survives a round trip: written back with cz_npy_write and read again,
 * it gives the same values.
 */
#include "fuzz_util.h"
#include "npy.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    int ndim = (data[0] & 1) ? 2 : 1;
    int64_t rows = data[1] >> 4, cols = ndim == 2 ? (data[1] & 15) : 1;
    const uint8_t *file = data + 2;
    size_t fsize = size - 2;
    float *values = NULL, *again = NULL;
    cz_error err;
    cz_error_clear(&err);
    int rc = cz_npy_read(fz_input_path(0, file, fsize), ndim, rows, cols, &values, &err);
    if (rc != CZ_OK) {
        if (values)
            fz_fail("cz_npy_read failed (%d) but returned data", rc);
        if (!err.message[0])
            fz_fail("cz_npy_read failed (%d) without a message", rc);
        return 0;
    }
    size_t count = (size_t)(rows * cols);
    /* Header: magic (6), version (2), length (2 in version 1, 4 from version 2), then text. */
    size_t lenbytes = file[6] >= 2 ? 4 : 2;
    size_t hlen = 0;
    for (size_t i = 0; i < lenbytes; i++)
        hlen |= (size_t)file[8 + i] << (8 * i);
    size_t data_start = 8 + lenbytes + hlen;
    if (fsize != data_start + count * sizeof(float))
        fz_fail("cz_npy_read accepted a file of %zu bytes; a header of %zu bytes and %zu float32 "
                "values make %zu",
                fsize, hlen, count, data_start + count * sizeof(float));
    const char *copy = fz_scratch_path("copy.npy");
    cz_error_clear(&err);
    if (cz_npy_write(copy, values, ndim, rows, cols, &err) != CZ_OK)
        fz_fail("cz_npy_write failed: %s", err.message);
    cz_error_clear(&err);
    if (cz_npy_read(copy, ndim, rows, cols, &again, &err) != CZ_OK)
        fz_fail("a file written by cz_npy_write is refused: %s", err.message);
    if (count && memcmp(values, again, count * sizeof(float)) != 0)
        fz_fail("the values changed in a write and read round trip");
    free(again);
    free(values);
    return 0;
}
