/* Prints the size of cz_exec_config and the offset of every field, one "name offset" per line
 * (an optimizer's struct's fields as "muon.momentum", their offsets in cz_exec_config), for the
 * Python package's test to compare with its ctypes mirror of the struct; with the argument
 * "qk", the same of cz_qk_clip_rows and cz_qk_clip_spec ("rows.param", "spec.sizeof", ...). */
#include <canzona_exec.h>

#include <stddef.h>
#include <stdio.h>
#include <string.h>

#define FIELD(f) printf(#f " %zu\n", offsetof(cz_exec_config, f))
#define QK(s, name, f) printf(name "." #f " %zu\n", offsetof(s, f))

static int qk_layout(void)
{
    printf("rows.sizeof %zu\nspec.sizeof %zu\n", sizeof(cz_qk_clip_rows), sizeof(cz_qk_clip_spec));
    QK(cz_qk_clip_rows, "rows", param);
    QK(cz_qk_clip_rows, "rows", row0);
    QK(cz_qk_clip_rows, "rows", rows);
    QK(cz_qk_clip_rows, "rows", layer);
    QK(cz_qk_clip_rows, "rows", head0);
    QK(cz_qk_clip_rows, "rows", heads);
    QK(cz_qk_clip_rows, "rows", power);
    QK(cz_qk_clip_spec, "spec", tau);
    QK(cz_qk_clip_spec, "spec", nlayers);
    QK(cz_qk_clip_spec, "spec", heads_per_layer);
    QK(cz_qk_clip_spec, "spec", rows);
    QK(cz_qk_clip_spec, "spec", nrows);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "qk"))
        return qk_layout();
    printf("sizeof %zu\n", sizeof(cz_exec_config));
    FIELD(version);
    FIELD(backend);
    FIELD(comm);
    FIELD(dp_rank);
    FIELD(tp_rank);
    FIELD(world_comm);
    FIELD(dp_comm);
    FIELD(tp_comm);
    FIELD(lr);
    FIELD(weight_decay);
    FIELD(check_finite);
    FIELD(max_grad_norm);
    FIELD(memory);
    FIELD(dtype);
    FIELD(stream);
    FIELD(nccl_timeout_s);
    FIELD(mpi_timeout_s);
    FIELD(callbacks);
    FIELD(muon.version);
    FIELD(muon.momentum);
    FIELD(muon.nesterov);
    FIELD(muon.ns_steps);
    FIELD(muon.ns_coeffs);
    FIELD(muon.ns_eps);
    FIELD(muon.scale_coeff);
    FIELD(muon.scaling);
    FIELD(adamw.version);
    FIELD(adamw.lr);
    FIELD(adamw.beta1);
    FIELD(adamw.beta2);
    FIELD(adamw.eps);
    FIELD(adamw.weight_decay);
    FIELD(soap.version);
    FIELD(soap.beta1);
    FIELD(soap.beta2);
    FIELD(soap.shampoo_beta);
    FIELD(soap.eps);
    FIELD(soap.bias_correction);
    FIELD(shampoo.version);
    FIELD(shampoo.beta1);
    FIELD(shampoo.beta2);
    FIELD(shampoo.eps);
    FIELD(shampoo.momentum);
    FIELD(shampoo.nesterov);
    FIELD(shampoo.start_step);
    FIELD(shampoo.max_dim);
    FIELD(shampoo.bias_correction);
    FIELD(shampoo.grafting);
    FIELD(shampoo.graft_beta2);
    FIELD(shampoo.graft_eps);
    FIELD(grad_reduce_in_fp32);
    FIELD(normuon.version);
    FIELD(normuon.mode);
    FIELD(normuon.beta2);
    FIELD(normuon.eps);
    return 0;
}
