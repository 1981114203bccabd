/*
 * format_internal.h — what the plan-format library's own files share and nothing else uses:
 * the strict JSON getters (json_util.h), the enums' name tables, the reader of a model's
 * Megatron record, the rule for parameter names and the SHA-256 primitive. Its functions are
 * named cz__ (internal, docs/ARCHITECTURE.md). The rest of the project includes cz_format.h
 * only (tools/check_layers.py checks it; the planner's white-box tests in tests/unit and fuzz/
 * may include this header too).
 */
#ifndef CZ_FORMAT_INTERNAL_H
#define CZ_FORMAT_INTERNAL_H

#include "cz_format.h"
#include "json_util.h"

/* The enums' names (settings.c): one table per enum in enum order, each ending in NULL so that
 * the JSON readers can take it as the list of accepted values (cz__json_get_enum). The name and
 * parse functions in canzona.h read the same tables; nothing else spells these names. */
extern const char *const cz__dtype_names[];
extern const char *const cz__optimizer_names[];
extern const char *const cz__unit_names[];
extern const char *const cz__dp_strategy_names[];
extern const char *const cz__tp_strategy_names[];
extern const char *const cz__layerwise_order_names[];
extern const char *const cz__solver_names[];
extern const char *const cz__layout_names[];
extern const char *const cz__hsdp_compute_names[];
extern const char *const cz__muon_tp_mode_names[];
extern const char *const cz__kind_names[];         /* cz_param_kind: "matrix", "elementwise" */
extern const char *const cz__solve_status_names[]; /* CZ_SOLVE_* */
/* A bucket's buffer as a plan spells it: a split-layout bucket's (cz_plan_bucket.elementwise, 0
 * or 1), then "expert" (index CZ_BUFFER_EXPERT) for an expert buffer's bucket. */
#define CZ_BUFFER_EXPERT 2
extern const char *const cz__bucket_buffer_names[];
/* settings.alpha_numel_loads, 0 or 1, as a plan spells it. */
extern const char *const cz__alpha_loads_names[];

/* The top-level member of a plan file that holds its content hash (docs/FORMATS.md section 5). */
#define CZ_CONTENT_KEY "content_sha256"

/* Reads the optional "megatron" record of a model description (root) into m->megatron and
 * checks it against itself and against m's parameters (megatron_rules.c; model_io.c calls it). */
int cz__model_megatron_read(const char *file, const json_t *root, cz_model *m, cz_error *err);

/* NULL when name is safe as a file name inside a folder, else why not ("contains '/'", ...):
 * empty, longer than CZ_PARAM_NAME_MAX, a '/' or '\\', a control character, or a leading '.'
 * (which also covers "." and ".."). The model and plan readers refuse such names (model_io.c). */
const char *cz__param_name_problem(const char *name);

/* SHA-256 of data as 64 lowercase hexadecimal digits and a NUL (sha256.c). */
void cz__sha256_hex(const void *data, size_t len, char out[65]);
/* The same fed piece by piece: init, any number of updates, final (which writes the digits). */
typedef struct cz_sha256 {
    uint32_t h[8];
    uint64_t len;          /* bytes fed so far */
    unsigned char buf[64]; /* a block not yet complete */
    size_t nbuf;
} cz_sha256;
void cz__sha256_init(cz_sha256 *s);
void cz__sha256_update(cz_sha256 *s, const void *data, size_t len);
void cz__sha256_final(cz_sha256 *s, char out[65]);

/* The parts of the plan reader (plan_io.c) that the split plan's reader (plan_slice_read.c)
 * runs on the pieces of a split plan folder, so that a piece means exactly what the same
 * member of a whole plan file means. Each reads its member(s) of root (or the entry e at path)
 * into p, with messages naming c->file and the JSON path. */
int cz__plan_read_schema(const cz_json_ctx *c, const json_t *root, int *version);
int cz__plan_read_origin(const cz_json_ctx *c, const json_t *root, cz_plan *p);
int cz__plan_read_settings(const cz_json_ctx *c, const json_t *root, cz_plan *p);
int cz__plan_read_solver_result(const cz_json_ctx *c, const json_t *root, cz_plan *p);
int cz__plan_read_shape(const cz_json_ctx *c, const json_t *root, cz_plan *p);
int cz__plan_read_param(const cz_json_ctx *c, const json_t *e, const char *path, size_t index,
                        const cz_plan *p, cz_plan_param *q);
int cz__plan_read_bucket(const cz_json_ctx *c, const json_t *e, const char *path, size_t index,
                         const cz_plan *p, cz_plan_bucket *b);
int cz__plan_read_group(const cz_json_ctx *c, const json_t *e, const char *path, const cz_plan *p,
                        int nslots, bool split, cz_plan_group *g);

#endif /* CZ_FORMAT_INTERNAL_H */
