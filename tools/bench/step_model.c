/* canzona-bench --dry-run: the device bytes one step of a plan reads and writes on one GPU,
 * pass by pass (the executor's model, step_bytes.h), and the time they need at a memory
 * bandwidth: a lower bound on the step's time there, to set a measured GPU time against; and
 * the backend memory the executor allocates on that GPU by kind (memory_model.h), to set the
 * run's recorded and measured memory against. No device, no MPI. */
#include "bench.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct dry_opts {
    const char *plan, *json;
    int dp, tp, ns_steps, dtype; /* dtype -1: the plan's */
    int per_param, grad_fp32;    /* the job binds per parameter; grad_reduce_in_fp32 */
    double gbps;
} dry_opts;

static void dry_usage(FILE *f)
{
    fprintf(f, "usage: canzona-bench --dry-run --plan PLAN [--gpu DP,TP] [--dtype fp32|bf16]\n"
               "                     [--ns-steps N] [--mem-gbps G] [--per-param]\n"
               "                     [--grad-reduce-fp32] [--json FILE]\n"
               "Prints the device bytes one steady-state step of the plan reads and writes on\n"
               "GPU (DP, TP), pass by pass (each operand read once, each result written once),\n"
               "and the time the total needs at G GB/s: a lower bound on the step's time;\n"
               "then the backend memory the executor allocates there, by kind, and what is\n"
               "beyond the model states as a share of the optimizer state.\n"
               "Dense one-stage Muon plans without cooperative tasks. No device, no MPI.\n"
               "  --gpu       which GPU (default 0,0)\n"
               "  --dtype     the job's parameters and gradients (default: the plan's)\n"
               "  --ns-steps  Newton-Schulz iterations (default 5)\n"
               "  --mem-gbps  memory bandwidth in GB/s (default 4800, an H200's)\n"
               "  --per-param the job binds its buffers one parameter at a time (fp32 copies)\n"
               "  --grad-reduce-fp32  a bf16 job's gradients reduced in fp32\n"
               "  --json      also write the figures as JSON (schema canzona.step_bytes/1)\n");
}

/* 0, 1 for --help, 2 for a bad option. */
static int dry_parse(int argc, char **argv, dry_opts *o)
{
    static const struct option longs[] = {
        {"dry-run", no_argument, 0, 'n'},        {"plan", required_argument, 0, 'p'},
        {"model", required_argument, 0, 'm'},    {"gpu", required_argument, 0, 'g'},
        {"dtype", required_argument, 0, 'T'},    {"ns-steps", required_argument, 0, 'k'},
        {"mem-gbps", required_argument, 0, 'b'}, {"json", required_argument, 0, 'j'},
        {"per-param", no_argument, 0, 'P'},      {"grad-reduce-fp32", no_argument, 0, 'F'},
        {"help", no_argument, 0, 'h'},           {0, 0, 0, 0}};
    *o = (dry_opts){.ns_steps = 5, .dtype = -1, .gbps = 4800.0};
    int c;
    char *end;
    optind = 1;
    while ((c = getopt_long(argc, argv, "", longs, NULL)) != -1) {
        switch (c) {
        case 'n':
        case 'm': /* the model is not needed: accepted so that a run's line works as it is */
            break;
        case 'p':
            o->plan = optarg;
            break;
        case 'g':
            if (sscanf(optarg, "%d,%d", &o->dp, &o->tp) != 2)
                return 2;
            break;
        case 'T':
            if (strcmp(optarg, "fp32") != 0 && strcmp(optarg, "bf16") != 0)
                return 2;
            o->dtype = optarg[0] == 'b' ? CZ_DTYPE_BF16 : CZ_DTYPE_FP32;
            break;
        case 'k':
            o->ns_steps = (int)strtol(optarg, &end, 10);
            if (*end || o->ns_steps < 0)
                return 2;
            break;
        case 'b':
            o->gbps = strtod(optarg, &end);
            if (*end || !(o->gbps > 0.0))
                return 2;
            break;
        case 'j':
            o->json = optarg;
            break;
        case 'P':
            o->per_param = 1;
            break;
        case 'F':
            o->grad_fp32 = 1;
            break;
        case 'h':
            return 1;
        default:
            return 2;
        }
    }
    return o->plan && optind == argc ? 0 : 2;
}

static void print_table(const dry_opts *o, const cz_plan *plan, cz_dtype dt, const cz_step_bytes *b)
{
    printf("step bytes: %s, DP%d x TP%d, GPU (%d, %d), %s, %d Newton-Schulz iterations\n",
           plan->model_name ? plan->model_name : "?", plan->dp, plan->tp, o->dp, o->tp,
           cz_dtype_name(dt), o->ns_steps);
    printf("buffer %lld elements, DP range %lld, parts computed %lld, Newton-Schulz blocks %lld\n",
           (long long)b->buffer, (long long)b->ranges, (long long)b->hosted,
           (long long)b->ns_elems);
    printf("%-36s %14s %14s %10s\n", "pass", "read (MB)", "written (MB)", "ms");
    double s = 1e-6, ms = 1e3 / (o->gbps * 1e9);
    for (int p = 0; p < CZ_NPASSES; p++) {
        if (b->read[p] == 0 && b->write[p] == 0)
            continue;
        printf("%-36s %14.3f %14.3f %10.3f\n", cz__step_pass_name((cz_step_pass)p),
               (double)b->read[p] * s, (double)b->write[p] * s,
               (double)(b->read[p] + b->write[p]) * ms);
    }
    int64_t t = b->total_read + b->total_write;
    printf("%-36s %14.3f %14.3f %10.3f\n", "total", (double)b->total_read * s,
           (double)b->total_write * s, (double)t * ms);
    printf("at %.0f GB/s the step's device traffic needs at least %.3f ms (a lower bound: each "
           "operand read once, collectives' own traffic and kernel launches not counted)\n",
           o->gbps, (double)t * ms);
}

static int write_json(const dry_opts *o, const cz_plan *plan, cz_dtype dt, const cz_step_bytes *b,
                      const cz_exec_mem_usage *mem, cz_error *err)
{
    json_t *root = json_object(), *passes = json_array();
    json_object_set_new(root, "schema", json_string("canzona.step_bytes/1"));
    json_object_set_new(root, "plan", json_string(o->plan));
    json_object_set_new(root, "dp", json_integer(plan->dp));
    json_object_set_new(root, "tp", json_integer(plan->tp));
    json_object_set_new(root, "gpu", json_pack("[ii]", o->dp, o->tp));
    json_object_set_new(root, "dtype", json_string(cz_dtype_name(dt)));
    json_object_set_new(root, "ns_steps", json_integer(o->ns_steps));
    for (int p = 0; p < CZ_NPASSES; p++)
        json_array_append_new(
            passes, json_pack("{sssIsI}", "pass", cz__step_pass_name((cz_step_pass)p), "read",
                              (json_int_t)b->read[p], "written", (json_int_t)b->write[p]));
    json_object_set_new(root, "passes", passes);
    json_object_set_new(root, "read", json_integer(b->total_read));
    json_object_set_new(root, "written", json_integer(b->total_write));
    json_object_set_new(root, "mem_gbps", json_real(o->gbps));
    if (mem)
        json_object_set_new(root, "memory", cz_bench_memory_json(mem));
    json_object_set_new(root, "lower_bound_s",
                        json_real((double)(b->total_read + b->total_write) / (o->gbps * 1e9)));
    int rc = cz_bench_write_json(o->json, root, err);
    json_decref(root);
    return rc;
}

int cz_bench_dry_run_main(int argc, char **argv)
{
    dry_opts o;
    int prc = dry_parse(argc, argv, &o);
    if (prc) {
        dry_usage(prc == 1 ? stdout : stderr);
        return prc == 1 ? 0 : 2;
    }
    cz_plan *plan = NULL;
    cz_error err;
    cz_error_clear(&err);
    cz_step_bytes b;
    int rc = cz_plan_read(&plan, o.plan, &err);
    cz_dtype dt = CZ_DTYPE_FP32;
    if (rc == CZ_OK) {
        dt = o.dtype < 0 ? plan->dtype : (cz_dtype)o.dtype;
        rc = cz__step_bytes(plan, o.dp, o.tp, dt, o.ns_steps, &b, &err);
    }
    cz_exec_mem_usage mem;
    bool have_mem = false;
    if (rc == CZ_OK) {
        print_table(&o, plan, dt, &b);
        /* A plan the memory model does not cover still gets its step bytes: said, not failed. */
        cz_exec_mem_job job = {dt, o.per_param || dt != CZ_DTYPE_FP32, o.grad_fp32 != 0, false};
        cz_error merr;
        cz_error_clear(&merr);
        have_mem = cz__exec_memory_predict(plan, o.dp, o.tp, &job, &mem, &merr) == CZ_OK;
        char title[256];
        snprintf(title, sizeof title,
                 "executor memory (predicted): GPU (%d, %d), %s, %s binding%s, after create "
                 "and the first bind",
                 o.dp, o.tp, cz_dtype_name(dt), o.per_param ? "per-parameter" : "flat",
                 o.grad_fp32 ? ", gradients reduced in fp32" : "");
        if (have_mem)
            cz_bench_memory_print(title, &mem);
        else
            printf("executor memory: not predicted: %s\n", merr.message);
        if (o.json)
            rc = write_json(&o, plan, dt, &b, have_mem ? &mem : NULL, &err);
    }
    if (rc != CZ_OK)
        fprintf(stderr, "canzona-bench --dry-run: %s\n", err.message);
    cz_plan_free(plan);
    return rc == CZ_OK ? 0 : 1;
}
