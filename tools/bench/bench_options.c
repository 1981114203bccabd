/* canzona-bench's options: --help, parsing (every rank parses its own command line), the
 * agreement across ranks that every rank was given the same ones, and the executor's
 * configuration they ask for. */
#include "bench_run.h"

#include <errno.h>
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void cz_bench_usage(FILE *f)
{
    fprintf(
        f, "usage: mpirun -np DP*TP canzona-bench --plan PLAN --model MODEL [options]\n"
           "Runs the plan's optimizer step with libcanzona-exec and times it.\n"
           "       canzona-bench --dry-run --plan PLAN [--gpu DP,TP] [--dtype fp32|bf16]\n"
           "                     [--ns-steps N] [--mem-gbps G] [--json FILE]\n"
           "Prints one GPU's device bytes per pass of the step and the time they need at G GB/s\n"
           "(default 4800, an H200's): a lower bound, no device or MPI (--dry-run --help).\n"
           "  --plan FILE        plan written by `canzona plan` (required)\n"
           "  --model FILE       the model the plan was made for (required; checked by hash)\n"
           "  --create-from DIR  create the executor from DIR, the plan's split folder (canzona\n"
           "                     plan --split): each rank reads its own part; --plan still\n"
           "                     gives the data and the reference\n"
           "  --steps N          timed optimizer steps (default 5)\n"
           "  --warmup N         untimed steps before them (default 1)\n"
           "  --seed S           seed of the generated parameters and gradients (default 1)\n"
           "  --init-dir DIR     initial parameters from DIR/<param name>.npy (full fp32 tensors)\n"
           "  --dump-dir DIR     write the updated full parameters as DIR/<param name>.npy\n"
           "                     (DIR and its parents are created when missing)\n"
           "  --grad-dir DIR     gradients from DIR/step<S>/dp<D>/<param name>.npy (full fp32\n"
           "                     tensors; S counts every step from 0, warm-up included; D is\n"
           "                     the DP replica) instead of generated ones\n"
           "  --dump-grads DIR   write the generated gradients in --grad-dir's layout first\n"
           "  --same-grads       every step takes step 0's generated gradients (generated and\n"
           "                     converted once, uploaded to a GPU every step): a timing run of a\n"
           "                     large model that does not spend its time making data; not with\n"
           "                     --verify, --grad-dir or --dump-grads\n"
           "  --load-state FILE  load the optimizer state (safetensors, saved under any plan of\n"
           "                     the model) before the first step; not with --verify\n"
           "  --save-state FILE  save the optimizer state after the last step\n"
           "  --json FILE        write the per-phase timings and the wall time (medians over\n"
           "                     steps, and every step's) as JSON\n"
           "  --verify           check that every DP replica holds the same parameters, then\n"
           "                     recompute all steps on rank 0 on whole tensors and compare\n"
           "  --tolerance T      largest allowed max|a-b|/max|b| per parameter (default 1e-5)\n"
           "  --update-tolerance T  also bound each parameter's update error\n"
           "                     ||(a-w0)-(b-w0)|| / ||b-w0|| (L2 over the tensor; w0 the initial\n"
           "                     fp32 values; default: not checked, only printed)\n"
           "  --dtype D          dtype of the bound parameters and gradients: fp32 or bf16\n"
           "                     (default: the plan's)\n"
           "  --grad-reduce-in-fp32  with bf16, reduce-scatter the gradients in fp32 (Megatron's\n"
           "                     --grad-reduce-in-fp32); default: in bf16 (docs/EXECUTOR.md,\n"
           "                     \"On the wire\")\n"
           "  --lr X             Muon learning rate (default: 1e-3 with --scaling rms, 0.02 with\n"
           "                     shape)\n"
           "  --scaling S        Muon update scale: rms (0.2*sqrt(max(m,n)), default) or shape\n"
           "                     (sqrt(max(1,m/n)))\n"
           "  --scale-coeff X    coefficient of the rms scaling (default 0.2)\n"
           "  --momentum X       Muon momentum (default 0.95)\n"
           "  --nesterov         Nesterov momentum for Muon (the default)\n"
           "  --no-nesterov      plain momentum for Muon\n"
           "  --ns-steps N       Newton-Schulz iterations (default 5, or a table's rows)\n"
           "  --ns-coeffs SET    Newton-Schulz coefficients: jordan (default), cubic,\n"
           "                     polar_express, or rows 'a,b,c;...' (one per iteration)\n"
           "  --ns-eps X         added to the Frobenius norm before Newton-Schulz (default 1e-7)\n"
           "  --weight-decay X   decoupled weight decay of Muon, and of AdamW unless\n"
           "                     --adamw-weight-decay is given (default 0.01)\n"
           "  --adamw-lr X       AdamW learning rate (default 3e-4)\n"
           "  --adamw-beta1 X    (default 0.9)\n"
           "  --adamw-beta2 X    (default 0.95)\n"
           "  --adamw-eps X      (default 1e-8)\n"
           "  --adamw-weight-decay X  AdamW's own decoupled weight decay\n"
           "  --max-grad-norm X  clip the global gradient norm to X (default 0: no clipping)\n"
           "  --qk-clip TAU      QK-clip (MuonClip) on every fused QKV parameter (a name ending\n"
           "                     in linear_qkv.weight: one attention layer each; its rows the\n"
           "                     declared [Q, K, V] blocks, or without blocks Megatron's rows\n"
           "                     interleaved per query group), with per-head maxima generated\n"
           "                     for every step and DP rank (about two heads in seven above TAU\n"
           "                     on each); needs --qk-heads; checked by --verify\n"
           "  --qk-heads H:G     query heads and query groups of each layer (with --qk-clip)\n"
           "  --backend B        compute backend: cpu (default) or cuda (device buffers; one GPU\n"
           "                     per node-local rank, modulo the GPUs present)\n"
           "  --comm C           data plane: mpi (default; with cuda, host-staged) or nccl\n"
           "Shampoo (plans made with --optimizer shampoo; --lr default 0.01, --weight-decay as\n"
           "above; refresh interval = the plan's precondition_frequency):\n"
           "  --shampoo-beta1 X        filtered-gradient EMA (default 0.9; 0 = none)\n"
           "  --shampoo-beta2 X        factor EMA (default 1.0: a running sum)\n"
           "  --shampoo-eps X          added after the eigenvalue shift (default 1e-12)\n"
           "  --shampoo-momentum X     (default 0)\n"
           "  --shampoo-nesterov N     1 = Nesterov momentum (default 0)\n"
           "  --shampoo-start-step N   first preconditioned step (default: the plan's\n"
           "                           precondition_frequency)\n"
           "  --shampoo-max-dim N      block sides longer than N (default 1024)\n"
           "  --shampoo-grafting M     none, adagrad (default), rmsprop or adam\n"
           "  --shampoo-graft-beta2 X  rmsprop/adam grafting (default 0.99 / 0.999)\n"
           "  --shampoo-graft-eps X    (default 1e-10)\n"
           "SOAP (plans made with --optimizer soap; --lr default 3e-3, --weight-decay as above;\n"
           "refresh interval and max_precond_dim are the plan's):\n"
           "  --soap-beta1 X           Adam's first moment (default 0.95)\n"
           "  --soap-beta2 X           Adam's second moment (default 0.95)\n"
           "  --soap-shampoo-beta X    factor EMA (default: --soap-beta2)\n"
           "  --soap-eps X             (default 1e-8)\n"
           "NorMuon (Muon plans; docs/EXECUTOR.md, \"NorMuon\"):\n"
           "  --normuon MODE           none (default), row (Dion's: one second moment per row of\n"
           "                           each unit) or col (one per column); not with --verify\n"
           "  --normuon-beta2 X        the second moment's EMA coefficient, in [0, 1) (default\n"
           "                           0.95)\n"
           "  --normuon-eps X          added to its square root (default 1e-8)\n"
           "  --own-comms        split the DP and TP communicators here and hand them in, as a\n"
           "                     job with its own communicators would\n"
           "  --inject-nan NAME  (testing) put a NaN into NAME's gradient on rank 0\n"
           "  --bad-dp-comm      (testing) hand in a DP communicator of the wrong size\n"
           "  --corrupt-replica  (testing) change one parameter on DP rank 1 before --verify\n"
           "  --help             this text\n"
           "Environment: CZ_MPI_TIMEOUT_S=S bounds every MPI wait (default 1800 s): after it\n"
           "each live rank names the rank it waited for and the job ends (MPI_Abort).\n"
           "Single-process modes (no mpirun): canzona-bench ns --help (Newton-Schulz on one\n"
           "GPU), canzona-bench coll --help (the DP collectives' model), canzona-bench calibrate\n"
           "--help (the GPU's rates for the cost model).\n");
    fputs("The bucket-wise step (cz_executor_bucket_ready, step_finish, bucket_wait):\n"
          "  --overlap          declare each bucket ready in backward order (bucket 0 first),\n"
          "                     finish the step, wait for each bucket in forward order before\n"
          "                     the next step; the results are the plain step's bit for bit\n"
          "  --delay-bucket B   with --overlap, declare bucket B ready last\n"
          "  --skip-bucket B    (testing) with --overlap, never declare B on the last rank\n"
          "  --repeat-bucket B  (testing) with --overlap, declare bucket B twice\n"
          "  --bucket-order O   (testing) with --overlap, declare the buckets in order O:\n"
          "                     backward (the default: bucket 0 first), reverse (the highest\n"
          "                     first) or rotate (from the middle one on, then from bucket 0)\n"
          "  --order-rank R     (testing) --bucket-order on rank R only (default: every rank)\n"
          "  --declare-nothing S  (testing) with --overlap, rank 0 declares no bucket in step\n"
          "                     S (1-based, warm-up counted) and goes to step_finish at once\n"
          "  --end-after-stall  (testing) after a reported stall, cancel the step, free the\n"
          "                     executor and call MPI_Finalize (as a job that ends itself\n"
          "                     would), not MPI_Abort\n"
          "  --early-updates    with --overlap, run each micro-group inside the bucket_ready\n"
          "                     that posts its last bucket (cz_executor_set_early_updates;\n"
          "                     turns the NaN/Inf check off, refused with --max-grad-norm)\n"
          "  --compute-ms X     simulate X ms of backward compute per bucket this rank holds\n"
          "                     (a sleep, no MPI call): with --overlap before each\n"
          "                     bucket_ready, without it all before the step; prints the\n"
          "                     exposed step, the iteration's wall time less that compute\n",
          f);
}

static const struct option longs[] = {{"plan", required_argument, 0, 'p'},
                                      {"model", required_argument, 0, 'm'},
                                      {"steps", required_argument, 0, 's'},
                                      {"warmup", required_argument, 0, 'w'},
                                      {"seed", required_argument, 0, 'S'},
                                      {"init-dir", required_argument, 0, 'i'},
                                      {"dump-dir", required_argument, 0, 'd'},
                                      {"json", required_argument, 0, 'j'},
                                      {"verify", no_argument, 0, 'v'},
                                      {"tolerance", required_argument, 0, 't'},
                                      {"lr", required_argument, 0, 'l'},
                                      {"adamw-lr", required_argument, 0, 'a'},
                                      {"weight-decay", required_argument, 0, 'W'},
                                      {"nesterov", no_argument, 0, 'n'},
                                      {"no-nesterov", no_argument, 0, 'o'},
                                      {"momentum", required_argument, 0, 'M'},
                                      {"ns-steps", required_argument, 0, 'k'},
                                      {"scaling", required_argument, 0, 'x'},
                                      {"scale-coeff", required_argument, 0, 'X'},
                                      {"adamw-beta1", required_argument, 0, '1'},
                                      {"adamw-beta2", required_argument, 0, '2'},
                                      {"adamw-eps", required_argument, 0, 'e'},
                                      {"adamw-weight-decay", required_argument, 0, 'D'},
                                      {"max-grad-norm", required_argument, 0, 'G'},
                                      {"grad-dir", required_argument, 0, 'g'},
                                      {"dump-grads", required_argument, 0, 'u'},
                                      {"dtype", required_argument, 0, 'T'},
                                      {"update-tolerance", required_argument, 0, 'U'},
                                      {"ns-eps", required_argument, 0, 'E'},
                                      {"ns-coeffs", required_argument, 0, 'c'},
                                      {"inject-nan", required_argument, 0, 'N'},
                                      {"own-comms", no_argument, 0, 'O'},
                                      {"backend", required_argument, 0, 'K'},
                                      {"comm", required_argument, 0, 'Y'},
                                      {"bad-dp-comm", no_argument, 0, 'B'},
                                      {"corrupt-replica", no_argument, 0, 'R'},
                                      {"load-state", required_argument, 0, 'y'},
                                      {"save-state", required_argument, 0, 'z'},
                                      {"shampoo-beta1", required_argument, 0, 1001},
                                      {"shampoo-beta2", required_argument, 0, 1002},
                                      {"shampoo-eps", required_argument, 0, 1003},
                                      {"shampoo-momentum", required_argument, 0, 1004},
                                      {"shampoo-nesterov", required_argument, 0, 1005},
                                      {"shampoo-start-step", required_argument, 0, 1006},
                                      {"shampoo-max-dim", required_argument, 0, 1007},
                                      {"shampoo-grafting", required_argument, 0, 1008},
                                      {"shampoo-graft-beta2", required_argument, 0, 1009},
                                      {"shampoo-graft-eps", required_argument, 0, 1010},
                                      {"soap-beta1", required_argument, 0, 1011},
                                      {"soap-beta2", required_argument, 0, 1012},
                                      {"soap-shampoo-beta", required_argument, 0, 1013},
                                      {"soap-eps", required_argument, 0, 1014},
                                      {"overlap", no_argument, 0, 1015},
                                      {"delay-bucket", required_argument, 0, 1016},
                                      {"skip-bucket", required_argument, 0, 1017},
                                      {"repeat-bucket", required_argument, 0, 1018},
                                      {"compute-ms", required_argument, 0, 1019},
                                      {"early-updates", no_argument, 0, 1020},
                                      {"bucket-order", required_argument, 0, 1021},
                                      {"order-rank", required_argument, 0, 1022},
                                      {"declare-nothing", required_argument, 0, 1023},
                                      {"end-after-stall", no_argument, 0, 1024},
                                      {"qk-clip", required_argument, 0, 1025},
                                      {"qk-heads", required_argument, 0, 1026},
                                      {"grad-reduce-in-fp32", no_argument, 0, 1027},
                                      {"create-from", required_argument, 0, 1028},
                                      {"normuon", required_argument, 0, 1029},
                                      {"normuon-beta2", required_argument, 0, 1030},
                                      {"normuon-eps", required_argument, 0, 1031},
                                      {"same-grads", no_argument, 0, 1032},
                                      {"help", no_argument, 0, 'h'},
                                      {0, 0, 0, 0}};

/* The defaults before any option. */
static void opts_defaults(bench_opts *o)
{
    memset(o, 0, sizeof *o);
    o->steps = 5;
    o->warmup = 1;
    o->seed = 1;
    o->tolerance = 1e-5;
    o->backend = "cpu";
    o->comm = "mpi";
    /* Defaults are the library's (cz_exec_config_init), so that the bench runs what a job
     * that changes nothing runs. */
    cz_exec_config d;
    cz_exec_config_init(&d);
    cz_exec_config_init(&o->shampoo);
    o->lr = d.lr;
    o->adamw_lr = d.adamw.lr;
    o->wd = d.weight_decay;
    o->adamw_wd = -1.0; /* = --weight-decay */
    o->ns_coeffs = d.muon.ns_coeffs;
    o->nesterov = d.muon.nesterov;
    o->momentum = d.muon.momentum;
    o->ns_steps = d.muon.ns_steps;
    o->scaling = d.muon.scaling;
    o->scale_coeff = d.muon.scale_coeff;
    o->beta1 = d.adamw.beta1;
    o->beta2 = d.adamw.beta2;
    o->adamw_eps = d.adamw.eps;
    o->max_grad_norm = d.max_grad_norm;
    o->dtype = d.dtype;
    o->grad_reduce_in_fp32 = d.grad_reduce_in_fp32;
    o->ns_eps = d.muon.ns_eps;
    o->delay_bucket = o->skip_bucket = o->repeat_bucket = -1;
    o->order_rank = -1;
}

/* The options by what they set, one function each. Each returns 0 when c is one of its
 * options (a number's end in *end, which cz_bench_parse checks), -1 when it is not, 2 with the
 * reason in msg. This one: the run's inputs and outputs, steps, the backend and data plane, the
 * bucket-wise step, the testing switches. */
static int run_option(bench_opts *o, int c, char *arg, char **end, char *msg, size_t cap)
{
    switch (c) {
    case 'p':
        o->plan = arg;
        return 0;
    case 'm':
        o->model = arg;
        return 0;
    case 's':
        o->steps = (int)strtol(arg, end, 10);
        return 0;
    case 'w':
        o->warmup = (int)strtol(arg, end, 10);
        return 0;
    case 'S':
        o->seed = strtoull(arg, end, 10);
        return 0;
    case 'i':
        o->init_dir = arg;
        return 0;
    case 'd':
        o->dump_dir = arg;
        return 0;
    case 'j':
        o->json = arg;
        return 0;
    case 'v':
        o->verify = 1;
        return 0;
    case 't':
        o->tolerance = strtod(arg, end);
        return 0;
    case 'g':
        o->grad_dir = arg;
        return 0;
    case 'u':
        o->dump_grads = arg;
        return 0;
    case 'y':
        o->load_state = arg;
        return 0;
    case 'z':
        o->save_state = arg;
        return 0;
    case 'T': {
        cz_dtype t;
        if (cz_dtype_parse(arg, &t) != 0 || (t != CZ_DTYPE_FP32 && t != CZ_DTYPE_BF16)) {
            snprintf(msg, cap, "--dtype '%s': expected fp32 or bf16", arg);
            return 2;
        }
        o->dtype = (int)t;
        return 0;
    }
    case 'U':
        o->update_tolerance = strtod(arg, end);
        return 0;
    case 'O':
        o->own_comms = 1;
        return 0;
    case 'B':
        o->bad_dp_comm = 1;
        return 0;
    case 'R':
        o->corrupt_replica = 1;
        return 0;
    case 'K':
        o->backend = arg;
        return 0;
    case 'Y':
        o->comm = arg;
        return 0;
    case 'N':
        o->inject_nan = arg;
        return 0;
    case 1015:
        o->overlap = 1;
        return 0;
    case 1016:
        o->delay_bucket = (int)strtol(arg, end, 10);
        return 0;
    case 1017:
        o->skip_bucket = (int)strtol(arg, end, 10);
        return 0;
    case 1018:
        o->repeat_bucket = (int)strtol(arg, end, 10);
        return 0;
    case 1019:
        o->compute_ms = strtod(arg, end);
        return 0;
    case 1020:
        o->early = 1;
        return 0;
    case 1025:
        o->qk_tau = strtod(arg, end);
        return 0;
    case 1026:
        if (sscanf(arg, "%d:%d", &o->qk_heads, &o->qk_groups) != 2 || o->qk_heads < 1 ||
            o->qk_groups < 1 || o->qk_heads % o->qk_groups) {
            snprintf(msg, cap, "--qk-heads '%s': expected H:G, G query groups dividing H heads",
                     arg);
            return 2;
        }
        return 0;
    case 1021:
        o->bucket_order = strcmp(arg, "backward") == 0  ? 0
                          : strcmp(arg, "reverse") == 0 ? 1
                          : strcmp(arg, "rotate") == 0  ? 2
                                                        : -1;
        if (o->bucket_order < 0) {
            snprintf(msg, cap, "--bucket-order '%s': expected backward, reverse or rotate", arg);
            return 2;
        }
        return 0;
    case 1022:
        o->order_rank = (int)strtol(arg, end, 10);
        return 0;
    case 1023:
        o->declare_nothing = (int)strtol(arg, end, 10);
        return 0;
    case 1024:
        o->end_after_stall = 1;
        return 0;
    case 1027:
        o->grad_reduce_in_fp32 = 1;
        return 0;
    case 1028:
        o->create_from = arg;
        return 0;
    default:
        return -1;
    }
}

/* Muon's and AdamW's hyper-parameters and the global clipping (as run_option). */
static int muon_adamw_option(bench_opts *o, int c, char *arg, char **end, char *msg, size_t cap)
{
    switch (c) {
    case 'l':
        o->lr = strtod(arg, end);
        return 0;
    case 'a':
        o->adamw_lr = strtod(arg, end);
        return 0;
    case 'W':
        o->wd = strtod(arg, end);
        return 0;
    case 'n':
        o->nesterov = 1;
        return 0;
    case 'o':
        o->nesterov = 0;
        return 0;
    case 'M':
        o->momentum = strtod(arg, end);
        return 0;
    case 'k':
        o->ns_steps = (int)strtol(arg, end, 10);
        return 0;
    case 'x':
        if (strcmp(arg, "rms") == 0)
            o->scaling = CZ_MUON_SCALE_RMS;
        else if (strcmp(arg, "shape") == 0)
            o->scaling = CZ_MUON_SCALE_SHAPE;
        else {
            snprintf(msg, cap, "--scaling '%s': expected rms or shape", arg);
            return 2;
        }
        return 0;
    case 'X':
        o->scale_coeff = strtod(arg, end);
        return 0;
    case '1':
        o->beta1 = strtod(arg, end);
        return 0;
    case '2':
        o->beta2 = strtod(arg, end);
        return 0;
    case 'e':
        o->adamw_eps = strtod(arg, end);
        return 0;
    case 'D':
        o->adamw_wd = strtod(arg, end);
        return 0;
    case 'G':
        o->max_grad_norm = strtod(arg, end);
        return 0;
    case 'E':
        o->ns_eps = strtod(arg, end);
        return 0;
    case 'c':
        o->ns_coeffs = arg;
        return 0;
    default:
        return -1;
    }
}

/* Shampoo's and SOAP's settings, into the fields of o->shampoo (as run_option). */
static int precond_option(bench_opts *o, int c, char *arg, char **end, char *msg, size_t cap)
{
    switch (c) {
    case 1001:
        o->shampoo.shampoo.beta1 = strtof(arg, end);
        return 0;
    case 1002:
        o->shampoo.shampoo.beta2 = strtof(arg, end);
        return 0;
    case 1003:
        o->shampoo.shampoo.eps = strtof(arg, end);
        return 0;
    case 1004:
        o->shampoo.shampoo.momentum = strtof(arg, end);
        return 0;
    case 1005:
        o->shampoo.shampoo.nesterov = (int)strtol(arg, end, 10);
        return 0;
    case 1006:
        o->shampoo.shampoo.start_step = (int)strtol(arg, end, 10);
        return 0;
    case 1007:
        o->shampoo.shampoo.max_dim = (int)strtol(arg, end, 10);
        return 0;
    case 1008: {
        static const char *const names[] = {"none", "adagrad", "rmsprop", "adam"};
        int k = 0;
        while (k < 4 && strcmp(arg, names[k]) != 0)
            k++;
        if (k == 4) {
            snprintf(msg, cap, "--shampoo-grafting %s: expected none, adagrad, rmsprop or adam",
                     arg);
            return 2;
        }
        o->shampoo.shampoo.grafting = (cz_shampoo_grafting)k;
        return 0;
    }
    case 1009:
        o->shampoo.shampoo.graft_beta2 = strtof(arg, end);
        return 0;
    case 1010:
        o->shampoo.shampoo.graft_eps = strtof(arg, end);
        return 0;
    case 1011:
        o->shampoo.soap.beta1 = strtof(arg, end);
        return 0;
    case 1012:
        o->shampoo.soap.beta2 = strtof(arg, end);
        return 0;
    case 1013:
        o->shampoo.soap.shampoo_beta = strtof(arg, end);
        return 0;
    case 1014:
        o->shampoo.soap.eps = strtof(arg, end);
        return 0;
    case 1029:
        if (strcmp(arg, "none") == 0)
            o->shampoo.normuon.mode = CZ_NORMUON_NONE;
        else if (strcmp(arg, "row") == 0)
            o->shampoo.normuon.mode = CZ_NORMUON_ROW;
        else if (strcmp(arg, "col") == 0)
            o->shampoo.normuon.mode = CZ_NORMUON_COL;
        else {
            snprintf(msg, cap, "--normuon '%s': expected none, row or col", arg);
            return 2;
        }
        return 0;
    case 1030:
        o->shampoo.normuon.beta2 = strtof(arg, end);
        return 0;
    case 1032:
        o->same_grads = 1;
        return 0;
    case 1031:
        o->shampoo.normuon.eps = strtof(arg, end);
        return 0;
    default:
        return -1;
    }
}

/* What the options mean together, once all are read (optind < argc: an operand). Returns 0 or
 * 2 with the reason in msg. */
static int check_options(const bench_opts *o, int argc, char *msg, size_t cap)
{
    if ((o->own_comms || o->bad_dp_comm) && strcmp(o->comm, "mpi") != 0) {
        snprintf(msg, cap,
                 "--own-comms and --bad-dp-comm hand in MPI communicators: only with "
                 "--comm mpi");
        return 2;
    }
    if ((o->bucket_order || o->declare_nothing) && !o->overlap) {
        snprintf(msg, cap,
                 "--bucket-order and --declare-nothing drive the bucket-wise step: add --overlap");
        return 2;
    }
    if (o->qk_tau < 0.0 || (o->qk_tau > 0.0) != (o->qk_heads > 0) ||
        (o->qk_tau > 0.0 && o->early)) {
        snprintf(msg, cap,
                 "--qk-clip TAU (> 0) and --qk-heads H:G go together, and not with "
                 "--early-updates");
        return 2;
    }
    if (o->early && !o->overlap) {
        snprintf(msg, cap, "--early-updates runs inside the bucket-wise step: add --overlap");
        return 2;
    }
    if (optind < argc || !o->plan || !o->model || o->steps < 1 || o->warmup < 0) {
        snprintf(msg, cap,
                 "--plan and --model are required, --steps >= 1, --warmup >= 0, no "
                 "positional arguments (see --help)");
        return 2;
    }
    /* An output that is one of the inputs would replace it (the CLI refuses the same). The
     * checkpoint may replace the one it resumed from: it is written whole or not at all. */
    const char *const ins[] = {o->plan, o->model, o->load_state, o->save_state};
    const char *const what[] = {"the --plan file", "the --model file", "the --load-state file",
                                "the --save-state file"};
    cz_error ferr;
    if (cz__file_check_output(o->save_state, ins, what, 2, &ferr) ||
        cz__file_check_output(o->json, ins, what, 4, &ferr)) {
        snprintf(msg, cap, "%s", ferr.message);
        return 2;
    }
    if (o->shampoo.normuon.mode != CZ_NORMUON_NONE && o->verify) {
        /* --verify's reference is plain Muon (bench_verify.c); NorMuon's is normuon_ref. */
        snprintf(msg, cap,
                 "--normuon and --verify do not go together: --verify's reference is plain "
                 "Muon; check NorMuon with --dump-dir and tests/mpi/normuon_ref.c");
        return 2;
    }
    if (o->same_grads && (o->verify || o->grad_dir || o->dump_grads)) {
        /* The reference and the gradient files hold every step's own gradients. */
        snprintf(msg, cap,
                 "--same-grads does not go with %s: it reuses step 0's generated "
                 "gradients in every step",
                 o->verify     ? "--verify"
                 : o->grad_dir ? "--grad-dir"
                               : "--dump-grads");
        return 2;
    }
    if (o->load_state && o->verify) {
        /* The single-process reference starts from zero optimizer state. */
        snprintf(msg, cap,
                 "--load-state and --verify do not go together: the reference run "
                 "starts from zero optimizer state");
        return 2;
    }
    return 0;
}

int cz_bench_parse(int argc, char **argv, bench_opts *o, char *msg, size_t cap)
{
    opts_defaults(o);
    int c, steps_given = 0;
    char *end;
    opterr = 0;
    int li = 0;
    while ((c = getopt_long(argc, argv, "", longs, &li)) != -1) {
        errno = 0;
        end = NULL;
        if (c == 'h')
            return 1;
        int r = run_option(o, c, optarg, &end, msg, cap);
        if (r < 0)
            r = muon_adamw_option(o, c, optarg, &end, msg, cap);
        if (r < 0)
            r = precond_option(o, c, optarg, &end, msg, cap);
        if (r < 0) {
            snprintf(msg, cap, "unknown option or missing value: %s (see --help)",
                     argv[optind - 1]);
            return 2;
        }
        if (r)
            return r;
        if (end && (end == optarg || *end || errno)) {
            snprintf(msg, cap, "bad number '%s' for --%s", optarg, longs[li].name);
            return 2;
        }
        steps_given |= c == 'k';
    }
    /* A table's row count is its iteration count (an unknown set is the executor's to refuse,
     * with its message, at create). */
    int rows = 0;
    cz_error nerr;
    if (!steps_given && cz_exec_ns_coeffs_steps(o->ns_coeffs, &rows, &nerr) == CZ_OK && rows > 0)
        o->ns_steps = rows;
    return check_options(o, argc, msg, cap);
}

/* The options every rank must share, as text: those that decide which collectives run (steps,
 * warm-up, verify, dump, own communicators, the data plane), what the ranks compute (seed,
 * hyperparameters, initial values, the backend), and the paths only rank 0 uses (checkpoints,
 * --json, --dump-dir, --dump-grads): a rank given another one would otherwise be silently
 * ignored. Paths every rank reads (--plan, --model, --init-dir, --grad-dir) may differ per
 * node; --tolerance concerns rank 0. */
static void options_text(const bench_opts *o, int prc, char *buf, size_t cap)
{
    const cz_exec_config *h = &o->shampoo;
    int n = snprintf(buf, cap, "load-state=%s save-state=%s json=%s dump-dir=%s dump-grads=%s ",
                     o->load_state ? o->load_state : "-", o->save_state ? o->save_state : "-",
                     o->json ? o->json : "-", o->dump_dir ? o->dump_dir : "-",
                     o->dump_grads ? o->dump_grads : "-");
    if (n < 0 || (size_t)n >= cap)
        return;
    buf += n;
    cap -= (size_t)n;
    n = snprintf(
        buf, cap,
        "help=%d steps=%d warmup=%d seed=%llu verify=%d dump-dir=%d init-dir=%d grad-dir=%d "
        "dtype=%d lr=%.17g scaling=%d scale-coeff=%.17g momentum=%.17g "
        "nesterov=%d ns-steps=%d ns-coeffs=%s ns-eps=%.17g weight-decay=%.17g adamw-lr=%.17g "
        "adamw-beta1=%.17g adamw-beta2=%.17g adamw-eps=%.17g adamw-weight-decay=%.17g "
        "max-grad-norm=%.17g own-comms=%d bad-dp-comm=%d corrupt-replica=%d inject-nan=%s "
        "backend=%s comm=%s grad-reduce-in-fp32=%d same-grads=%d",
        prc == 1, o->steps, o->warmup, (unsigned long long)o->seed, o->verify, o->dump_dir != NULL,
        o->init_dir != NULL, o->grad_dir != NULL, o->dtype, o->lr, (int)o->scaling, o->scale_coeff,
        o->momentum, o->nesterov, o->ns_steps, o->ns_coeffs ? o->ns_coeffs : "", o->ns_eps, o->wd,
        o->adamw_lr, o->beta1, o->beta2, o->adamw_eps, o->adamw_wd, o->max_grad_norm, o->own_comms,
        o->bad_dp_comm, o->corrupt_replica, o->inject_nan ? o->inject_nan : "", o->backend, o->comm,
        o->grad_reduce_in_fp32, o->same_grads);
    if (n < 0 || (size_t)n >= cap)
        return;
    snprintf(buf + n, cap - (size_t)n,
             " shampoo=%.9g,%.9g,%.9g,%.9g,%d,%d,%d,%d,%.9g,%.9g soap=%.9g,%.9g,%.9g,%.9g "
             "overlap=%d,%d,%d,%d,%.17g,%d,%d,%d,%d,%d qk=%.17g,%d,%d normuon=%d,%.9g,%.9g",
             h->shampoo.beta1, h->shampoo.beta2, h->shampoo.eps, h->shampoo.momentum,
             h->shampoo.nesterov, h->shampoo.start_step, h->shampoo.max_dim,
             (int)h->shampoo.grafting, h->shampoo.graft_beta2, h->shampoo.graft_eps, h->soap.beta1,
             h->soap.beta2, h->soap.shampoo_beta, h->soap.eps, o->overlap, o->delay_bucket,
             o->skip_bucket, o->repeat_bucket, o->compute_ms, o->early, o->bucket_order,
             o->order_rank, o->declare_nothing, o->end_after_stall, o->qk_tau, o->qk_heads,
             o->qk_groups, (int)h->normuon.mode, h->normuon.beta2, h->normuon.eps);
}

/* The fingerprint of options_text, its largest and smallest value over the ranks in one
 * reduction: equal when every rank has the same options. */
int cz_bench_agree_options(const bench_opts *o, int prc, const char *msg)
{
    /* Room for five paths and every other option. */
    char text[5 * 4096 + 2048] = "";
    uint64_t fp = 0;
    if (prc != 2) {
        options_text(o, prc, text, sizeof text);
        fp = 1469598103934665603ull; /* FNV-1a */
        for (const char *c = text; *c; c++)
            fp = (fp ^ (unsigned char)*c) * 1099511628211ull;
    }
    /* One reduction: any failure, the largest fingerprint, and the smallest (as ~max of ~). */
    uint64_t mine[3] = {prc == 2, fp, ~fp}, all[3];
    cz_bench_allreduce(mine, all, 3, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD,
                       "canzona-bench's agreement on the options");
    if (prc == 2) {
        fprintf(stderr, "canzona-bench: rank %d: %s\n", cz_bench_rank, msg);
        return 0;
    }
    if (all[0]) {
        fprintf(stderr, "canzona-bench: rank %d: stopping, another rank's options are invalid\n",
                cz_bench_rank);
        return 0;
    }
    if (all[1] != ~all[2]) {
        fprintf(stderr,
                "canzona-bench: rank %d: the ranks were given different options; every rank "
                "must get the same ones (this rank: %s)\n",
                cz_bench_rank, text);
        return 0;
    }
    return 1;
}

/* The executor's configuration the options ask for; the communicators are main's. */
void cz_bench_config(const bench_opts *o, cz_exec_config *cfg)
{
    cz_exec_config_init(cfg);
    cfg->backend = o->backend;
    cfg->comm = o->comm;
    bool cuda = strcmp(o->backend, "cuda") == 0;
    cfg->memory = cuda ? CZ_EXEC_MEMORY_DEVICE : CZ_EXEC_MEMORY_HOST;
    cfg->lr = (float)o->lr;
    cfg->adamw.lr = (float)o->adamw_lr;
    cfg->weight_decay = (float)o->wd;
    cfg->adamw.weight_decay = (float)(o->adamw_wd >= 0 ? o->adamw_wd : o->wd);
    cfg->muon.nesterov = o->nesterov;
    cfg->muon.momentum = (float)o->momentum;
    cfg->muon.ns_steps = o->ns_steps;
    cfg->muon.ns_coeffs = o->ns_coeffs;
    cfg->muon.scaling = o->scaling;
    cfg->muon.scale_coeff = (float)o->scale_coeff;
    cfg->adamw.beta1 = (float)o->beta1;
    cfg->adamw.beta2 = (float)o->beta2;
    cfg->adamw.eps = (float)o->adamw_eps;
    cfg->max_grad_norm = (float)o->max_grad_norm;
    cfg->check_finite = !o->early; /* early updates cannot refuse a step after its first update */
    cfg->dtype = o->dtype;
    cfg->grad_reduce_in_fp32 = o->grad_reduce_in_fp32;
    cfg->muon.ns_eps = (float)o->ns_eps;
    cfg->shampoo.beta1 = o->shampoo.shampoo.beta1;
    cfg->shampoo.beta2 = o->shampoo.shampoo.beta2;
    cfg->shampoo.eps = o->shampoo.shampoo.eps;
    cfg->shampoo.momentum = o->shampoo.shampoo.momentum;
    cfg->shampoo.nesterov = o->shampoo.shampoo.nesterov;
    cfg->shampoo.start_step = o->shampoo.shampoo.start_step;
    cfg->shampoo.max_dim = o->shampoo.shampoo.max_dim;
    cfg->shampoo.grafting = o->shampoo.shampoo.grafting;
    cfg->shampoo.graft_beta2 = o->shampoo.shampoo.graft_beta2;
    cfg->shampoo.graft_eps = o->shampoo.shampoo.graft_eps;
    cfg->soap.beta1 = o->shampoo.soap.beta1;
    cfg->soap.beta2 = o->shampoo.soap.beta2;
    cfg->soap.shampoo_beta = o->shampoo.soap.shampoo_beta;
    cfg->soap.eps = o->shampoo.soap.eps;
    cfg->normuon = o->shampoo.normuon;
}
