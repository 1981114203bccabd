/* Cost model: Muon, SOAP, Shampoo and AdamW against hand arithmetic, in all three units. */
#include "cz_test_util.h"

#include <check.h>
#include <math.h>

#define EQ(a, b) ck_assert_double_eq_tol((a), (b), 1e-9 * fabs(b) + 1e-18)

/* A standalone parameter definition. */
static cz_param_def def(int64_t rows, int64_t cols, int tp_dim, cz_param_kind kind)
{
    cz_param_def d;
    memset(&d, 0, sizeof d);
    d.name = "p";
    d.ndim = cols == 0 ? 1 : 2;
    d.shape[0] = rows;
    d.shape[1] = cols == 0 ? 1 : cols;
    d.tp_dim = tp_dim;
    d.kind = kind;
    d.block_dim = -1;
    d.layer = -1;
    return d;
}

static double cost(const cz_param_def *d, cz_optimizer o, cz_cost_unit u, int tp, cz_dtype dt)
{
    cz_settings s;
    cz_settings_init(&s);
    s.optimizer = o;
    s.unit = u;
    cz_cluster *c = czt_cluster_new(1, tp, 1);
    double v = cz__cost_param(d, &s, c, dt);
    cz_cluster_free(c);
    return v;
}

START_TEST(muon_4x8)
{
    cz_param_def d = def(4, 8, -1, CZ_KIND_MATRIX);
    /* a=4, b=8: 5 * (4*16*8 + 2*64) = 3200 matmul FLOPs, 10*32 = 320 elementwise FLOPs;
     * bf16 bytes: 32 * (8 + 3*2) = 448. */
    EQ(cost(&d, CZ_OPTIM_MUON, CZ_UNIT_NUMEL, 1, CZ_DTYPE_BF16), 32.0);
    EQ(cost(&d, CZ_OPTIM_MUON, CZ_UNIT_FLOPS, 1, CZ_DTYPE_BF16), 3520.0);
    EQ(cost(&d, CZ_OPTIM_MUON, CZ_UNIT_TIME, 1, CZ_DTYPE_BF16), 3200e-12 + 448e-9);
    /* fp32: 32 * (8 + 12) = 640 bytes. */
    EQ(cost(&d, CZ_OPTIM_MUON, CZ_UNIT_TIME, 1, CZ_DTYPE_FP32), 3200e-12 + 640e-9);
    /* A matrix is optimized once whatever tp is, and the transpose costs the same. */
    EQ(cost(&d, CZ_OPTIM_MUON, CZ_UNIT_FLOPS, 4, CZ_DTYPE_BF16), 3520.0);
    cz_param_def t = def(8, 4, 0, CZ_KIND_MATRIX);
    EQ(cost(&t, CZ_OPTIM_MUON, CZ_UNIT_FLOPS, 2, CZ_DTYPE_BF16), 3520.0);
    /* One Newton-Schulz step: 640 matmul + 320 elementwise FLOPs. */
    cz_settings s;
    cz_settings_init(&s);
    s.ns_steps = 1;
    s.unit = CZ_UNIT_FLOPS;
    cz_cluster *c = czt_cluster_new(1, 1, 1);
    EQ(cz__cost_param(&d, &s, c, CZ_DTYPE_BF16), 960.0);
    cz_cluster_free(c);
}
END_TEST

START_TEST(muon_blocks_summed)
{
    cz_param_def d = def(12, 8, 0, CZ_KIND_MATRIX);
    int64_t sizes[2] = {4, 8};
    d.block_dim = 0;
    d.nblocks = 2;
    d.block_sizes = sizes;
    /* 4x8: 3520; 8x8: 5 * (4*64*8 + 2*512) + 640 = 16000; whole 12x8 would be 21440. */
    EQ(cost(&d, CZ_OPTIM_MUON, CZ_UNIT_FLOPS, 1, CZ_DTYPE_BF16), 19520.0);
    EQ(cost(&d, CZ_OPTIM_MUON, CZ_UNIT_NUMEL, 1, CZ_DTYPE_BF16), 96.0);
    d.nblocks = 0;
    EQ(cost(&d, CZ_OPTIM_MUON, CZ_UNIT_FLOPS, 1, CZ_DTYPE_BF16), 21440.0);
    /* Blocks along the columns: 12x3 + 12x5 (a=3,b=12: 5*(432+54) + 360 = 2790;
     * a=5,b=12: 5*(1200+250) + 600 = 7850). */
    int64_t cols[2] = {3, 5};
    d.block_dim = 1;
    d.nblocks = 2;
    d.block_sizes = cols;
    EQ(cost(&d, CZ_OPTIM_MUON, CZ_UNIT_FLOPS, 1, CZ_DTYPE_BF16), 2790.0 + 7850.0);
}
END_TEST

START_TEST(soap_4x8)
{
    cz_param_def d = def(4, 8, -1, CZ_KIND_MATRIX);
    /* Left (m=4): projections 4*16*8 = 512, Gram 2*16*8 = 256, refresh (22/3)*64/10.
     * Right (n=8): projections 4*4*64 = 1024, Gram 512, refresh (22/3)*512/10.
     * Matmul: 2304 + 422.4 = 2726.4; elementwise 12*32 = 384. */
    EQ(cost(&d, CZ_OPTIM_SOAP, CZ_UNIT_FLOPS, 1, CZ_DTYPE_BF16), 3110.4);
    EQ(cost(&d, CZ_OPTIM_SOAP, CZ_UNIT_NUMEL, 1, CZ_DTYPE_BF16), 32.0);
    /* bf16 bytes: 32 * (16 + 6) = 704. */
    EQ(cost(&d, CZ_OPTIM_SOAP, CZ_UNIT_TIME, 1, CZ_DTYPE_BF16), 2726.4e-12 + 704e-9);
    /* With max_precond_dim 4 the right side (8) has no factor: 512 + 256 + 46.9333 + 384. */
    cz_settings s;
    cz_settings_init(&s);
    s.optimizer = CZ_OPTIM_SOAP;
    s.unit = CZ_UNIT_FLOPS;
    s.max_precond_dim = 4;
    cz_cluster *c = czt_cluster_new(1, 1, 1);
    EQ(cz__cost_param(&d, &s, c, CZ_DTYPE_BF16), 512.0 + 256.0 + 22.0 / 3.0 * 6.4 + 384.0);
    /* precondition_frequency 1: refresh every step. */
    s.max_precond_dim = 10000;
    s.precondition_frequency = 1;
    EQ(cz__cost_param(&d, &s, c, CZ_DTYPE_BF16), 2304.0 + 22.0 / 3.0 * 576.0 + 384.0);
    cz_cluster_free(c);
}
END_TEST

START_TEST(shampoo_4x8)
{
    cz_param_def d = def(4, 8, -1, CZ_KIND_MATRIX);
    /* Left: Gram 256 + precondition 256 + 10*64/10 = 576; right: 512 + 512 + 10*512/10 = 1536;
     * elementwise 10*32 = 320. */
    EQ(cost(&d, CZ_OPTIM_SHAMPOO, CZ_UNIT_FLOPS, 1, CZ_DTYPE_BF16), 2432.0);
    /* Bytes 32 * (8 + 6) = 448. */
    EQ(cost(&d, CZ_OPTIM_SHAMPOO, CZ_UNIT_TIME, 1, CZ_DTYPE_BF16), 2112e-12 + 448e-9);
}
END_TEST

START_TEST(adamw_split_and_replicated)
{
    cz_param_def split = def(16, 0, 0, CZ_KIND_ELEMENTWISE);
    cz_param_def repl = def(16, 0, -1, CZ_KIND_ELEMENTWISE);
    /* Split over tp=2: 16 elements of work in all; replicated: every TP rank does all 16. */
    EQ(cost(&split, CZ_OPTIM_MUON, CZ_UNIT_NUMEL, 2, CZ_DTYPE_BF16), 16.0);
    EQ(cost(&repl, CZ_OPTIM_MUON, CZ_UNIT_NUMEL, 2, CZ_DTYPE_BF16), 32.0);
    EQ(cost(&split, CZ_OPTIM_MUON, CZ_UNIT_FLOPS, 2, CZ_DTYPE_BF16), 192.0);
    EQ(cost(&repl, CZ_OPTIM_MUON, CZ_UNIT_FLOPS, 2, CZ_DTYPE_BF16), 384.0);
    /* 16 * (3*2 + 16) = 352 bytes; fp32 16 * (12 + 16) = 448. */
    EQ(cost(&split, CZ_OPTIM_MUON, CZ_UNIT_TIME, 2, CZ_DTYPE_BF16), 352e-9);
    EQ(cost(&repl, CZ_OPTIM_MUON, CZ_UNIT_TIME, 2, CZ_DTYPE_BF16), 704e-9);
    EQ(cost(&split, CZ_OPTIM_MUON, CZ_UNIT_TIME, 2, CZ_DTYPE_FP32), 448e-9);
    /* With tp=1 replication costs nothing extra. */
    EQ(cost(&repl, CZ_OPTIM_MUON, CZ_UNIT_NUMEL, 1, CZ_DTYPE_BF16), 16.0);
    /* Under the adamw setting a matrix is elementwise work too: 12 * 32 FLOPs. */
    cz_param_def mat = def(4, 8, 0, CZ_KIND_MATRIX);
    EQ(cost(&mat, CZ_OPTIM_ADAMW, CZ_UNIT_FLOPS, 2, CZ_DTYPE_BF16), 384.0);
    EQ(cost(&mat, CZ_OPTIM_ADAMW, CZ_UNIT_TIME, 2, CZ_DTYPE_BF16), 32.0 * 22.0 * 1e-9);
}
END_TEST

START_TEST(seconds_ignore_unit)
{
    cz_param_def d = def(4, 8, -1, CZ_KIND_MATRIX);
    cz_settings s;
    cz_settings_init(&s);
    s.unit = CZ_UNIT_NUMEL;
    cz_cluster *c = czt_cluster_new(1, 1, 1);
    c->device.matmul_tflops = 2.0;
    c->device.mem_gbps = 4.0;
    EQ(cz__cost_param_seconds(&d, &s, c, CZ_DTYPE_BF16), 3200e-12 / 2.0 + 448e-9 / 4.0);
    EQ(cz__cost_param(&d, &s, c, CZ_DTYPE_BF16), 32.0);
    cz_cluster_free(c);
}
END_TEST

START_TEST(state_bytes)
{
    cz_settings s;
    cz_settings_init(&s);
    cz_param_def d = def(4, 8, 0, CZ_KIND_MATRIX);
    EQ(cz__state_bytes(&d, &s, 2), 128.0); /* Muon: 4 * 32, full matrix on the host */
    s.optimizer = CZ_OPTIM_SOAP;
    EQ(cz__state_bytes(&d, &s, 2), 4.0 * (32 + 128 + 64)); /* 896 */
    s.max_precond_dim = 4;
    EQ(cz__state_bytes(&d, &s, 2), 4.0 * (32 + 64)); /* no right factor */
    s.max_precond_dim = 10000;
    s.optimizer = CZ_OPTIM_SHAMPOO;
    EQ(cz__state_bytes(&d, &s, 2), 4.0 * (32 + 128 + 32)); /* 768 */
    s.optimizer = CZ_OPTIM_MUON;
    cz_param_def split = def(16, 0, 0, CZ_KIND_ELEMENTWISE);
    cz_param_def repl = def(16, 0, -1, CZ_KIND_ELEMENTWISE);
    EQ(cz__state_bytes(&split, &s, 2), 64.0); /* 8 B on each of 8 local elements */
    EQ(cz__state_bytes(&repl, &s, 2), 128.0);
    s.optimizer = CZ_OPTIM_ADAMW;
    EQ(cz__state_bytes(&d, &s, 2), 128.0); /* 8 B * 16 local elements */
    int64_t sizes[2] = {1, 3};
    d.block_dim = 0;
    d.nblocks = 2;
    d.block_sizes = sizes;
    s.optimizer = CZ_OPTIM_SOAP;
    /* 1x8: 4*(2 + 128 + 16) = 584; 3x8: 4*(18 + 128 + 48) = 776. */
    EQ(cz__state_bytes(&d, &s, 2), 584.0 + 776.0);
}
END_TEST

START_TEST(dtype_bytes)
{
    ck_assert_int_eq(cz__dtype_bytes(CZ_DTYPE_BF16), 2);
    ck_assert_int_eq(cz__dtype_bytes(CZ_DTYPE_FP16), 2);
    ck_assert_int_eq(cz__dtype_bytes(CZ_DTYPE_FP32), 4);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("cost");
    TCase *tc = tcase_create("formulas");
    tcase_add_test(tc, muon_4x8);
    tcase_add_test(tc, muon_blocks_summed);
    tcase_add_test(tc, soap_4x8);
    tcase_add_test(tc, shampoo_4x8);
    tcase_add_test(tc, adamw_split_and_replicated);
    tcase_add_test(tc, seconds_ignore_unit);
    tcase_add_test(tc, state_bytes);
    tcase_add_test(tc, dtype_bytes);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
