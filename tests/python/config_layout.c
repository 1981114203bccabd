/* Prints the size of cz_exec_config and the offset of every field, one "name offset" per line,
 * for the Python package's test to compare with its ctypes mirror of the struct. */
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
    FIELD(momentum);
    FIELD(nesterov);
    FIELD(weight_decay);
    FIELD(ns_steps);
    FIELD(ns_coeffs);
    FIELD(ns_eps);
    FIELD(scale_coeff);
    FIELD(adamw_lr);
    FIELD(adamw_beta1);
    FIELD(adamw_beta2);
    FIELD(adamw_eps);
    FIELD(adamw_weight_decay);
    FIELD(check_finite);
    FIELD(muon_scaling);
    FIELD(max_grad_norm);
    FIELD(memory);
    FIELD(dtype);
    FIELD(stream);
    FIELD(shampoo_beta1);
    FIELD(shampoo_beta2);
    FIELD(shampoo_eps);
    FIELD(shampoo_momentum);
    FIELD(shampoo_nesterov);
    FIELD(shampoo_start_step);
    FIELD(shampoo_max_dim);
    FIELD(shampoo_bias_correction);
    FIELD(shampoo_grafting);
    FIELD(shampoo_graft_beta2);
    FIELD(shampoo_graft_eps);
    FIELD(soap_beta1);
    FIELD(soap_beta2);
    FIELD(soap_shampoo_beta);
    FIELD(soap_eps);
    FIELD(soap_bias_correction);
    FIELD(nccl_timeout_s);
    FIELD(mpi_timeout_s);
    FIELD(callbacks);
    return 0;
}
