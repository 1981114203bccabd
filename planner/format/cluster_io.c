/* Loading a cluster shape (canzona.cluster/1). */
#include "format_internal.h"

#include <inttypes.h>
#include <limits.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* Writes the sizes given on the command line into the cluster's JSON before it is read, so that
 * every check and the content hash apply to the cluster actually planned for (the hash equals
 * that of a file with these values written in). DP, when not given, is derived as Megatron-LM
 * derives it: GPUs / (TP x PP). */
static int apply_sizes(const cz_json_ctx *c, json_t *root, const cz_cluster_sizes *z)
{
    int gpus = 0, dp = 0, tp = 0, pp = 0, gpn = 0, rc;
    if ((rc = cz__json_get_int(c, root, "$", "gpus", true, 1, INT_MAX, &gpus)) != CZ_OK ||
        (rc = cz__json_get_int(c, root, "$", "dp", true, 1, INT_MAX, &dp)) != CZ_OK ||
        (rc = cz__json_get_int(c, root, "$", "tp", true, 1, INT_MAX, &tp)) != CZ_OK ||
        (rc = cz__json_get_int(c, root, "$", "pp", true, 1, INT_MAX, &pp)) != CZ_OK ||
        (rc = cz__json_get_int(c, root, "$", "gpus_per_node", true, 1, INT_MAX, &gpn)) != CZ_OK)
        return rc;
    if (z->gpus_per_node > 0)
        gpn = z->gpus_per_node;
    if (z->tp > 0)
        tp = z->tp;
    if (z->pp > 0)
        pp = z->pp;
    int64_t target = gpus, model = (int64_t)tp * pp;
    const char *whence = "the cluster's gpus";
    if (model > INT_MAX)
        return cz__error_set(c->err, CZ_EINVALID,
                             "%s: TP size %d x PP size %d is more GPUs than supported", c->file, tp,
                             pp);
    if (z->nodes > 0) {
        target = (int64_t)z->nodes * gpn;
        whence = "nodes x GPUs per node";
    } else if (z->dp > 0) {
        target = (int64_t)z->dp * model;
        whence = "DP x TP x PP";
    }
    if (target > INT_MAX)
        return cz__error_set(c->err, CZ_EINVALID,
                             "%s: the sizes given make %" PRId64 " GPUs (%s), more than supported",
                             c->file, target, whence);
    if (z->dp > 0) {
        if ((int64_t)z->dp * model != target)
            return cz__error_set(c->err, CZ_EINVALID,
                                 "%s: DP size %d x TP size %d x PP size %d = %" PRId64
                                 " GPUs, but %d nodes x %d GPUs per node = %" PRId64,
                                 c->file, z->dp, tp, pp, (int64_t)z->dp * model, z->nodes, gpn,
                                 target);
        dp = z->dp;
    } else {
        if (target % model)
            return cz__error_set(c->err, CZ_EINVALID,
                                 "%s: TP size %d x PP size %d = %" PRId64
                                 " does not divide the %" PRId64
                                 " GPUs (%s), so no DP size fits; give a TP and PP size that "
                                 "divide it, or the DP size",
                                 c->file, tp, pp, model, target, whence);
        dp = (int)(target / model);
    }
    if (z->bucket_size != 0) {
        /* Megatron's default written out, since a "buckets" object must give a size. */
        int64_t size = z->bucket_size > 0
                           ? z->bucket_size
                           : ((int64_t)dp * 1000000 > 40000000 ? (int64_t)dp * 1000000 : 40000000);
        json_t *b = json_object_get(root, "buckets");
        if (!json_is_object(b)) {
            if (b)
                return cz__json_fail(c, "$.buckets", "expected an object");
            b = json_object();
            if (!b || json_object_set_new(root, "buckets", b))
                return cz__error_set(c->err, CZ_ENOMEM, "%s: out of memory", c->file);
        }
        if (json_object_set_new(b, "size", json_integer(size)))
            return cz__error_set(c->err, CZ_ENOMEM, "%s: out of memory", c->file);
    }
    /* The expert sizes are written only when given and not what the file already means: a
     * file without them keeps Megatron-Core's defaults (EP 1, ETP = TP) and its hash when the
     * command line asks for just those. */
    bool ep_set = json_object_get(root, "ep") || (z->ep > 0 && z->ep != 1);
    bool etp_set = json_object_get(root, "etp") || (z->etp > 0 && z->etp != tp);
    if ((z->ep > 0 && ep_set && json_object_set_new(root, "ep", json_integer(z->ep))) ||
        (z->etp > 0 && etp_set && json_object_set_new(root, "etp", json_integer(z->etp))))
        return cz__error_set(c->err, CZ_ENOMEM, "%s: out of memory", c->file);
    if (json_object_set_new(root, "gpus", json_integer(target)) ||
        json_object_set_new(root, "dp", json_integer(dp)) ||
        json_object_set_new(root, "tp", json_integer(tp)) ||
        json_object_set_new(root, "pp", json_integer(pp)) ||
        json_object_set_new(root, "gpus_per_node", json_integer(gpn)))
        return cz__error_set(c->err, CZ_ENOMEM, "%s: out of memory", c->file);
    return CZ_OK;
}

static bool sizes_given(const cz_cluster_sizes *z)
{
    return z && (z->dp > 0 || z->tp > 0 || z->pp > 0 || z->nodes > 0 || z->gpus_per_node > 0 ||
                 z->bucket_size != 0 || z->ep > 0 || z->etp > 0);
}

static int cluster_from_json(cz_cluster **out, json_t *root, const char *sha_in, const char *path,
                             const cz_cluster_sizes *sizes, cz_error *err);

int cz_cluster_load(cz_cluster **out, const char *path, cz_error *err)
{
    return cz__cluster_load_sized(out, path, NULL, err);
}

int cz__cluster_load_sized(cz_cluster **out, const char *path, const cz_cluster_sizes *sizes,
                           cz_error *err)
{
    json_t *root = NULL;
    char sha[65];
    int rc;
    *out = NULL;
    if ((rc = cz__json_load_file(&root, sha, path, err)) != CZ_OK)
        goto done;
    rc = cluster_from_json(out, root, sha, path, sizes, err);
done:
    json_decref(root);
    return rc;
}

int cz_cluster_parse(cz_cluster **out, const char *json_text, const char *name, cz_error *err)
{
    json_error_t jerr;
    char sha[65];
    int rc;
    if (!out || !json_text)
        return cz__error_set(err, CZ_EINVALID, "cz_cluster_parse: out and json_text are required");
    *out = NULL;
    if (!name)
        name = "<cluster text>";
    /* The same parse rules as a file's (duplicate keys refused), and the same hash: the
     * canonical content's, which a plan records whatever the text's layout. */
    json_t *root = json_loads(json_text, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return cz__error_set(err, CZ_EPARSE, "%s:%d:%d: invalid JSON: %s", name, jerr.line,
                             jerr.column, jerr.text);
    if ((rc = cz__json_canonical_sha256(root, sha, err)) != CZ_OK)
        goto done;
    rc = cluster_from_json(out, root, sha, name, NULL, err);
done:
    json_decref(root);
    return rc;
}

/* A cluster from its JSON (a file's or a text's) and the hash of its content. */
static int cluster_from_json(cz_cluster **out, json_t *root, const char *sha_in, const char *path,
                             const cz_cluster_sizes *sizes, cz_error *err)
{
    static const char *const top_keys[] = {
        "schema", "name", "description",   "gpus",   "dp",    "tp",      "pp",
        "ep",     "etp",  "gpus_per_node", "device", "links", "buckets", NULL};
    static const char *const device_keys[] = {"name",       "matmul_tflops", "mem_gbps",
                                              "memory_gib", "kind",          NULL};
    static const char *const kinds[] = {"H100", "H200", "B200", "GB300", NULL};
    static const char *const link_keys[] = {"intra_node_gbps", "inter_node_gbps", "latency_us",
                                            NULL};
    static const char *const bucket_keys[] = {"size", "align", NULL};
    cz_json_ctx c = {path, err};
    cz_cluster *cl = NULL;
    const json_t *device, *links, *buckets = NULL;
    const char *name = NULL, *desc = NULL, *dev_name = NULL;
    char sha[65];
    int rc;

    *out = NULL;
    memcpy(sha, sha_in, sizeof sha);
    cl = calloc(1, sizeof *cl);
    if (!cl)
        return cz__error_set(err, CZ_ENOMEM, "%s: out of memory", path);
    cl->bucket_align = 64;
    if (sizes_given(sizes) && ((rc = cz__json_check_schema(&c, root, CZ_CLUSTER_SCHEMA)) != CZ_OK ||
                               (rc = apply_sizes(&c, root, sizes)) != CZ_OK ||
                               (rc = cz__json_canonical_sha256(root, sha, err)) != CZ_OK))
        goto done;
    if ((rc = cz__json_check_schema(&c, root, CZ_CLUSTER_SCHEMA)) != CZ_OK ||
        (rc = cz__json_check_object(&c, root, "$", top_keys)) != CZ_OK ||
        (rc = cz__json_get_string(&c, root, "$", "name", true, &name)) != CZ_OK ||
        (rc = cz__json_get_string(&c, root, "$", "description", false, &desc)) != CZ_OK ||
        (rc = cz__json_get_int(&c, root, "$", "gpus", true, 1, INT_MAX, &cl->gpus)) != CZ_OK ||
        (rc = cz__json_get_int(&c, root, "$", "dp", true, 1, INT_MAX, &cl->dp)) != CZ_OK ||
        (rc = cz__json_get_int(&c, root, "$", "tp", true, 1, INT_MAX, &cl->tp)) != CZ_OK ||
        (rc = cz__json_get_int(&c, root, "$", "pp", true, 1, INT_MAX, &cl->pp)) != CZ_OK ||
        (rc = cz__json_get_int(&c, root, "$", "gpus_per_node", true, 1, INT_MAX,
                               &cl->gpus_per_node)) != CZ_OK)
        goto done;
    /* Absent: Megatron-Core's defaults, expert_model_parallel_size 1 and
     * expert_tensor_parallel_size = tensor_model_parallel_size. */
    cl->ep = 1;
    cl->etp = cl->tp;
    if ((rc = cz__json_get_int(&c, root, "$", "ep", false, 1, INT_MAX, &cl->ep)) != CZ_OK ||
        (rc = cz__json_get_int(&c, root, "$", "etp", false, 1, INT_MAX, &cl->etp)) != CZ_OK)
        goto done;
    if ((rc = cz__json_get_object(&c, root, "$", "device", true, device_keys, &device)) != CZ_OK ||
        (rc = cz__json_get_string(&c, device, "$.device", "name", true, &dev_name)) != CZ_OK ||
        (rc = cz__json_get_double(&c, device, "$.device", "matmul_tflops", true, 0, true,
                                  &cl->device.matmul_tflops)) != CZ_OK ||
        (rc = cz__json_get_double(&c, device, "$.device", "mem_gbps", true, 0, true,
                                  &cl->device.mem_gbps)) != CZ_OK ||
        (rc = cz__json_get_double(&c, device, "$.device", "memory_gib", true, 0, true,
                                  &cl->device.memory_gib)) != CZ_OK)
        goto done;
    /* The device model's kind (docs/FORMATS.md section 2.2): absent keeps the flat model. */
    int kind = -1;
    if ((rc = cz__json_get_enum(&c, device, "$.device", "kind", false, kinds, &kind)) != CZ_OK)
        goto done;
    cl->device.kind = kind < 0 ? CZ_DEVICE_KIND_NONE : (cz_device_kind)(kind + 1);
    cz__device_kind_costs(cl->device.kind, cl->device.matmul_tflops, &cl->device.costs);
    if ((rc = cz__json_get_object(&c, root, "$", "links", true, link_keys, &links)) != CZ_OK ||
        (rc = cz__json_get_double(&c, links, "$.links", "intra_node_gbps", true, 0, true,
                                  &cl->links.intra_node_gbps)) != CZ_OK ||
        (rc = cz__json_get_double(&c, links, "$.links", "inter_node_gbps", true, 0, true,
                                  &cl->links.inter_node_gbps)) != CZ_OK ||
        (rc = cz__json_get_double(&c, links, "$.links", "latency_us", true, 0, false,
                                  &cl->links.latency_us)) != CZ_OK)
        goto done;
    if ((rc = cz__json_get_object(&c, root, "$", "buckets", false, bucket_keys, &buckets)) != CZ_OK)
        goto done;
    if (buckets && ((rc = cz__json_get_int64(&c, buckets, "$.buckets", "size", true, 1, INT64_MAX,
                                             &cl->bucket_size)) != CZ_OK ||
                    (rc = cz__json_get_int64(&c, buckets, "$.buckets", "align", false, 1, INT32_MAX,
                                             &cl->bucket_align)) != CZ_OK))
        goto done;
    /* dp*tp fits in 64 bits; when it exceeds INT_MAX it cannot equal gpus anyway, and below
     * that the product with pp fits too. */
    int64_t dp_tp = (int64_t)cl->dp * cl->tp;
    if (dp_tp > INT_MAX || dp_tp * cl->pp != cl->gpus) {
        if (dp_tp > INT_MAX)
            rc = cz__json_fail(&c, "$", "dp*tp*pp = %d*%d*%d overflows; expected gpus = %d", cl->dp,
                               cl->tp, cl->pp, cl->gpus);
        else
            rc =
                cz__json_fail(&c, "$", "dp*tp*pp = %d*%d*%d = %" PRId64 " does not match gpus = %d",
                              cl->dp, cl->tp, cl->pp, dp_tp * cl->pp, cl->gpus);
        goto done;
    }
    if ((rc = cz__megatron_check_expert_grid(path, cl->tp, cl->dp, cl->pp, cl->ep, cl->etp, err)) !=
        CZ_OK)
        goto done;
    cl->name = cz__strdup(name);
    cl->source = cz__strdup(path);
    cl->device.name = cz__strdup(dev_name);
    if (!cl->name || !cl->source || !cl->device.name) {
        rc = cz__error_set(err, CZ_ENOMEM, "%s: out of memory", path);
        goto done;
    }
    memcpy(cl->sha256, sha, sizeof sha);
    *out = cl;
    cl = NULL;
done:
    cz_cluster_free(cl);
    return rc;
}
