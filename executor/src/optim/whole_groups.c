/* The micro-group layout shared by the optimizers that compute whole matrices only (SOAP,
 * Shampoo): the state lives in the optimizer's table, the group lists where it is used. */
#include "whole_groups.h"

#include "alloc.h"

int cz__whole_group_add(cz_whole_groups *l, cz_optim *o, const cz_opt_part *parts, int n,
                        cz_whole_state_fn create, cz_opt_group **out, cz_error *err)
{
    int rc;
    cz_whole_group *g = cz__exec_calloc(1, sizeof *g);
    if (!g)
        return cz__error_set(err, CZ_ENOMEM, "out of memory for micro-group layouts");
    /* Linked before it is filled: destroy frees it whatever happens below. */
    *(l->last ? &l->last->next : &l->first) = g;
    l->last = g;
    *out = (cz_opt_group *)g;
    g->parts = cz__exec_calloc((size_t)n + 1, sizeof *g->parts);
    if (!g->parts)
        return cz__error_set(err, CZ_ENOMEM, "out of memory for micro-group layouts");
    for (int i = 0; i < n; i++) {
        const cz_opt_part *x = &parts[i];
        /* These plans have whole-matrix tasks only (the structural check). */
        CZ_ASSERT(x->x.width == 1 && x->x.part.rows == x->p->def.shape[0] &&
                      x->x.part.cols == x->p->def.shape[1],
                  err);
        void *state = NULL;
        if ((rc = create(o, x->p, &state, err)) != CZ_OK)
            return rc;
        g->parts[g->nparts++] = (cz_whole_part){state, x->in, x->out};
    }
    return CZ_OK;
}

void cz__whole_groups_free(cz_whole_groups *l)
{
    for (cz_whole_group *g = l->first, *next; g; g = next) {
        next = g->next;
        cz__exec_free(g->parts);
        cz__exec_free(g);
    }
    *l = (cz_whole_groups){0};
}
