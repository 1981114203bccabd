/* The MPI plane's bf16 exchanges against its fp32 ones (docs/EXECUTOR.md, "On the wire"), on
 * every rank of MPI_COMM_WORLD (run on 2 and 4 ranks).
 *
 * Reduce-scatter: every rank contributes bf16 values x_r (so the fp32 sum of the same values
 * starts from identical inputs); the bf16 plane rounds each pairwise sum to bf16, n - 1
 * roundings in an order MPI chooses. Whatever the order, a sum of n terms whose partial sums
 * are each rounded with unit roundoff u satisfies |s^ - s| <= gamma(n - 1) * sum |x_r|, with
 * gamma(k) = k u / (1 - k u) (Higham, Accuracy and Stability of Numerical Algorithms, 4.2):
 * u = 2^-8 for bf16 (8 significand bits), 2^-24 for fp32. Against the fp32 plane's result the
 * bound is the sum of both, which is what is checked, element by element, and the bf16 result
 * must differ from the fp32 one somewhere (the rounding the bound is about does happen).
 *
 * All-gather: each rank rounds its fp32 range to bf16 (nearest even) and the plane moves the
 * words: every element must be exactly the rounding of the fp32 all-gather's element, hence
 * within u = 2^-8 of it relatively.
 *
 * Both in the blocking and the non-blocking form (the bucket-wise step's), which must agree bit
 * for bit. Exit 0 = pass. */
#include "cz_exec_testing.h"

#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAXR 8

static int fails;

static void check(int ok, int rank, const char *what, size_t i, double a, double b, double bound)
{
    if (ok)
        return;
    if (fails++ < 10)
        fprintf(stderr, "rank %d: %s at %zu: %.9g vs %.9g (bound %.3g)\n", rank, what, i, a, b,
                bound);
}

/* A value of rank r at element i: magnitudes over 2^-20 .. 2^10 and both signs, so that sums
 * cancel and round at every scale; fp32 before rounding to bf16. */
static float value(int r, size_t i)
{
    uint64_t h =
        (uint64_t)(r + 1) * 0x9E3779B97F4A7C15ull ^ (uint64_t)(i + 1) * 0xBF58476D1CE4E5B9ull;
    h ^= h >> 31;
    h *= 0x94D049BB133111EBull;
    h ^= h >> 29;
    double m = 1.0 + (double)(h & 0xffffff) / 16777216.0;
    int e = (int)((h >> 24) % 31) - 20;
    return (float)((h >> 60) & 1 ? -ldexp(m, e) : ldexp(m, e));
}

static double gamma_of(int k, double u)
{
    return k * u / (1.0 - k * u);
}

static int run(cz_plane *p, cz_error *err)
{
    int n = p->size, me = p->rank;
    size_t counts[MAXR], total = 0, off = 0;
    for (int r = 0; r < n; r++) {
        counts[r] = r == 1 ? 0 : (size_t)(257 + 131 * r); /* uneven, and one empty range */
        if (r < me)
            off += counts[r];
        total += counts[r];
    }
    uint16_t *xb = malloc(total * sizeof *xb), *rb = malloc((counts[me] + 1) * sizeof *rb);
    uint16_t *rb2 = malloc((counts[me] + 1) * sizeof *rb2), *gb = malloc(total * sizeof *gb);
    uint16_t *gb2 = malloc(total * sizeof *gb2);
    float *xf = malloc(total * sizeof *xf), *rf = malloc((counts[me] + 1) * sizeof *rf);
    float *gf = malloc(total * sizeof *gf);
    cz_comm_req *req = p->ops->req_create(p);
    int rc = CZ_ENOMEM;
    if (!xb || !rb || !rb2 || !gb || !gb2 || !xf || !rf || !gf || !req)
        goto done;
    for (size_t i = 0; i < total; i++) {
        xb[i] = cz_ew_bf16_from_f32(value(me, i));
        xf[i] = cz_ew_f32_from_bf16(xb[i]);
    }
    if ((rc = p->ops->reduce_scatter(p, xb, rb, counts, CZ_DTYPE_BF16, NULL, err)) != CZ_OK ||
        (rc = p->ops->reduce_scatter(p, xf, rf, counts, CZ_DTYPE_FP32, NULL, err)) != CZ_OK ||
        (rc = p->ops->ireduce_scatter(p, xb, rb2, counts, CZ_DTYPE_BF16, NULL, req, err)) !=
            CZ_OK ||
        (rc = p->ops->wait(p, req, err)) != CZ_OK)
        goto done;
    double bound = gamma_of(n - 1, 0x1p-8) + gamma_of(n - 1, 0x1p-24);
    size_t differ = 0;
    for (size_t i = 0; i < counts[me]; i++) {
        double abs_sum = 0.0;
        for (int r = 0; r < n; r++)
            abs_sum += fabs((double)cz_ew_f32_from_bf16(cz_ew_bf16_from_f32(value(r, off + i))));
        double a = cz_ew_f32_from_bf16(rb[i]), b = rf[i];
        check(fabs(a - b) <= bound * abs_sum, me, "bf16 reduce-scatter", i, a, b, bound * abs_sum);
        check(rb[i] == rb2[i], me, "non-blocking bf16 reduce-scatter", i, rb2[i], rb[i], 0);
        differ += a != b;
    }
    /* Every rank with a range sees rounding somewhere (its range holds hundreds of sums). */
    check(counts[me] == 0 || differ > 0, me, "bf16 reduce-scatter equal to fp32 everywhere", 0,
          (double)differ, 0, 0);

    /* All-gather: rank r's range of fp32 values, rounded to bf16 by its owner. */
    off = 0;
    for (int r = 0; r < n; r++)
        for (size_t i = 0; i < counts[r]; i++, off++) {
            gf[off] = r == me ? value(r, off) : 0.0f;
            gb[off] = gb2[off] = r == me ? cz_ew_bf16_from_f32(gf[off]) : 0;
        }
    if ((rc = p->ops->all_gather(p, gb, counts, CZ_DTYPE_BF16, NULL, err)) != CZ_OK ||
        (rc = p->ops->all_gather(p, gf, counts, CZ_DTYPE_FP32, NULL, err)) != CZ_OK ||
        (rc = p->ops->iall_gatherv(p, gb2, counts, CZ_DTYPE_BF16, NULL, req, err)) != CZ_OK ||
        (rc = p->ops->wait(p, req, err)) != CZ_OK)
        goto done;
    for (size_t i = 0; i < total; i++) {
        double a = cz_ew_f32_from_bf16(gb[i]), b = gf[i];
        check(gb[i] == cz_ew_bf16_from_f32(gf[i]), me, "bf16 all-gather (rounding)", i, a, b, 0);
        check(fabs(a - b) <= 0x1p-8 * fabs(b), me, "bf16 all-gather (bound)", i, a, b,
              0x1p-8 * fabs(b));
        check(gb[i] == gb2[i], me, "non-blocking bf16 all-gather", i, gb2[i], gb[i], 0);
    }
    rc = CZ_OK;
done:
    if (rc == CZ_ENOMEM && !err->message[0])
        cz__error_set(err, CZ_ENOMEM, "out of memory");
    if (req)
        p->ops->req_free(p, req);
    free(xb);
    free(rb);
    free(rb2);
    free(gb);
    free(gb2);
    free(xf);
    free(rf);
    free(gf);
    return rc;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank = 0, size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    cz_error err;
    cz_error_clear(&err);
    cz_ctrl ctrl = {0};
    cz_plane p = {0};
    cz_compute c = {0};
    int rc = size > MAXR ? cz__error_set(&err, CZ_EINVALID, "at most %d ranks", MAXR) : CZ_OK;
    if (rc == CZ_OK)
        rc = cz__compute_open(&c, "cpu", &err);
    if (rc == CZ_OK)
        rc = cz__ctrl_mpi_open(&ctrl, NULL, 60.0, &err);
    if (rc == CZ_OK)
        rc = cz__plane_mpi_open(&p, NULL, &ctrl, &err);
    if (rc == CZ_OK) {
        p.compute = &c;
        p.label = "wire test";
        rc = run(&p, &err);
    }
    if (rc != CZ_OK) {
        fprintf(stderr, "rank %d: %s\n", rank, err.message);
        fails++;
    }
    cz__plane_close(&p);
    cz__ctrl_close(&ctrl);
    cz__compute_close(&c);
    int all = 0;
    MPI_Allreduce(&fails, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0)
        printf("wire_mpi on %d ranks: %s\n", size, all ? "FAILED" : "OK");
    MPI_Finalize();
    return all ? 1 : 0;
}
