/* Prints the size of cz_exec_config and the offset of every field, one "name offset" per line
 * (an optimizer's struct's fields as "muon.momentum", their offsets in cz_exec_config), for the
 * Python package's test to compare with its ctypes mirror of the struct. */
#include <canzona_exec.h>

#include <stddef.h>
#include <stdio.h>

#define FIELD(f) printf(#f " %zu\n", offsetof(cz_exec_config, f))

int main(void)
{
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
    return 0;
}
