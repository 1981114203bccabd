/* The DP gradient is the mean of the replicas' gradients, checked directly: every MPI rank is
 * one DP replica (TP 1) of the test model of tests/exec/ref_optim.h, each with its own
 * gradients, and after three steps every rank's parameters must match the independent reference
 * run on the mean gradient. Muon and AdamW are nearly blind to the gradient's scale (Muon
 * normalises it; AdamW divides m by sqrt(v)), so a sum in place of the mean would only show
 * through the tiny eps; here both eps are set to 1, of the order of the gradients, and a sum
 * moves every parameter visibly. Public API only (canzona.h, canzona_exec.h). Exit 0 = pass. */
#include "ref_optim.h"

#include <mpi.h>
#include <unistd.h>

static double grad(int rank, int step, int i, int k)
{
    return 0.05 *
           ref_val(424242u + 1000003u * (uint64_t)((step * 16 + i) * 64 + rank) + (uint64_t)k);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank = 0, size = 1, fails = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    cz_error err;
    cz_error_clear(&err);
    char dir[256];
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/cz-avg-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    cz_plan *plan = NULL;
    cz_executor *ex = NULL;
    float *P[REF_NPARAMS] = {0}, *G[REF_NPARAMS] = {0};
    double *RP[REF_NPARAMS] = {0}, *RG[REF_NPARAMS] = {0};
    ref_state st[REF_NPARAMS];
    memset(st, 0, sizeof st);
    if (!mkdtemp(dir) || ref_plan(dir, size, &plan, &err) != CZ_OK) {
        fprintf(stderr, "rank %d: planning the test model: %s\n", rank, err.message);
        fails = 1;
        goto out;
    }
    cz_exec_config cfg;
    cz_exec_config_init(&cfg);
    cfg.comm = "mpi";
    cfg.muon.ns_eps = 1.0f;
    cfg.adamw.eps = 1.0f;
    cfg.adamw.lr = 0.01f;
    if (cz_executor_create_from_plan(&ex, plan, &cfg, &err) != CZ_OK) {
        fprintf(stderr, "rank %d: %s\n", rank, err.message);
        fails = 1;
        goto out;
    }
    for (int i = 0; i < REF_NPARAMS; i++) {
        int n = REF_PARAMS[i].rows * REF_PARAMS[i].cols;
        P[i] = malloc((size_t)n * sizeof(float));
        G[i] = malloc((size_t)n * sizeof(float));
        RP[i] = malloc((size_t)n * sizeof(double));
        RG[i] = malloc((size_t)n * sizeof(double));
        st[i].buf = calloc((size_t)n, sizeof(double));
        st[i].m = calloc((size_t)n, sizeof(double));
        st[i].v = calloc((size_t)n, sizeof(double));
        for (int k = 0; k < n; k++) {
            P[i][k] = (float)(0.5 * ref_val(1000003u * (uint64_t)i + (uint64_t)k));
            RP[i][k] = P[i][k];
        }
        if (cz_executor_bind_param(ex, REF_PARAMS[i].name, P[i], G[i], REF_PARAMS[i].rows,
                                   REF_PARAMS[i].cols, &err) != CZ_OK) {
            fprintf(stderr, "rank %d: %s\n", rank, err.message);
            fails = 1;
            goto out;
        }
    }
    ref_hp h;
    ref_hp_from(&cfg, &h);
    for (int step = 0; step < 3; step++) {
        for (int i = 0; i < REF_NPARAMS; i++)
            for (int k = 0; k < REF_PARAMS[i].rows * REF_PARAMS[i].cols; k++) {
                G[i][k] = (float)grad(rank, step, i, k);
                double sum = 0;
                for (int d = 0; d < size; d++)
                    sum += (float)grad(d, step, i, k);
                RG[i][k] = sum / size;
            }
        if (cz_executor_step(ex, &err) != CZ_OK) {
            fprintf(stderr, "rank %d: step %d: %s\n", rank, step, err.message);
            fails = 1;
            goto out;
        }
        for (int i = 0; i < REF_NPARAMS; i++)
            ref_step(&h, &REF_PARAMS[i], &st[i], RP[i], RG[i]);
    }
    for (int i = 0; i < REF_NPARAMS; i++) {
        double worst = 0, change = 0;
        for (int k = 0; k < REF_PARAMS[i].rows * REF_PARAMS[i].cols; k++) {
            double p0 = (float)(0.5 * ref_val(1000003u * (uint64_t)i + (uint64_t)k));
            worst = fmax(worst, fabs(P[i][k] - RP[i][k]));
            change = fmax(change, fabs(RP[i][k] - p0));
        }
        double rel = change > 0 ? worst / change : worst;
        if (!(rel <= 1e-3)) {
            fprintf(stderr,
                    "rank %d of %d: %s differs from the reference on the mean gradient by "
                    "%.3g of its change\n",
                    rank, size, REF_PARAMS[i].name, rel);
            fails = 1;
        } else if (rank == 0) {
            printf("dp %d: %s within %.2g of the reference\n", size, REF_PARAMS[i].name, rel);
        }
    }
out:
    cz_executor_free(ex);
    cz_plan_free(plan);
    for (int i = 0; i < REF_NPARAMS; i++) {
        free(P[i]);
        free(G[i]);
        free(RP[i]);
        free(RG[i]);
        free(st[i].buf);
        free(st[i].m);
        free(st[i].v);
    }
    char path[320];
    snprintf(path, sizeof path, "%s/model.json", dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/cluster.json", dir);
    unlink(path);
    rmdir(dir);
    int any = 0;
    MPI_Allreduce(&fails, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    MPI_Finalize();
    return any ? 1 : 0;
}
