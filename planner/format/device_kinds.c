/*
 * The device model's defaults per device kind (a cluster file's "device.kind"). Every figure is
 * a datasheet's or a measurement's; docs/SIMULATOR.md, "The device model", lists each with its
 * source. What a kind supplies is what a cluster file's effective rates do not say: the fp32
 * GEMM rate relative to the bf16 one, and the fixed cost of a launch, a cuBLAS call, an NCCL call
 * and a PyTorch op. The bf16 rate itself stays the cluster file's device.matmul_tflops.
 */
#include "format_internal.h"

#include <string.h>

static const char *const kind_names[] = {NULL, "H100", "H200", "B200", "GB300"};

const char *cz__device_kind_name(cz_device_kind k)
{
    return k > CZ_DEVICE_KIND_NONE && k <= CZ_DEVICE_KIND_GB300 ? kind_names[k] : NULL;
}

/* The H200 calibration (plans/calibration/h200.json, canzona-bench calibrate, 2026-11-27): one
 * kernel launched back to back, and one Newton-Schulz iteration of a 64 x 64 matrix (its fixed
 * cost: the work of so small a matrix is well under a microsecond). */
#define H200_LAUNCH_S 4.152959883213043e-06
#define H200_NS_ITER_BF16_S 5.456858500011209e-05
#define H200_NS_ITER_FP32_S 3.756197000001294e-05
/* Its GEMM table's large-GEMM rates (the slope of seconds against FLOPs, fitted with a free
 * intercept to minimize the relative error; cz_cluster_calibrate fits any calibration so):
 * bf16 813.9, fp32 51.2 TFLOP/s. Their ratio is the Hopper kinds' fp32 rate per bf16 rate. */
#define H200_GEMM_BF16_TFLOPS 813.9
#define H200_GEMM_FP32_TFLOPS 51.2
/* Datasheet dense peaks (TFLOP/s; fp32 without tensor cores): H100 and H200 SXM 989.4 bf16 and
 * 66.9 fp32; B200 2250 and 75; GB300 (Blackwell Ultra) 2500 and 80. */
#define HOPPER_PEAK_BF16 989.4
#define HOPPER_PEAK_FP32 66.9

void cz__device_costs_from_ns(double launch_s, double ns_bf16_s, double ns_fp32_s,
                              cz_device_costs *out)
{
    /* One iteration of the executor's Newton-Schulz (executor/src/compute/ns_plan.c, cz__ns_plan): bf16
     * three GEMMs and four elementwise kernels (three conversions to bf16 and B = A), fp32 three
     * GEMMs and two (B = A and X = a X + Y). What is left of the measured iteration after its
     * elementwise launches is its GEMMs' calls. */
    out->launch_s = launch_s;
    out->gemm_call_s[CZ_GEMM_BF16] =
        (ns_bf16_s - CZ_NS_EW_KERNELS_BF16 * launch_s) / CZ_NS_GEMMS_PER_ITERATION;
    out->gemm_call_s[CZ_GEMM_FP32] =
        (ns_fp32_s - CZ_NS_EW_KERNELS_FP32 * launch_s) / CZ_NS_GEMMS_PER_ITERATION;
    if (out->gemm_call_s[CZ_GEMM_BF16] < 0)
        out->gemm_call_s[CZ_GEMM_BF16] = 0;
    if (out->gemm_call_s[CZ_GEMM_FP32] < 0)
        out->gemm_call_s[CZ_GEMM_FP32] = 0;
    /* An NCCL call launches one kernel from the host like any other. */
    out->nccl_call_s = launch_s;
    /* A PyTorch op costs at least what one op of the executor's bf16 iteration costs from C
     * (its seven ops' measured time over seven): a lower bound, PyTorch's dispatch comes on top. */
    out->torch_op_s = ns_bf16_s / (CZ_NS_GEMMS_PER_ITERATION + CZ_NS_EW_KERNELS_BF16);
}

void cz__device_kind_costs(cz_device_kind k, double matmul_tflops, cz_device_costs *out)
{
    memset(out, 0, sizeof *out);
    if (!cz__device_kind_name(k))
        return;
    out->on = 1;
    /* The host-side costs (launch, cuBLAS and NCCL calls) were measured on the H200 node; no
     * other kind has been measured, and they are the same CUDA launch path on every kind. */
    cz__device_costs_from_ns(H200_LAUNCH_S, H200_NS_ITER_BF16_S, H200_NS_ITER_FP32_S, out);
    out->gemm_tflops[CZ_GEMM_BF16] = matmul_tflops;
    double ratio = H200_GEMM_FP32_TFLOPS / H200_GEMM_BF16_TFLOPS;
    if (k == CZ_DEVICE_KIND_B200 || k == CZ_DEVICE_KIND_GB300) {
        /* No Blackwell fp32 measurement: the datasheet's fp32 / bf16 peak ratio at the
         * fraction of its peak fp32 reached relative to bf16 on the H200 (0.93). */
        double eff =
            (H200_GEMM_FP32_TFLOPS / HOPPER_PEAK_FP32) / (H200_GEMM_BF16_TFLOPS / HOPPER_PEAK_BF16);
        ratio = (k == CZ_DEVICE_KIND_B200 ? 75.0 / 2250.0 : 80.0 / 2500.0) * eff;
    }
    out->gemm_tflops[CZ_GEMM_FP32] = matmul_tflops * ratio;
}
