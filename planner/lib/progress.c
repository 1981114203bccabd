/* Progress reports of long-running solves. The library never prints; a tool installs a handler
 * and decides what to show. One process-wide handler, because the solvers run deep inside
 * cz_plan_build and threading a callback through every call would widen the public API. */
#include "cz_types.h"

#include <time.h>

static cz_progress_fn progress_fn;
static void *progress_ctx;

void cz_set_progress_handler(cz_progress_fn fn, void *ctx)
{
    progress_fn = fn;
    progress_ctx = ctx;
}

void cz_progress_report(const cz_progress *p)
{
    if (progress_fn && p)
        progress_fn(p, progress_ctx);
}

double cz_clock_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double cz_cpu_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
