/*
 * optimizer.h — what the optimizers share: the tensors of their state as a checkpoint names
 * them.
 */
#ifndef CZ_OPTIMIZER_H
#define CZ_OPTIMIZER_H

#include <stdbool.h>
#include <stdint.h>

/* What values a state tensor can hold, as a checkpoint load checks them: every tensor is
 * finite; a second moment or a sum of squares is >= 0 everywhere; a Gram factor (a sum of
 * G G^T) has a diagonal >= 0. */
typedef enum cz_state_values {
    CZ_STATE_FINITE = 0,
    CZ_STATE_NONNEG = 1,
    CZ_STATE_GRAM = 2,
} cz_state_values;

/* One tensor of a matrix optimizer's state as a checkpoint names it: "<param name>.<suffix>",
 * rows x cols fp32, one contiguous backend buffer. */
typedef struct cz_state_tensor {
    char suffix[64];
    int64_t rows, cols;
    cz_state_values values;
    /* Shampoo's momentum of the direction: its tile's origin in the full matrix. The file
     * holds the reference's momentum, this plus the weight-decay part each rank keeps beside
     * its parameters (cz__shampoo_decay_momentum). */
    bool momentum;
    int64_t r0, c0;
} cz_state_tensor;

#endif /* CZ_OPTIMIZER_H */
