/* The probe backend (compute_probe.c): a compute table that allocates nothing and makes empty
 * run maps, for the models that lay a step out without running it (step_bytes.c,
 * memory_model.c). */
#ifndef CZ_COMPUTE_PROBE_H
#define CZ_COMPUTE_PROBE_H

#include "compute.h"

const cz_compute_ops *cz__compute_probe_ops(void);

#endif /* CZ_COMPUTE_PROBE_H */
