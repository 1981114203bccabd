/*
 * alloc.h — the executor's allocator (alloc.c). Every allocation the executor makes (host
 * tables, backend memory of the CPU backend, communication requests; the GPU plugin borrows
 * it) goes through these, so that a test can prove that a step allocates nothing:
 * cz__exec_alloc_count() is the number of successful allocations so far.
 */
#ifndef CZ_ALLOC_H
#define CZ_ALLOC_H

#include <stddef.h>
#include <stdint.h>

void *cz__exec_malloc(size_t bytes);
void *cz__exec_calloc(size_t n, size_t size);
void cz__exec_free(void *p);
uint64_t cz__exec_alloc_count(void);

#endif /* CZ_ALLOC_H */
