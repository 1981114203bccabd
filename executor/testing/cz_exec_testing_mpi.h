/*
 * cz_exec_testing_mpi.h — cz_exec_testing.h and the MPI watchdog (mpi_watch.h: bounded waits and
 * the report of a stalled rank), for canzona-bench's own collectives. Needs <mpi.h>.
 */
#ifndef CZ_EXEC_TESTING_MPI_H
#define CZ_EXEC_TESTING_MPI_H

#include "cz_exec_testing.h"
#include "mpi_watch.h"

#endif /* CZ_EXEC_TESTING_MPI_H */
