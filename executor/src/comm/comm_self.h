/*
 * comm_self.h — the "self" planes (comm_self.c): one process, so every collective is a copy
 * and the control plane has nothing to agree with. Opened through comm.c.
 */
#ifndef CZ_COMM_SELF_H
#define CZ_COMM_SELF_H

#include "comm.h"
#include "cz_format.h"

int cz__ctrl_self_open(cz_ctrl *c, cz_error *err);
int cz__plane_self_open(cz_plane *p, cz_error *err);

#endif /* CZ_COMM_SELF_H */
