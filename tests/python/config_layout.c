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
    return 0;
}
