/* Internal invariants: what the planner's own code guarantees to itself (an index in range, an
 * order already sorted, a size that layout made non-negative), as opposed to what a user's input
 * may get wrong, which is reported with a message the user can act on.
 *
 * As libgit2's GIT_ASSERT: a debug build (NDEBUG not defined) aborts at the first broken
 * invariant, with the file, line and condition, so that tests and sanitizer runs stop where the
 * bug is; a release build returns CZ_EINTERNAL with the same text in the caller's cz_error, so
 * that a program using the library gets an error instead of a crash or a wrong plan. */
#ifndef CZ_ASSERT_H
#define CZ_ASSERT_H

#include "cz_error.h"

#include <stdio.h>
#include <stdlib.h>

#ifdef NDEBUG
#define CZ_ASSERT_FAIL_(err, expr)                                                                 \
    cz__error_set((err), CZ_EINTERNAL,                                                             \
                  "%s:%d: internal invariant '%s' does not hold (a planner bug)", __FILE__,        \
                  __LINE__, expr)
#else
#define CZ_ASSERT_FAIL_(err, expr)                                                                 \
    ((void)(err),                                                                                  \
     fprintf(stderr, "%s:%d: internal invariant '%s' does not hold (a planner bug)\n", __FILE__,   \
             __LINE__, expr),                                                                      \
     abort(), CZ_EINTERNAL)
#endif

/* In a function that returns a CZ_* code: returns CZ_EINTERNAL when cond is false. */
#define CZ_ASSERT(cond, err)                                                                       \
    do {                                                                                           \
        if (!(cond))                                                                               \
            return CZ_ASSERT_FAIL_(err, #cond);                                                    \
    } while (0)

/* In a function with one cleanup label: sets rc to CZ_EINTERNAL and jumps there. */
#define CZ_ASSERT_GOTO(cond, err, rc, label)                                                       \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            (rc) = CZ_ASSERT_FAIL_(err, #cond);                                                    \
            goto label;                                                                            \
        }                                                                                          \
    } while (0)

#endif
