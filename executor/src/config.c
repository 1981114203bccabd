/* Executor configuration defaults. */
#include "canzona_exec.h"

#include <string.h>

void cz_exec_config_init(cz_exec_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->version = CZ_EXEC_CONFIG_VERSION;
    cfg->backend = "cpu";
    cfg->comm = NULL;
    cfg->dp_rank = -1;
    cfg->tp_rank = -1;
    cfg->lr = 0.0f; /* resolved by the scaling at create */
    cfg->momentum = 0.95f;
    cfg->nesterov = 1;
    cfg->weight_decay = 0.01f;
    cfg->ns_steps = 5;
    cfg->ns_coeffs = "jordan";
    cfg->ns_eps = 1e-7f;
    cfg->scale_coeff = 0.2f;
    cfg->adamw_lr = 3e-4f;
    cfg->adamw_beta1 = 0.9f;
    cfg->adamw_beta2 = 0.95f;
    cfg->adamw_eps = 1e-8f;
    cfg->adamw_weight_decay = 0.01f;
    cfg->check_finite = 1;
    cfg->muon_scaling = CZ_MUON_SCALE_RMS;
    cfg->max_grad_norm = 0.0f;
    cfg->memory = CZ_EXEC_MEMORY_HOST;
    cfg->dtype = -1;
    cfg->stream = NULL;
    cfg->shampoo_beta1 = 0.9f;
    cfg->shampoo_beta2 = 1.0f;
    cfg->shampoo_eps = 1e-12f;
    cfg->shampoo_momentum = 0.0f;
    cfg->shampoo_nesterov = 0;
    cfg->shampoo_start_step = -1;
    cfg->shampoo_max_dim = 0;
    cfg->shampoo_bias_correction = 1;
    cfg->shampoo_grafting = CZ_GRAFT_ADAGRAD;
    cfg->shampoo_graft_beta2 = -1.0f;
    cfg->shampoo_graft_eps = 1e-10f;
    cfg->soap_beta1 = 0.95f;
    cfg->soap_beta2 = 0.95f;
    cfg->soap_shampoo_beta = -1.0f;
    cfg->soap_eps = 1e-8f;
    cfg->soap_bias_correction = 1;
    cfg->nccl_timeout_s = 0.0; /* CZ_NCCL_TIMEOUT_S, else 300 s */
    cfg->mpi_timeout_s = 0.0;  /* CZ_MPI_TIMEOUT_S, else 1800 s */
}
