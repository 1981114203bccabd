/*
 * cz_types.h — the planner library's whole internal interface in one include, for the CLI and
 * the planner's own tests. New code can include the narrow header it needs instead:
 *  - cz_format.h (planner/format): model, cluster and plan structures, readers' limits,
 *    errors, invariants, enum names, files, the structural check;
 *  - cz_algorithms.h: cost model, partitioners, schedulers, solvers, metrics;
 *  - cz_analysis.h: simulate, render, import, validate, inspect, diff;
 *  - cz_order.h: the orders the algorithms sort into.
 * Not installed; library users see only canzona.h. Nothing outside planner/ includes it (the
 * executor, tools and their tests include cz_format.h; tools/check_layers.py checks it).
 */
#ifndef CZ_TYPES_H
#define CZ_TYPES_H

#include "canzona.h"
#include "cz_algorithms.h"
#include "cz_analysis.h"
#include "cz_format.h"
#include "cz_order.h"

#endif /* CZ_TYPES_H */
