/* The names of the planner's enums, one table per enum in enum order, each ending in NULL so that
 * the JSON readers can take it as the list of accepted values (cz_json_get_enum). The name and
 * parse functions in canzona.h read the same tables; nothing else spells these names. */
#ifndef CZ_NAMES_H
#define CZ_NAMES_H

#include "canzona.h"

extern const char *const cz_dtype_names[];
extern const char *const cz_optimizer_names[];
extern const char *const cz_unit_names[];
extern const char *const cz_dp_strategy_names[];
extern const char *const cz_tp_strategy_names[];
extern const char *const cz_layerwise_order_names[];
extern const char *const cz_solver_names[];
extern const char *const cz_layout_names[];
extern const char *const cz_muon_tp_mode_names[];
extern const char *const cz_kind_names[];         /* cz_param_kind: "matrix", "elementwise" */
extern const char *const cz_solve_status_names[]; /* CZ_SOLVE_* */

/* Bytes per element of a dtype (settings.c). */
int cz_dtype_bytes(cz_dtype d);

/* "matrix" or "elementwise"; NULL for a value outside the enum. */
const char *cz_kind_name(cz_param_kind v);

#endif
