/*
 * qk_clip.h — QK-clip (MuonClip) inside the step (qk_clip.c owns ex->qk: made by
 * cz_executor_set_qk_clip, freed with the executor). The public calls (set_qk_clip,
 * qk_logits, qk_clipped) are in canzona_exec.h; the step asks two things of it, in this order:
 * agreement on the handed maxima with the step's statistics, before any update, and the
 * scaling of the owned rows after every update, before the parameter all-gathers.
 */
#ifndef CZ_QK_CLIP_H
#define CZ_QK_CLIP_H

#include "executor_impl.h"

#include <stdbool.h>

typedef struct cz_qk_clip cz_qk_clip;

/* cz_executor_set_qk_clip once the executor checked that early updates are off (executor.c):
 * the description checked against the plan and kept (spec NULL: cleared). */
int cz__qk_clip_set(cz_executor *ex, const cz_qk_clip_spec *spec, cz_error *err);

/* Whether this rank handed maxima for the coming step (the count the step sums over ranks). */
bool cz__qk_clip_armed(const cz_executor *ex);

/* Collective over the control plane, every rank in the same step with `armed` the number of
 * ranks whose cz__qk_clip_armed was true: none, and the step clips nothing; all, and the
 * maxima are MAX-reduced and compared (the descriptions' fingerprints); some, and the step is
 * refused on every rank (CZ_EINVALID naming the lowest rank without maxima). Consumes this
 * rank's maxima either way. Before any update: a refusal changes nothing. */
int cz__qk_clip_agree(cz_executor *ex, double armed, cz_error *err);

/* Scales the rows of the heads the agreed maxima clip, in the owned ranges of flat buffer P
 * (the fp32 parameters or master copy), through the compute ops. Nothing when the step clips
 * nothing. */
void cz__qk_clip_apply(cz_executor *ex, float *P);

/* Releases ex->qk (nothing when there is none). */
void cz__qk_clip_free(cz_executor *ex);

#endif /* CZ_QK_CLIP_H */
