/* canzona-bench: runs a plan with libcanzona-exec on MPI ranks, times each phase, and checks
 * the distributed result against a single-process optimizer on whole tensors (--verify).
 *
 *   mpirun -np DP*TP canzona-bench --plan P --model M [options]
 */
#include "bench.h"
#include "bench_gpu.h"
#include "mpi_watch.h"
#include "ns_bench.h"
#include "npy.h"

#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

typedef struct bench_opts {
    const char *plan, *model, *init_dir, *dump_dir, *json, *ns_coeffs, *inject_nan;
    const char *grad_dir, *dump_grads, *load_state, *save_state;
    const char *backend, *comm; /* --backend cpu|cuda, --comm mpi|nccl */
    int steps, warmup, verify, nesterov, ns_steps, own_comms, bad_dp_comm, corrupt_replica;
    int dtype; /* -1 = the executor's (the plan's) */
    /* --overlap: the bucket-wise step; --delay-bucket, --skip-bucket, --repeat-bucket: one
     * bucket declared last, never (on the last rank), or twice (-1: none) */
    int overlap, delay_bucket, skip_bucket, repeat_bucket;
    int early;         /* --early-updates: cz_executor_set_early_updates (with --overlap) */
    double compute_ms; /* --compute-ms: simulated backward compute per held bucket */
    cz_muon_scaling scaling;
    uint64_t seed;
    cz_exec_config shampoo; /* only its shampoo_* and soap_* fields: --shampoo-*, --soap-* */
    double tolerance, lr, adamw_lr, wd, adamw_wd, momentum, scale_coeff, beta1, beta2, adamw_eps,
        max_grad_norm, update_tolerance, ns_eps;
} bench_opts;

static int g_rank;
/* Every wait of the bench's own collectives is bounded like the executor's (mpi_watch.h), on
 * the same report channel: the executor's world is MPI_COMM_WORLD, so they share it. */
static cz_mpi_chan *g_chan;
static double g_timeout;

/* A rank that dies (killed, crashed) ends the job through mpirun, which terminates the other
 * ranks: each says so, with the step it was in, before it goes (mpirun's own message names
 * the process that died). Only async-signal-safe calls here. */
static volatile long g_step_now = -1;
static char g_term_msg[96];
static size_t g_term_len;

static void on_term(int sig)
{
    char buf[160];
    size_t n = g_term_len;
    memcpy(buf, g_term_msg, n);
    char digits[24];
    int k = 0;
    for (long v = g_step_now; v > 0 && k < 20; v /= 10)
        digits[k++] = (char)('0' + v % 10);
    if (k == 0)
        digits[k++] = '0';
    static const char in[] = " in step ",
                      end[] = " (mpirun ends the job this way when a rank dies; its own "
                              "message names which)\n";
    memcpy(buf + n, in, sizeof in - 1);
    n += sizeof in - 1;
    while (k > 0)
        buf[n++] = digits[--k];
    memcpy(buf + n, end, sizeof end - 1);
    n += sizeof end - 1;
    ssize_t w = write(2, buf, n);
    (void)w;
    signal(sig, SIG_DFL);
    raise(sig);
}

/* A stalled rank: this rank's report, the other live ranks' time to print theirs, then the
 * end of the job. MPI_Finalize would wait for the stalled rank forever. */
static void stalled(const cz_error *err)
{
    signal(SIGTERM, SIG_DFL); /* the report says it all; MPI_Abort's SIGTERM needs no line */
    fprintf(stderr, "canzona-bench: rank %d: %s\n", g_rank, err->message);
    fflush(stderr);
    cz__mpi_watch_settle();
    MPI_Abort(MPI_COMM_WORLD, 3);
}

/* After a call of the executor that failed: a stall there ends the job the same way. */
static void stop_if_stalled(int rc, const cz_error *err)
{
    if (rc && cz__mpi_watch_broken())
        stalled(err);
}

/* Waits for the bench's collective r on comm; a stall ends the job (stalled). */
static void bench_wait(MPI_Request *r, MPI_Comm comm, const char *what)
{
    cz_error err;
    if (cz__mpi_wait(g_chan, r, 1, comm, NULL, g_timeout, what, &err))
        stalled(&err);
}

static void bench_barrier(MPI_Comm comm, const char *what)
{
    MPI_Request r;
    MPI_Ibarrier(comm, &r);
    bench_wait(&r, comm, what);
}

static void bench_allreduce(const void *in, void *out, int n, MPI_Datatype t, MPI_Op op,
                            MPI_Comm comm, const char *what)
{
    MPI_Request r;
    MPI_Iallreduce(in, out, n, t, op, comm, &r);
    bench_wait(&r, comm, what);
}

/* MPI_Comm_split has no non-blocking form: every rank of comm is known to be there first. */
static void bench_split(MPI_Comm comm, int color, int key, MPI_Comm *out, const char *what)
{
    bench_barrier(comm, what);
    MPI_Comm_split(comm, color, key, out);
}

static void usage(FILE *f)
{
    fprintf(
        f, "usage: mpirun -np DP*TP canzona-bench --plan PLAN --model MODEL [options]\n"
           "Runs the plan's optimizer step with libcanzona-exec and times it.\n"
           "  --plan FILE        plan written by `canzona plan` (required)\n"
           "  --model FILE       the model the plan was made for (required; checked by hash)\n"
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
           "  --lr X             Muon learning rate (default: 1e-3 with --scaling rms, 0.02 with\n"
           "                     shape)\n"
           "  --scaling S        Muon update scale: rms (0.2*sqrt(max(m,n)), default) or shape\n"
           "                     (sqrt(max(1,m/n)))\n"
           "  --scale-coeff X    coefficient of the rms scaling (default 0.2)\n"
           "  --momentum X       Muon momentum (default 0.95)\n"
           "  --nesterov         Nesterov momentum for Muon (the default)\n"
           "  --no-nesterov      plain momentum for Muon\n"
           "  --ns-steps N       Newton-Schulz iterations (default 5)\n"
           "  --ns-coeffs NAME   Newton-Schulz coefficients: jordan (default) or cubic\n"
           "  --ns-eps X         added to the Frobenius norm before Newton-Schulz (default 1e-7)\n"
           "  --weight-decay X   decoupled weight decay of Muon, and of AdamW unless\n"
           "                     --adamw-weight-decay is given (default 0.01)\n"
           "  --adamw-lr X       AdamW learning rate (default 3e-4)\n"
           "  --adamw-beta1 X    (default 0.9)\n"
           "  --adamw-beta2 X    (default 0.95)\n"
           "  --adamw-eps X      (default 1e-8)\n"
           "  --adamw-weight-decay X  AdamW's own decoupled weight decay\n"
           "  --max-grad-norm X  clip the global gradient norm to X (default 0: no clipping)\n"
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
          "  --early-updates    with --overlap, run each micro-group inside the bucket_ready\n"
          "                     that posts its last bucket (cz_executor_set_early_updates;\n"
          "                     turns the NaN/Inf check off, refused with --max-grad-norm)\n"
          "  --compute-ms X     simulate X ms of backward compute per bucket this rank holds\n"
          "                     (a sleep, no MPI call): with --overlap before each\n"
          "                     bucket_ready, without it all before the step; prints the\n"
          "                     exposed step, the iteration's wall time less that compute\n",
          f);
}

/* Returns 0, 1 for --help, or 2 with the reason in msg. Prints nothing: main agrees on the
 * outcome across ranks first. */
static int parse(int argc, char **argv, bench_opts *o, char *msg, size_t cap)
{
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
                                          {"help", no_argument, 0, 'h'},
                                          {0, 0, 0, 0}};
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
    o->adamw_lr = d.adamw_lr;
    o->wd = d.weight_decay;
    o->adamw_wd = -1.0; /* = --weight-decay */
    o->ns_coeffs = d.ns_coeffs;
    o->nesterov = d.nesterov;
    o->momentum = d.momentum;
    o->ns_steps = d.ns_steps;
    o->scaling = d.muon_scaling;
    o->scale_coeff = d.scale_coeff;
    o->beta1 = d.adamw_beta1;
    o->beta2 = d.adamw_beta2;
    o->adamw_eps = d.adamw_eps;
    o->max_grad_norm = d.max_grad_norm;
    o->dtype = d.dtype;
    o->ns_eps = d.ns_eps;
    o->delay_bucket = o->skip_bucket = o->repeat_bucket = -1;
    int c;
    char *end;
    opterr = 0;
    int li = 0;
    while ((c = getopt_long(argc, argv, "", longs, &li)) != -1) {
        errno = 0;
        end = NULL;
        switch (c) {
        case 'p':
            o->plan = optarg;
            break;
        case 'm':
            o->model = optarg;
            break;
        case 's':
            o->steps = (int)strtol(optarg, &end, 10);
            break;
        case 'w':
            o->warmup = (int)strtol(optarg, &end, 10);
            break;
        case 'S':
            o->seed = strtoull(optarg, &end, 10);
            break;
        case 'i':
            o->init_dir = optarg;
            break;
        case 'd':
            o->dump_dir = optarg;
            break;
        case 'j':
            o->json = optarg;
            break;
        case 'v':
            o->verify = 1;
            break;
        case 't':
            o->tolerance = strtod(optarg, &end);
            break;
        case 'l':
            o->lr = strtod(optarg, &end);
            break;
        case 'a':
            o->adamw_lr = strtod(optarg, &end);
            break;
        case 'W':
            o->wd = strtod(optarg, &end);
            break;
        case 'n':
            o->nesterov = 1;
            break;
        case 'o':
            o->nesterov = 0;
            break;
        case 'M':
            o->momentum = strtod(optarg, &end);
            break;
        case 'k':
            o->ns_steps = (int)strtol(optarg, &end, 10);
            break;
        case 'x':
            if (strcmp(optarg, "rms") == 0)
                o->scaling = CZ_MUON_SCALE_RMS;
            else if (strcmp(optarg, "shape") == 0)
                o->scaling = CZ_MUON_SCALE_SHAPE;
            else {
                snprintf(msg, cap, "--scaling '%s': expected rms or shape", optarg);
                return 2;
            }
            break;
        case 'X':
            o->scale_coeff = strtod(optarg, &end);
            break;
        case '1':
            o->beta1 = strtod(optarg, &end);
            break;
        case '2':
            o->beta2 = strtod(optarg, &end);
            break;
        case 'e':
            o->adamw_eps = strtod(optarg, &end);
            break;
        case 'D':
            o->adamw_wd = strtod(optarg, &end);
            break;
        case 'G':
            o->max_grad_norm = strtod(optarg, &end);
            break;
        case 'g':
            o->grad_dir = optarg;
            break;
        case 'u':
            o->dump_grads = optarg;
            break;
        case 'y':
            o->load_state = optarg;
            break;
        case 'z':
            o->save_state = optarg;
            break;
        case 'T': {
            cz_dtype t;
            if (cz_dtype_parse(optarg, &t) != 0 || (t != CZ_DTYPE_FP32 && t != CZ_DTYPE_BF16)) {
                snprintf(msg, cap, "--dtype '%s': expected fp32 or bf16", optarg);
                return 2;
            }
            o->dtype = (int)t;
            break;
        }
        case 'U':
            o->update_tolerance = strtod(optarg, &end);
            break;
        case 'E':
            o->ns_eps = strtod(optarg, &end);
            break;
        case 'c':
            o->ns_coeffs = optarg;
            break;
        case 'O':
            o->own_comms = 1;
            break;
        case 'B':
            o->bad_dp_comm = 1;
            break;
        case 'R':
            o->corrupt_replica = 1;
            break;
        case 'K':
            o->backend = optarg;
            break;
        case 'Y':
            o->comm = optarg;
            break;
        case 'N':
            o->inject_nan = optarg;
            break;
        case 1001:
            o->shampoo.shampoo_beta1 = strtof(optarg, &end);
            break;
        case 1002:
            o->shampoo.shampoo_beta2 = strtof(optarg, &end);
            break;
        case 1003:
            o->shampoo.shampoo_eps = strtof(optarg, &end);
            break;
        case 1004:
            o->shampoo.shampoo_momentum = strtof(optarg, &end);
            break;
        case 1005:
            o->shampoo.shampoo_nesterov = (int)strtol(optarg, &end, 10);
            break;
        case 1006:
            o->shampoo.shampoo_start_step = (int)strtol(optarg, &end, 10);
            break;
        case 1007:
            o->shampoo.shampoo_max_dim = (int)strtol(optarg, &end, 10);
            break;
        case 1008: {
            static const char *const names[] = {"none", "adagrad", "rmsprop", "adam"};
            int k = 0;
            while (k < 4 && strcmp(optarg, names[k]) != 0)
                k++;
            if (k == 4) {
                snprintf(msg, cap, "--shampoo-grafting %s: expected none, adagrad, rmsprop or adam",
                         optarg);
                return 2;
            }
            o->shampoo.shampoo_grafting = (cz_shampoo_grafting)k;
            break;
        }
        case 1009:
            o->shampoo.shampoo_graft_beta2 = strtof(optarg, &end);
            break;
        case 1010:
            o->shampoo.shampoo_graft_eps = strtof(optarg, &end);
            break;
        case 1011:
            o->shampoo.soap_beta1 = strtof(optarg, &end);
            break;
        case 1012:
            o->shampoo.soap_beta2 = strtof(optarg, &end);
            break;
        case 1013:
            o->shampoo.soap_shampoo_beta = strtof(optarg, &end);
            break;
        case 1014:
            o->shampoo.soap_eps = strtof(optarg, &end);
            break;
        case 1015:
            o->overlap = 1;
            break;
        case 1016:
            o->delay_bucket = (int)strtol(optarg, &end, 10);
            break;
        case 1017:
            o->skip_bucket = (int)strtol(optarg, &end, 10);
            break;
        case 1018:
            o->repeat_bucket = (int)strtol(optarg, &end, 10);
            break;
        case 1019:
            o->compute_ms = strtod(optarg, &end);
            break;
        case 1020:
            o->early = 1;
            break;
        case 'h':
            return 1;
        default:
            snprintf(msg, cap, "unknown option or missing value: %s (see --help)",
                     argv[optind - 1]);
            return 2;
        }
        if (end && (end == optarg || *end || errno)) {
            snprintf(msg, cap, "bad number '%s' for --%s", optarg, longs[li].name);
            return 2;
        }
    }
    if ((o->own_comms || o->bad_dp_comm) && strcmp(o->comm, "mpi") != 0) {
        snprintf(msg, cap,
                 "--own-comms and --bad-dp-comm hand in MPI communicators: only with "
                 "--comm mpi");
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
    if (o->load_state && o->verify) {
        /* The single-process reference starts from zero optimizer state. */
        snprintf(msg, cap,
                 "--load-state and --verify do not go together: the reference run "
                 "starts from zero optimizer state");
        return 2;
    }
    return 0;
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
        "backend=%s comm=%s",
        prc == 1, o->steps, o->warmup, (unsigned long long)o->seed, o->verify, o->dump_dir != NULL,
        o->init_dir != NULL, o->grad_dir != NULL, o->dtype, o->lr, (int)o->scaling, o->scale_coeff,
        o->momentum, o->nesterov, o->ns_steps, o->ns_coeffs ? o->ns_coeffs : "", o->ns_eps, o->wd,
        o->adamw_lr, o->beta1, o->beta2, o->adamw_eps, o->adamw_wd, o->max_grad_norm, o->own_comms,
        o->bad_dp_comm, o->corrupt_replica, o->inject_nan ? o->inject_nan : "", o->backend,
        o->comm);
    if (n < 0 || (size_t)n >= cap)
        return;
    snprintf(buf + n, cap - (size_t)n,
             " shampoo=%.9g,%.9g,%.9g,%.9g,%d,%d,%d,%d,%.9g,%.9g soap=%.9g,%.9g,%.9g,%.9g "
             "overlap=%d,%d,%d,%d,%.17g,%d",
             h->shampoo_beta1, h->shampoo_beta2, h->shampoo_eps, h->shampoo_momentum,
             h->shampoo_nesterov, h->shampoo_start_step, h->shampoo_max_dim,
             (int)h->shampoo_grafting, h->shampoo_graft_beta2, h->shampoo_graft_eps, h->soap_beta1,
             h->soap_beta2, h->soap_shampoo_beta, h->soap_eps, o->overlap, o->delay_bucket,
             o->skip_bucket, o->repeat_bucket, o->compute_ms, o->early);
}

/* Option errors are agreed across ranks like every later failure, before any other
 * collective: a rank that stopped alone would leave the others waiting forever. Each rank
 * prints its own reason. Returns 1 when every rank parsed the same valid options. */
static int agree_options(const bench_opts *o, int prc, const char *msg)
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
    bench_allreduce(mine, all, 3, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD,
                    "canzona-bench's agreement on the options");
    if (prc == 2) {
        fprintf(stderr, "canzona-bench: rank %d: %s\n", g_rank, msg);
        return 0;
    }
    if (all[0]) {
        fprintf(stderr, "canzona-bench: rank %d: stopping, another rank's options are invalid\n",
                g_rank);
        return 0;
    }
    if (all[1] != ~all[2]) {
        fprintf(stderr,
                "canzona-bench: rank %d: the ranks were given different options; every rank "
                "must get the same ones (this rank: %s)\n",
                g_rank, text);
        return 0;
    }
    return 1;
}

/* Every rank learns whether any failed; prints the local message. Returns 1 if any failed. */
static int any_failed(int rc, const cz_error *err, const char *what)
{
    stop_if_stalled(rc, err);
    int mine = rc != 0, any = 0;
    bench_allreduce(&mine, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD,
                    "canzona-bench's agreement on failure");
    if (mine)
        fprintf(stderr, "canzona-bench: rank %d: %s: %s\n", g_rank, what, err->message);
    else if (any)
        fprintf(stderr, "canzona-bench: rank %d: stopping, another rank failed (%s)\n", g_rank,
                what);
    return any;
}

static int64_t full_numel(const cz_plan_param *p)
{
    return p->def.shape[0] * (p->def.ndim == 1 ? 1 : p->def.shape[1]);
}

static int64_t param_offset(const cz_plan *plan, const cz_plan_param *p)
{
    return plan->buckets[cz__bucket_index(plan, p->bucket)].offset + p->offset;
}

/* This rank's place: its stage, DP and TP rank, and with expert groups its place in the
 * expert grid (local rank = dp_rank * tp + tp_rank = (edp_rank * ep + ep_rank) * etp +
 * etp_rank, Megatron-Core's order) and where its EP rank's expert buffer starts in its buffer
 * (after the stage's dense buckets). */
typedef struct bench_place {
    int stage, dp_rank, tp_rank;
    bool experts;
    int ep_rank, etp_rank, edp_rank;
    int64_t expert_base;
} bench_place;

static bench_place place_make(const cz_plan *plan, int stage, int dp_rank, int tp_rank)
{
    bench_place w = {.stage = stage, .dp_rank = dp_rank, .tp_rank = tp_rank};
    if (cz_plan_has_experts(plan)) {
        int local = dp_rank * plan->tp + tp_rank;
        w.experts = true;
        w.etp_rank = local % plan->etp;
        w.ep_rank = local / plan->etp % plan->ep;
        w.edp_rank = local / (plan->etp * plan->ep);
    }
    for (size_t b = 0; b < plan->nbuckets; b++)
        if (plan->buckets[b].stage == stage && !plan->buckets[b].expert)
            w.expert_base += plan->buckets[b].size;
    return w;
}

static bool is_expert(const cz_plan *plan, const cz_plan_param *p)
{
    return cz_plan_has_experts(plan) && p->expert;
}

/* Whether this rank holds p (its stage's, and its EP rank's expert). */
static bool holds(const bench_place *w, const cz_plan_param *p)
{
    return p->stage == w->stage && (!w->experts || !p->expert || p->ep_rank == w->ep_rank);
}

/* This rank's place in the group that splits p: TP, or ETP for a routed expert. */
static int split_rank(const bench_place *w, const cz_plan *plan, const cz_plan_param *p)
{
    return is_expert(plan, p) ? w->etp_rank : w->tp_rank;
}

static int64_t param_offset_at(const cz_plan *plan, const bench_place *w, const cz_plan_param *p)
{
    return (is_expert(plan, p) ? w->expert_base : 0) + param_offset(plan, p);
}

/* Initial full tensor of a parameter: from --init-dir or generated. */
static int initial_full(const bench_opts *o, const cz_plan_param *p, float **out, cz_error *err)
{
    if (o->init_dir) {
        char *path = NULL;
        int rc = cz_npy_param_path(o->init_dir, p->def.name, &path, err);
        if (rc)
            return rc;
        rc = cz_npy_read(path, p->def.ndim, p->def.shape[0], p->def.shape[1], out, err);
        free(path);
        return rc;
    }
    *out = malloc((size_t)full_numel(p) * sizeof(float));
    if (!*out)
        return cz__error_set(err, CZ_ENOMEM, "out of memory for '%s'", p->def.name);
    cz_bench_fill_shard(p, 1, 0, o->seed, 0, 0, 0, CZ_BENCH_PARAM_SCALE, *out);
    return CZ_OK;
}

/* This rank's parameter shards: those of its pipeline stage and EP rank (its buffer holds no
 * other). */
static int fill_params(const bench_opts *o, const cz_plan *plan, const bench_place *w, float *P,
                       cz_error *err)
{
    for (size_t i = 0; i < plan->nparams; i++) {
        const cz_plan_param *p = &plan->params[i];
        if (!holds(w, p))
            continue;
        float *dst = P + param_offset_at(plan, w, p);
        int n = cz_plan_param_tp(plan, p), r = split_rank(w, plan, p);
        if (!o->init_dir) {
            cz_bench_fill_shard(p, n, r, o->seed, 0, 0, 0, CZ_BENCH_PARAM_SCALE, dst);
            continue;
        }
        float *full = NULL;
        int rc = initial_full(o, p, &full, err);
        if (rc)
            return rc;
        cz__shard_pack(p, n, r, full, dst);
        free(full);
    }
    return CZ_OK;
}

/* Creates dir and any missing parent (as mkdir -p). */
static int make_dirs(const char *dir, cz_error *err)
{
    char path[4096];
    size_t n = strlen(dir);
    if (n == 0 || n >= sizeof path)
        return cz__error_set(err, CZ_EINVALID, "directory name '%s' is empty or too long", dir);
    memcpy(path, dir, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (path[i] != '/' && path[i] != '\0')
            continue;
        char c = path[i];
        path[i] = '\0';
        struct stat st;
        if (mkdir(path, 0777) != 0 && errno != EEXIST)
            return cz__error_set(err, CZ_EIO, "%s: cannot create directory: %s", path,
                                 strerror(errno));
        if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
            return cz__error_set(err, CZ_EIO, "%s: exists and is not a directory", path);
        path[i] = c;
    }
    return CZ_OK;
}

/* Gradient files: DIR/step<S>/dp<D>/<param name>.npy in *out (malloc'd); the name is checked as
 * for --init-dir, so that it cannot reach outside the folder. */
static int grad_path(const char *dir, int64_t step, int dp, const char *name, char **out,
                     cz_error *err)
{
    char sub[4200];
    int n = snprintf(sub, sizeof sub, "%s/step%lld/dp%d", dir, (long long)step, dp);
    if (n < 0 || (size_t)n >= sizeof sub)
        return cz__error_set(err, CZ_EINVALID, "gradient folder name '%s' is too long", dir);
    return cz_npy_param_path(sub, name, out, err);
}

/* The full gradient of p that DP replica dp sees at step: from --grad-dir or generated. */
static int full_grad(const bench_opts *o, const cz_plan_param *p, int64_t step, int dp, float *out,
                     cz_error *err)
{
    if (!o->grad_dir) {
        cz_bench_fill_shard(p, 1, 0, o->seed, 1, step, dp, 1.0f, out);
        return CZ_OK;
    }
    char *path = NULL;
    float *tmp = NULL;
    int rc = grad_path(o->grad_dir, step, dp, p->def.name, &path, err);
    if (!rc)
        rc = cz_npy_read(path, p->def.ndim, p->def.shape[0], p->def.shape[1], &tmp, err);
    if (!rc)
        memcpy(out, tmp, (size_t)full_numel(p) * sizeof(float));
    free(tmp);
    free(path);
    return rc;
}

/* Writes the generated gradients of every step and replica in --grad-dir's layout (rank 0). */
static int dump_grads(const bench_opts *o, const cz_plan *plan, int total, cz_error *err)
{
    int rc = CZ_OK;
    int64_t maxn = 1;
    for (size_t i = 0; i < plan->nparams; i++)
        if (full_numel(&plan->params[i]) > maxn)
            maxn = full_numel(&plan->params[i]);
    float *buf = malloc((size_t)maxn * sizeof(float));
    char dir[4200];
    if (!buf)
        return cz__error_set(err, CZ_ENOMEM, "out of memory");
    for (int s = 0; s < total && !rc; s++)
        for (int d = 0; d < plan->dp && !rc; d++) {
            snprintf(dir, sizeof dir, "%s/step%d/dp%d", o->dump_grads, s, d);
            rc = make_dirs(dir, err);
            for (size_t i = 0; i < plan->nparams && !rc; i++) {
                const cz_plan_param *p = &plan->params[i];
                cz_bench_fill_shard(p, 1, 0, o->seed, 1, s, d, 1.0f, buf);
                char *path = NULL;
                rc = grad_path(o->dump_grads, s, d, p->def.name, &path, err);
                if (!rc)
                    rc =
                        cz_npy_write(path, buf, p->def.ndim, p->def.shape[0], p->def.shape[1], err);
                free(path);
            }
        }
    free(buf);
    return rc;
}

/* This rank's gradient shards of one step: generated shard by shard, or cut from the full
 * tensors of --grad-dir (the same values when the files hold the generated ones). */
static int fill_grads(const bench_opts *o, const cz_plan *plan, const bench_place *w, int64_t step,
                      float *G, cz_error *err)
{
    int rc = CZ_OK;
    for (size_t i = 0; i < plan->nparams && !rc; i++) {
        const cz_plan_param *p = &plan->params[i];
        if (!holds(w, p))
            continue;
        float *dst = G + param_offset_at(plan, w, p);
        int n = cz_plan_param_tp(plan, p), r = split_rank(w, plan, p);
        /* A routed expert's replicas are its expert-DP group's ranks. */
        int replica = is_expert(plan, p) ? w->edp_rank : w->dp_rank;
        if (!o->grad_dir) {
            cz_bench_fill_shard(p, n, r, o->seed, 1, step, replica, 1.0f, dst);
            continue;
        }
        float *full = malloc((size_t)full_numel(p) * sizeof(float));
        rc = full ? full_grad(o, p, step, replica, full, err)
                  : cz__error_set(err, CZ_ENOMEM, "out of memory for '%s'", p->def.name);
        if (!rc)
            cz__shard_pack(p, n, r, full, dst);
        free(full);
    }
    return rc;
}

/* One parameter's full tensor into full (malloc'ed by the caller; NULL when it could not be)
 * on rank 0 of row, the TP ranks of one DP rank of its stage. Every rank of row takes part,
 * whatever failed before, so that none is left in the gather. */
static int gather_param(const cz_plan *plan, const bench_place *w, MPI_Comm row, int rank,
                        const cz_plan_param *p, const float *P, float *full, cz_error *err)
{
    int tp = cz_plan_param_tp(plan, p), rc = CZ_OK;
    float *all = rank == 0 ? malloc((size_t)(p->numel * tp) * sizeof(float)) : NULL;
    if (rank == 0 && (!all || !full))
        rc = cz__error_set(err, CZ_ENOMEM, "out of memory gathering '%s'", p->def.name);
    MPI_Request r;
    MPI_Igather(P + param_offset_at(plan, w, p), (int)p->numel, MPI_FLOAT, all, (int)p->numel,
                MPI_FLOAT, 0, row, &r);
    bench_wait(&r, row, "canzona-bench's gather of the parameters");
    if (rank == 0 && !rc) {
        if (p->def.tp_dim < 0)
            memcpy(full, all, (size_t)p->numel * sizeof(float));
        else
            for (int k = 0; k < tp; k++)
                cz__shard_unpack(p, tp, k, all + (size_t)k * (size_t)p->numel, full);
    }
    free(all);
    return rc;
}

/* A full tensor from world rank src (the first rank of the row that gathered it) to world
 * rank 0; n floats. Both ends hold a buffer of n floats (gather_full checks). */
static void stage_to_root(int src, float *buf, int64_t n)
{
    if (src == 0 || (g_rank != 0 && g_rank != src))
        return;
    MPI_Request r;
    if (g_rank == 0)
        MPI_Irecv(buf, (int)n, MPI_FLOAT, src, 7, MPI_COMM_WORLD, &r);
    else
        MPI_Isend(buf, (int)n, MPI_FLOAT, 0, 7, MPI_COMM_WORLD, &r);
    bench_wait(&r, MPI_COMM_WORLD, "canzona-bench's transfer of a later stage's parameters");
}

/* Gathers every parameter's full tensor to world rank 0: each stage's from the TP ranks of its
 * DP rank 0 (after the all-gather every DP replica holds all of its stage's parameters), then
 * a later stage's from that stage's first rank. full[i] is set on rank 0. An allocation failure
 * is fatal here (the transfers have no way to skip a tensor): the bench stops. */
static int gather_full(const cz_plan *plan, const bench_place *w, MPI_Comm row, MPI_Comm erow,
                       const float *P, float **full, cz_error *err)
{
    int rank, erank, rc = CZ_OK, per_stage = plan->dp * plan->tp;
    MPI_Comm_rank(row, &rank);
    MPI_Comm_rank(erow, &erank);
    for (size_t i = 0; i < plan->nparams; i++) {
        const cz_plan_param *p = &plan->params[i];
        bool expert = is_expert(plan, p);
        bool mine = holds(w, p) && (expert ? w->edp_rank == 0 : w->dp_rank == 0);
        int me = expert ? erank : rank;
        /* The row's first rank in the world: local rank 0 of the stage, or the first of EP
         * rank e at expert-DP rank 0 (Megatron-Core's order). */
        int src = p->stage * per_stage + (expert ? p->ep_rank * plan->etp : 0);
        if ((g_rank == 0 || (mine && me == 0)) &&
            !(full[i] = malloc((size_t)full_numel(p) * sizeof(float)))) {
            fprintf(stderr, "canzona-bench: rank %d: out of memory gathering '%s'\n", g_rank,
                    p->def.name);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        int prc = mine ? gather_param(plan, w, expert ? erow : row, me, p, P, full[i], err) : CZ_OK;
        rc = rc ? rc : prc;
        stage_to_root(src, full[i], full_numel(p));
    }
    return rc;
}

/* The averaged gradient of p at step s (whole tensor) into g; tmp is scratch of the same size. */
static int avg_grad(const bench_opts *o, const cz_plan *plan, const cz_plan_param *p, int64_t s,
                    float *g, float *tmp, cz_error *err)
{
    int64_t n = full_numel(p);
    /* A routed expert's gradient is summed over its expert-DP replicas and scaled by 1/DP, as
     * Megatron-Core's DDP scales expert gradients (and the executor reduces them). */
    float inv = 1.0f / (float)plan->dp;
    int replicas = is_expert(plan, p) ? plan->edp : plan->dp;
    for (int d = 0; d < replicas; d++) {
        int rc = full_grad(o, p, s, d, tmp, err);
        if (rc)
            return rc;
        for (int64_t k = 0; k < n; k++)
            g[k] = d == 0 ? tmp[k] : g[k] + tmp[k];
    }
    for (int64_t k = 0; k < n; k++)
        g[k] *= inv;
    return CZ_OK;
}

/* Single-process reference: the same steps on whole tensors, gradients averaged over the DP
 * replicas, clipped by the global norm when asked. Compares every parameter and every step's
 * gradient norm (ex_norms) with the distributed run. */
static int reference_compare(const bench_opts *o, const cz_plan *plan, const cz_exec_config *cfg,
                             int total_steps, float *const *dist, const double *ex_norms,
                             double *worst_update, cz_error *err)
{
    int rc = CZ_OK, failures = 0;
    cz_compute cpu;
    cz_muon_hparams mh;
    cz_adamw_hparams ah;
    double *norms = calloc((size_t)total_steps, sizeof(double));
    int64_t maxn = 1;
    for (size_t i = 0; i < plan->nparams; i++)
        if (full_numel(&plan->params[i]) > maxn)
            maxn = full_numel(&plan->params[i]);
    float *g = malloc((size_t)maxn * sizeof(float)), *tmp = malloc((size_t)maxn * sizeof(float));
    rc = cz__compute_open(&cpu, "cpu", err);
    /* The reference here is Muon's; a Shampoo run is checked against the independent
     * reference of tests/mpi (shampoo_ref) on its --dump-dir output. */
    if (!rc && plan->settings.optimizer != CZ_OPTIM_MUON)
        rc = cz__error_set(err, CZ_EUNSUPPORTED,
                           "--verify recomputes Muon plans only; this plan's optimizer is '%s' "
                           "(compare --dump-dir output with an independent reference instead)",
                           cz_optimizer_name(plan->settings.optimizer));
    if (!rc)
        rc = cz__muon_hparams_from_config(&mh, cfg, err);
    if (!rc && (!norms || !g || !tmp))
        rc = cz__error_set(err, CZ_ENOMEM, "out of memory verifying");
    if (rc)
        goto out;
    cz__adamw_hparams_from_config(&ah, cfg);
    printf("verify: %d steps on whole tensors, tolerance %g (max|a-b| / max|b|)\n", total_steps,
           o->tolerance);
    /* First pass: every step's global gradient norm (summed per parameter in double). */
    for (int64_t s = 0; s < total_steps && !rc; s++) {
        double sq = 0.0;
        for (size_t i = 0; i < plan->nparams && !rc; i++) {
            const cz_plan_param *p = &plan->params[i];
            rc = avg_grad(o, plan, p, s, g, tmp, err);
            double ps = 0.0;
            for (int64_t k = 0; !rc && k < full_numel(p); k++)
                ps += (double)g[k] * g[k];
            sq += ps;
        }
        norms[s] = sqrt(sq);
        double rel = fabs(ex_norms[s] - norms[s]) / (norms[s] > 0 ? norms[s] : 1.0);
        int bad = !(rel <= o->tolerance);
        failures += bad;
        printf("  gradient norm of step %-3lld executor %.9g reference %.9g rel.err %.3e%s\n",
               (long long)s, ex_norms[s], norms[s], rel, bad ? "  FAIL" : "");
    }
    for (size_t i = 0; i < plan->nparams && !rc; i++) {
        const cz_plan_param *p = &plan->params[i];
        int64_t n = full_numel(p);
        float *w = NULL, *w0 = NULL;
        float *s1 = calloc((size_t)n, sizeof(float)), *s2 = calloc((size_t)n, sizeof(float));
        rc = initial_full(o, p, &w, err);
        if (!rc)
            rc = initial_full(o, p, &w0, err);
        if (!rc && (!s1 || !s2))
            rc = cz__error_set(err, CZ_ENOMEM, "out of memory verifying '%s'", p->def.name);
        for (int64_t s = 0; s < total_steps && !rc; s++) {
            rc = avg_grad(o, plan, p, s, g, tmp, err);
            if (rc)
                break;
            float max = cfg->max_grad_norm;
            if (max > 0.0f && norms[s] > (double)max) {
                float f = (float)((double)max / (norms[s] + 1e-6));
                for (int64_t k = 0; k < n; k++)
                    g[k] = g[k] * f;
            }
            if (p->def.kind == CZ_KIND_ELEMENTWISE) {
                cz_adamw_args aa;
                cz__adamw_args_make(&aa, &ah, s + 1);
                cz__cpu_adamw(w, g, s1, s2, n, &aa);
            } else {
                cz__cpu_momentum(g, s1, g, n, mh.momentum, mh.nesterov);
                const cz_plan_param *ps[1] = {p};
                const float *in[1] = {g};
                float *outp[1] = {tmp};
                rc = cz__muon_orthogonalize(&cpu, &mh, ps, in, outp, 1, err);
                cz__cpu_apply_update(w, tmp, n, mh.lr, mh.weight_decay);
            }
        }
        if (!rc) {
            double maxd = 0, maxb = 0;
            for (int64_t k = 0; k < n; k++) {
                double d = fabs((double)dist[i][k] - (double)w[k]);
                if (!(d <= maxd))
                    maxd = d; /* NaN propagates as a failure */
                if (fabs((double)w[k]) > maxb)
                    maxb = fabs((double)w[k]);
            }
            /* The update against the reference's: what changed from the initial values,
             * compared as ||ua - ub|| / ||ub|| (one element whose tiny gradient changes sign
             * under rounding moves a whole AdamW step; a max-based figure would be that). */
            double du2 = 0, ub2 = 0;
            for (int64_t k = 0; k < n; k++) {
                double ub = (double)w[k] - w0[k], du = ((double)dist[i][k] - w0[k]) - ub;
                du2 += du * du;
                ub2 += ub * ub;
            }
            double urel = ub2 > 0 ? sqrt(du2 / ub2) : sqrt(du2);
            double rel = maxb > 0 ? maxd / maxb : maxd;
            int bad = !(rel <= o->tolerance) ||
                      (o->update_tolerance > 0 && !(urel <= o->update_tolerance));
            failures += bad;
            if (urel > *worst_update)
                *worst_update = urel;
            printf("  %-48s %-11s rel.err %.3e  update rel.err %.3e%s\n", p->def.name,
                   p->def.kind == CZ_KIND_MATRIX ? "muon" : "adamw", rel, urel,
                   bad ? "  FAIL" : "");
        }
        free(w), free(w0), free(s1), free(s2);
    }
    if (!rc && failures)
        rc = cz__error_set(err, CZ_EMISMATCH,
                           "%d value(s) differ from the reference by more "
                           "than %g",
                           failures, o->tolerance);
    if (!rc)
        printf("verify: OK (largest update rel.err %.3e)\n", *worst_update);
out:
    cz__compute_close(&cpu);
    free(norms), free(g), free(tmp);
    return rc;
}

/* After the parameter all-gather every DP replica must hold bit-identical parameters. Compares
 * a hash of this rank's whole local buffer with the other replicas of its TP rank. */
static uint64_t fnv_bytes(const float *P, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    const unsigned char *bytes = (const unsigned char *)P;
    for (size_t i = 0; i < n * sizeof(float); i++) {
        h ^= bytes[i];
        h *= 1099511628211ull;
    }
    return h;
}

/* Whether the ranks of col all hash to h. */
static bool same_hash(uint64_t h, MPI_Comm col)
{
    uint64_t lo = 0, hi = 0;
    bench_allreduce(&h, &lo, 1, MPI_UINT64_T, MPI_MIN, col, "canzona-bench's replica check");
    bench_allreduce(&h, &hi, 1, MPI_UINT64_T, MPI_MAX, col, "canzona-bench's replica check");
    MPI_Comm_free(&col);
    return lo == hi;
}

/* The dense buffer's replicas are one stage's DP ranks of one TP rank; an expert buffer's, the
 * expert-DP ranks of one stage, EP rank and ETP rank. */
static int check_replicas(const cz_plan *plan, const bench_place *w, const float *P, size_t n,
                          cz_error *err)
{
    size_t dense = w->experts ? (size_t)w->expert_base : n;
    MPI_Comm col, ecol;
    bench_split(MPI_COMM_WORLD, w->stage * plan->tp + w->tp_rank, w->dp_rank, &col,
                "canzona-bench's replica check");
    bench_split(MPI_COMM_WORLD,
                w->experts ? (w->stage * plan->ep + w->ep_rank) * plan->etp + w->etp_rank : g_rank,
                w->edp_rank, &ecol, "canzona-bench's replica check");
    bool dense_ok = same_hash(fnv_bytes(P, dense), col);
    bool expert_ok = same_hash(fnv_bytes(P + dense, n - dense), ecol);
    if (!dense_ok)
        return cz__error_set(err, CZ_EINTERNAL,
                             "the DP replicas of TP rank %d of stage %d hold different parameters "
                             "after the all-gather",
                             w->tp_rank, w->stage);
    if (!expert_ok)
        return cz__error_set(err, CZ_EINTERNAL,
                             "the expert-DP replicas of EP rank %d, ETP rank %d of stage %d hold "
                             "different expert parameters after the all-gather",
                             w->ep_rank, w->etp_rank, w->stage);
    return CZ_OK;
}

static void to_bf16(uint16_t *dst, const float *src, size_t n)
{
    for (size_t k = 0; k < n; k++)
        dst[k] = cz__bf16_from_f32(src[k]);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* The step's phases as the executor's host clock saw them (cz_exec_timings), their sum, and
 * the step's wall time until its last work on the device is done (see the loop). */
enum { NPHASES = 6 };

static int write_json(const bench_opts *o, const cz_plan *plan, const double med[NPHASES],
                      double *const per[NPHASES], int n, cz_error *err)
{
    static const char *names[NPHASES] = {"reduce_scatter", "elementwise", "matrix",
                                         "all_gather",     "total",       "wall"};
    json_t *root = json_object(), *m = json_object(), *steps = json_object();
    json_object_set_new(root, "schema", json_string("canzona.bench/1"));
    json_object_set_new(root, "plan", json_string(o->plan));
    json_object_set_new(root, "model", json_string(plan->model_name ? plan->model_name : ""));
    json_object_set_new(root, "dp", json_integer(plan->dp));
    json_object_set_new(root, "tp", json_integer(plan->tp));
    json_object_set_new(root, "dp_strategy", json_string(cz_dp_strategy_name(plan->settings.dp)));
    json_object_set_new(root, "tp_strategy", json_string(cz_tp_strategy_name(plan->settings.tp)));
    json_object_set_new(root, "backend", json_string(o->backend));
    json_object_set_new(root, "comm", json_string(o->comm));
    json_object_set_new(root, "steps", json_integer(n));
    json_object_set_new(root, "warmup", json_integer(o->warmup));
    for (int k = 0; k < NPHASES; k++) {
        json_object_set_new(m, names[k], json_real(med[k]));
        json_t *a = json_array();
        for (int s = 0; s < n; s++)
            json_array_append_new(a, json_real(per[k][s]));
        json_object_set_new(steps, names[k], a);
    }
    json_object_set_new(root, "median_s", m);
    json_object_set_new(root, "per_step_s", steps);
    /* Through the planner's writer: replaced atomically, errors named with their reason. */
    int rc = cz_bench_write_json(o->json, root, err);
    json_decref(root);
    return rc;
}

/* ms milliseconds standing for backward compute: a sleep, the host idle as under a GPU's
 * backward pass, and no MPI call inside, as a backward pass makes none on the executor's
 * communicators. */
static double g_slept; /* seconds slept by sleep_ms in this step, measured */

static void sleep_ms(double ms)
{
    if (ms <= 0)
        return;
    double t0 = MPI_Wtime();
    struct timespec ts = {(time_t)(ms / 1e3), (long)(fmod(ms, 1e3) * 1e6)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
    /* What it really took (a sleep overshoots): the exposed step subtracts this. */
    g_slept += MPI_Wtime() - t0;
}

/* One step the way a job overlapping it with its passes drives it: each bucket declared ready
 * as a backward pass would finish it (bucket 0, the last layers, first; --delay-bucket's last),
 * the step finished, and each bucket's parameters waited for in the order a forward pass would
 * read them (the first layers' bucket, the highest index, first). */
static int overlap_step(const bench_opts *o, cz_executor *ex, cz_error *err)
{
    size_t nb = cz_executor_bucket_count(ex);
    int world = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    bool last_rank = g_rank == world - 1;
    int rc;
    for (size_t b = 0; b < nb; b++) {
        if (!cz_executor_bucket_held(ex, b) || (int)b == o->delay_bucket ||
            ((int)b == o->skip_bucket && last_rank))
            continue;
        sleep_ms(o->compute_ms);
        if ((rc = cz_executor_bucket_ready(ex, b, err)) != CZ_OK)
            return rc;
        if ((int)b == o->repeat_bucket && (rc = cz_executor_bucket_ready(ex, b, err)) != CZ_OK)
            return rc;
    }
    if (o->delay_bucket >= 0 && cz_executor_bucket_held(ex, (size_t)o->delay_bucket)) {
        sleep_ms(o->compute_ms);
        if ((rc = cz_executor_bucket_ready(ex, (size_t)o->delay_bucket, err)) != CZ_OK)
            return rc;
    }
    if ((rc = cz_executor_step_finish(ex, err)) != CZ_OK)
        return rc;
    for (size_t b = nb; b-- > 0;)
        if (cz_executor_bucket_held(ex, b) && (rc = cz_executor_bucket_wait(ex, b, err)) != CZ_OK)
            return rc;
    return CZ_OK;
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "ns") == 0)
        return cz_bench_ns_main(argc - 1, argv + 1); /* one GPU, no MPI */
    if (argc > 1 && strcmp(argv[1], "coll") == 0)
        return cz_bench_coll_main(argc - 1, argv + 1); /* a model, no MPI */
    if (argc > 1 && strcmp(argv[1], "calibrate") == 0)
        return cz_bench_calibrate_main(argc - 1, argv + 1); /* one GPU, no MPI */
    int world = 1, status = 1;
    bench_opts o;
    cz_error err;
    cz_error_clear(&err);
    cz_plan *plan = NULL;
    cz_model *model = NULL;
    cz_executor *ex = NULL;
    float *P = NULL, *G = NULL, **full = NULL;
    uint16_t *Pb = NULL, *Gb = NULL;
    bench_gpu gpu = {0};
    double *norms = NULL;
    double *per[NPHASES] = {0};
    MPI_Comm row = MPI_COMM_NULL, erow = MPI_COMM_NULL;
    MPI_Comm own_dp = MPI_COMM_NULL, own_tp = MPI_COMM_NULL, world_comm = MPI_COMM_WORLD;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    g_term_len = (size_t)snprintf(g_term_msg, sizeof g_term_msg,
                                  "canzona-bench: rank %d: terminated (SIGTERM)", g_rank);
    if (g_term_len >= sizeof g_term_msg)
        g_term_len = sizeof g_term_msg - 1;
    signal(SIGTERM, on_term);
    g_timeout = cz__comm_mpi_timeout(NULL, getenv("CZ_MPI_TIMEOUT_S"));
    cz__mpi_watch_phase("canzona-bench, starting", -1);
    if (cz__mpi_chan_open(&g_chan, MPI_COMM_WORLD, g_timeout, &err))
        stalled(&err);
    char opt_msg[sizeof err.message] = "";
    int prc = parse(argc, argv, &o, opt_msg, sizeof opt_msg);
    if (!agree_options(&o, prc, opt_msg)) {
        status = 2;
        goto done;
    }
    if (prc == 1) {
        if (g_rank == 0)
            usage(stdout);
        status = 0;
        goto done;
    }

    cz_exec_config cfg;
    cz_exec_config_init(&cfg);
    cfg.backend = o.backend;
    cfg.comm = o.comm;
    bool cuda = strcmp(o.backend, "cuda") == 0;
    cfg.memory = cuda ? CZ_EXEC_MEMORY_DEVICE : CZ_EXEC_MEMORY_HOST;
    cfg.lr = (float)o.lr;
    cfg.adamw_lr = (float)o.adamw_lr;
    cfg.weight_decay = (float)o.wd;
    cfg.adamw_weight_decay = (float)(o.adamw_wd >= 0 ? o.adamw_wd : o.wd);
    cfg.nesterov = o.nesterov;
    cfg.momentum = (float)o.momentum;
    cfg.ns_steps = o.ns_steps;
    cfg.ns_coeffs = o.ns_coeffs;
    cfg.muon_scaling = o.scaling;
    cfg.scale_coeff = (float)o.scale_coeff;
    cfg.adamw_beta1 = (float)o.beta1;
    cfg.adamw_beta2 = (float)o.beta2;
    cfg.adamw_eps = (float)o.adamw_eps;
    cfg.max_grad_norm = (float)o.max_grad_norm;
    cfg.check_finite = !o.early; /* early updates cannot refuse a step after its first update */
    cfg.dtype = o.dtype;
    cfg.ns_eps = (float)o.ns_eps;
    cfg.shampoo_beta1 = o.shampoo.shampoo_beta1;
    cfg.shampoo_beta2 = o.shampoo.shampoo_beta2;
    cfg.shampoo_eps = o.shampoo.shampoo_eps;
    cfg.shampoo_momentum = o.shampoo.shampoo_momentum;
    cfg.shampoo_nesterov = o.shampoo.shampoo_nesterov;
    cfg.shampoo_start_step = o.shampoo.shampoo_start_step;
    cfg.shampoo_max_dim = o.shampoo.shampoo_max_dim;
    cfg.shampoo_grafting = o.shampoo.shampoo_grafting;
    cfg.shampoo_graft_beta2 = o.shampoo.shampoo_graft_beta2;
    cfg.shampoo_graft_eps = o.shampoo.shampoo_graft_eps;
    cfg.soap_beta1 = o.shampoo.soap_beta1;
    cfg.soap_beta2 = o.shampoo.soap_beta2;
    cfg.soap_shampoo_beta = o.shampoo.soap_shampoo_beta;
    cfg.soap_eps = o.shampoo.soap_eps;
    if (o.own_comms || o.bad_dp_comm) {
        /* As a job would: the grid is read from the plan's topology, TP innermost, PP
         * outermost (g_rank / tp is then stage * dp + dp_rank). */
        cz_plan *tmp = NULL;
        int tp = 1, dp = 1;
        if (cz_plan_read(&tmp, o.plan, &err) == 0) {
            tp = tmp->tp;
            dp = tmp->dp;
        }
        cz_plan_free(tmp);
        bench_split(MPI_COMM_WORLD, g_rank / (dp * tp) * tp + g_rank % tp, g_rank % (dp * tp) / tp,
                    &own_dp, "canzona-bench's DP communicator");
        bench_split(MPI_COMM_WORLD, g_rank / tp, g_rank % tp, &own_tp,
                    "canzona-bench's TP communicator");
        cfg.dp_comm = o.bad_dp_comm ? (const void *)&world_comm : (const void *)&own_dp;
        cfg.tp_comm = &own_tp;
    }

    /* The executor reads and checks the plan and agrees on failure across ranks. */
    if (cuda)
        bench_barrier(MPI_COMM_WORLD, "canzona-bench's barrier before selecting the GPU");
    if (cuda && any_failed(bench_gpu_select(&err), &err, "selecting the GPU"))
        goto done;
    int rc = cz_executor_create(&ex, o.plan, &cfg, &err);
    stop_if_stalled(rc, &err);
    if (rc == CZ_OK && o.early)
        rc = cz_executor_set_early_updates(ex, 1, &err);
    if (rc) {
        fprintf(stderr, "canzona-bench: rank %d: %s\n", g_rank, err.message);
        goto done;
    }
    /* The plan must come from this model. The executor sees only the plan; a plan edited with
     * its content hash recomputed would otherwise run, and --verify, which reads the same plan,
     * would not notice. */
    rc = cz_plan_read(&plan, o.plan, &err);
    if (!rc)
        rc = cz_model_load(&model, o.model, &err);
    if (!rc)
        rc = cz__plan_check_model(plan, model, &err);
    if (any_failed(rc, &err, "loading the plan and model"))
        goto done;

    int dp_rank = cz_executor_dp_rank(ex), tp_rank = cz_executor_tp_rank(ex);
    int stage = cz_executor_pp_rank(ex);
    bench_place place = place_make(plan, stage, dp_rank, tp_rank);
    size_t n = cz_executor_buffer_numel(ex);
    /* The job's view is fp32 (P, G); with bf16 the bound buffers are bf16 copies of them. */
    bool bf16 = cz_executor_dtype(ex) == CZ_DTYPE_BF16;
    P = calloc(n ? n : 1, sizeof(float));
    G = calloc(n ? n : 1, sizeof(float));
    if (bf16) {
        Pb = calloc(n ? n : 1, sizeof(uint16_t));
        Gb = calloc(n ? n : 1, sizeof(uint16_t));
        if (!Pb || !Gb)
            P = NULL;
    }
    rc = (P && G) ? CZ_OK : cz__error_set(&err, CZ_ENOMEM, "out of memory for %zu elements", n);
    if (!rc)
        rc = fill_params(&o, plan, &place, P, &err);
    /* With --backend cuda the bound buffers are device copies of P/Pb and G/Gb. */
    size_t bytes = n * (bf16 ? sizeof(uint16_t) : sizeof(float));
    void *hostP = bf16 ? (void *)Pb : (void *)P, *hostG = bf16 ? (void *)Gb : (void *)G;
    if (!rc && bf16)
        to_bf16(Pb, P, n);
    if (!rc && cuda)
        rc = bench_gpu_alloc(&gpu, bytes, &err);
    if (!rc && cuda)
        rc = bench_gpu_copy(gpu.params, hostP, bytes, 1, &err);
    if (!rc)
        rc = cz_executor_bind_typed(ex, cuda ? gpu.params : hostP, cuda ? gpu.grads : hostG, n,
                                    bf16 ? CZ_DTYPE_BF16 : CZ_DTYPE_FP32, &err);
    if (any_failed(rc, &err, "preparing the buffers"))
        goto done;
    rc = o.load_state ? cz_executor_load_state(ex, o.load_state, &err) : CZ_OK;
    if (any_failed(rc, &err, "loading the optimizer state"))
        goto done;

    int total = o.warmup + o.steps;
    rc = (g_rank == 0 && o.dump_grads) ? dump_grads(&o, plan, total, &err) : CZ_OK;
    if (any_failed(rc, &err, "writing the gradients"))
        goto done;
    norms = calloc((size_t)total, sizeof(double));
    if (!norms) {
        fprintf(stderr, "canzona-bench: rank %d: out of memory\n", g_rank);
        goto done;
    }
    for (int k = 0; k < NPHASES; k++) {
        per[k] = calloc((size_t)o.steps, sizeof(double));
        if (!per[k]) {
            fprintf(stderr, "canzona-bench: rank %d: out of memory\n", g_rank);
            goto done;
        }
    }
    uint64_t allocs_after_first = 0, dev_after_first = 0;
    for (int s = 0; s < total; s++) {
        if (s == 1) {
            allocs_after_first = cz__exec_alloc_count();
            dev_after_first = bench_gpu_alloc_count();
        }
        g_step_now = s + 1;
        cz__mpi_watch_phase("canzona-bench, reading the step's gradients", s + 1);
        rc = fill_grads(&o, plan, &place, s, G, &err);
        if (any_failed(rc, &err, "reading the gradients"))
            goto done;
        if (o.inject_nan && s == 0 && g_rank == 0) {
            size_t i = 0;
            while (i < plan->nparams && strcmp(plan->params[i].def.name, o.inject_nan) != 0)
                i++;
            if (i < plan->nparams && holds(&place, &plan->params[i]))
                G[param_offset_at(plan, &place, &plan->params[i])] = NAN;
            else if (i < plan->nparams)
                fprintf(stderr, "canzona-bench: --inject-nan: '%s' is not in rank 0's stage\n",
                        o.inject_nan);
            else
                fprintf(stderr, "canzona-bench: --inject-nan: no parameter '%s'\n", o.inject_nan);
        }
        if (bf16)
            to_bf16(Gb, G, n);
        if (cuda && any_failed(bench_gpu_copy(gpu.grads, hostG, bytes, 1, &err), &err,
                               "uploading the gradients"))
            goto done;
        cz__mpi_watch_phase("canzona-bench, before the step", s + 1);
        bench_barrier(MPI_COMM_WORLD, "canzona-bench's barrier before a step");
        size_t held = 0;
        for (size_t b = 0; b < cz_executor_bucket_count(ex); b++)
            held += (size_t)cz_executor_bucket_held(ex, b);
        if (!o.overlap)
            sleep_ms(o.compute_ms * (double)held);
        g_slept = 0.0;
        /* The executor's timings are host times: on a GPU its step returns with work still
         * queued on the device, so the wall time waits for the device before the clock stops.
         * With --overlap it is the iteration's wall time less the sleeps standing for backward
         * compute inside overlap_step: the exposed step. */
        double w0 = MPI_Wtime();
        rc = o.overlap ? overlap_step(&o, ex, &err) : cz_executor_step(ex, &err);
        if (!rc && cuda)
            rc = bench_gpu_sync(&err);
        double wall = MPI_Wtime() - w0 - g_slept;
        stop_if_stalled(rc, &err);
        if (rc) {
            fprintf(stderr, "canzona-bench: rank %d: %s\n", g_rank, err.message);
            goto done;
        }
        norms[s] = cz_executor_grad_norm(ex);
        if (s < o.warmup)
            continue;
        cz_exec_timings t;
        cz_executor_timings(ex, &t);
        double v[NPHASES] = {t.reduce_scatter, t.elementwise, t.matrix,
                             t.all_gather,     t.total,       wall},
               mx[NPHASES];
        /* A step lasts as long as its slowest rank. */
        cz__mpi_watch_phase("canzona-bench, timing the step", s + 1);
        bench_allreduce(v, mx, NPHASES, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD,
                        "canzona-bench's step timings");
        for (int k = 0; k < NPHASES; k++)
            per[k][s - o.warmup] = mx[k];
    }
    rc = cuda ? bench_gpu_copy(hostP, gpu.params, bytes, 0, &err) : CZ_OK;
    if (any_failed(rc, &err, "downloading the parameters"))
        goto done;
    if (bf16)
        for (size_t k = 0; k < n; k++)
            P[k] = cz__f32_from_bf16(Pb[k]);
    /* Steps after the first must allocate nothing (every executor allocation is counted). */
    uint64_t step_allocs = total > 1 ? cz__exec_alloc_count() - allocs_after_first : 0, max_allocs;
    cz__mpi_watch_phase("canzona-bench, after the steps", -1);
    bench_allreduce(&step_allocs, &max_allocs, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD,
                    "canzona-bench's allocation count");
    /* And no device allocation (cudaMalloc and kin, counted by the GPU plugin). */
    uint64_t dev_allocs = total > 1 ? bench_gpu_alloc_count() - dev_after_first : 0, max_dev;
    bench_allreduce(&dev_allocs, &max_dev, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD,
                    "canzona-bench's device allocation count");
    uint64_t early = (uint64_t)cz_executor_early_groups(ex), all_early;
    bench_allreduce(&early, &all_early, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD,
                    "canzona-bench's early micro-group count");
    /* After the count: a checkpoint allocates, a step must not. */
    rc = o.save_state ? cz_executor_save_state(ex, o.save_state, &err) : CZ_OK;
    if (any_failed(rc, &err, "saving the optimizer state"))
        goto done;
    double med[NPHASES];
    for (int k = 0; k < NPHASES; k++) {
        double *tmp = malloc((size_t)o.steps * sizeof(double));
        memcpy(tmp, per[k], (size_t)o.steps * sizeof(double));
        med[k] = median(tmp, o.steps);
        free(tmp);
    }
    char pp_text[32] = "";
    if (plan->pp > 1)
        snprintf(pp_text, sizeof pp_text, " pp=%d", plan->pp);
    if (g_rank == 0) {
        printf("canzona-bench: %s on dp=%d tp=%d%s (dp %s, tp %s), %d steps after %d warm-up\n",
               plan->model_name ? plan->model_name : "?", plan->dp, plan->tp, pp_text,
               cz_dp_strategy_name(plan->settings.dp), cz_tp_strategy_name(plan->settings.tp),
               o.steps, o.warmup);
        printf("median seconds per step (slowest rank): reduce-scatter %.6f  elementwise %.6f  "
               "matrix %.6f  all-gather %.6f  total %.6f\n",
               med[0], med[1], med[2], med[3], med[4]);
        printf("median step wall time (slowest rank; from the call until the device is done): "
               "%.6f\n",
               med[5]);
        if (o.overlap || o.compute_ms > 0)
            printf("exposed step (the step's wall time, with --overlap from the first "
                   "bucket_ready to the last bucket_wait less the sleeps for --compute-ms %g per "
                   "bucket; slowest rank): median %.6f s\n",
                   o.compute_ms, med[5]);
        if (o.early)
            printf("micro-groups updated early in the last step (before step_finish; every "
                   "rank's, summed): %llu\n",
                   (unsigned long long)all_early);
        printf("executor allocations in steps 2..%d (most on one rank): %llu\n", total,
               (unsigned long long)max_allocs);
        if (cuda)
            printf("device allocations in steps 2..%d (most on one rank): %llu\n", total,
                   (unsigned long long)max_dev);
    }
    rc = (g_rank == 0 && o.json) ? write_json(&o, plan, med, per, o.steps, &err) : CZ_OK;
    if (any_failed(rc, &err, "writing the timings"))
        goto done;

    if (o.verify) {
        if (o.corrupt_replica && dp_rank == 1 && n > 0)
            P[n - 1] += 1.0f; /* (testing) what a broken all-gather would leave behind */
        rc = check_replicas(plan, &place, P, n, &err);
        if (any_failed(rc, &err, "verifying"))
            goto done;
        if (g_rank == 0)
            printf("verify: every DP replica holds identical parameters\n");
    }
    if (o.dump_dir || o.verify) {
        bench_split(MPI_COMM_WORLD, stage * plan->dp + dp_rank, tp_rank, &row,
                    "canzona-bench's parameter gather");
        /* The ETP ranks of one expert rank (stage, expert-DP rank, EP rank); without expert
         * groups each rank alone (unused). */
        bench_split(MPI_COMM_WORLD,
                    place.experts ? (stage * plan->edp + place.edp_rank) * plan->ep + place.ep_rank
                                  : g_rank,
                    place.experts ? place.etp_rank : 0, &erow,
                    "canzona-bench's expert parameter gather");
        full = calloc(plan->nparams ? plan->nparams : 1, sizeof *full);
        rc = full ? gather_full(plan, &place, row, erow, P, full, &err)
                  : cz__error_set(&err, CZ_ENOMEM, "out of memory");
        if (!rc && g_rank == 0 && o.dump_dir) {
            rc = make_dirs(o.dump_dir, &err);
            for (size_t i = 0; i < plan->nparams && !rc; i++) {
                char *path = NULL;
                rc = cz_npy_param_path(o.dump_dir, plan->params[i].def.name, &path, &err);
                if (!rc)
                    rc = cz_npy_write(path, full[i], plan->params[i].def.ndim,
                                      plan->params[i].def.shape[0], plan->params[i].def.shape[1],
                                      &err);
                free(path);
            }
        }
        if (!rc && g_rank == 0 && o.verify) {
            double worst_update = 0;
            rc = reference_compare(&o, plan, &cfg, total, full, norms, &worst_update, &err);
        }
        if (any_failed(rc, &err, o.verify ? "verifying" : "dumping"))
            goto done;
    }
    status = 0;
done:
    if (full && plan)
        for (size_t i = 0; i < plan->nparams; i++)
            free(full[i]);
    free(full);
    free(norms);
    for (int k = 0; k < NPHASES; k++)
        free(per[k]);
    if (row != MPI_COMM_NULL)
        MPI_Comm_free(&row);
    if (erow != MPI_COMM_NULL)
        MPI_Comm_free(&erow);
    if (own_dp != MPI_COMM_NULL)
        MPI_Comm_free(&own_dp);
    if (own_tp != MPI_COMM_NULL)
        MPI_Comm_free(&own_tp);
    cz_executor_free(ex);
    bench_gpu_free(&gpu);
    cz_plan_free(plan);
    cz_model_free(model);
    free(P);
    free(G);
    free(Pb);
    free(Gb);
    cz__mpi_chan_close(g_chan);
    MPI_Finalize();
    return status;
}
