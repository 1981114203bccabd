/*
 * ns_coop.h — the shared rules of cooperative Newton-Schulz (cz_muon_coop_run): how the
 * symmetric a x a Gram matrix travels packed, and which form of the polynomial a member's
 * slice uses. Plain C, shared by the CPU and CUDA backends so that both make the same choice
 * and the planner's cost model (planner/lib/cost.c, cz_cost_coop) can state the same rule.
 *
 * Packed Gram: the upper triangle including the diagonal, row-major,
 *   p = [A00 A01 .. A0,a-1, A11 A12 .. A1,a-1, .., Aa-1,a-1],
 * a (a + 1) / 2 floats per matrix: half the bytes of the full a x a on the all-reduce. Element
 * (i, j), i <= j, sits at i a - i (i - 1) / 2 + (j - i).
 *
 * Polynomial form of a member with an a x n slice X_j and the summed Gram A:
 *   standard  B = b A + c A A,            X_j = a X_j + B X_j       2 a^3 + 2 a^2 n FLOPs
 *   A(AX)     Y = A X_j, Z = A Y,         X_j = a X_j + b Y + c Z   4 a^2 n FLOPs
 * (equal in exact arithmetic). A(AX) is strictly cheaper exactly when n < a.
 */
#ifndef CZ_NS_COOP_H
#define CZ_NS_COOP_H

#include <stdint.h>

/* Floats of one packed a x a symmetric matrix: a (a + 1) / 2. */
static inline int64_t cz_ns_packed_len(int64_t a)
{
    return a > 0 ? a * (a + 1) / 2 : 0;
}

/* Offset of row i's first packed element (i, i). */
static inline int64_t cz_ns_packed_row(int64_t a, int64_t i)
{
    return i * a - i * (i - 1) / 2;
}

/* 1 when a member's a x n slice takes the A(AX) form (n < a), 0 for the standard form. */
static inline int cz_ns_coop_use_aax(int64_t a, int64_t n)
{
    return n < a;
}

/* Writes the upper triangle of each of `batch` row-major a x a matrices at full (back to
 * back) to packed (back to back, cz_ns_packed_len(a) each). */
void cz_ns_sym_pack(float *packed, const float *full, int batch, int64_t a);
/* The inverse: full a x a matrices, the lower triangle mirrored from the upper one. */
void cz_ns_sym_unpack(float *full, const float *packed, int batch, int64_t a);

#endif /* CZ_NS_COOP_H */
