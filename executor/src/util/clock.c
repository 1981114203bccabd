/* The executor's clock: monotonic seconds, for step timings and the planes' time limits. Its
 * own file because the GPU plugin builds it too (gpu_plugin.h). */
#include "clock.h"

#include <time.h>

double cz__exec_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
