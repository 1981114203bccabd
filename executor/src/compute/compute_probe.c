/* The probe backend: a compute table that allocates nothing and only makes (empty) run maps.
 * The models that predict a step without running it (the step's device bytes, step_bytes.c;
 * the executor's memory, memory_model.c) run the pipeline's own layout code over it, so that
 * they count what the executor would lay out instead of a copy of its arithmetic. */
#include "alloc.h"
#include "compute.h"
#include "compute_probe.h"

struct cz_runs {
    size_t n;
};

static cz_runs *probe_runs_create(cz_compute *c, const cz_copy_run *runs, size_t n)
{
    (void)c;
    (void)runs;
    cz_runs *r = cz__exec_malloc(sizeof *r);
    if (r)
        r->n = n;
    return r;
}

static void probe_runs_free(cz_compute *c, cz_runs *r)
{
    (void)c;
    cz__exec_free(r);
}

static const cz_compute_ops PROBE_OPS = {.version = CZ_COMPUTE_OPS_VERSION,
                                         .kind = CZ_BACKEND_CPU,
                                         .name = "probe",
                                         .runs_create = probe_runs_create,
                                         .runs_free = probe_runs_free};

const cz_compute_ops *cz__compute_probe_ops(void)
{
    return &PROBE_OPS;
}
