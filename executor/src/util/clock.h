/*
 * clock.h — the executor's clock (clock.c), for the step's timings and the planes' time
 * limits.
 */
#ifndef CZ_CLOCK_H
#define CZ_CLOCK_H

/* Monotonic clock in seconds. */
double cz__exec_now(void);

#endif /* CZ_CLOCK_H */
