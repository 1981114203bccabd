/* The executor's one allocator: a counter in front of malloc, so that a test can prove that a
 * step after the first allocates nothing (cz__exec_alloc_count before and after). Ranks are
 * processes and an executor is used from one thread, so a relaxed atomic is enough. */
#include "alloc.h"

#include <stdatomic.h>
#include <stdlib.h>

static _Atomic uint64_t cz_alloc_count;

void *cz__exec_malloc(size_t bytes)
{
    void *p = malloc(bytes ? bytes : 1);
    if (p)
        atomic_fetch_add_explicit(&cz_alloc_count, 1, memory_order_relaxed);
    return p;
}

void *cz__exec_calloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (p)
        atomic_fetch_add_explicit(&cz_alloc_count, 1, memory_order_relaxed);
    return p;
}

void cz__exec_free(void *p)
{
    free(p);
}

uint64_t cz__exec_alloc_count(void)
{
    return atomic_load_explicit(&cz_alloc_count, memory_order_relaxed);
}
