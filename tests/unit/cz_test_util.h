/*
 * cz_test_util.h — in-memory builders of models and clusters for the planner's unit tests.
 * Everything is malloc'd the way the loaders do it, so cz_model_free / cz_cluster_free release
 * it. Random models come from a small fixed-seed generator: tests are reproducible.
 */
#ifndef CZ_TEST_UTIL_H
#define CZ_TEST_UTIL_H

#include "cz_types.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static inline cz_model *czt_model_new(const char *name, cz_dtype dtype, int nlayers)
{
    cz_model *m = calloc(1, sizeof *m);
    if (!m)
        return NULL;
    m->name = cz__strdup(name);
    m->source = cz__strdup("test-model.json");
    m->dtype = dtype;
    m->nlayers = nlayers;
    snprintf(m->sha256, sizeof m->sha256, "%064d", 1);
    return m;
}

/* Appends a parameter; cols == 0 makes it 1-D. Returns its id, or -1 when out of memory. */
static inline int czt_model_add(cz_model *m, const char *name, int64_t rows, int64_t cols,
                                int tp_dim, cz_param_kind kind, int layer)
{
    cz_param_def *np = realloc(m->params, (m->nparams + 1) * sizeof *np);
    if (!np)
        return -1;
    m->params = np;
    cz_param_def *p = &m->params[m->nparams];
    memset(p, 0, sizeof *p);
    p->name = cz__strdup(name);
    p->ndim = cols == 0 ? 1 : 2;
    p->shape[0] = rows;
    p->shape[1] = cols == 0 ? 1 : cols;
    p->tp_dim = tp_dim;
    p->kind = kind;
    p->block_dim = -1;
    p->layer = layer;
    return (int)m->nparams++;
}

/* Splits parameter id into blocks along dim. */
static inline void czt_model_blocks(cz_model *m, int id, int dim, int n, const int64_t *sizes)
{
    cz_param_def *p = &m->params[id];
    free(p->block_sizes);
    p->block_sizes = malloc((size_t)n * sizeof *p->block_sizes);
    memcpy(p->block_sizes, sizes, (size_t)n * sizeof *sizes);
    p->nblocks = n;
    p->block_dim = dim;
}

/* A cluster with 1 TFLOP/s and 1 GB/s so that seconds are FLOPs * 1e-12 + bytes * 1e-9. */
static inline cz_cluster *czt_cluster_new(int dp, int tp, int pp)
{
    cz_cluster *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->name = cz__strdup("test-cluster");
    c->source = cz__strdup("test-cluster.json");
    snprintf(c->sha256, sizeof c->sha256, "%064d", 2);
    c->dp = dp;
    c->tp = tp;
    c->pp = pp;
    c->gpus = dp * tp * pp;
    c->gpus_per_node = 8;
    c->device.name = cz__strdup("test-device");
    c->device.matmul_tflops = 1.0;
    c->device.mem_gbps = 1.0;
    c->device.memory_gib = 80.0;
    c->links.intra_node_gbps = 100.0;
    c->links.inter_node_gbps = 25.0;
    c->links.latency_us = 5.0;
    c->bucket_size = 0;
    c->bucket_align = 64;
    return c;
}

/* xorshift64*: small, fixed-seed, the same everywhere. */
static inline uint64_t czt_rand(uint64_t *state)
{
    uint64_t x = *state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *state = x;
    return x * 2685821657736338717ULL;
}

static inline int czt_rand_int(uint64_t *state, int lo, int hi) /* inclusive */
{
    return lo + (int)(czt_rand(state) % (uint64_t)(hi - lo + 1));
}

/* A random transformer-like model: an elementwise embedding, 1-4 layers of norms, random
 * matrices (some blocked, random tp_dim) and biases, a final norm and an output layer. All
 * dimensions are multiples of 4, so any tp in {1, 2, 4} divides them. */
static inline cz_model *czt_model_random(uint64_t *rng)
{
    int nlayers = czt_rand_int(rng, 1, 4);
    cz_model *m = czt_model_new("random", (cz_dtype)czt_rand_int(rng, 0, 2), nlayers);
    char name[64];
    int h = 4 * czt_rand_int(rng, 2, 16);
    czt_model_add(m, "embedding", 4 * czt_rand_int(rng, 4, 64), h, 0, CZ_KIND_ELEMENTWISE, -1);
    for (int l = 0; l < nlayers; l++) {
        snprintf(name, sizeof name, "layers.%d.norm", l);
        czt_model_add(m, name, h, 0, -1, CZ_KIND_ELEMENTWISE, l);
        int nmat = czt_rand_int(rng, 1, 5);
        for (int k = 0; k < nmat; k++) {
            int64_t rows = 4 * czt_rand_int(rng, 1, 40), cols = 4 * czt_rand_int(rng, 1, 40);
            int tp_dim = czt_rand_int(rng, -1, 1);
            snprintf(name, sizeof name, "layers.%d.w%d", l, k);
            int id = czt_model_add(m, name, rows, cols, tp_dim, CZ_KIND_MATRIX, l);
            if (czt_rand_int(rng, 0, 3) == 0) {
                /* Blocks along dim 0 made of multiples of 4 rows. */
                int64_t sizes[3];
                int64_t q = rows / 4;
                if (q >= 3) {
                    sizes[0] = 4 * (q / 3);
                    sizes[1] = 4 * (q / 3);
                    sizes[2] = rows - sizes[0] - sizes[1];
                    czt_model_blocks(m, id, 0, 3, sizes);
                }
            }
            if (czt_rand_int(rng, 0, 2) == 0) {
                snprintf(name, sizeof name, "layers.%d.b%d", l, k);
                czt_model_add(m, name, rows, 0, tp_dim == 0 ? 0 : -1, CZ_KIND_ELEMENTWISE, l);
            }
        }
    }
    czt_model_add(m, "final_norm", h, 0, -1, CZ_KIND_ELEMENTWISE, -1);
    czt_model_add(m, "output", 4 * czt_rand_int(rng, 4, 64), h, 0, CZ_KIND_ELEMENTWISE, -1);
    return m;
}

/* The whole file at path, '\0'-terminated (its length in *len when len is not NULL); NULL
 * when it cannot be read. The caller frees it. */
static inline char *czt_slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    long n = -1;
    if (f && fseek(f, 0, SEEK_END) == 0)
        n = ftell(f);
    if (n >= 0 && fseek(f, 0, SEEK_SET) == 0 && (buf = malloc((size_t)n + 1)) &&
        fread(buf, 1, (size_t)n, f) == (size_t)n) {
        buf[n] = '\0';
        if (len)
            *len = (size_t)n;
    } else {
        free(buf);
        buf = NULL;
    }
    if (f)
        fclose(f);
    return buf;
}

/* A fresh folder $TMPDIR/<prefix>_XXXXXX (/tmp without TMPDIR) written into dir; NULL when it
 * cannot be made. Tests write only inside it. */
static inline char *czt_tmpdir_make(char *dir, size_t size, const char *prefix)
{
    const char *base = getenv("TMPDIR");
    snprintf(dir, size, "%s/%s_XXXXXX", base && *base ? base : "/tmp", prefix);
    return mkdtemp(dir);
}

/* Removes the folder czt_tmpdir_make made, its files and its empty subfolders. */
static inline void czt_tmpdir_remove(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    char p[512];
    while ((e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        if (remove(p) != 0)
            rmdir(p);
    }
    closedir(d);
    rmdir(dir);
}

#endif /* CZ_TEST_UTIL_H */
