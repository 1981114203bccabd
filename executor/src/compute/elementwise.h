/*
 * elementwise.h — the per-element arithmetic of the optimizer, shared by the CPU backend's loops
 * (compute_cpu.c) and the CUDA backend's kernels (cuda/kernels.cu). Each function computes one
 * element; the backends only differ in how they iterate. Because the CPU tests run exactly these
 * functions, they exercise the arithmetic the GPU runs (the GPU compiler may still contract a*b+c
 * into a fused multiply-add, which changes the last bit; the GPU tests allow for that).
 *
 * Plain C17 for the host, CUDA C++ inside kernels: CZ_HD marks the functions __host__ __device__
 * under nvcc and is empty for a C compiler. Only <math.h>, <stdint.h> and <string.h> functions
 * that CUDA also provides on the device are used.
 */
#ifndef CZ_ELEMENTWISE_H
#define CZ_ELEMENTWISE_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define CZ_HD __host__ __device__ __forceinline__
#else
#define CZ_HD static inline
#endif

/* x * alpha (gradient averaging over DP, clipping). */
CZ_HD float cz_ew_scale(float x, float alpha)
{
    return x * alpha;
}

/* x squared in double: a float squared cannot overflow a double, so a sum of these is
 * non-finite exactly when some x is NaN or Inf (the step's finiteness check). */
CZ_HD double cz_ew_sq(float x)
{
    return (double)x * x;
}

/* Muon momentum on one element: *buf = mu * *buf + g; returns the Newton-Schulz input,
 * g + mu * *buf with Nesterov, else *buf. */
CZ_HD float cz_ew_momentum(float g, float *buf, float mu, int nesterov)
{
    float b = mu * *buf + g;
    *buf = b;
    return nesterov ? g + mu * b : b;
}

/* The factor that normalises a block whose sum of squares is sq (Frobenius norm plus eps). */
CZ_HD float cz_ew_norm_inv(double sq, float eps)
{
    return (float)(1.0 / (sqrt(sq) + (double)eps));
}

/* Decoupled weight decay and the update: p * keep - lr * u, keep = 1 - lr * wd. */
CZ_HD float cz__ew_keep(float lr, float wd)
{
    return 1.0f - lr * wd;
}

CZ_HD float cz_ew_update(float p, float u, float keep, float lr)
{
    return p * keep - lr * u;
}

/* One AdamW element: updates *m and *v and returns the new parameter. c1, c2 are the bias
 * corrections 1 - beta^t; keep = 1 - lr * wd. */
CZ_HD float cz_ew_adamw(float p, float g, float *m, float *v, float b1, float b2, float c1,
                        float c2, float lr, float eps, float keep)
{
    float mi = b1 * *m + (1.0f - b1) * g;
    float vi = b2 * *v + (1.0f - b2) * g * g;
    *m = mi;
    *v = vi;
    float mhat = mi / c1, vhat = vi / c2;
    return p * keep - lr * mhat / (sqrtf(vhat) + eps);
}

CZ_HD uint32_t cz_ew_f32_bits(float f)
{
#ifdef __CUDA_ARCH__
    return __float_as_uint(f);
#else
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
#endif
}

CZ_HD float cz_ew_f32_from_bits(uint32_t u)
{
#ifdef __CUDA_ARCH__
    return __uint_as_float(u);
#else
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
#endif
}

/* fp32 -> bf16, rounding to nearest even; a NaN stays a (quiet) NaN. Bit arithmetic rather
 * than the CUDA intrinsic so that host and device round identically by construction. */
CZ_HD uint16_t cz_ew_bf16_from_f32(float f)
{
    uint32_t u = cz_ew_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

CZ_HD float cz_ew_f32_from_bf16(uint16_t b)
{
    return cz_ew_f32_from_bits((uint32_t)b << 16);
}

/* ---- the linear-algebra ops' elementwise parts (SOAP, Shampoo) ---- */

/* y = a*y + b*x. */
CZ_HD float cz_ew_axpby(float y, float x, float a, float b)
{
    return a * y + b * x;
}

/* acc = a*acc + b*x^2. */
CZ_HD float cz_ew_sq_accum(float acc, float x, float a, float b)
{
    return a * acc + b * x * x;
}

/* A diagonal preconditioner: x / (sqrt(acc * inv_bias) + eps). */
CZ_HD float cz_ew_graft_div(float x, float acc, float inv_bias, float eps)
{
    return x / (sqrtf(acc * inv_bias) + eps);
}

/* The grafting factor sqrt(num / den); 0 when den is 0 (a zero direction stays zero). */
CZ_HD float cz_ew_ratio(double num, double den)
{
    return den > 0.0 ? (float)sqrt(num / den) : 0.0f;
}

/* Distributed Shampoo's eigenvalue shift: lo = min(0, every w), folded one w at a time from
 * lo = 0. */
CZ_HD float cz_ew_eig_min(float lo, float w)
{
    return w < lo ? w : lo;
}

/* The inverse-root scale of an eigenvalue w: (w - lo + eps)^(-1/root), in double. */
CZ_HD double cz_ew_root_scale(float w, float lo, float eps, float root)
{
    return pow((double)w - (double)lo + (double)eps, -1.0 / (double)root);
}

/* An eigenvector element scaled by its column's root scale. */
CZ_HD float cz_ew_root_apply(float q, double s)
{
    return (float)((double)q * s);
}

/* SOAP's refresh order: column k goes before column j when its estimate is larger, ties by
 * index (a stable descending sort). A column's place is the number of columns before it, so
 * the order is computed without a sort, one column per thread on the GPU. */
CZ_HD int cz_ew_sorts_before(double est_k, int64_t k, double est_j, int64_t j)
{
    /* A NaN goes after every number: the order stays total, so every column gets a place of
     * its own and the permutation stays a permutation. */
    int nk = est_k != est_k, nj = est_j != est_j;
    if (nk || nj)
        return nk == nj ? k < j : nj;
    return est_k > est_j || (est_k == est_j && k < j);
}

/* NorMuon, per line of the orthogonalized update (a row or a column): the EMA of the line's
 * mean square s, v + (1 - beta2) (s - v) (torch.lerp(v, s, 1 - beta2), as Dion computes it),
 * kept in fp32 as Dion keeps it in the parameter's dtype. */
CZ_HD float cz_ew_normuon_v(float v, double s, float beta2)
{
    return (float)((double)v + (1.0 - (double)beta2) * (s - (double)v));
}

/* The line's divisor's inverse, 1 / (sqrt(v) + eps). */
CZ_HD double cz_ew_normuon_d(float v, float eps)
{
    return 1.0 / (sqrt((double)v) + (double)eps);
}

/* The factor that gives the normalized update its Frobenius norm before: sqrt(before) /
 * max(sqrt(after), 1e-8), from the sums of squares before and after the division (Dion's
 * clamp of the norm after at 1e-8; a zero update stays zero). */
CZ_HD double cz_ew_normuon_rescale(double before, double after)
{
    double na = sqrt(after);
    return sqrt(before) / (na > 1e-8 ? na : 1e-8);
}

#endif /* CZ_ELEMENTWISE_H */
