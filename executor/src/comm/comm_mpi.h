/*
 * comm_mpi.h — the "mpi" planes (comm_mpi.c), opened through comm.c. Declared whatever the
 * build: without MPI they report that the backend is not available.
 */
#ifndef CZ_COMM_MPI_H
#define CZ_COMM_MPI_H

#include "comm.h"
#include "cz_format.h"

#include <stdbool.h>
#include <stdint.h>

/* True when this build has MPI and MPI has been initialized. */
bool cz__comm_mpi_available(void);
/* Control and data plane over a duplicate of the MPI_Comm at handle (NULL = MPI_COMM_WORLD).
 * Every wait of them is bounded by timeout_s (cz__comm_mpi_timeout); its report names the
 * phase c->phase points to (set before the open). A data plane takes the limit, the report
 * channel and the phase of ctrl, an MPI control plane (mpi_watch.h). */
int cz__ctrl_mpi_open(cz_ctrl *c, const void *handle, double timeout_s, cz_error *err);
int cz__plane_mpi_open(cz_plane *p, const void *handle, const cz_ctrl *ctrl, cz_error *err);

#endif /* CZ_COMM_MPI_H */
