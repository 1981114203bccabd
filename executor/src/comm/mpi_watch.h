/*
 * mpi_watch.h — every MPI wait bounded, and the report of a stalled rank (internal; MPI code
 * only: comm_mpi.c and canzona-bench).
 *
 * MPI waits forever for a rank that stopped (SIGSTOP, a debugger, a hung file system, a job's
 * own code that never calls back). Every wait of the executor's MPI planes and control plane,
 * and of canzona-bench, goes through cz__mpi_wait: non-blocking MPI calls polled until they
 * complete or until the time limit passes with no completion. Then the rank asks every other
 * rank, over a diagnosis channel (a duplicate of the world communicator, point-to-point only),
 * what it is waiting in; every rank polls the channel while it waits, so the live ranks answer
 * within milliseconds, stop their own wait, and ask in turn. Ranks that do not answer within a
 * grace period (half the limit, at most 30 s) are the ones the others wait for. Each live rank
 * then returns CZ_ETIMEOUT with a message naming its phase, the operation and the ranks it
 * waited for. The communicators are unusable after that (the stalled operations stay posted):
 * every later wait fails at once, and MPI_Finalize would wait for the stopped rank, so the job
 * should print, let the others print (cz__mpi_watch_settle) and call MPI_Abort.
 */
#ifndef CZ_MPI_WATCH_H
#define CZ_MPI_WATCH_H

#include "canzona_format.h"
#include "comm.h"

#include <mpi.h>
#include <stdbool.h>
#include <stdint.h>

/* Default time limit of one MPI wait (seconds): generous, as torch.distributed's default
 * process-group timeout, since a wait may cover another rank's long computation or a
 * checkpoint's file on rank 0. CZ_MPI_TIMEOUT_S or cz_exec_config.mpi_timeout_s set it. */
#define CZ_MPI_DEFAULT_TIMEOUT_S 1800.0

/* A diagnosis channel. Ranks whose worlds are congruent share one (canzona-bench's and the
 * executor's), reference-counted. */
typedef struct cz_mpi_chan cz_mpi_chan;

/* Opens (collective over world, bounded by timeout_s; phase: as cz__mpi_wait's) or shares the
 * channel of world. */
int cz__mpi_chan_open(cz_mpi_chan **out, MPI_Comm world, double timeout_s, const cz_phase *phase,
                      cz_error *err);
/* Drops a reference; the last one frees the channel's communicator. NULL is allowed. */
void cz__mpi_chan_close(cz_mpi_chan *ch);

/* Waits for n requests posted on comm until all complete (CZ_OK), MPI fails (CZ_EIO), or no
 * request completes for timeout_s seconds, or another rank reports a stall: then the ranks are
 * asked over ch (NULL: none yet, the report cannot name ranks) and CZ_ETIMEOUT is returned with
 * the report. peers[k] is the rank in comm that request k waits for, -1 for a collective (all
 * of comm); peers NULL = all collective. phase is what the caller is doing, read when the
 * report is made (NULL: "outside a step"); what names the operation ("DP reduce-scatter"). */
int cz__mpi_wait(cz_mpi_chan *ch, MPI_Request *r, int n, MPI_Comm comm, const int *peers,
                 double timeout_s, const cz_phase *phase, const char *what, cz_error *err);

/* True once a wait has timed out or stopped for another rank's report in this process. */
bool cz__mpi_watch_broken(void);

/* After a report has been printed: tells the ranks that answered and waits (at most the grace
 * of the report) until each of them says the same, so that none ends the job (MPI_Abort)
 * before all have printed theirs. Answers late requests meanwhile. */
void cz__mpi_watch_settle(void);

#endif /* CZ_MPI_WATCH_H */
