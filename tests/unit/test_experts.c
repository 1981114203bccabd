/*
 * Expert groups (Megatron-Core's expert parallelism, issue 27's planner side):
 *  - the rank layout: the groups Megatron-Core's RankGenerator forms (TP, DP, PP on the dense
 *    grid; ETP, EP, expert-DP on the expert grid) on small cases checked by hand, including the
 *    docstring example of initialize_model_parallel;
 *  - the validity rules, each violation refused with the numbers and the rule named, and valid
 *    layouts accepted;
 *  - the planner's expert buffers on random MoE models under random grids: every expert owned
 *    once within its expert-DP group, in its EP rank's buffer, inside its owner's range, each
 *    expert matrix scheduled once over the ETP slots of its expert rank, the buffers covered,
 *    the structural check passed, determinism; a plan without experts under EP unchanged;
 *  - the structural check's refusal to a consumer that does not set expert_groups.
 */
#include "cz_analysis.h"
#include "cz_test_util.h"

#include <check.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- the rank layout ---------------------------------------------------------------------- */

static void check_group(const cz_grid *g, cz_group_kind kind, int rank, const int *want, int n)
{
    int got[64];
    ck_assert_int_eq(cz__megatron_group(g, kind, rank, got), n);
    for (int i = 0; i < n; i++)
        ck_assert_msg(got[i] == want[i], "group %d of rank %d: member %d is %d, want %d", (int)kind,
                      rank, i, got[i], want[i]);
}

/* initialize_model_parallel's docstring: 16 GPUs, TP 2, PP 4 (so DP 2): data-parallel groups
 * [g0, g2], [g1, g3], [g4, g6], ..., tensor groups [g0, g1], [g2, g3], ..., pipeline groups
 * [g0, g4, g8, g12], [g1, g5, g9, g13], ... */
START_TEST(test_megatron_docstring_layout)
{
    cz_grid g = {.tp = 2, .dp = 2, .pp = 4, .ep = 1, .etp = 2};
    check_group(&g, CZ_GROUP_DP, 0, (int[]){0, 2}, 2);
    check_group(&g, CZ_GROUP_DP, 5, (int[]){5, 7}, 2);
    check_group(&g, CZ_GROUP_DP, 13, (int[]){13, 15}, 2);
    check_group(&g, CZ_GROUP_TP, 2, (int[]){2, 3}, 2);
    check_group(&g, CZ_GROUP_TP, 15, (int[]){14, 15}, 2);
    check_group(&g, CZ_GROUP_PP, 0, (int[]){0, 4, 8, 12}, 4);
    check_group(&g, CZ_GROUP_PP, 6, (int[]){2, 6, 10, 14}, 4);
    /* EP 1 and ETP = TP: the expert grid is the dense one. */
    check_group(&g, CZ_GROUP_ETP, 2, (int[]){2, 3}, 2);
    check_group(&g, CZ_GROUP_EDP, 5, (int[]){5, 7}, 2);
    check_group(&g, CZ_GROUP_EP, 5, (int[]){5}, 1);
}
END_TEST

/* The expert grid by hand, from RankGenerator(tp=etp, ep, dp=world / (etp ep pp), pp, order
 * "tp-cp-ep-dp-pp"): global rank = etp_rank + etp (ep_rank + ep (edp_rank + edp stage)). */
START_TEST(test_expert_grid_layout)
{
    /* 16 GPUs, TP 2, PP 2 (DP 4), EP 2, ETP 1: expert-DP 4. */
    cz_grid g = {.tp = 2, .dp = 4, .pp = 2, .ep = 2, .etp = 1};
    ck_assert_int_eq(cz_grid_edp(&g), 4);
    check_group(&g, CZ_GROUP_EP, 0, (int[]){0, 1}, 2);
    check_group(&g, CZ_GROUP_EP, 7, (int[]){6, 7}, 2);
    check_group(&g, CZ_GROUP_EDP, 0, (int[]){0, 2, 4, 6}, 4);
    check_group(&g, CZ_GROUP_EDP, 9, (int[]){9, 11, 13, 15}, 4);
    check_group(&g, CZ_GROUP_ETP, 9, (int[]){9}, 1);
    /* the pipeline groups are the same in both grids */
    check_group(&g, CZ_GROUP_PP, 3, (int[]){3, 11}, 2);
    /* 8 GPUs, TP 4 (DP 2), EP 2, ETP 2: expert-DP 2. */
    cz_grid h = {.tp = 4, .dp = 2, .pp = 1, .ep = 2, .etp = 2};
    check_group(&h, CZ_GROUP_ETP, 5, (int[]){4, 5}, 2);
    check_group(&h, CZ_GROUP_EP, 1, (int[]){1, 3}, 2);
    check_group(&h, CZ_GROUP_EDP, 1, (int[]){1, 5}, 2);
    check_group(&h, CZ_GROUP_TP, 5, (int[]){4, 5, 6, 7}, 4);
    check_group(&h, CZ_GROUP_DP, 5, (int[]){1, 5}, 2);
    /* A grid whose ETP x EP does not divide TP x DP has no groups. */
    cz_grid bad = {.tp = 4, .dp = 1, .pp = 1, .ep = 3, .etp = 1};
    int out[16];
    ck_assert_int_eq(cz__megatron_group(&bad, CZ_GROUP_EP, 0, out), 0);
}
END_TEST

/* The plan's expert rank order matches the grid: expert rank x of a stage holds the GPUs
 * x * etp .. x * etp + etp - 1, x = edp_rank * ep + ep_rank. */
START_TEST(test_plan_rank_order)
{
    cz_plan p = {.dp = 4, .tp = 2, .pp = 2, .ep = 2, .etp = 1, .edp = 4};
    cz_grid g = {.tp = 2, .dp = 4, .pp = 2, .ep = 2, .etp = 1};
    for (int gpu = 0; gpu < 16; gpu++) {
        int etp_rank = -1, ep_group[8], edp_group[8];
        size_t x = cz_plan_gpu_expert_rank(&p, (size_t)gpu, &etp_rank);
        int stage = gpu / 8, local = gpu % 8, e = local % 2, d = local / 2;
        ck_assert_uint_eq(x, cz_plan_expert_rank(&p, stage, e, d));
        ck_assert_int_eq(etp_rank, 0);
        /* its EP group is the GPUs of the other EP ranks with the same expert-DP rank */
        ck_assert_int_eq(cz__megatron_group(&g, CZ_GROUP_EP, gpu, ep_group), 2);
        ck_assert_int_eq(ep_group[e], gpu);
        ck_assert_int_eq(cz__megatron_group(&g, CZ_GROUP_EDP, gpu, edp_group), 4);
        ck_assert_int_eq(edp_group[d], gpu);
    }
}
END_TEST

/* ---- the rules ---------------------------------------------------------------------------- */

static cz_model *moe_model(int experts, int layers, int with_bias)
{
    cz_model *m = czt_model_new("moe", CZ_DTYPE_BF16, layers);
    char name[128];
    czt_model_add(m, "embedding.word_embeddings.weight", 64, 32, 0, CZ_KIND_ELEMENTWISE, -1);
    for (int l = 0; l < layers; l++) {
        snprintf(name, sizeof name, "decoder.layers.%d.self_attention.linear_qkv.weight", l);
        czt_model_add(m, name, 96, 32, 0, CZ_KIND_MATRIX, l);
        snprintf(name, sizeof name, "decoder.layers.%d.mlp.router.weight", l);
        czt_model_add(m, name, experts, 32, -1, CZ_KIND_ELEMENTWISE, l);
        for (int e = 0; e < experts; e++) {
            snprintf(name, sizeof name,
                     "decoder.layers.%d.mlp.experts.local_experts.%d.linear_fc1.weight", l, e);
            czt_model_add(m, name, 32, 32, 0, CZ_KIND_MATRIX, l);
            snprintf(name, sizeof name,
                     "decoder.layers.%d.mlp.experts.local_experts.%d.linear_fc2.weight", l, e);
            czt_model_add(m, name, 32, 16, 1, CZ_KIND_MATRIX, l);
            if (with_bias) {
                snprintf(name, sizeof name,
                         "decoder.layers.%d.mlp.experts.local_experts.%d.linear_fc2.bias", l, e);
                czt_model_add(m, name, 32, 0, -1, CZ_KIND_ELEMENTWISE, l);
            }
        }
        snprintf(name, sizeof name, "decoder.layers.%d.mlp.shared_experts.linear_fc1.weight", l);
        czt_model_add(m, name, 64, 32, 0, CZ_KIND_MATRIX, l);
    }
    czt_model_add(m, "output_layer.weight", 64, 32, 0, CZ_KIND_ELEMENTWISE, -1);
    return m;
}

static cz_cluster *grid_cluster(int dp, int tp, int pp, int ep, int etp)
{
    cz_cluster *c = czt_cluster_new(dp, tp, pp);
    c->ep = ep;
    c->etp = etp;
    return c;
}

/* Every violation refused with its numbers and the rule; a valid layout accepted. */
START_TEST(test_rules_refused_with_the_rule)
{
    cz_error err;
    /* The expert grid: ETP x EP x PP must divide the world. */
    ck_assert_int_eq(cz__megatron_check_expert_grid("c.json", 4, 16, 1, 3, 4, &err), CZ_EINVALID);
    ck_assert_msg(strstr(err.message, "ETP 4 x EP 3 x PP 1 = 12 does not divide the 64 GPUs") &&
                      strstr(err.message, "initialize_model_parallel"),
                  "%s", err.message);
    ck_assert_int_eq(cz__megatron_check_expert_grid("c.json", 8, 128, 1, 64, 1, &err), CZ_OK);
    ck_assert_int_eq(cz__megatron_check_expert_grid("c.json", 1, 128, 16, 64, 1, &err), CZ_OK);
    ck_assert_int_eq(cz__megatron_check_expert_grid("c.json", 2, 4, 1, 4, 4, &err), CZ_EINVALID);

    /* Experts divisible by EP (60 experts over EP 8). */
    cz_model *m = moe_model(60, 2, 0);
    cz_cluster *c = grid_cluster(16, 1, 1, 8, 1);
    ck_assert_int_eq(cz__model_check_experts(m, c, &err), CZ_EINVALID);
    ck_assert_msg(strstr(err.message, "60 experts") && strstr(err.message, "EP 8") &&
                      strstr(err.message, "num_moe_experts % ep_size == 0") &&
                      strstr(err.message, "1, 2, 3, 4, 5, 6, 10, 12, 15, 20, 30, 60"),
                  "%s", err.message);
    cz_plan *plan = NULL;
    cz_settings s;
    cz_settings_init(&s);
    ck_assert_int_eq(cz_plan_build(&plan, m, c, &s, &err), CZ_EINVALID);
    ck_assert_ptr_null(plan);
    c->ep = 4; /* 60 / 4 = 15 experts per EP rank */
    ck_assert_int_eq(cz__model_check_experts(m, c, &err), CZ_OK);
    cz_cluster_free(c);
    cz_model_free(m);

    /* EP > 1 for a dense model. */
    m = czt_model_new("dense", CZ_DTYPE_BF16, 1);
    czt_model_add(m, "decoder.layers.0.mlp.linear_fc1.weight", 32, 32, 0, CZ_KIND_MATRIX, 0);
    c = grid_cluster(4, 1, 1, 2, 1);
    ck_assert_int_eq(cz__model_check_experts(m, c, &err), CZ_EINVALID);
    ck_assert_msg(strstr(err.message, "EP 2") && strstr(err.message, "no expert parameters"), "%s",
                  err.message);
    cz_cluster_free(c);
    cz_model_free(m);

    /* An expert bias with ETP > 1 (also at EP 1 with ETP = TP: Megatron-Core's rule holds for
     * every MoE model). */
    m = moe_model(4, 1, 1);
    c = grid_cluster(2, 2, 1, 1, 2);
    ck_assert_int_eq(cz__model_check_experts(m, c, &err), CZ_EINVALID);
    ck_assert_msg(strstr(err.message, "bias") && strstr(err.message, "ETP==1"), "%s", err.message);
    c->ep = 2;
    ck_assert_int_eq(cz__model_check_experts(m, c, &err), CZ_EINVALID);
    c->etp = 1;
    ck_assert_int_eq(cz__model_check_experts(m, c, &err), CZ_OK);
    cz_cluster_free(c);
    cz_model_free(m);

    /* A layer whose expert numbers have a gap. */
    m = moe_model(4, 1, 0);
    free(m->params[5].name); /* expert 1's linear_fc1 */
    m->params[5].name =
        cz__strdup("decoder.layers.0.mlp.experts.local_experts.7.linear_fc1.weight");
    c = grid_cluster(4, 1, 1, 2, 1);
    ck_assert_int_eq(cz__model_check_experts(m, c, &err), CZ_EINVALID);
    ck_assert_msg(strstr(err.message, "numbered up to 7 but expert 4 has no parameter"), "%s",
                  err.message);
    cz_cluster_free(c);
    cz_model_free(m);
}
END_TEST

/* The cluster file: ep and etp read (absent: 1 and TP), the grid rule checked at load, and the
 * command line's sizes written in only where they differ from the defaults. */
START_TEST(test_cluster_file)
{
    char dir[] = "/tmp/cz_experts_XXXXXX", path[256], p2[256];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/c.json", dir);
    FILE *f = fopen(path, "w");
    fprintf(f, "{\"schema\": \"canzona.cluster/1\", \"name\": \"c\", \"gpus\": 16, \"dp\": 4, "
               "\"tp\": 4, \"pp\": 1, \"gpus_per_node\": 8, \"device\": {\"name\": \"d\", "
               "\"matmul_tflops\": 1.0, \"mem_gbps\": 1.0, \"memory_gib\": 80.0}, \"links\": "
               "{\"intra_node_gbps\": 1.0, \"inter_node_gbps\": 1.0, \"latency_us\": 1.0}}");
    fclose(f);
    cz_cluster *c = NULL, *d = NULL;
    cz_error err;
    ck_assert_int_eq(cz_cluster_load(&c, path, &err), CZ_OK);
    ck_assert_int_eq(c->ep, 1);
    ck_assert_int_eq(c->etp, 4);
    /* --ep-size 1 and --etp-size equal to TP change nothing, the hash included. */
    cz_cluster_sizes z = {.ep = 1, .etp = 4};
    ck_assert_int_eq(cz__cluster_load_sized(&d, path, &z, &err), CZ_OK);
    ck_assert_str_eq(c->sha256, d->sha256);
    cz_cluster_free(d);
    z = (cz_cluster_sizes){.ep = 4, .etp = 1};
    ck_assert_int_eq(cz__cluster_load_sized(&d, path, &z, &err), CZ_OK);
    ck_assert_int_eq(d->ep, 4);
    ck_assert_int_eq(d->etp, 1);
    ck_assert_str_ne(c->sha256, d->sha256);
    cz_cluster_free(d);
    z = (cz_cluster_sizes){.ep = 3, .etp = 2};
    ck_assert_int_eq(cz__cluster_load_sized(&d, path, &z, &err), CZ_EINVALID);
    ck_assert_msg(strstr(err.message, "ETP 2 x EP 3 x PP 1 = 6 does not divide the 16 GPUs"), "%s",
                  err.message);
    z = (cz_cluster_sizes){.ep = 4, .etp = 8};
    ck_assert_int_eq(cz__cluster_load_sized(&d, path, &z, &err), CZ_EINVALID);
    ck_assert_msg(strstr(err.message, "ETP 8 x EP 4 x PP 1 = 32"), "%s", err.message);
    /* ETP x EP need not relate to TP: 4 x 4 covers the 16 ranks of TP 4 x DP 4 */
    z = (cz_cluster_sizes){.ep = 4, .etp = 4};
    ck_assert_int_eq(cz__cluster_load_sized(&d, path, &z, &err), CZ_OK);
    cz_cluster_free(d);
    cz_cluster_free(c);
    snprintf(p2, sizeof p2, "%s/bad.json", dir);
    f = fopen(p2, "w");
    fprintf(f, "{\"schema\": \"canzona.cluster/1\", \"name\": \"c\", \"gpus\": 16, \"dp\": 4, "
               "\"tp\": 4, \"pp\": 1, \"ep\": 0, \"gpus_per_node\": 8, \"device\": {\"name\": "
               "\"d\", \"matmul_tflops\": 1.0, \"mem_gbps\": 1.0, \"memory_gib\": 80.0}, "
               "\"links\": {\"intra_node_gbps\": 1.0, \"inter_node_gbps\": 1.0, \"latency_us\": "
               "1.0}}");
    fclose(f);
    ck_assert_int_eq(cz_cluster_load(&c, p2, &err), CZ_EINVALID);
    ck_assert_msg(strstr(err.message, "$.ep"), "%s", err.message);
    unlink(path);
    unlink(p2);
    rmdir(dir);
}
END_TEST

/* ---- the planner's expert buffers ---------------------------------------------------------- */

static cz_plan *build(const cz_model *m, const cz_cluster *c, const cz_settings *s)
{
    cz_plan *plan = NULL;
    cz_error err;
    cz_error_clear(&err);
    ck_assert_msg(cz_plan_build(&plan, m, c, s, &err) == CZ_OK, "%s", err.message);
    return plan;
}

static int structure_violations(const cz_plan *plan, int expert_groups, char *first, size_t n)
{
    cz_plan_checks c = {0};
    c.out = json_array();
    c.expert_groups = expert_groups;
    cz__plan_check_structure(&c, plan);
    int count = (int)json_array_size(c.out);
    if (count && first)
        snprintf(first, n, "%s: %s [%s]",
                 json_string_value(json_object_get(json_array_get(c.out, 0), "path")),
                 json_string_value(json_object_get(json_array_get(c.out, 0), "message")),
                 json_string_value(json_object_get(json_array_get(c.out, 0), "code")));
    json_decref(c.out);
    return count;
}

/* The properties of one plan with expert groups. */
static void check_expert_plan(const cz_plan *plan, int experts_per_layer, const char *ctx)
{
    ck_assert_msg(cz_plan_has_experts(plan), "%s: no expert groups", ctx);
    ck_assert_int_eq(plan->ep * plan->etp * plan->edp, plan->tp * plan->dp);
    int per = experts_per_layer / plan->ep;
    /* every expert in its EP rank's buffer, owned once within the expert-DP group, inside its
     * owner's range (atomic) */
    for (size_t i = 0; i < plan->nparams; i++) {
        const cz_plan_param *p = &plan->params[i];
        size_t len;
        long e;
        int is = cz__expert_of_name(p->def.name, &len, &e);
        ck_assert_msg(p->expert == is, "%s: '%s' expert flag %d", ctx, p->def.name, p->expert);
        const cz_plan_bucket *b = &plan->buckets[p->bucket];
        ck_assert_msg(b->expert == p->expert, "%s: '%s' in the wrong buffer", ctx, p->def.name);
        if (!is)
            continue;
        ck_assert_msg(p->ep_rank == e / per, "%s: expert %ld on EP rank %d", ctx, e, p->ep_rank);
        ck_assert_int_eq(b->ep_rank, p->ep_rank);
        if (plan->settings.dp == CZ_DP_EVEN) { /* ZeRO-1 slices: no whole owner */
            ck_assert_int_eq(p->dp_owner, -1);
            continue;
        }
        ck_assert_msg(p->dp_owner >= 0 && p->dp_owner < plan->edp, "%s: owner %d", ctx,
                      p->dp_owner);
        int tp_dim = p->def.tp_dim;
        if (tp_dim >= 0)
            ck_assert_int_eq(p->local_shape[tp_dim] * plan->etp, p->def.shape[tp_dim]);
        if (plan->settings.dp != CZ_DP_LAYERWISE) {
            ck_assert(p->offset >= b->ranges[2 * p->dp_owner]);
            ck_assert(p->offset + p->numel <= b->ranges[2 * p->dp_owner + 1]);
        }
    }
    /* the expert buffers' buckets covered by their expert-DP ranges */
    for (size_t k = 0; k < plan->nbuckets; k++) {
        const cz_plan_bucket *b = &plan->buckets[k];
        int n = cz_plan_bucket_nranks(plan, b);
        ck_assert_int_eq(b->size % n, 0);
        ck_assert_int_eq(b->ranges[0], 0);
        ck_assert_int_eq(b->ranges[2 * n - 1], b->size);
        for (int r = 0; r + 1 < n; r++)
            ck_assert_int_eq(b->ranges[2 * r + 1], b->ranges[2 * r + 2]);
    }
    /* each expert matrix scheduled exactly once, by its expert rank, over ETP slots */
    int *seen = calloc(plan->nparams, sizeof *seen);
    ck_assert_uint_eq(plan->nexpert_schedules,
                      (size_t)plan->pp * (size_t)plan->ep * (size_t)plan->edp);
    for (size_t k = 0; k < plan->nexpert_schedules; k++) {
        const cz_rank_schedule *rs = &plan->expert_schedules[k];
        ck_assert_uint_eq(k, cz_plan_expert_rank(plan, rs->stage, rs->ep_rank, rs->dp_rank));
        for (int g = 0; g < rs->ngroups; g++) {
            const cz_plan_group *gr = &rs->groups[g];
            ck_assert_int_eq(gr->nslots,
                             plan->etp == 1 || plan->settings.tp == CZ_TP_SC ? 1 : plan->etp);
            for (int t = 0; t < gr->ntasks; t++) {
                const cz_plan_param *p = &plan->params[gr->task_param[t]];
                ck_assert(p->expert && p->ep_rank == rs->ep_rank && p->stage == rs->stage);
                if (plan->settings.dp != CZ_DP_EVEN)
                    ck_assert_int_eq(p->dp_owner, rs->dp_rank);
                if (cz_group_task_block(gr, t) < 0)
                    seen[p->id]++;
            }
        }
    }
    for (size_t k = 0; k < plan->nschedules; k++)
        for (int g = 0; g < plan->schedules[k].ngroups; g++)
            for (int t = 0; t < plan->schedules[k].groups[g].ntasks; t++)
                ck_assert(!plan->params[plan->schedules[k].groups[g].task_param[t]].expert);
    for (size_t i = 0; i < plan->nparams; i++)
        if (plan->params[i].expert && plan->params[i].def.kind == CZ_KIND_MATRIX &&
            plan->settings.dp != CZ_DP_EVEN && !plan->settings.split_blocks)
            ck_assert_msg(seen[i] == 1, "%s: '%s' scheduled %d times", ctx,
                          plan->params[i].def.name, seen[i]);
    free(seen);
    char first[1024] = "";
    ck_assert_msg(structure_violations(plan, 1, first, sizeof first) == 0, "%s: %s", ctx, first);
}

static char *plan_text(const cz_plan *plan)
{
    char path[] = "/tmp/cz_experts_plan_XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    cz_error err;
    ck_assert_msg(cz_plan_write(plan, path, &err) == CZ_OK, "%s", err.message);
    FILE *f = fopen(path, "rb");
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    rewind(f);
    char *s = malloc((size_t)n + 1);
    ck_assert_uint_eq(fread(s, 1, (size_t)n, f), (size_t)n);
    s[n] = '\0';
    fclose(f);
    /* read back: the reader accepts it, its content hash matches, and it writes the same */
    cz_plan *back = NULL;
    ck_assert_msg(cz_plan_read(&back, path, &err) == CZ_OK, "%s", err.message);
    ck_assert_int_eq(back->content_hash_ok, 1);
    ck_assert_int_eq(back->schema_version, 3);
    ck_assert_msg(cz_plan_write(back, path, &err) == CZ_OK, "%s", err.message);
    cz_plan_free(back);
    f = fopen(path, "rb");
    char *t = malloc((size_t)n + 1);
    ck_assert_uint_eq(fread(t, 1, (size_t)n, f), (size_t)n);
    t[n] = '\0';
    fclose(f);
    ck_assert_msg(memcmp(s, t, (size_t)n) == 0, "a plan read back writes other bytes");
    free(t);
    unlink(path);
    return s;
}

START_TEST(test_random_expert_plans)
{
    static const int eps[] = {1, 2, 4, 8};
    static const int etps[] = {1, 2, 4};
    static const cz_dp_strategy dps[] = {CZ_DP_ALPHA, CZ_DP_ANCHORED, CZ_DP_LAYERWISE, CZ_DP_EVEN};
    uint64_t rng = 271828;
    int built = 0;
    for (int trial = 0; trial < 60; trial++) {
        int experts = 8 * czt_rand_int(&rng, 1, 4), layers = czt_rand_int(&rng, 1, 4);
        int tp = 1 << czt_rand_int(&rng, 0, 2), dp = 1 << czt_rand_int(&rng, 0, 3);
        int pp = czt_rand_int(&rng, 1, layers < 2 ? layers : 2);
        int ep = eps[czt_rand_int(&rng, 0, 3)], etp = etps[czt_rand_int(&rng, 0, 2)];
        if ((tp * dp) % (ep * etp) || (ep == 1 && etp == tp))
            continue;
        cz_model *m = moe_model(experts, layers, 0);
        cz_cluster *c = grid_cluster(dp, tp, pp, ep, etp);
        c->bucket_size = 4096 * czt_rand_int(&rng, 1, 8);
        cz_settings s;
        cz_settings_init(&s);
        s.dp = dps[trial % 4];
        s.tp = s.dp == CZ_DP_EVEN ? CZ_TP_SC : CZ_TP_ROLLBACK;
        if (trial % 7 == 3 && s.dp == CZ_DP_ALPHA)
            s.layout = CZ_LAYOUT_SPLIT;
        if (trial % 5 == 2 && s.dp == CZ_DP_ALPHA && etp > 1)
            s.coop = CZ_COOP_AUTO;
        char ctx[160];
        snprintf(ctx, sizeof ctx,
                 "trial %d: %d experts x %d layers, DP %d TP %d PP %d EP %d ETP %d, %s", trial,
                 experts, layers, dp, tp, pp, ep, etp, cz_dp_strategy_name(s.dp));
        cz_plan *a = build(m, c, &s), *b = build(m, c, &s);
        check_expert_plan(a, experts, ctx);
        char *ta = plan_text(a), *tb = plan_text(b);
        ck_assert_msg(strcmp(ta, tb) == 0, "%s: not deterministic", ctx);
        free(ta);
        free(tb);
        cz_plan_free(a);
        cz_plan_free(b);
        cz_model_free(m);
        cz_cluster_free(c);
        built++;
    }
    ck_assert_int_ge(built, 20);
}
END_TEST

/* A model with experts at EP 1 and ETP = TP keeps them in the dense buffer: the same plan as
 * a cluster that says nothing of experts. */
START_TEST(test_no_expert_groups_unchanged)
{
    cz_model *m = moe_model(8, 2, 0);
    cz_cluster *a = czt_cluster_new(4, 2, 1), *b = grid_cluster(4, 2, 1, 1, 2);
    cz_settings s;
    cz_settings_init(&s);
    cz_plan *pa = build(m, a, &s), *pb = build(m, b, &s);
    ck_assert(!cz_plan_has_experts(pa) && !cz_plan_has_experts(pb));
    ck_assert_ptr_null(pb->expert_schedules);
    for (size_t i = 0; i < pa->nparams; i++) {
        ck_assert_int_eq(pb->params[i].expert, 0);
        ck_assert_int_eq(pa->params[i].dp_owner, pb->params[i].dp_owner);
        ck_assert_int_eq(pa->params[i].offset, pb->params[i].offset);
    }
    ck_assert_double_eq(pa->metrics.tp_makespan, pb->metrics.tp_makespan);
    cz_plan_free(pa);
    cz_plan_free(pb);
    cz_cluster_free(a);
    cz_cluster_free(b);
    cz_model_free(m);
}
END_TEST

/* A consumer that does not set expert_groups (the executor today) is refused on the first
 * violation, before anything reads the expert buffers' ranges. */
START_TEST(test_consumer_without_expert_groups_refuses)
{
    cz_model *m = moe_model(8, 1, 0);
    cz_cluster *c = grid_cluster(4, 1, 1, 2, 1);
    cz_settings s;
    cz_settings_init(&s);
    cz_plan *plan = build(m, c, &s);
    char first[1024] = "";
    ck_assert_int_eq(structure_violations(plan, 0, first, sizeof first), 1);
    ck_assert_msg(strstr(first, "$.topology.ep") && strstr(first, "[topology.expert_groups]") &&
                      strstr(first, "EP 2, ETP 1, expert-DP 2"),
                  "%s", first);
    ck_assert_int_eq(structure_violations(plan, 1, first, sizeof first), 0);
    /* An expert moved to another EP rank breaks Megatron-Core's placement. */
    for (size_t i = 0; i < plan->nparams; i++)
        if (plan->params[i].expert) {
            plan->params[i].ep_rank = 1 - plan->params[i].ep_rank;
            break;
        }
    ck_assert_int_gt(structure_violations(plan, 1, first, sizeof first), 0);
    ck_assert_msg(strstr(first, "which Megatron-Core places on EP rank 0 of 2"), "%s", first);
    cz_plan_free(plan);
    cz_cluster_free(c);
    cz_model_free(m);
}
END_TEST

/* validate: a plan for another EP or ETP, and one without expert groups checked against a
 * cluster that gives them, are reported as topology violations. */
START_TEST(test_validate_another_ep)
{
    cz_model *m = moe_model(8, 1, 0);
    cz_cluster *c2 = grid_cluster(4, 1, 1, 2, 1), *c4 = grid_cluster(4, 1, 1, 4, 1);
    cz_cluster *c1 = czt_cluster_new(4, 1, 1);
    cz_settings s;
    cz_settings_init(&s);
    cz_plan *p2 = build(m, c2, &s), *p1 = build(m, c1, &s);
    json_t *v = NULL;
    cz_error err;
    const struct {
        const cz_plan *plan;
        const cz_cluster *cluster;
        const char *want;
    } cases[] = {{p2, c4, "made for EP 2 and ETP 1 but the cluster has EP 4 and ETP 1"},
                 {p1, c2, "the plan has no expert groups"},
                 {p2, c1, "the plan has expert groups (EP 2, ETP 1) but the cluster has EP 1"}};
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        ck_assert_int_ge(cz__plan_validate_json(cases[k].plan, m, cases[k].cluster, &v, &err), 0);
        int found = 0;
        for (size_t i = 0; i < json_array_size(v); i++) {
            json_t *o = json_array_get(v, i);
            if (!strcmp(json_string_value(json_object_get(o, "code")), "topology") &&
                strstr(json_string_value(json_object_get(o, "message")), cases[k].want))
                found = 1;
        }
        ck_assert_msg(found, "case %zu: no topology violation with '%s'", k, cases[k].want);
        json_decref(v);
    }
    ck_assert_int_ge(cz__plan_validate_json(p2, m, c2, &v, &err), 0);
    ck_assert_uint_eq(json_array_size(v), 0);
    json_decref(v);
    cz_plan_free(p2);
    cz_plan_free(p1);
    cz_cluster_free(c1);
    cz_cluster_free(c2);
    cz_cluster_free(c4);
    cz_model_free(m);
}
END_TEST

/* The solvers that walk only the dense buffer refuse expert groups with a message. */
START_TEST(test_unsupported_strategies)
{
    cz_model *m = moe_model(8, 1, 0);
    cz_cluster *c = grid_cluster(4, 1, 1, 2, 1);
    cz_settings s;
    cz_settings_init(&s);
    cz_plan *plan = NULL;
    cz_error err;
    s.dp = CZ_DP_TPAWARE;
    ck_assert_int_eq(cz_plan_build(&plan, m, c, &s, &err), CZ_EUNSUPPORTED);
    ck_assert_msg(strstr(err.message, "--dp tpaware with expert groups"), "%s", err.message);
    s.dp = CZ_DP_ALPHA;
    s.solver = CZ_SOLVER_ILP;
    ck_assert_int_eq(cz_plan_build(&plan, m, c, &s, &err), CZ_EUNSUPPORTED);
    ck_assert_msg(strstr(err.message, "--solver ilp with expert groups"), "%s", err.message);
    cz_cluster_free(c);
    cz_model_free(m);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("experts");
    TCase *layout = tcase_create("layout");
    tcase_add_test(layout, test_megatron_docstring_layout);
    tcase_add_test(layout, test_expert_grid_layout);
    tcase_add_test(layout, test_plan_rank_order);
    suite_add_tcase(s, layout);
    TCase *rules = tcase_create("rules");
    tcase_add_test(rules, test_rules_refused_with_the_rule);
    tcase_add_test(rules, test_cluster_file);
    tcase_add_test(rules, test_unsupported_strategies);
    suite_add_tcase(s, rules);
    TCase *planner = tcase_create("planner");
    tcase_set_timeout(planner, 120);
    tcase_add_test(planner, test_random_expert_plans);
    tcase_add_test(planner, test_no_expert_groups_unchanged);
    tcase_add_test(planner, test_consumer_without_expert_groups_refuses);
    tcase_add_test(planner, test_validate_another_ep);
    suite_add_tcase(s, planner);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
