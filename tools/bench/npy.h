/* A tiny reader/writer of NumPy .npy files: fp32, C order, 1-D or 2-D. */
#ifndef CZ_BENCH_NPY_H
#define CZ_BENCH_NPY_H

#include "canzona_format.h"

#include <stdint.h>

/* Writes data (rows x cols, or a 1-D array of rows when ndim is 1) to path, through the
 * planner's writer (file_io.h): replaced atomically, so a failed write leaves the old file;
 * the message names the file and the system's reason. */
int cz_npy_write(const char *path, const float *data, int ndim, int64_t rows, int64_t cols,
                 cz_error *err);
/* Reads path into *out (malloc'd, caller frees) after checking dtype '<f4', C order and that
 * the shape equals the expected one. */
int cz_npy_read(const char *path, int ndim, int64_t rows, int64_t cols, float **out, cz_error *err);

/* The file of a parameter in a --dump-dir or --init-dir folder: "DIR/<name>.npy" in *out
 * (malloc'd). Refuses a name that is not one plain file name (empty, ".", "..", or holding '/'),
 * so that a parameter name can never reach outside the folder. */
int cz_npy_param_path(const char *dir, const char *name, char **out, cz_error *err);

#endif
