/* What the plain-C models of one GPU's step (step_bytes.c, memory_model.c) check of the GPU
 * they are asked about (model_rank.c). */
#ifndef CZ_MODEL_RANK_H
#define CZ_MODEL_RANK_H

#include "cz_format.h"

/* CZ_OK when GPU (dp_rank, tp_rank) is in the plan's grid and its DP rank has a schedule without
 * cooperative tasks (which neither model covers); otherwise the error, naming `model` ("the byte
 * model", "the memory model"). */
int cz__model_rank_check(const cz_plan *plan, int dp_rank, int tp_rank, const char *model,
                         cz_error *err);

#endif /* CZ_MODEL_RANK_H */
