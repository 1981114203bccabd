/* Loading a cluster shape (canzona.cluster/1). */
#include "json_util.h"

#include <inttypes.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

int cz_cluster_load(cz_cluster **out, const char *path, cz_error *err)
{
    static const char *const top_keys[] = {"schema", "name",  "description", "gpus",
                                           "dp",     "tp",    "pp",          "gpus_per_node",
                                           "device", "links", "buckets",     NULL};
    static const char *const device_keys[] = {"name", "matmul_tflops", "mem_gbps", "memory_gib",
                                              NULL};
    static const char *const link_keys[] = {"intra_node_gbps", "inter_node_gbps", "latency_us",
                                            NULL};
    static const char *const bucket_keys[] = {"size", "align", NULL};
    cz_json_ctx c = {path, err};
    json_t *root = NULL;
    cz_cluster *cl = NULL;
    const json_t *device, *links, *buckets = NULL;
    const char *name = NULL, *desc = NULL, *dev_name = NULL;
    char sha[65];
    int rc;

    *out = NULL;
    cl = calloc(1, sizeof *cl);
    if (!cl)
        return cz_error_set(err, CZ_ENOMEM, "%s: out of memory", path);
    cl->bucket_align = 64;
    if ((rc = cz_json_load_file(&root, sha, path, err)) != CZ_OK)
        goto done;
    if ((rc = cz_json_check_schema(&c, root, CZ_CLUSTER_SCHEMA)) != CZ_OK ||
        (rc = cz_json_check_object(&c, root, "$", top_keys)) != CZ_OK ||
        (rc = cz_json_get_string(&c, root, "$", "name", true, &name)) != CZ_OK ||
        (rc = cz_json_get_string(&c, root, "$", "description", false, &desc)) != CZ_OK ||
        (rc = cz_json_get_int(&c, root, "$", "gpus", true, 1, INT_MAX, &cl->gpus)) != CZ_OK ||
        (rc = cz_json_get_int(&c, root, "$", "dp", true, 1, INT_MAX, &cl->dp)) != CZ_OK ||
        (rc = cz_json_get_int(&c, root, "$", "tp", true, 1, INT_MAX, &cl->tp)) != CZ_OK ||
        (rc = cz_json_get_int(&c, root, "$", "pp", true, 1, INT_MAX, &cl->pp)) != CZ_OK ||
        (rc = cz_json_get_int(&c, root, "$", "gpus_per_node", true, 1, INT_MAX,
                              &cl->gpus_per_node)) != CZ_OK)
        goto done;
    if ((rc = cz_json_get_object(&c, root, "$", "device", true, device_keys, &device)) != CZ_OK ||
        (rc = cz_json_get_string(&c, device, "$.device", "name", true, &dev_name)) != CZ_OK ||
        (rc = cz_json_get_double(&c, device, "$.device", "matmul_tflops", true, 0, true,
                                 &cl->device.matmul_tflops)) != CZ_OK ||
        (rc = cz_json_get_double(&c, device, "$.device", "mem_gbps", true, 0, true,
                                 &cl->device.mem_gbps)) != CZ_OK ||
        (rc = cz_json_get_double(&c, device, "$.device", "memory_gib", true, 0, true,
                                 &cl->device.memory_gib)) != CZ_OK)
        goto done;
    if ((rc = cz_json_get_object(&c, root, "$", "links", true, link_keys, &links)) != CZ_OK ||
        (rc = cz_json_get_double(&c, links, "$.links", "intra_node_gbps", true, 0, true,
                                 &cl->links.intra_node_gbps)) != CZ_OK ||
        (rc = cz_json_get_double(&c, links, "$.links", "inter_node_gbps", true, 0, true,
                                 &cl->links.inter_node_gbps)) != CZ_OK ||
        (rc = cz_json_get_double(&c, links, "$.links", "latency_us", true, 0, false,
                                 &cl->links.latency_us)) != CZ_OK)
        goto done;
    if ((rc = cz_json_get_object(&c, root, "$", "buckets", false, bucket_keys, &buckets)) != CZ_OK)
        goto done;
    if (buckets && ((rc = cz_json_get_int64(&c, buckets, "$.buckets", "size", true, 1, INT64_MAX,
                                            &cl->bucket_size)) != CZ_OK ||
                    (rc = cz_json_get_int64(&c, buckets, "$.buckets", "align", false, 1, INT32_MAX,
                                            &cl->bucket_align)) != CZ_OK))
        goto done;
    /* dp*tp fits in 64 bits; when it exceeds INT_MAX it cannot equal gpus anyway, and below
     * that the product with pp fits too. */
    int64_t dp_tp = (int64_t)cl->dp * cl->tp;
    if (dp_tp > INT_MAX || dp_tp * cl->pp != cl->gpus) {
        if (dp_tp > INT_MAX)
            rc = cz_json_fail(&c, "$", "dp*tp*pp = %d*%d*%d overflows; expected gpus = %d", cl->dp,
                              cl->tp, cl->pp, cl->gpus);
        else
            rc = cz_json_fail(&c, "$", "dp*tp*pp = %d*%d*%d = %" PRId64 " does not match gpus = %d",
                              cl->dp, cl->tp, cl->pp, dp_tp * cl->pp, cl->gpus);
        goto done;
    }
    cl->name = cz_strdup(name);
    cl->source = cz_strdup(path);
    cl->device.name = cz_strdup(dev_name);
    if (!cl->name || !cl->source || !cl->device.name) {
        rc = cz_error_set(err, CZ_ENOMEM, "%s: out of memory", path);
        goto done;
    }
    memcpy(cl->sha256, sha, sizeof sha);
    *out = cl;
    cl = NULL;
done:
    cz_cluster_free(cl);
    json_decref(root);
    return rc;
}
