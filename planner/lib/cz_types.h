/*
 * cz_types.h — the planner's whole internal interface in one include, for the CLI, the tests
 * and the executor. New code can include the narrow header it needs instead:
 *  - cz_plan_types.h: model, cluster and plan structures (and their conventions);
 *  - cz_algorithms.h: cost model, partitioners, schedulers, solvers, metrics;
 *  - cz_analysis.h: structural checks, simulate, render, import, validate, inspect, diff;
 *  - cz_error.h, cz_assert.h, cz_names.h, cz_order.h: errors, invariants, enum names, orders.
 * Not installed; library users see only canzona.h.
 */
#ifndef CZ_TYPES_H
#define CZ_TYPES_H

#include "canzona.h"
#include "cz_algorithms.h"
#include "cz_analysis.h"
#include "cz_assert.h"
#include "cz_error.h"
#include "cz_names.h"
#include "cz_order.h"
#include "cz_plan_types.h"

#endif /* CZ_TYPES_H */
