/* canzona-bench's own collectives, bounded like the executor's (mpi_watch.h), and how a rank
 * that stalls or is terminated ends the job with a line that names it. */
#include "bench_run.h"
#include "cz_exec_testing_mpi.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int cz_bench_rank;
/* Every wait of the bench's own collectives is bounded like the executor's (mpi_watch.h), on
 * the same report channel: the executor's world is MPI_COMM_WORLD, so they share it. */
static cz_mpi_chan *g_chan;
static double g_timeout;
/* What the bench is doing, named by the report of one of its own waits that stalls (the
 * executor's waits name the executor's phase). */
static cz_phase g_phase;

/* A rank that dies (killed, crashed) ends the job through mpirun, which terminates the other
 * ranks: each says so, with the step it was in, before it goes (mpirun's own message names
 * the process that died). Only async-signal-safe calls here. */
static volatile long g_step_now = -1;
static char g_term_msg[96];
static size_t g_term_len;

static void on_term(int sig)
{
    char buf[160];
    size_t n = g_term_len;
    memcpy(buf, g_term_msg, n);
    char digits[24];
    int k = 0;
    for (long v = g_step_now; v > 0 && k < 20; v /= 10)
        digits[k++] = (char)('0' + v % 10);
    if (k == 0)
        digits[k++] = '0';
    static const char in[] = " in step ",
                      end[] = " (mpirun ends the job this way when a rank dies; its own "
                              "message names which)\n";
    memcpy(buf + n, in, sizeof in - 1);
    n += sizeof in - 1;
    while (k > 0)
        buf[n++] = digits[--k];
    memcpy(buf + n, end, sizeof end - 1);
    n += sizeof end - 1;
    ssize_t w = write(2, buf, n);
    (void)w;
    signal(sig, SIG_DFL);
    raise(sig);
}

/* A stalled rank: this rank's report, the other live ranks' time to print theirs, then the end
 * of the job. MPI_Finalize would wait for the stalled rank forever. */
void cz_bench_stalled(const cz_error *err)
{
    signal(SIGTERM, SIG_DFL); /* the report says it all; MPI_Abort's SIGTERM needs no line */
    fprintf(stderr, "canzona-bench: rank %d: %s\n", cz_bench_rank, err->message);
    fflush(stderr);
    cz__mpi_watch_settle();
    MPI_Abort(MPI_COMM_WORLD, 3);
}

/* After a call of the executor that failed: a stall there ends the job the same way. */
void cz_bench_stop_if_stalled(int rc, const cz_error *err)
{
    if (rc && cz__mpi_watch_broken())
        cz_bench_stalled(err);
}

/* Waits for the bench's collective r on comm; a stall ends the job (cz_bench_stalled). */
void cz_bench_wait(MPI_Request *r, MPI_Comm comm, const char *what)
{
    cz_error err;
    if (cz__mpi_wait(g_chan, r, 1, comm, NULL, g_timeout, &g_phase, what, &err))
        cz_bench_stalled(&err);
}

void cz_bench_barrier(MPI_Comm comm, const char *what)
{
    MPI_Request r;
    MPI_Ibarrier(comm, &r);
    cz_bench_wait(&r, comm, what);
}

void cz_bench_allreduce(const void *in, void *out, int n, MPI_Datatype t, MPI_Op op, MPI_Comm comm,
                        const char *what)
{
    MPI_Request r;
    MPI_Iallreduce(in, out, n, t, op, comm, &r);
    cz_bench_wait(&r, comm, what);
}

/* MPI_Comm_split has no non-blocking form: every rank of comm is known to be there first. */
void cz_bench_split(MPI_Comm comm, int color, int key, MPI_Comm *out, const char *what)
{
    cz_bench_barrier(comm, what);
    MPI_Comm_split(comm, color, key, out);
}

/* Every rank learns whether any failed; prints the local message. Returns 1 if any failed. */
int cz_bench_any_failed(int rc, const cz_error *err, const char *what)
{
    cz_bench_stop_if_stalled(rc, err);
    int mine = rc != 0, any = 0;
    cz_bench_allreduce(&mine, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD,
                       "canzona-bench's agreement on failure");
    if (mine)
        fprintf(stderr, "canzona-bench: rank %d: %s: %s\n", cz_bench_rank, what, err->message);
    else if (any)
        fprintf(stderr, "canzona-bench: rank %d: stopping, another rank failed (%s)\n",
                cz_bench_rank, what);
    return any;
}

void cz_bench_set_phase(const char *what, long step)
{
    g_phase = (cz_phase){what, step};
}

void cz_bench_set_step(long step)
{
    g_step_now = step;
}

void cz_bench_ranks_open(int *argc, char ***argv)
{
    cz_error err;
    cz_error_clear(&err);
    MPI_Init(argc, argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &cz_bench_rank);
    g_term_len = (size_t)snprintf(g_term_msg, sizeof g_term_msg,
                                  "canzona-bench: rank %d: terminated (SIGTERM)", cz_bench_rank);
    if (g_term_len >= sizeof g_term_msg)
        g_term_len = sizeof g_term_msg - 1;
    signal(SIGTERM, on_term);
    g_timeout = cz__comm_mpi_timeout(NULL, getenv("CZ_MPI_TIMEOUT_S"));
    cz_bench_set_phase("canzona-bench, starting", -1);
    if (cz__mpi_chan_open(&g_chan, MPI_COMM_WORLD, g_timeout, &g_phase, &err))
        cz_bench_stalled(&err);
}

void cz_bench_ranks_close(void)
{
    cz__mpi_chan_close(g_chan);
    MPI_Finalize();
}
