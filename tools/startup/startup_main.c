/* canzona-startup: one rank's cz_executor_create in a fake world, timed (docs/PERF.md section
 * 16). The process plays world rank R of a job of N ranks over the callbacks comm plane (the
 * one canzona.torch uses); its callbacks answer every collective of create as the other N - 1
 * ranks would: the agreement's minimum is this rank's own values (every rank passed and has the
 * same plan). The executor opens its planes from the members the plan's layout names, with no
 * collective (executor.c, plane_members), which is the planes rank R gets in a real job; any
 * other collective at create, a world-sized split among them, is refused, so that a create
 * whose cost grows with the world again fails here (exec.startup_bounded). Nothing after create
 * is run. Prints one JSON line: CPU seconds (user + system) of create less those spent
 * answering for the fake world (reported apart: in a job they are the other ranks' and the
 * network's), wall seconds of create, and the process's peak resident set before and after.
 *
 *   canzona-startup PLAN --world N --tp T --pp P [--ep E --etp X] --rank R [--repeat K]
 *                   [--max-rss-mb M]
 *
 * PLAN is a plan file or a split plan folder (canzona plan --split). --repeat creates K times
 * (at most 64) and reports the median CPU and wall seconds, and the first create's peak;
 * --max-rss-mb makes a peak above M MiB an error (exit 1). */
#include "canzona_exec.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

typedef struct world {
    int n, rank, tp, dp, pp, ep, etp, edp;
    double fake_s; /* CPU seconds spent in these callbacks: the other ranks' part of a
                      collective, not this rank's */
} world;

static double cpu_s(void);

static int answer(world *w, void *buf, size_t count, cz_comm_dtype t, cz_comm_op op);

static int fake_all_reduce(void *user, cz_comm_group g, void *buf, size_t count, cz_comm_dtype t,
                           cz_comm_op op)
{
    world *w = user;
    (void)g;
    double c0 = cpu_s();
    int rc = answer(w, buf, count, t, op);
    w->fake_s += cpu_s() - c0;
    return rc;
}

static int answer(world *w, void *buf, size_t count, cz_comm_dtype t, cz_comm_op op)
{
    (void)buf;
    /* The agreement's minimum over ranks that all passed with the same plan: this rank's. */
    if (t == CZ_COMM_INT64 && op == CZ_COMM_MIN)
        return 0;
    fprintf(stderr,
            "canzona-startup: rank %d: unexpected all_reduce of %zu elements at create (a plane "
            "split over the world of %d ranks?): create must open its planes from the layout\n",
            w->rank, count, w->n);
    return 1;
}

static int fake_broadcast(void *user, cz_comm_group g, void *buf, size_t count, cz_comm_dtype t,
                          int root)
{
    (void)user, (void)g, (void)buf, (void)count, (void)t, (void)root;
    return 0;
}

static int fake_exchange(void *user, cz_comm_group g, const cz_comm_transfer *t, int n)
{
    (void)user, (void)g, (void)t, (void)n;
    return 0;
}

static double cpu_s(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + 1e-6 * (double)ru.ru_utime.tv_usec +
           (double)ru.ru_stime.tv_sec + 1e-6 * (double)ru.ru_stime.tv_usec;
}

static double wall_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double maxrss_mb(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_maxrss / 1024.0; /* kilobytes on Linux */
}

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int usage(void)
{
    fprintf(stderr, "usage: canzona-startup PLAN|DIR --world N --tp T --pp P [--ep E --etp X] "
                    "--rank R [--repeat K] [--max-rss-mb M]\n");
    return 2;
}

int main(int argc, char **argv)
{
    world w = {.ep = 1, .etp = -1, .rank = -1};
    const char *plan = NULL;
    double max_rss = 0;
    int repeat = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int *dst = !strcmp(a, "--world")  ? &w.n
                   : !strcmp(a, "--tp")   ? &w.tp
                   : !strcmp(a, "--pp")   ? &w.pp
                   : !strcmp(a, "--ep")   ? &w.ep
                   : !strcmp(a, "--etp")  ? &w.etp
                   : !strcmp(a, "--rank") ? &w.rank
                                          : NULL;
        if (dst && i + 1 < argc)
            *dst = atoi(argv[++i]);
        else if (!strcmp(a, "--repeat") && i + 1 < argc)
            repeat = atoi(argv[++i]);
        else if (!strcmp(a, "--max-rss-mb") && i + 1 < argc)
            max_rss = atof(argv[++i]);
        else if (a[0] != '-' && !plan)
            plan = a;
        else
            return usage();
    }
    if (w.etp < 0)
        w.etp = w.tp;
    if (!plan || w.n < 1 || w.tp < 1 || w.pp < 1 || w.ep < 1 || w.etp < 1 || w.rank < 0 ||
        w.rank >= w.n || w.n % (w.tp * w.pp) != 0 || repeat < 1 || repeat > 64)
        return usage();
    w.dp = w.n / (w.tp * w.pp);
    w.edp = w.tp * w.dp / (w.etp * w.ep);
    cz_comm_callbacks cb = {.version = CZ_COMM_CALLBACKS_VERSION,
                            .user = &w,
                            .world_size = w.n,
                            .world_rank = w.rank,
                            .all_reduce = fake_all_reduce,
                            .broadcast = fake_broadcast,
                            .exchange = fake_exchange};
    cz_exec_config cfg;
    cz_exec_config_init(&cfg);
    cfg.comm = "callbacks";
    cfg.callbacks = &cb;
    cz_executor *ex = NULL;
    cz_error err = {0};
    /* Each create's own CPU seconds; the median of --repeat creates is reported (one create
     * of a rank's part takes milliseconds, near the clock's resolution). */
    double own[64], wall[64], rss0 = maxrss_mb(), rss1 = rss0;
    size_t numel = 0, nparams = 0;
    int rc = CZ_OK, dp_rank = -1, stage = -1;
    for (int k = 0; k < repeat && rc == CZ_OK; k++) {
        w.fake_s = 0;
        double c0 = cpu_s(), t0 = wall_s();
        rc = cz_executor_create(&ex, plan, &cfg, &err);
        own[k] = cpu_s() - c0 - w.fake_s;
        wall[k] = wall_s() - t0;
        /* What create made of the plan, so that two forms of one plan can be compared. */
        numel = cz_executor_buffer_numel(ex), nparams = cz_executor_param_count(ex);
        dp_rank = cz_executor_dp_rank(ex), stage = cz_executor_pp_rank(ex);
        cz_executor_free(ex);
        ex = NULL;
        /* The peak of one create: later ones reuse what the first freed, or fragment it. */
        if (k == 0)
            rss1 = maxrss_mb();
    }
    qsort(own, (size_t)repeat, sizeof *own, by_value);
    qsort(wall, (size_t)repeat, sizeof *wall, by_value);
    /* create_cpu_s is the rank's own: the fake world's answers are taken out of it. */
    printf("{\"rank\": %d, \"rc\": %d, \"create_cpu_s\": %.4f, \"fake_world_cpu_s\": %.4f, "
           "\"create_wall_s\": %.4f, \"rss_before_mb\": %.1f, \"peak_rss_mb\": %.1f, "
           "\"stage\": %d, \"dp_rank\": %d, \"buffer_numel\": %zu, \"params\": %zu}\n",
           w.rank, rc, own[repeat / 2], w.fake_s, wall[repeat / 2], rss0, rss1, stage, dp_rank,
           numel, nparams);
    if (rc) {
        fprintf(stderr, "canzona-startup: rank %d: %s\n", w.rank, err.message);
        return 1;
    }
    if (max_rss > 0 && rss1 > max_rss) {
        fprintf(stderr, "canzona-startup: rank %d: peak RSS %.1f MiB is above the bound %.1f MiB\n",
                w.rank, rss1, max_rss);
        return 1;
    }
    return 0;
}
