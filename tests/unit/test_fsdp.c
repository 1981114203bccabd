/* The fully sharded layout (settings.layout fsdp): FSDP2's torch.chunk shard sizes, the plan
 * format's version 4 round trip, owners balanced to the atomic lower bound on a bundled model,
 * the structural rules and validate against a job that contradicts the plan. */
#include "cz_analysis.h"
#include "cz_test_util.h"

#include <check.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The sizes checked against torch 2.13's fully_shard (gloo, 4 ranks). */
START_TEST(chunk_rows)
{
    static const int64_t seven[] = {2, 2, 2, 1}, five[] = {2, 2, 1, 0}, two[] = {1, 1, 0, 0};
    for (int r = 0; r < 4; r++) {
        ck_assert_int_eq(cz__fsdp_rows(7, 4, r), seven[r]);
        ck_assert_int_eq(cz__fsdp_rows(5, 4, r), five[r]);
        ck_assert_int_eq(cz__fsdp_rows(2, 4, r), two[r]);
        ck_assert_int_eq(cz__fsdp_rows(8, 4, r), 2);
    }
    ck_assert_int_eq(cz__fsdp_chunk_rows(7, 4), 2);
    ck_assert_int_eq(cz__fsdp_chunk_rows(5, 4), 2);
    ck_assert_int_eq(cz__fsdp_chunk_rows(2, 4), 1);
    ck_assert_int_eq(cz__fsdp_chunk_rows(4096, 1), 4096);
    ck_assert(cz__fsdp_even(8, 4) && !cz__fsdp_even(7, 4) && !cz__fsdp_even(2, 4));
    ck_assert_int_eq(cz__fsdp_rows(7, 4, 4), 0); /* outside the ranks */
    ck_assert_int_eq(cz__fsdp_rows(0, 4, 0), 0);
    /* Every rank's rows add up to the parameter's, whatever the split. */
    for (int64_t rows = 1; rows < 40; rows++)
        for (int dp = 1; dp < 12; dp++) {
            int64_t sum = 0;
            for (int r = 0; r < dp; r++)
                sum += cz__fsdp_rows(rows, dp, r);
            ck_assert_int_eq(sum, rows);
        }
}
END_TEST

/* A small model: a matrix of 7 rows, one of 5, one of 2 (fewer than the 4 DP ranks), 1-D
 * parameters; planned fully sharded at DP 4 x TP 1. */
static cz_plan *small_plan(cz_model **m_out, cz_cluster **c_out)
{
    cz_model *m = czt_model_new("fsdp-small", CZ_DTYPE_FP32, 1);
    czt_model_add(m, "a.weight", 7, 64, -1, CZ_KIND_MATRIX, 0);
    czt_model_add(m, "b.weight", 5, 32, -1, CZ_KIND_MATRIX, 0);
    czt_model_add(m, "c.weight", 2, 16, -1, CZ_KIND_MATRIX, 0);
    czt_model_add(m, "d.weight", 64, 64, -1, CZ_KIND_MATRIX, 0);
    czt_model_add(m, "norm.weight", 64, 0, -1, CZ_KIND_ELEMENTWISE, 0);
    czt_model_add(m, "bias", 3, 0, -1, CZ_KIND_ELEMENTWISE, 0);
    cz_cluster *c = czt_cluster_new(4, 1, 1);
    cz_settings s;
    cz_settings_init(&s);
    s.layout = CZ_LAYOUT_FSDP;
    cz_plan *p = NULL;
    cz_error err;
    ck_assert_msg(cz_plan_build(&p, m, c, &s, &err) == CZ_OK, "%s", err.message);
    *m_out = m;
    *c_out = c;
    return p;
}

static size_t structure_violations(const cz_plan *p, const char *code, char **text)
{
    cz_plan_checks c = {0};
    c.out = json_array();
    cz__plan_check_structure(&c, p);
    size_t n = 0, i;
    json_t *v;
    json_array_foreach(c.out, i, v) n +=
        !code || strcmp(json_string_value(json_object_get(v, "code")), code) == 0;
    *text = json_dumps(c.out, JSON_COMPACT);
    json_decref(c.out);
    return n;
}

START_TEST(plan_shards_and_owners)
{
    cz_model *m;
    cz_cluster *c;
    cz_plan *p = small_plan(&m, &c);
    static const int64_t chunk[] = {2, 2, 1, 16, 16, 1};
    ck_assert_uint_eq(p->nbuckets, 0);
    ck_assert_uint_eq(p->nschedules, 1);
    for (size_t i = 0; i < p->nparams; i++) {
        const cz_plan_param *q = &p->params[i];
        ck_assert_int_eq(q->shard_rows, chunk[i]);
        if (q->def.kind == CZ_KIND_MATRIX) {
            ck_assert(q->owner >= 0 && q->owner < 4);
            ck_assert_int_eq(q->dp_owner, q->owner);
        } else {
            ck_assert_int_eq(q->owner, -1);
        }
    }
    /* Four matrices over four GPUs: each on a GPU of its own, so that the makespan is the
     * largest matrix plus at most all the elementwise work. */
    int seen[4] = {0};
    double largest = 0.0, ew = 0.0;
    for (size_t i = 0; i < p->nparams; i++) {
        const cz_plan_param *q = &p->params[i];
        if (q->def.kind == CZ_KIND_MATRIX) {
            ck_assert_int_eq(seen[q->owner]++, 0);
            largest = q->cost > largest ? q->cost : largest;
        } else {
            ew += q->cost;
        }
    }
    ck_assert(p->metrics.tp_makespan >= largest);
    ck_assert(p->metrics.tp_makespan <= (largest + ew) * (1 + 1e-12));
    char *text;
    ck_assert_msg(structure_violations(p, NULL, &text) == 0, "%s", text);
    free(text);
    cz_plan_free(p);
    cz_model_free(m);
    cz_cluster_free(c);
}
END_TEST

START_TEST(round_trip)
{
    char dir[256], a[300], b[300];
    ck_assert_ptr_nonnull(czt_tmpdir_make(dir, sizeof dir, "cz_fsdp"));
    snprintf(a, sizeof a, "%s/a.json", dir);
    snprintf(b, sizeof b, "%s/b.json", dir);
    cz_model *m;
    cz_cluster *c;
    cz_plan *p = small_plan(&m, &c), *q = NULL;
    cz_error err;
    ck_assert_msg(cz_plan_write(p, a, &err) == CZ_OK, "%s", err.message);
    ck_assert_msg(cz_plan_read(&q, a, &err) == CZ_OK, "%s", err.message);
    ck_assert_int_eq(q->schema_version, 4);
    ck_assert_int_eq(q->settings.layout, CZ_LAYOUT_FSDP);
    ck_assert_int_eq(q->content_hash_ok, 1);
    ck_assert_uint_eq(q->nbuckets, 0);
    ck_assert_uint_eq(q->nschedules, p->nschedules);
    for (size_t i = 0; i < p->nparams; i++) {
        ck_assert_int_eq(q->params[i].owner, p->params[i].owner);
        ck_assert_int_eq(q->params[i].dp_owner, p->params[i].dp_owner);
        ck_assert_int_eq(q->params[i].shard_rows, p->params[i].shard_rows);
    }
    ck_assert_int_eq(q->schedules[0].ngroups, p->schedules[0].ngroups);
    ck_assert_msg(cz_plan_write(q, b, &err) == CZ_OK, "%s", err.message);
    char *ta = czt_slurp(a, NULL), *tb = czt_slurp(b, NULL);
    ck_assert_ptr_nonnull(ta);
    ck_assert_ptr_nonnull(tb);
    ck_assert_str_eq(ta, tb);
    ck_assert_ptr_nonnull(strstr(ta, "\"schema\": \"" CZ_PLAN_SCHEMA_FSDP "\""));
    ck_assert_ptr_nonnull(strstr(ta, "\"fsdp_schedule\""));
    ck_assert_ptr_null(strstr(ta, "\"buckets\""));
    /* The metrics a reader recomputes are the ones written. */
    cz_plan_metrics keep = q->metrics;
    memset(&q->metrics, 0, sizeof q->metrics);
    ck_assert_msg(cz__plan_metrics_compute(q, c, &err) == CZ_OK, "%s", err.message);
    ck_assert(cz__close_rel(q->metrics.tp_makespan, keep.tp_makespan));
    ck_assert(cz__close_rel(q->metrics.lower_bound, keep.lower_bound));
    cz__plan_metrics_free(&keep);
    free(ta);
    free(tb);
    cz_plan_free(p);
    cz_plan_free(q);
    cz_model_free(m);
    cz_cluster_free(c);
    czt_tmpdir_remove(dir);
}
END_TEST

/* A plan edited by hand: each fully sharded rule names the parameter. */
START_TEST(structure_rules)
{
    cz_model *m;
    cz_cluster *c;
    cz_plan *p = small_plan(&m, &c);
    char *text;
    p->params[0].shard_rows = 7; /* one rank holding all of a's rows */
    ck_assert_uint_eq(structure_violations(p, "fsdp.shard_rows", &text), 1);
    ck_assert_ptr_nonnull(strstr(text, "'a.weight'"));
    ck_assert_ptr_nonnull(strstr(text, "ceil(7 / 4) = 2"));
    free(text);
    p->params[0].shard_rows = 2;
    p->params[0].owner = (p->params[0].owner + 1) % 4; /* not where the schedule hosts it */
    p->params[0].dp_owner = p->params[0].owner;
    ck_assert_uint_eq(structure_violations(p, "fsdp.schedule", &text), 1);
    ck_assert_ptr_nonnull(strstr(text, "but its owner is GPU"));
    free(text);
    p->params[4].owner = 0; /* an elementwise parameter with an owner */
    ck_assert_uint_ge(structure_violations(p, "fsdp.owner", &text), 1);
    ck_assert_ptr_nonnull(strstr(text, "'norm.weight' is elementwise"));
    free(text);
    cz_plan_free(p);
    cz_model_free(m);
    cz_cluster_free(c);
}
END_TEST

static size_t validate_count(const cz_plan *p, const cz_model *m, const cz_cluster *c,
                             const char *code, const char *needle)
{
    json_t *v = NULL;
    cz_error err;
    ck_assert_msg(cz__plan_validate_json(p, m, c, &v, &err) >= 0, "%s", err.message);
    size_t n = 0, i;
    json_t *e;
    json_array_foreach(v, i, e)
    {
        const char *msg = json_string_value(json_object_get(e, "message"));
        n += strcmp(json_string_value(json_object_get(e, "code")), code) == 0 &&
             (!needle || strstr(msg, needle));
    }
    json_decref(v);
    return n;
}

/* validate against the job: the DP size FSDP2 shards over, and each parameter's shards. */
START_TEST(validate_against_job)
{
    cz_model *m;
    cz_cluster *c;
    cz_plan *p = small_plan(&m, &c);
    ck_assert_uint_eq(validate_count(p, m, c, "fsdp.dp", NULL), 0);
    ck_assert_uint_eq(validate_count(p, m, c, "fsdp.shard_rows", NULL), 0);
    /* The same plan against a job of DP 3: d.weight's 64 rows were even over 4, not over 3. */
    c->dp = 3;
    c->gpus = 3;
    ck_assert_uint_eq(validate_count(p, m, c, "fsdp.dp", "cut for DP 4"), 1);
    ck_assert_uint_eq(validate_count(p, m, c, "fsdp.even", "'d.weight'"), 1);
    /* a.weight (7 rows: 2 per rank over 4, 3 over 3) is sharded differently. */
    ck_assert_uint_eq(validate_count(p, m, c, "fsdp.shard_rows", "'a.weight'"), 1);
    cz_plan_free(p);
    cz_model_free(m);
    cz_cluster_free(c);
}
END_TEST

/* The bundled Qwen3 32B at 64 GPUs (DP 8 x TP 8) and the 8B at 256 (DP 32 x TP 8): owners within
 * 1.05 of the atomic lower bound. */
START_TEST(balanced_on_bundled_models)
{
    const char *src = getenv("CZ_SOURCE_DIR");
    ck_assert_ptr_nonnull(src);
    static const struct {
        const char *model;
        int nodes;
    } jobs[] = {{"qwen3-32b", 8}, {"qwen3-8b", 32}};
    for (size_t j = 0; j < sizeof jobs / sizeof *jobs; j++) {
        char mp[512], cp[512];
        snprintf(mp, sizeof mp, "%s/plans/models/%s.json", src, jobs[j].model);
        snprintf(cp, sizeof cp, "%s/plans/clusters/h100-64-dp8-tp8.json", src);
        cz_model *m = NULL;
        cz_cluster *c = NULL;
        cz_plan *p = NULL;
        cz_error err;
        cz_cluster_sizes sizes = {0};
        sizes.nodes = jobs[j].nodes;
        sizes.tp = 8;
        ck_assert_msg(cz_model_load(&m, mp, &err) == CZ_OK, "%s", err.message);
        ck_assert_msg(cz__cluster_load_sized(&c, cp, &sizes, &err) == CZ_OK, "%s", err.message);
        ck_assert_int_eq(c->dp * c->tp, 8 * jobs[j].nodes);
        cz_settings s;
        cz_settings_init(&s);
        s.layout = CZ_LAYOUT_FSDP;
        ck_assert_msg(cz_plan_build(&p, m, c, &s, &err) == CZ_OK, "%s", err.message);
        ck_assert_msg(p->metrics.tp_makespan <= 1.05 * p->metrics.lower_bound,
                      "%s at %d GPUs: makespan %g, lower bound %g", jobs[j].model, c->gpus,
                      p->metrics.tp_makespan, p->metrics.lower_bound);
        char *text;
        ck_assert_msg(structure_violations(p, NULL, &text) == 0, "%s", text);
        free(text);
        cz_plan_free(p);
        cz_model_free(m);
        cz_cluster_free(c);
    }
}
END_TEST

START_TEST(settings_refused)
{
    cz_model *m = czt_model_new("fsdp-small", CZ_DTYPE_FP32, 1);
    czt_model_add(m, "a.weight", 8, 8, -1, CZ_KIND_MATRIX, 0);
    cz_cluster *c = czt_cluster_new(2, 1, 1);
    cz_settings s;
    cz_settings_init(&s);
    s.layout = CZ_LAYOUT_FSDP;
    s.dp = CZ_DP_ALPHA;
    cz_plan *p = NULL;
    cz_error err;
    ck_assert_int_eq(cz_plan_build(&p, m, c, &s, &err), CZ_EUNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(err.message, "--layout fsdp"));
    ck_assert_ptr_nonnull(strstr(err.message, "--dp alpha"));
    cz_model_free(m);
    cz_cluster_free(c);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("fsdp");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, chunk_rows);
    tcase_add_test(tc, plan_shards_and_owners);
    tcase_add_test(tc, round_trip);
    tcase_add_test(tc, structure_rules);
    tcase_add_test(tc, validate_against_job);
    tcase_add_test(tc, balanced_on_bundled_models);
    tcase_add_test(tc, settings_refused);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
