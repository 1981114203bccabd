/* `canzona-bench coll`: the alpha-beta model's time of a step's DP collectives (every bucket's
 * reduce-scatter and all-gather in fp32, as the executor moves them) when NCCL builds them all
 * rooted, all padded, or by the rule of nccl_plan.h, with alpha and beta from the cluster's
 * links: inter-node when the DP group spans nodes (dp * tp > gpus_per_node), else intra-node.
 * A prediction for the NCCL plane; needs no device. */
#include "bench.h"
#include "cz_exec_testing.h"
#include "ns_bench.h"

#include <stdio.h>
#include <string.h>

int cz_bench_coll_main(int argc, char **argv)
{
    if (argc != 5 || strcmp(argv[1], "--plan") != 0 || strcmp(argv[3], "--cluster") != 0) {
        fprintf(stderr, "usage: canzona-bench coll --plan PLAN --cluster CLUSTER\n");
        return 2;
    }
    cz_error err;
    cz_plan *plan = NULL;
    cz_cluster *cl = NULL;
    int rc = cz_plan_read(&plan, argv[2], &err);
    if (!rc)
        rc = cz_cluster_load(&cl, argv[4], &err);
    if (!rc && (cl->dp != plan->dp || cl->tp != plan->tp))
        rc = cz__error_set(&err, CZ_EMISMATCH, "%s: dp %d, tp %d but the plan has dp %d, tp %d",
                           argv[4], cl->dp, cl->tp, plan->dp, plan->tp);
    if (rc) {
        fprintf(stderr, "canzona-bench coll: %s\n", err.message);
        cz_plan_free(plan);
        cz_cluster_free(cl);
        return 1;
    }
    int inter = cl->dp * cl->tp > cl->gpus_per_node;
    double alpha = cl->links.latency_us * 1e-6;
    double bps = (inter ? cl->links.inter_node_gbps : cl->links.intra_node_gbps) * 1e9;
    int np[3];
    double t[3];
    for (int p = 0; p < 3; p++)
        t[p] = cz__nccl_step_time(plan, (cz_nccl_policy)p, sizeof(float), alpha, bps, &np[p]);
    printf("canzona-bench coll: %s on %s (DP %d over %s links: %.1f us, %.0f GB/s), %zu buckets\n",
           plan->model_name ? plan->model_name : argv[2], cl->name, plan->dp,
           inter ? "inter-node" : "intra-node", cl->links.latency_us, bps * 1e-9, plan->nbuckets);
    printf("reduce-scatter + all-gather per step: all rooted %.3f ms, all padded %.3f ms, by the "
           "rule %.3f ms (%d of %zu buckets padded)\n",
           1e3 * t[0], 1e3 * t[1], 1e3 * t[2], np[2], plan->nbuckets);
    cz_plan_free(plan);
    cz_cluster_free(cl);
    return 0;
}
