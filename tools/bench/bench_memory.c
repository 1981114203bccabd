/* The executor's backend memory by kind, printed and as JSON (bench.h): what --dry-run predicts
 * (memory_model.h) and what a run recorded (cz_executor_memory_usage), in one form so that the
 * two read side by side. */
#include "bench.h"

#include <stdio.h>

void cz_bench_memory_print(const char *title, const cz_exec_mem_usage *u)
{
    const double mib = 1.0 / (1024.0 * 1024.0);
    int64_t state = u->bytes[CZ_EXEC_MEM_STATE];
    printf("%s\n", title);
    printf("  %-10s %16s %12s\n", "kind", "bytes", "MiB");
    for (int k = 0; k < CZ_EXEC_MEM_NKINDS; k++)
        printf("  %-10s %16lld %12.3f\n", cz_exec_mem_kind_name(k), (long long)u->bytes[k],
               (double)u->bytes[k] * mib);
    printf("  model states (params + grads + state) %lld bytes (%.3f MiB); beyond them %lld "
           "bytes (%.3f MiB)",
           (long long)u->model_states, (double)u->model_states * mib, (long long)u->beyond,
           (double)u->beyond * mib);
    /* The target of docs/PERF.md section 7 is this share: at most 10% of the optimizer state. */
    if (state > 0)
        printf(", %.2f%% of the optimizer state\n", 100.0 * (double)u->beyond / (double)state);
    else
        printf("\n");
}

json_t *cz_bench_memory_json(const cz_exec_mem_usage *u)
{
    json_t *o = json_object(), *by = json_object();
    for (int k = 0; k < CZ_EXEC_MEM_NKINDS; k++)
        json_object_set_new(by, cz_exec_mem_kind_name(k), json_integer(u->bytes[k]));
    json_object_set_new(o, "bytes", by);
    json_object_set_new(o, "model_states", json_integer(u->model_states));
    json_object_set_new(o, "beyond", json_integer(u->beyond));
    return o;
}
