/* Split plan folders (docs/FORMATS.md section 9): every rank's part, read back, is the whole
 * plan's restricted to that rank (its stage's dense parameters and its EP rank's experts, their
 * buckets, its DP rank's and its expert rank's schedules, task ids mapped through global_ids)
 * and passes the structural check; a rank outside the world and an index pointing at another
 * rank's line are refused with the file and the path. */
#include "canzona.h" /* cz_plan_build: the test plan in-process */
#include "cz_format.h"

#include <check.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char dir[256], path[300];
static cz_plan *whole;

static void setup(void)
{
    const char *src = getenv("CZ_SOURCE_DIR");
    ck_assert_ptr_nonnull(src);
    char mp[512], cp[512];
    snprintf(mp, sizeof mp, "%s/plans/models/test-moe.json", src);
    snprintf(cp, sizeof cp, "%s/plans/clusters/cpu-4-dp4-ep2.json", src);
    snprintf(dir, sizeof dir, "%s/cz_plan_slice_%d", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp",
             (int)getpid());
    snprintf(path, sizeof path, "%s.json", dir);
    cz_error err;
    cz_model *m = NULL;
    cz_cluster *c = NULL;
    cz_cluster_sizes sizes = {.pp = 2};
    cz_settings s;
    cz_settings_init(&s);
    ck_assert_msg(cz_model_load(&m, mp, &err) == 0, "%s", err.message);
    ck_assert_msg(cz__cluster_load_sized(&c, cp, &sizes, &err) == 0, "%s", err.message);
    cz_plan *built = NULL;
    ck_assert_msg(cz_plan_build(&built, m, c, &s, &err) == 0, "%s", err.message);
    ck_assert_msg(cz_plan_write(built, path, &err) == 0, "%s", err.message);
    ck_assert_msg(cz__plan_split_write(path, dir, &err) == 0, "%s", err.message);
    ck_assert_msg(cz_plan_read(&whole, path, &err) == 0, "%s", err.message);
    ck_assert(whole->pp == 2 && cz_plan_has_experts(whole));
    cz_plan_free(built);
    cz_model_free(m);
    cz_cluster_free(c);
}

static void teardown(void)
{
    char f[400];
    const char *names[] = {"header.json", "stage-0.parts", "stage-0.index", "stage-1.parts",
                           "stage-1.index"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        snprintf(f, sizeof f, "%s/%s", dir, names[i]);
        unlink(f);
    }
    rmdir(dir);
    unlink(path);
    cz_plan_free(whole);
}

/* Schedule a of the part equals schedule b of the whole plan, its ids mapped back. */
static void same_schedule(const cz_plan *part, const cz_rank_schedule *a, const cz_rank_schedule *b)
{
    ck_assert_int_eq(a->ngroups, b->ngroups);
    for (int g = 0; g < a->ngroups; g++) {
        ck_assert_int_eq(a->groups[g].ntasks, b->groups[g].ntasks);
        for (int t = 0; t < a->groups[g].ntasks; t++) {
            ck_assert_int_eq(part->slice.global_ids[a->groups[g].task_param[t]],
                             b->groups[g].task_param[t]);
            ck_assert_int_eq(a->groups[g].task_slot[t], b->groups[g].task_slot[t]);
            ck_assert(a->groups[g].task_cost[t] == b->groups[g].task_cost[t]);
        }
    }
}

START_TEST(every_part_is_the_whole_plan_restricted)
{
    for (int r = 0; r < 4; r++) {
        cz_plan *part = NULL;
        cz_error err;
        ck_assert_msg(cz__plan_read_slice(&part, dir, r, &err) == 0, "%s", err.message);
        int stage = r / 2, local = r % 2, e = local % whole->ep, d = local / whole->ep;
        ck_assert(part->slice.on && part->slice.stage == stage && part->slice.dp_rank == local);
        ck_assert_str_eq(part->content_sha256, whole->content_sha256);
        /* Exactly the parameters of its stage's dense buffer and of its EP rank's experts. */
        size_t n = 0;
        for (size_t i = 0; i < whole->nparams; i++) {
            const cz_plan_param *q = &whole->params[i];
            if (q->stage != stage || (q->expert && q->ep_rank != e))
                continue;
            ck_assert_uint_lt(n, part->nparams);
            const cz_plan_param *x = &part->params[n];
            ck_assert_int_eq(part->slice.global_ids[n], (int)i);
            ck_assert_str_eq(x->def.name, q->def.name);
            ck_assert(x->offset == q->offset && x->numel == q->numel && x->cost == q->cost &&
                      x->dp_owner == q->dp_owner && x->expert == q->expert);
            const cz_plan_bucket *kb = &part->buckets[x->bucket], *wb = &whole->buckets[q->bucket];
            ck_assert(kb->offset == wb->offset && kb->size == wb->size &&
                      kb->expert == wb->expert && kb->ep_rank == wb->ep_rank);
            n++;
        }
        ck_assert_uint_eq(n, part->nparams);
        same_schedule(part, cz_plan_rank_schedule(part, stage, local),
                      cz_plan_rank_schedule(whole, stage, local));
        same_schedule(part, cz_plan_expert_schedule(part, stage, e, d),
                      cz_plan_expert_schedule(whole, stage, e, d));
        ck_assert_ptr_null(cz_plan_rank_schedule(part, stage, 1 - local));
        /* The structural check of canzona validate passes on the part. */
        cz_plan_checks c = {0};
        c.expert_groups = 1;
        c.out = json_array();
        cz__plan_check_structure(&c, part);
        ck_assert_msg(json_array_size(c.out) == 0, "rank %d: %s", r,
                      json_string_value(json_object_get(json_array_get(c.out, 0), "message")));
        json_decref(c.out);
        cz_plan_free(part);
    }
}
END_TEST

START_TEST(wrong_rank_or_line_refused)
{
    cz_plan *part = NULL;
    cz_error err;
    ck_assert_int_eq(cz__plan_read_slice(&part, dir, 4, &err), CZ_EMISMATCH);
    ck_assert_ptr_nonnull(strstr(err.message, "world rank 4 is outside the plan's 4 ranks"));
    ck_assert_ptr_null(part);
    /* Stage 0's index with the records of DP ranks 0 and 1 swapped: rank 0 gets rank 1's line. */
    char f[400], rec[2][CZ_SLICE_INDEX_RECORD];
    snprintf(f, sizeof f, "%s/stage-0.index", dir);
    FILE *fp = fopen(f, "r+b");
    ck_assert_ptr_nonnull(fp);
    size_t first = (size_t)whole->ep; /* the slices' records come first */
    ck_assert_int_eq(fseek(fp, (long)(first * CZ_SLICE_INDEX_RECORD), SEEK_SET), 0);
    ck_assert_uint_eq(fread(rec, CZ_SLICE_INDEX_RECORD, 2, fp), 2);
    ck_assert_int_eq(fseek(fp, (long)(first * CZ_SLICE_INDEX_RECORD), SEEK_SET), 0);
    ck_assert_uint_eq(fwrite(rec[1], CZ_SLICE_INDEX_RECORD, 1, fp), 1);
    ck_assert_uint_eq(fwrite(rec[0], CZ_SLICE_INDEX_RECORD, 1, fp), 1);
    fclose(fp);
    ck_assert_int_ne(cz__plan_read_slice(&part, dir, 0, &err), CZ_OK);
    ck_assert_ptr_nonnull(strstr(err.message, "stage-0.parts (part 2): $.dp_rank"));
    ck_assert_ptr_nonnull(strstr(err.message, "(reading the part of world rank 0: stage 0"));
    ck_assert_ptr_null(part);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("plan_slice");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, every_part_is_the_whole_plan_restricted);
    tcase_add_test(tc, wrong_rank_or_line_refused);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
