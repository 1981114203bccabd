/*
 * checkpoint_file.h — between the optimizer-state checkpoint's cross-rank transfer
 * (checkpoint.c: which rank keeps which tensor, the gather on rank 0 and the scatter from it)
 * and its container (checkpoint_file.c: the safetensors file, its header, its checks against
 * the plan). Both walk the same list of tensors, ck_entry, which every rank builds from the
 * plan and the settings alone.
 */
#ifndef CZ_CHECKPOINT_FILE_H
#define CZ_CHECKPOINT_FILE_H

#include "cz_format.h"
#include "optimizer.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* One tensor of the checkpoint, in file order: tensor k of its optimizer's list for the
 * parameter (cz_state_tensor), where it lives among the ranks (place), and what a load
 * accepts in it (values). */
typedef struct ck_entry {
    int param;
    cz_optim *opt;
    int64_t k;
    cz_state_place place;
    char suffix[64];
    int ndim;
    int64_t shape[2], n;
    cz_state_values values;
    bool plus_addend; /* the file holds it plus the (r0, c0) rectangle of the addend */
    int64_t r0, c0;
} ck_entry;

/* The safetensors header of the tensors e with their data back to back in list order, padded
 * with spaces to a multiple of 8 bytes (*out, malloc'ed, *len bytes); *data_bytes gets the
 * size of the data. */
int cz__ckpt_header_build(const cz_plan *plan, const ck_entry *e, size_t ne, int64_t steps,
                          char **out, size_t *len, size_t *data_bytes, cz_error *err);

/* Writes the header's length and the header (hlen bytes) at the start of file, which has room
 * for them; the data starts at file + 8 + hlen. */
void cz__ckpt_header_put(char *file, const char *header, size_t hlen);

/* Reads the file at path (*data, malloc'ed, *len bytes), never more than a checkpoint of the
 * list e can hold. */
int cz__ckpt_read(const cz_plan *plan, const ck_entry *e, size_t ne, const char *path, char **data,
                  size_t *len, cz_error *err);

/* Checks the checkpoint at data against the list e: every tensor the plan's state needs, F32,
 * its shape, its values; nothing else, and the data laid out as safetensors requires. Fills
 * offs (absolute byte offsets, in list order) and *steps. */
int cz__ckpt_parse(const cz_plan *plan, const ck_entry *e, size_t ne, const char *path,
                   const char *data, size_t len, size_t *offs, int64_t *steps, cz_error *err);

#endif
