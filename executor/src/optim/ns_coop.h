/*
 * ns_coop.h — the shared rules of cooperative Newton-Schulz (cz__muon_coop_run): how the
 * symmetric a x a Gram matrix travels packed and in row panels, and which form of the
 * polynomial a member's slice uses. Plain C, shared by the CPU and CUDA backends so that both
 * make the same choice and the planner's cost model (planner/lib/cost.c, cz__cost_coop) can
 * state the same rule.
 *
 * Packed Gram: the upper triangle including the diagonal, row-major,
 *   p = [A00 A01 .. A0,a-1, A11 A12 .. A1,a-1, .., Aa-1,a-1],
 * a (a + 1) / 2 floats per matrix: half the bytes of the full a x a on the all-reduce. Row i
 * starts at cz_coop_packed_before(a, i) (cz_format.h), so a run of rows r0 .. r1-1 — a
 * panel (cz_coop_panel_row; how many, the plan says per task) — is contiguous. A batch's Gram
 * buffer holds the panels one after the other, each panel the batch's matrices back to back, so
 * that every panel is one contiguous all-reduce.
 *
 * Polynomial form of a member with an a x n slice X_j and the summed Gram A:
 *   standard  B = b A + c A A,            X_j = a X_j + B X_j       2 a^3 + 2 a^2 n FLOPs
 *   A(AX)     Y = A X_j, Z = A Y,         X_j = a X_j + b Y + c Z   4 a^2 n FLOPs
 * (equal in exact arithmetic). A(AX) is strictly cheaper exactly when n < a, and it lets rows
 * r0 .. r1-1 of Y start as soon as the panels up to r1 have arrived.
 */
#ifndef CZ_NS_COOP_H
#define CZ_NS_COOP_H

#include "cz_format.h"

#include <stdint.h>

/* Floats of one packed a x a symmetric matrix: a (a + 1) / 2. */
static inline int64_t cz_ns_packed_len(int64_t a)
{
    return a > 0 ? a * (a + 1) / 2 : 0;
}

/* Floats per matrix of the packed rows r0 .. r1-1. */
static inline int64_t cz_ns_panel_len(int64_t a, int64_t r0, int64_t r1)
{
    return cz_coop_packed_before(a, r1) - cz_coop_packed_before(a, r0);
}

/* 1 when a member's a x n slice takes the A(AX) form (n < a), 0 for the standard form. */
static inline int cz_ns_coop_use_aax(int64_t a, int64_t n)
{
    return n < a;
}

/* Host forms of the backends' panel packing, for the CPU backend and the tests: rows r0 .. r1-1
 * of each of `batch` row-major a x a matrices at full (back to back) packed into out
 * (cz_ns_panel_len each, back to back), and the inverse, which also mirrors each row into its
 * column below the diagonal. r0 = 0, r1 = a packs the whole triangle. */
void cz__ns_rows_pack(float *out, const float *full, int batch, int64_t a, int64_t r0, int64_t r1);
void cz__ns_rows_unpack(float *full, const float *in, int batch, int64_t a, int64_t r0, int64_t r1);

#endif /* CZ_NS_COOP_H */
