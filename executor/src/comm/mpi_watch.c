/* Bounded MPI waits and the report of a stalled rank (see mpi_watch.h).
 *
 * The diagnosis protocol, over each channel's private communicator (point-to-point only, so it
 * never mixes with the collectives of the planes):
 *   - a rank whose wait made no progress for the limit sends a request (its phase) to every
 *     other rank of the channel and posts a receive of each one's answer;
 *   - every rank, while it waits, probes each channel for requests; one that sees a request
 *     stops its own wait and does the same (so all live ranks join within milliseconds);
 *   - a rank in the diagnosis answers every request it receives, and collects answers until
 *     all came or the grace ran out; whoever did not answer is stopped, dead, or busy outside
 *     canzona, and is what the live ranks were waiting for.
 * One process-wide state (the channels and whether a wait has stopped): MPI's progress is
 * process-wide too, and a rank must answer whatever channel a request comes on, whichever of
 * its waits it is in. What the rank is doing is not part of it: each wait is handed the phase
 * of the executor (or of canzona-bench) it serves. Not thread-safe: the executor's threading
 * rule (canzona_exec.h, one thread drives an executor) extends to every executor of the
 * process, as MPI's progress does under MPI_THREAD_FUNNELED. */
#include "alloc.h"
#include "cz_format.h"

#ifdef CZ_HAVE_MPI
#include "mpi_watch.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CZ_TAG_REQUEST 0x637a /* "cz" */
#define CZ_TAG_ANSWER 0x637b
#define CZ_TAG_DONE 0x637c
#define CZ_MAX_CHANNELS 4

struct cz_mpi_chan {
    MPI_Comm comm;
    int refs, size, rank;
};

/* What a rank tells the others (raw bytes: every rank runs this code). */
typedef struct diag_msg {
    int64_t step;
    char phase[96];
    char what[64];
} diag_msg;

static struct {
    cz_mpi_chan *chans[CZ_MAX_CHANNELS];
    int nchans;
    bool broken;
    diag_msg me;             /* sent by every request and answer; fixed once broken */
    cz_mpi_chan *asked;      /* the channel of this rank's diagnosis, for settle */
    unsigned char *answered; /* per rank of it: 1 when that rank answered */
    double grace;
} g;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Polling pace: yield the core at first (a wait is usually short, and oversubscribed ranks
 * need the core to finish what this rank waits for), then sleep so that a long wait does not
 * keep a core busy. */
static void pause_for(double waited)
{
    if (waited < 0.05) {
        sched_yield();
        return;
    }
    struct timespec ts = {0, 200000};
    nanosleep(&ts, NULL);
}

static double grace_of(double timeout_s)
{
    double s = timeout_s / 2;
    return s < 30.0 ? s : 30.0;
}

bool cz__mpi_watch_broken(void)
{
    return g.broken;
}

/* True when some channel holds a request from another rank. */
static bool request_waiting(void)
{
    for (int c = 0; c < g.nchans; c++) {
        int flag = 0;
        MPI_Iprobe(MPI_ANY_SOURCE, CZ_TAG_REQUEST, g.chans[c]->comm, &flag, MPI_STATUS_IGNORE);
        if (flag)
            return true;
    }
    return false;
}

/* Answers every request waiting on every channel with g.me. *from gets the first asker's rank
 * on ch (when ch is given and the request came on it). */
static void answer_requests(const cz_mpi_chan *ch, int *from)
{
    for (int c = 0; c < g.nchans; c++)
        for (;;) {
            int flag = 0;
            MPI_Status st;
            MPI_Iprobe(MPI_ANY_SOURCE, CZ_TAG_REQUEST, g.chans[c]->comm, &flag, &st);
            if (!flag)
                break;
            diag_msg in;
            MPI_Recv(&in, (int)sizeof in, MPI_BYTE, st.MPI_SOURCE, CZ_TAG_REQUEST, g.chans[c]->comm,
                     MPI_STATUS_IGNORE);
            MPI_Request rq;
            if (MPI_Isend(&g.me, (int)sizeof g.me, MPI_BYTE, st.MPI_SOURCE, CZ_TAG_ANSWER,
                          g.chans[c]->comm, &rq) == MPI_SUCCESS)
                MPI_Request_free(&rq);
            if (from && *from < 0 && g.chans[c] == ch)
                *from = st.MPI_SOURCE;
        }
}

int cz__mpi_chan_open(cz_mpi_chan **out, MPI_Comm world, double timeout_s, const cz_phase *phase,
                      cz_error *err)
{
    *out = NULL;
    for (int c = 0; c < g.nchans; c++) {
        int same = MPI_UNEQUAL;
        MPI_Comm_compare(world, g.chans[c]->comm, &same);
        if (same == MPI_IDENT || same == MPI_CONGRUENT) {
            g.chans[c]->refs++;
            *out = g.chans[c];
            return CZ_OK;
        }
    }
    if (g.nchans == CZ_MAX_CHANNELS)
        return cz__error_set(err, CZ_EUNSUPPORTED,
                             "more than %d distinct world communicators in one process",
                             CZ_MAX_CHANNELS);
    cz_mpi_chan *ch = cz__exec_calloc(1, sizeof *ch);
    if (!ch)
        return cz__error_set(err, CZ_ENOMEM, "out of memory for an MPI communicator");
    MPI_Request r;
    int rc = MPI_Comm_idup(world, &ch->comm, &r);
    if (rc == MPI_SUCCESS)
        rc = cz__mpi_wait(g.nchans ? g.chans[0] : NULL, &r, 1, world, NULL, timeout_s, phase,
                          "duplicating the world communicator", err);
    else
        rc = cz__error_set(err, CZ_EIO, "MPI_Comm_idup failed");
    if (rc) {
        cz__exec_free(ch);
        return rc;
    }
    MPI_Comm_set_errhandler(ch->comm, MPI_ERRORS_RETURN);
    MPI_Comm_size(ch->comm, &ch->size);
    MPI_Comm_rank(ch->comm, &ch->rank);
    ch->refs = 1;
    g.chans[g.nchans++] = ch;
    *out = ch;
    return CZ_OK;
}

void cz__mpi_chan_close(cz_mpi_chan *ch)
{
    if (!ch || --ch->refs > 0)
        return;
    int c = 0;
    while (c < g.nchans && g.chans[c] != ch)
        c++;
    if (c < g.nchans)
        g.chans[c] = g.chans[--g.nchans];
    int fin = 0;
    MPI_Finalized(&fin);
    /* After a stall the peers may never free theirs: keep it rather than risk a wait. */
    if (!fin && !g.broken)
        MPI_Comm_free(&ch->comm);
    if (g.asked == ch)
        g.asked = NULL;
    cz__exec_free(ch);
}

/* The channel ranks of the members of comm (n = its size, out[n]). */
static void members(const cz_mpi_chan *ch, MPI_Comm comm, const int *ranks, int n, int *out)
{
    MPI_Group from, to;
    MPI_Comm_group(comm, &from);
    MPI_Comm_group(ch->comm, &to);
    MPI_Group_translate_ranks(from, n, ranks, to, out);
    MPI_Group_free(&from);
    MPI_Group_free(&to);
}

/* Appends ", r" for each rank of list (of n) to buf, at most 12 of them. */
static void list_ranks(char *buf, size_t cap, const int *list, int n)
{
    size_t len = strlen(buf);
    for (int k = 0; k < n && len + 1 < cap; k++) {
        if (k == 12) {
            snprintf(buf + len, cap - len, " and %d more", n - k);
            return;
        }
        len += (size_t)snprintf(buf + len, cap - len, "%s%d", k ? ", " : "", list[k]);
    }
}

/* Asks every rank of ch (see the file comment); answered[] gets who answered. */
static void ask(cz_mpi_chan *ch, unsigned char *answered, double grace)
{
    int n = ch->size;
    MPI_Request *rr = cz__exec_calloc((size_t)n, sizeof *rr);
    diag_msg *in = cz__exec_calloc((size_t)n, sizeof *in);
    int *idx = cz__exec_calloc((size_t)n, sizeof *idx);
    answered[ch->rank] = 1;
    if (!rr || !in || !idx)
        goto done;
    for (int k = 0; k < n; k++) {
        rr[k] = MPI_REQUEST_NULL;
        if (k == ch->rank)
            continue;
        MPI_Irecv(&in[k], (int)sizeof in[k], MPI_BYTE, k, CZ_TAG_ANSWER, ch->comm, &rr[k]);
        MPI_Request s;
        if (MPI_Isend(&g.me, (int)sizeof g.me, MPI_BYTE, k, CZ_TAG_REQUEST, ch->comm, &s) ==
            MPI_SUCCESS)
            MPI_Request_free(&s);
    }
    double end = now() + grace;
    int left = n - 1;
    while (left > 0 && now() < end) {
        answer_requests(NULL, NULL);
        int got = 0;
        MPI_Testsome(n, rr, &got, idx, MPI_STATUSES_IGNORE);
        if (got == MPI_UNDEFINED)
            break;
        for (int k = 0; k < got; k++) {
            answered[idx[k]] = 1;
            left--;
        }
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    for (int k = 0; k < n; k++)
        if (rr[k] != MPI_REQUEST_NULL) {
            MPI_Cancel(&rr[k]);
            MPI_Wait(&rr[k], MPI_STATUS_IGNORE);
        }
done:
    cz__exec_free(rr);
    cz__exec_free(in);
    cz__exec_free(idx);
}

/* What this rank will tell the others from now on (fixed: requests and answers in flight
 * send this buffer). */
static void fill_me(const cz_phase *phase, const char *what)
{
    if (g.broken)
        return;
    snprintf(g.me.phase, sizeof g.me.phase, "%s",
             phase && phase->what ? phase->what : "outside a step");
    snprintf(g.me.what, sizeof g.me.what, "%s", what);
    g.me.step = phase && phase->what ? phase->step : -1;
    g.broken = true;
}

/* The report of a wait that stopped after `waited` seconds: for the lapse of the limit, or
 * (noticed) for another rank's request, rank `from` of ch when known. */
static int diagnose(cz_mpi_chan *ch, MPI_Request *r, int n, MPI_Comm comm, const int *peers,
                    double waited, double timeout_s, bool noticed, int from, const cz_phase *phase,
                    const char *what, cz_error *err)
{
    if (!ch && g.nchans)
        ch = g.chans[0];
    fill_me(phase, what);
    char where[192];
    if (g.me.step >= 0)
        snprintf(where, sizeof where, "step %lld (%s), %s", (long long)g.me.step, g.me.phase, what);
    else
        snprintf(where, sizeof where, "%s, %s", g.me.phase, what);
    char head[320];
    if (!noticed)
        snprintf(head, sizeof head, "no MPI progress for %.1f s in %s", waited, where);
    else if (from >= 0)
        snprintf(head, sizeof head,
                 "stopped waiting after %.1f s in %s: rank %d reported a stalled wait", waited,
                 where, from);
    else
        snprintf(head, sizeof head,
                 "stopped waiting after %.1f s in %s: another rank reported a stalled wait", waited,
                 where);
    if (!ch)
        return cz__error_set(err, CZ_ETIMEOUT,
                             "%s; the other ranks did not all arrive (MPI does not tell which); "
                             "CZ_MPI_TIMEOUT_S or cz_exec_config.mpi_timeout_s sets the limit",
                             head);

    /* Who this rank waits for: the peers of its unfinished transfers, else every member of
     * the collective. */
    int csize = 0;
    MPI_Comm_size(comm, &csize);
    int *want = cz__exec_calloc((size_t)(csize + n + 1), sizeof *want);
    int *chr = cz__exec_calloc((size_t)(csize + n + 1), sizeof *chr);
    unsigned char *answered = cz__exec_calloc((size_t)ch->size, 1);
    if (!want || !chr || !answered) {
        cz__exec_free(want), cz__exec_free(chr), cz__exec_free(answered);
        return cz__error_set(err, CZ_ETIMEOUT, "%s (out of memory for the report)", head);
    }
    int nwant = 0;
    for (int k = 0; peers && k < n; k++) {
        int done = 1;
        if (r[k] != MPI_REQUEST_NULL)
            MPI_Test(&r[k], &done, MPI_STATUS_IGNORE);
        if (!done && peers[k] >= 0)
            want[nwant++] = peers[k];
    }
    if (nwant == 0) {
        int me = 0;
        MPI_Comm_rank(comm, &me);
        for (int k = 0; k < csize; k++)
            if (k != me)
                want[nwant++] = k;
    }
    members(ch, comm, want, nwant, chr);

    double grace = grace_of(timeout_s);
    ask(ch, answered, grace);
    g.asked = ch;
    cz__exec_free(g.answered);
    g.answered = answered;
    g.grace = grace;

    /* Of those this rank waits for, the ones that did not answer (each once: a peer may have
     * a send and a receive pending); if all answered (they wait too), every rank that did not. */
    int *silent = want, nsilent = 0, nanswered = 0;
    for (int k = 0; k < nwant; k++) {
        int c = chr[k];
        bool seen = false;
        for (int j = 0; j < nsilent && !seen; j++)
            seen = silent[j] == c;
        if (c >= 0 && c < ch->size && !answered[c] && !seen)
            silent[nsilent++] = c;
    }
    bool direct = nsilent > 0;
    for (int k = 0; k < ch->size; k++) {
        nanswered += answered[k] && k != ch->rank;
        if (!direct && !answered[k])
            silent[nsilent++] = k;
    }
    char who[160] = "";
    list_ranks(who, sizeof who, silent, nsilent);
    int rc;
    if (nsilent == 0)
        rc = cz__error_set(err, CZ_ETIMEOUT,
                           "%s; every rank answered within %.1f s, so none is stopped: a rank "
                           "may be slower than the limit; CZ_MPI_TIMEOUT_S or "
                           "cz_exec_config.mpi_timeout_s sets it",
                           head, grace);
    else
        rc = cz__error_set(err, CZ_ETIMEOUT,
                           "%s; waiting for rank%s %s%s, which did not answer within %.1f s "
                           "(stopped, dead, or busy outside canzona); %d other rank%s answered "
                           "and wait%s too. The communicators cannot be used any more; "
                           "CZ_MPI_TIMEOUT_S or cz_exec_config.mpi_timeout_s sets the limit",
                           head, nsilent > 1 ? "s" : "", who,
                           direct ? "" : " (through the other ranks of this operation)", grace,
                           nanswered, nanswered == 1 ? "" : "s", nanswered == 1 ? "s" : "");
    cz__exec_free(want);
    cz__exec_free(chr);
    return rc;
}

int cz__mpi_wait(cz_mpi_chan *ch, MPI_Request *r, int n, MPI_Comm comm, const int *peers,
                 double timeout_s, const cz_phase *phase, const char *what, cz_error *err)
{
    if (n <= 0)
        return CZ_OK;
    if (g.broken)
        return cz__error_set(err, CZ_ETIMEOUT,
                             "%s: an earlier MPI wait of this process stopped for a stalled rank "
                             "(see its message); the communicators cannot be used any more",
                             what);
    int done = 0;
    int rc = MPI_Testall(n, r, &done, MPI_STATUSES_IGNORE);
    double start = 0.0, t = 0.0;
    for (bool first = true; rc == MPI_SUCCESS && !done; first = false) {
        t = now();
        if (first)
            start = t;
        if (t - start >= timeout_s)
            return diagnose(ch, r, n, comm, peers, t - start, timeout_s, false, -1, phase, what,
                            err);
        if (request_waiting()) {
            int from = -1;
            cz_mpi_chan *on = ch ? ch : g.nchans ? g.chans[0] : NULL;
            fill_me(phase, what);
            answer_requests(on, &from);
            return diagnose(on, r, n, comm, peers, t - start, timeout_s, true, from, phase, what,
                            err);
        }
        pause_for(t - start);
        rc = MPI_Testall(n, r, &done, MPI_STATUSES_IGNORE);
    }
    if (rc != MPI_SUCCESS) {
        char msg[MPI_MAX_ERROR_STRING];
        int len = 0;
        MPI_Error_string(rc, msg, &len);
        return cz__error_set(err, CZ_EIO, "MPI %s failed: %s", what, msg);
    }
    return CZ_OK;
}

void cz__mpi_watch_settle(void)
{
    cz_mpi_chan *ch = g.asked;
    if (!ch || !g.answered)
        return;
    int n = ch->size, left = 0;
    MPI_Request *rr = cz__exec_calloc((size_t)n, sizeof *rr);
    int *idx = cz__exec_calloc((size_t)n, sizeof *idx);
    char *in = cz__exec_calloc((size_t)n, 1);
    static char token;
    if (!rr || !idx || !in)
        goto done;
    for (int k = 0; k < n; k++) {
        rr[k] = MPI_REQUEST_NULL;
        if (k == ch->rank || !g.answered[k])
            continue;
        MPI_Irecv(&in[k], 1, MPI_BYTE, k, CZ_TAG_DONE, ch->comm, &rr[k]);
        MPI_Request s;
        if (MPI_Isend(&token, 1, MPI_BYTE, k, CZ_TAG_DONE, ch->comm, &s) == MPI_SUCCESS)
            MPI_Request_free(&s);
        left++;
    }
    for (double end = now() + g.grace; left > 0 && now() < end;) {
        answer_requests(NULL, NULL);
        int got = 0;
        MPI_Testsome(n, rr, &got, idx, MPI_STATUSES_IGNORE);
        left -= got == MPI_UNDEFINED ? left : got;
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    for (int k = 0; k < n; k++)
        if (rr[k] != MPI_REQUEST_NULL) {
            MPI_Cancel(&rr[k]);
            MPI_Wait(&rr[k], MPI_STATUS_IGNORE);
        }
done:
    cz__exec_free(rr);
    cz__exec_free(idx);
    cz__exec_free(in);
}

#else /* !CZ_HAVE_MPI */

typedef int cz_mpi_watch_unused; /* ISO C wants a declaration in every translation unit */

#endif
