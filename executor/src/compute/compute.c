/* The compute seam's dispatch: which table a backend name opens, and the seam's own checks.
 * The cpu backend is built in; "cuda" lives in the GPU plugin (gpu_plugin.h), loaded the first
 * time a job asks for it; tests may register a table of their own (a recording wrapper). */
#include "compute.h"
#include "compute_cpu.h"
#include "cz_format.h"
#include "gpu_plugin.h"
#include "linalg_plan.h"

#include <string.h>

enum { MAX_REGISTERED = 4 };
static const cz_compute_ops *registered[MAX_REGISTERED];

int cz__compute_register(const cz_compute_ops *ops)
{
    for (int i = 0; i < MAX_REGISTERED; i++)
        if (!registered[i] || registered[i] == ops) {
            registered[i] = ops;
            return CZ_OK;
        }
    return CZ_EINVALID;
}

static int adopt(cz_compute *c, const cz_compute_ops *ops, cz_error *err)
{
    if (ops->version != CZ_COMPUTE_OPS_VERSION)
        return cz__error_set(err, CZ_EINTERNAL,
                             "compute backend '%s' has ops version %d; this executor needs %d",
                             ops->name, ops->version, CZ_COMPUTE_OPS_VERSION);
    c->ops = ops;
    return CZ_OK;
}

int cz__compute_open_cuda(cz_compute *c, const cz_cuda_options *o, cz_error *err)
{
    const cz_gpu_api *gpu;
    cz_error e;
    c->ops = NULL;
    c->impl = NULL;
    /* The plugin was built with this library (its ABI string is checked at load), so its
     * tables are of this version. */
    if (cz__gpu_load(&gpu, &e))
        return cz__error_set(err, e.code, "compute backend 'cuda' is not available: %s", e.message);
    return gpu->compute_open(c, o, err);
}

int cz__compute_open(cz_compute *c, const char *name, cz_error *err)
{
    c->ops = NULL;
    c->impl = NULL;
    if (!name || strcmp(name, "cpu") == 0)
        return adopt(c, &cz__compute_cpu_ops, err);
    if (strcmp(name, "cuda") == 0)
        return cz__compute_open_cuda(c, NULL, err);
    for (int i = 0; i < MAX_REGISTERED && registered[i]; i++)
        if (strcmp(name, registered[i]->name) == 0)
            return adopt(c, registered[i], err);
    return cz__error_set(err, CZ_EUNSUPPORTED, "compute backend '%s' is unknown (known: cpu, cuda)",
                         name);
}

int cz__compute_open_for(cz_compute *c, const cz_compute_want *w, bool *staged, cz_error *err)
{
    const char *name = w->name ? w->name : "cpu";
    int rc;
    *staged = false;
    if (!w->host_plane && strcmp(name, "cuda") != 0)
        return cz__error_set(err, CZ_EUNSUPPORTED,
                             "comm backend '%s' works on device memory: it needs backend "
                             "'cuda' (backend is '%s')",
                             w->plane, name);
    if (strcmp(name, "cuda") != 0)
        return cz__compute_open(c, name, err);
    if (w->memory != CZ_EXEC_MEMORY_DEVICE)
        return cz__error_set(err, CZ_EUNSUPPORTED,
                             "compute backend 'cuda' binds device memory: set memory = "
                             "CZ_EXEC_MEMORY_DEVICE (1) and bind buffers from cudaMalloc");
    /* A host-driven plane (mpi, self) reads and writes the executor's buffers from the host:
     * they are then managed memory, and the step stages the job's device buffers through
     * them (the host-staged combination). NCCL works on device memory directly. Newton-Schulz
     * runs in bf16 (fp32 accumulation) when the parameters are bf16. */
    cz_cuda_options o = {
        .stream = w->stream,
        .managed = w->host_plane,
        .ns_precision = w->dtype == CZ_DTYPE_BF16 ? CZ_NS_BF16 : CZ_NS_FP32,
    };
    if ((rc = cz__compute_open_cuda(c, &o, err)) != CZ_OK)
        return rc;
    *staged = o.managed;
    return CZ_OK;
}

void cz__compute_close(cz_compute *c)
{
    if (c->ops && c->ops->close)
        c->ops->close(c);
    c->ops = NULL;
    c->impl = NULL;
}

int cz__compute_linalg_work(cz_compute *c, int64_t n, int64_t vn, cz_linalg_work *out,
                            cz_error *err)
{
    return c->ops->linalg_work(c, n, vn, out, err);
}

int cz__compute_linalg_work_block(cz_compute *c, int64_t rows, int64_t cols, int64_t max_dim,
                                  cz_linalg_work *out, cz_error *err)
{
    int64_t sides[2];
    int n = cz__la_factored_sides(rows, cols, max_dim, sides);
    *out = (cz_linalg_work){0};
    for (int i = 0; i < n; i++) {
        cz_linalg_work w;
        int rc = c->ops->linalg_work(c, sides[i], rows * cols, &w, err);
        if (rc)
            return rc;
        out->syevd = w.syevd > out->syevd ? w.syevd : out->syevd;
        out->qr = w.qr > out->qr ? w.qr : out->qr;
        out->sort = w.sort > out->sort ? w.sort : out->sort;
    }
    return CZ_OK;
}

bool cz__compute_has_linalg(const cz_compute *c, const char **missing)
{
    const cz_compute_ops *o = c->ops;
    const char *m = !o->gemm                            ? "gemm"
                    : !o->tile_copy                     ? "tile_copy"
                    : !o->syevd                         ? "syevd"
                    : !o->eig_root_scale                ? "eig_root_scale"
                    : !o->axpby                         ? "axpby"
                    : !o->sq_accum                      ? "sq_accum"
                    : !o->graft_div                     ? "graft_div"
                    : !o->scale_ratio                   ? "scale_ratio"
                    : !o->qr                            ? "qr"
                    : !o->basis_sort                    ? "basis_sort"
                    : o->version < 3 || !o->linalg_work ? "linalg_work"
                                                        : NULL;
    if (missing)
        *missing = m;
    return m == NULL;
}

int cz__compute_require_linalg(const cz_compute *c, const char *what, cz_error *err)
{
    const char *missing = NULL;
    if (cz__compute_has_linalg(c, &missing))
        return CZ_OK;
    return cz__error_set(err, CZ_EUNSUPPORTED,
                         "plan optimizer '%s' needs the compute backend's linear-algebra "
                         "operations, but backend '%s' has no '%s'%s",
                         what, c->ops->name, missing,
                         strcmp(missing, "syevd") == 0 && c->ops->kind == CZ_BACKEND_CPU
                             ? " (this build has no LAPACKE: install liblapacke-dev and rebuild)"
                             : "");
}

void *cz__compute_alloc(cz_compute *c, cz_exec_mem_kind kind, size_t bytes)
{
    void *p = c->ops->alloc(c, bytes);
    if (p && kind >= 0 && kind < CZ_EXEC_MEM_NKINDS)
        c->mem[kind] += (int64_t)bytes;
    return p;
}

void cz__compute_note_runs(cz_compute *c, size_t n)
{
    c->mem[CZ_EXEC_MEM_INDEX] += (int64_t)(n * sizeof(cz_copy_run));
}
