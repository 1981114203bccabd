/*
 * format_internal.h — what the plan-format library's own files share and nothing else uses:
 * the strict JSON getters (json_util.h), the reader of a model's Megatron record, the rule for
 * parameter names and the SHA-256 primitive. The rest of the project includes cz_format.h only
 * (tools/check_layers.py checks it).
 */
#ifndef CZ_FORMAT_INTERNAL_H
#define CZ_FORMAT_INTERNAL_H

#include "cz_format.h"
#include "json_util.h"

/* Reads the optional "megatron" record of a model description (root) into m->megatron and
 * checks it against itself and against m's parameters (megatron_rules.c; model_io.c calls it). */
int cz_model_megatron_read(const char *file, const json_t *root, cz_model *m, cz_error *err);

/* NULL when name is safe as a file name inside a folder, else why not ("contains '/'", ...):
 * empty, longer than CZ_PARAM_NAME_MAX, a '/' or '\\', a control character, or a leading '.'
 * (which also covers "." and ".."). The model and plan readers refuse such names (model_io.c). */
const char *cz_param_name_problem(const char *name);

/* SHA-256 of data as 64 lowercase hexadecimal digits and a NUL (sha256.c). */
void cz_sha256_hex(const void *data, size_t len, char out[65]);

#endif /* CZ_FORMAT_INTERNAL_H */
