/* A gradient shard whose size contradicts a fully sharded plan, on one rank of four: that
 * rank's bind_param refuses it naming the parameter and the rows FSDP2 gives it, and the first
 * step is refused on every rank (the bound rank names the parameter, the others the rank), none
 * left waiting in an exchange. The shard rows are torch.chunk's, computed here on their own
 * (ceil(rows / dp) per rank, the last ranks fewer) over the rows of the rank's TP shard.
 * Usage: mpirun -np 4 exec_fsdp_bind PLAN BAD_RANK PARAM (PLAN: an fsdp plan of 4 GPUs at
 * PP 1; world rank = dp_rank * tp + tp_rank). Public API only. Exit 0 = pass. */
#include "canzona.h"
#include "canzona_exec.h"
#include "cz_format.h" /* the plan's parameters, to bind them */

#include <mpi.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* torch.chunk along dim 0: rank r of dp holds min(c, rows - r * c) rows, c = ceil(rows / dp). */
static int64_t chunk_rows(int64_t rows, int dp, int r)
{
    int64_t c = (rows + dp - 1) / dp, left = rows - (int64_t)r * c;
    return left < 0 ? 0 : left < c ? left : c;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank = 0, fails = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (argc != 4) {
        fprintf(stderr, "usage: exec_fsdp_bind PLAN BAD_RANK PARAM\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    int bad = atoi(argv[2]);
    const char *name = argv[3];
    cz_error err;
    cz_plan *plan = NULL;
    cz_executor *ex = NULL;
    float *buf = NULL;
    cz_exec_config cfg;
    cz_exec_config_init(&cfg);
    cfg.comm = "mpi";
    if (cz_plan_read(&plan, argv[1], &err) != CZ_OK ||
        cz_executor_create(&ex, argv[1], &cfg, &err) != CZ_OK) {
        fprintf(stderr, "rank %d: %s\n", rank, err.message);
        fails = 1;
        goto out;
    }
    int64_t most = 1;
    for (size_t i = 0; i < plan->nparams; i++) {
        const cz_plan_param *p = &plan->params[i];
        int64_t n = p->def.shape[0] * (p->def.ndim == 1 ? 1 : p->def.shape[1]);
        most = n > most ? n : most;
    }
    buf = calloc((size_t)(2 * most), sizeof(float));
    int seen = 0;
    for (size_t i = 0; buf && i < plan->nparams; i++) {
        const cz_plan_param *p = &plan->params[i];
        /* The rows of this rank's TP shard (local_shape) that its DP rank holds. */
        int64_t rows = chunk_rows(p->local_shape[0], plan->dp, rank / plan->tp),
                cols = p->def.ndim == 1 ? 1 : p->local_shape[1];
        bool wrong = rank == bad && strcmp(p->def.name, name) == 0;
        seen += strcmp(p->def.name, name) == 0;
        int rc = cz_executor_bind_param(ex, p->def.name, buf, buf + most, rows + (wrong ? 1 : 0),
                                        cols, &err);
        if (wrong &&
            (rc != CZ_EMISMATCH || !strstr(err.message, name) || !strstr(err.message, "FSDP2"))) {
            fprintf(stderr, "rank %d: the wrong shard of '%s' was not refused as expected: %s\n",
                    rank, name, rc ? err.message : "accepted");
            fails = 1;
        } else if (wrong) {
            printf("rank %d: refused: %s\n", rank, err.message);
        } else if (rc != CZ_OK) {
            fprintf(stderr, "rank %d: %s\n", rank, err.message);
            fails = 1;
        }
    }
    if (!buf || seen != 1) {
        fprintf(stderr, "rank %d: no parameter '%s' in the plan (or out of memory)\n", rank, name);
        fails = 1;
        goto out;
    }
    /* Every rank enters the step: the bound ranks would wait for rank bad in the first
     * exchange if the step did not agree on the binding first. */
    int rc = cz_executor_step(ex, &err);
    char want[256];
    if (rank == bad)
        snprintf(want, sizeof want, "parameter '%s' is not bound", name);
    else
        snprintf(want, sizeof want, "rank %d has not bound its buffers", bad);
    if (rc == CZ_OK || !strstr(err.message, want)) {
        fprintf(stderr, "rank %d: expected the step refused with \"%s\": %s\n", rank, want,
                rc ? err.message : "it ran");
        fails = 1;
    } else {
        printf("rank %d: step refused: %s\n", rank, err.message);
    }
out:
    cz_executor_free(ex);
    cz_plan_free(plan);
    free(buf);
    int any = 0;
    MPI_Allreduce(&fails, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    MPI_Finalize();
    return any ? 1 : 0;
}
