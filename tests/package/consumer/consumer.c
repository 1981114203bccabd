/* A program that uses libcanzona-exec as a training job would: reads a plan, binds flat fp32
 * buffers, runs steps and prints the parameter checksum and gradient norm. Built by the packaging
 * tests against the library found by add_subdirectory, find_package or pkg-config.
 * Usage: consumer PLAN.json */
#include <canzona_exec.h>

#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: consumer PLAN.json\n");
        return 2;
    }
    int rc = 1;
    cz_error err;
    cz_error_clear(&err);
    cz_plan *plan = NULL;
    cz_executor *ex = NULL;
    float *params = NULL, *grads = NULL;
    cz_exec_config cfg;
    cz_exec_config_init(&cfg);
    cfg.comm = "self";
    cfg.dtype = CZ_DTYPE_FP32;
    if (cz_plan_read(&plan, argv[1], &err) != CZ_OK ||
        cz_executor_create_from_plan(&ex, plan, &cfg, &err) != CZ_OK)
        goto out;
    size_t n = cz_executor_buffer_numel(ex);
    params = malloc(n * sizeof *params);
    grads = malloc(n * sizeof *grads);
    if (!params || !grads) {
        fprintf(stderr, "consumer: out of memory\n");
        goto out;
    }
    for (size_t i = 0; i < n; i++)
        params[i] = (float)((i % 7) + 1) * 0.1f;
    if (cz_executor_bind_buffers(ex, params, grads, n, &err) != CZ_OK)
        goto out;
    for (int step = 0; step < 3; step++) {
        for (size_t i = 0; i < n; i++)
            grads[i] = (float)((i % 5) + 1) * 0.01f;
        if (cz_executor_step(ex, &err) != CZ_OK)
            goto out;
    }
    double sum = 0;
    for (size_t i = 0; i < n; i++)
        sum += params[i];
    printf("elements %zu checksum %.6f grad_norm %.6f\n", n, sum, cz_executor_grad_norm(ex));
    rc = 0;
out:
    if (rc && err.code)
        fprintf(stderr, "consumer: %s\n", err.message);
    free(params);
    free(grads);
    cz_executor_free(ex);
    cz_plan_free(plan);
    return rc;
}
