/* Progress reports of long-running solves, and the clocks that time them. The library never
 * prints; the caller of cz_plan_build passes a callback and its payload in cz_settings (as
 * libgit2's options structs do), which reach the solvers in the plan's copy of the settings, so
 * that two builds in one process report to their own callers. */
#include "cz_algorithms.h"

#include <time.h>

void cz__progress_report(const cz_settings *s, const cz_progress *p)
{
    if (s && s->progress && p)
        s->progress(p, s->progress_payload);
}

double cz__clock_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double cz__cpu_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
