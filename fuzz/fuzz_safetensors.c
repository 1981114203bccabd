/*
 * Harness: the optimizer-state checkpoint reader (cz_executor_load_state, a safetensors file).
 *
 * Three one-process executors over a four-parameter model (written by the harness: an
 * elementwise matrix and vector, a blocked matrix, a 4 x 6 one) on one GPU hold state after
 * three steps: Muon with AdamW, Shampoo (tiles of 4, momentum with weight decay, Adam
 * grafting: every optional tensor) and SOAP (sides up to 4 rotated). Each input is loaded into
 * each of them. Properties beyond "no crash, leak or undefined
 * behaviour":
 *   - a refusal carries a message and leaves the executor's state as it was (every state
 *     buffer and the step count hash as before: read in place, the cpu backend's memory being
 *     host memory, so that the check costs no file);
 *   - a file the reader accepts is read exactly: saved again, every tensor holds the input's
 *     bytes under the same name, and the step is the input's.
 *
 * The mutator (LLVMFuzzerCustomMutator below) edits the header with the JSON harnesses' edits
 * (fz_json_edit) and writes it back with its length and padding, or puts a NaN, an infinity or
 * a negative number into the data, so that most inputs get past the length and JSON checks to
 * the checks of offsets, shapes, names and values; one call in four is libFuzzer's own byte
 * mutation.
 *
 * Seeds: with CZ_FUZZ_SEED_DIR set, the harness writes the three executors' checkpoints there
 * (muon.safetensors, shampoo.safetensors, soap.safetensors) and exits (fuzz/run.sh).
 */
#include "canzona_exec.h"
#include "cz_format.h"
#include "cz_exec_testing.h"
#include "fuzz_util.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

size_t LLVMFuzzerMutate(uint8_t *data, size_t size, size_t max_size);

#define FZ_EXECUTORS 3

typedef struct fz_exec {
    const char *name;
    cz_plan *plan;
    cz_executor *ex;
    float *P, *G;
    uint64_t print; /* hash of its state now */
} fz_exec;

static fz_exec execs[FZ_EXECUTORS] = {{.name = "muon"}, {.name = "shampoo"}, {.name = "soap"}};

static char *read_whole(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        fz_fail("cannot read back %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    if (!b || fread(b, 1, (size_t)n, f) != (size_t)n)
        fz_fail("cannot read back %s", path);
    fclose(f);
    *len = (size_t)n;
    return b;
}

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

/* A hash of the buffers of a PARTS tensor that this rank keeps, part by part (its DP rank's
 * schedule lists them). */
static uint64_t parts_print(uint64_t h, const cz_executor *ex, cz_optim *o, int i, int64_t k)
{
    const cz_rank_schedule *rs = ex->schedule;
    cz_exec_part v[64]; /* a task has at most tp parts: the fixture's tp is far below */
    for (int g = 0; g < rs->ngroups; g++)
        for (int t = 0; t < rs->groups[g].ntasks; t++) {
            if (rs->groups[g].task_param[t] != i)
                continue;
            int n = cz__task_parts(ex->plan, &rs->groups[g], t, v, 64);
            for (int j = 0; j < n; j++) {
                const float *b = o->ops->state_buffer(o, i, k, &v[j].part);
                if (b)
                    h = fnv(h, b, (size_t)(v[j].part.rows * v[j].part.cols) * sizeof(float));
            }
        }
    return h;
}

/* A hash of every optimizer-state buffer of ex (through the optimizers' table) and of its step
 * count. */
static uint64_t state_print(const cz_executor *ex)
{
    const cz_plan *plan = ex->plan;
    uint64_t h = fnv(1469598103934665603ull, &ex->steps, sizeof ex->steps);
    cz_state_tensor t[64];
    for (size_t i = 0; i < plan->nparams; i++) {
        const cz_plan_param *p = &plan->params[i];
        cz_optim *o = (cz_optim *)(p->def.kind == CZ_KIND_MATRIX ? &ex->matrix_opt : &ex->elem_opt);
        float *addend = o->ops->state_addend ? o->ops->state_addend(o, (int)i) : NULL;
        if (addend)
            h = fnv(h, addend, (size_t)p->numel * sizeof(float));
        int64_t n = o->ops->state_tensors(o, p, t, 64);
        if (n > 64)
            fz_fail("the fixture has more state tensors than the harness counts");
        for (int64_t k = 0; k < n; k++) {
            if (t[k].place == CZ_STATE_PARTS) {
                h = parts_print(h, ex, o, (int)i, k);
                continue;
            }
            const float *b = o->ops->state_buffer(o, (int)i, k, NULL);
            size_t len = t[k].place == CZ_STATE_SHARDED ? (size_t)ex->own.piece_len[i]
                                                        : (size_t)(t[k].rows * t[k].cols);
            if (b)
                h = fnv(h, b, len * sizeof(float));
        }
    }
    return h;
}

/* Saves x's state and returns the file (malloc'ed). */
static char *save(fz_exec *x, size_t *len)
{
    cz_error err;
    const char *path = fz_scratch_path("saved.safetensors");
    if (cz_executor_save_state(x->ex, path, &err) != CZ_OK)
        fz_fail("%s: saving the state failed: %s", x->name, err.message);
    return read_whole(path, len);
}

static void open_exec(fz_exec *x, const cz_model *model, const cz_cluster *cluster,
                      cz_optimizer opt)
{
    cz_settings s;
    cz_settings_init(&s);
    s.optimizer = opt;
    s.precondition_frequency = 2;
    s.max_precond_dim = 4;
    cz_error err;
    if (cz_plan_build(&x->plan, model, cluster, &s, &err) != CZ_OK)
        fz_fail("%s: the fixture plan does not build: %s", x->name, err.message);
    cz_exec_config cfg;
    cz_exec_config_init(&cfg);
    cfg.comm = "self";
    cfg.shampoo.max_dim = 4;
    cfg.shampoo.momentum = 0.5f;
    cfg.shampoo.grafting = CZ_GRAFT_ADAM;
    cfg.weight_decay = 0.05f;
    if (cz_executor_create_from_plan(&x->ex, x->plan, &cfg, &err) != CZ_OK)
        fz_fail("%s: the fixture executor does not open: %s", x->name, err.message);
    size_t n = cz_executor_buffer_numel(x->ex);
    x->P = calloc(n, sizeof(float));
    x->G = calloc(n, sizeof(float));
    if (!x->P || !x->G)
        fz_fail("%s: out of memory for the fixture buffers", x->name);
    if (cz_executor_bind_buffers(x->ex, x->P, x->G, n, &err) != CZ_OK)
        fz_fail("%s: binding the fixture buffers failed: %s", x->name, err.message);
    for (size_t k = 0; k < n; k++)
        x->P[k] = 0.01f * (float)((k * 7919) % 101) - 0.5f;
    for (int step = 0; step < 3; step++) {
        for (size_t k = 0; k < n; k++)
            x->G[k] = 0.02f * (float)((k * 104729 + (size_t)step * 613) % 97) - 0.97f;
        if (cz_executor_step(x->ex, &err) != CZ_OK)
            fz_fail("%s: a fixture step failed: %s", x->name, err.message);
    }
    x->print = state_print(x->ex);
}

static void write_seeds(const char *dir)
{
    for (int i = 0; i < FZ_EXECUTORS; i++) {
        char path[4096];
        cz_error err;
        snprintf(path, sizeof path, "%s/%s.safetensors", dir, execs[i].name);
        if (cz_executor_save_state(execs[i].ex, path, &err) != CZ_OK)
            fz_fail("cannot write the seed %s: %s", path, err.message);
    }
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    /* Small enough that every checkpoint stays far below the fuzzer's input size (64 KiB) and
     * a load takes microseconds, with every kind of tensor: AdamW moments of a matrix-shaped
     * and a 1-D parameter, a blocked matrix, one cut into tiles (6 > 4) and, for SOAP, sides
     * that are rotated (<= 4) and sides that are not. */
    static const char tiny[] =
        "{\"schema\": \"canzona.model/1\", \"name\": \"fuzz-checkpoint\", \"dtype\": \"fp32\", "
        "\"params\": [{\"name\": \"embed\", \"shape\": [8, 4], \"tp_dim\": null, \"optimizer\": "
        "\"elementwise\"}, {\"name\": \"qkv\", \"shape\": [12, 4], \"tp_dim\": null, \"blocks\": "
        "{\"dim\": 0, \"sizes\": [4, 4, 4]}}, {\"name\": \"norm\", \"shape\": [4], \"tp_dim\": "
        "null}, "
        "{\"name\": \"proj\", \"shape\": [4, 6], \"tp_dim\": null}]}";
    const char *mpath = fz_scratch_path("fuzz-checkpoint.json");
    FILE *mf = fopen(mpath, "w");
    if (!mf || fputs(tiny, mf) < 0 || fclose(mf) != 0)
        fz_fail("cannot write the fixture model");
    cz_model *model = NULL;
    cz_error merr;
    if (cz_model_load(&model, mpath, &merr) != CZ_OK)
        fz_fail("the fixture model does not load: %s", merr.message);
    static const char one_gpu[] =
        "{\"schema\": \"canzona.cluster/1\", \"name\": \"one-gpu\", \"gpus\": 1, \"dp\": 1, "
        "\"tp\": 1, \"pp\": 1, \"gpus_per_node\": 1, \"device\": {\"name\": \"test-gpu\", "
        "\"matmul_tflops\": 700, \"mem_gbps\": 2500, \"memory_gib\": 80}, \"links\": "
        "{\"intra_node_gbps\": 450, \"inter_node_gbps\": 50, \"latency_us\": 1}}";
    const char *cpath = fz_scratch_path("one-gpu.json");
    FILE *f = fopen(cpath, "w");
    if (!f || fputs(one_gpu, f) < 0 || fclose(f) != 0)
        fz_fail("cannot write the fixture cluster");
    cz_cluster *cluster = NULL;
    cz_error err;
    if (cz_cluster_load(&cluster, cpath, &err) != CZ_OK)
        fz_fail("the fixture cluster does not load: %s", err.message);
    const cz_optimizer opts[FZ_EXECUTORS] = {CZ_OPTIM_MUON, CZ_OPTIM_SHAMPOO, CZ_OPTIM_SOAP};
    for (int i = 0; i < FZ_EXECUTORS; i++)
        open_exec(&execs[i], model, cluster, opts[i]);
    cz_cluster_free(cluster);
    cz_model_free(model);
    const char *seeds = getenv("CZ_FUZZ_SEED_DIR");
    if (seeds) {
        write_seeds(seeds);
        exit(0);
    }
    return 0;
}

/* The header of a checkpoint (data, len): its JSON object, and where the data starts. */
static json_t *header(const char *data, size_t len, size_t *base)
{
    uint64_t h = 0;
    for (int b = 0; b < 8 && (size_t)b < len; b++)
        h |= (uint64_t)(unsigned char)data[b] << (8 * b);
    if (len < 8 || h > len - 8)
        return NULL;
    *base = 8 + (size_t)h;
    return json_loadb(data + 8, (size_t)h, 0, NULL);
}

/* The byte range [begin, end) of tensor key in a parsed header. */
static void range(json_t *root, const char *key, size_t *begin, size_t *end)
{
    json_t *o = json_object_get(json_object_get(root, key), "data_offsets");
    *begin = (size_t)json_integer_value(json_array_get(o, 0));
    *end = (size_t)json_integer_value(json_array_get(o, 1));
}

/* An accepted input, saved again: the same tensors with the same bytes, the same step. */
static void check_read_exactly(fz_exec *x, const char *in, size_t in_len)
{
    size_t out_len, in_base = 0, out_base = 0;
    char *out = save(x, &out_len);
    json_t *hi = header(in, in_len, &in_base), *ho = header(out, out_len, &out_base);
    if (!hi || !ho)
        fz_fail("%s: an accepted checkpoint or its copy has no readable header", x->name);
    const char *key;
    json_t *v;
    json_object_foreach(ho, key, v)
    {
        if (strcmp(key, "__metadata__") == 0) {
            const char *a =
                json_string_value(json_object_get(json_object_get(hi, "__metadata__"), "step"));
            const char *b = json_string_value(json_object_get(v, "step"));
            if (!a || !b || strtoll(a, NULL, 10) != strtoll(b, NULL, 10))
                fz_fail("%s: step \"%s\" was read as \"%s\"", x->name, a ? a : "?", b ? b : "?");
            continue;
        }
        if (!json_object_get(hi, key))
            fz_fail("%s: tensor '%s' was saved but the accepted input has none", x->name, key);
        size_t ib, ie, ob, oe;
        range(hi, key, &ib, &ie);
        range(ho, key, &ob, &oe);
        if (ie - ib != oe - ob || memcmp(in + in_base + ib, out + out_base + ob, ie - ib) != 0)
            fz_fail("%s: tensor '%s' changed between the accepted input and its copy", x->name,
                    key);
    }
    if (json_object_size(hi) != json_object_size(ho))
        fz_fail("%s: the accepted input has %zu entries, its copy %zu", x->name,
                json_object_size(hi), json_object_size(ho));
    json_decref(hi);
    json_decref(ho);
    free(out);
    x->print = state_print(x->ex);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fz_input_path(0, data, size);
    for (int i = 0; i < FZ_EXECUTORS; i++) {
        fz_exec *x = &execs[i];
        cz_error err;
        cz_error_clear(&err);
        int rc = cz_executor_load_state(x->ex, path, &err);
        if (rc == CZ_OK) {
            check_read_exactly(x, (const char *)data, size);
            continue;
        }
        if (!err.message[0])
            fz_fail("%s: load refused (%d) without a message", x->name, rc);
        if (rc == CZ_EINTERNAL)
            fz_fail("%s: load failed with an internal error: %s", x->name, err.message);
        if (state_print(x->ex) != x->print)
            fz_fail("%s: a refused load (%s) changed the state", x->name, err.message);
    }
    return 0;
}

/* ---- mutator ---- */

static uint64_t next(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Writes header root and the data section (d, dn) into out as a checkpoint: its length, the
 * header padded with spaces to 8 bytes, the data. Returns the size, 0 when it exceeds max. */
static size_t compose(json_t *root, const uint8_t *d, size_t dn, uint8_t *out, size_t max)
{
    char *text = json_dumps(root, JSON_COMPACT);
    size_t hl = text ? strlen(text) : 0, padded = (hl + 7) / 8 * 8, total = 8 + padded + dn;
    if (!text || total > max) {
        free(text);
        return 0;
    }
    uint8_t *tmp = malloc(dn ? dn : 1);
    if (!tmp) {
        free(text);
        return 0;
    }
    memcpy(tmp, d, dn); /* d lies inside out */
    for (int b = 0; b < 8; b++)
        out[b] = (uint8_t)((uint64_t)padded >> (8 * b));
    memcpy(out + 8, text, hl);
    memset(out + 8 + hl, ' ', padded - hl);
    memcpy(out + 8 + padded, tmp, dn);
    free(tmp);
    free(text);
    return total;
}

size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size, unsigned int seed)
{
    uint64_t s = seed;
    size_t base = 0;
    json_t *root = next(&s) % 4 == 0 ? NULL : header((const char *)data, size, &base);
    if (!json_is_object(root)) {
        json_decref(root);
        return LLVMFuzzerMutate(data, size, max_size);
    }
    size_t dn = size - base;
    uint64_t pick = next(&s) % 4;
    if (pick != 0)
        fz_json_edit(root, &s);
    if (pick <= 1 && dn >= 4) {
        /* A value the optimizer state cannot hold, or one at the edge of what it can. */
        static const float odd[] = {NAN, INFINITY, -INFINITY, -1.0f, -0.0f, 3e38f, 1e-45f};
        float v = odd[next(&s) % (sizeof odd / sizeof odd[0])];
        size_t at = (size_t)(next(&s) % (dn / 4)) * 4;
        memcpy(data + base + at, &v, sizeof v);
    }
    size_t n = compose(root, data + base, dn, data, max_size);
    json_decref(root);
    return n ? n : LLVMFuzzerMutate(data, size, max_size);
}
