/* Loads the GPU plugin (gpu_plugin.h) on first use.
 *
 * The plugin needs cuBLAS and cuSOLVER, which are found on the machine, never shipped: in the
 * CUDA toolkit, on the system's library path, or inside the nvidia-* Python wheels that
 * PyTorch installs (where no ld.so.conf points). dlopen() of the plugin reports the first
 * library it cannot find ("libcublas.so.13: cannot open shared object file"); the loader then
 * looks for that file in its own list of folders, loads it with RTLD_GLOBAL (so that every
 * later dependency on that soname is satisfied by it) and tries again, one missing library at
 * a time, depth first, so cuSOLVER's own dependencies (cuSPARSE, nvJitLink) are found the same
 * way. Nothing is loaded from the folders when the system's search finds it (a PyTorch process
 * has already loaded its own cuBLAS: dlopen matches it by soname).
 *
 * Folders searched, in order: CZ_NVIDIA_LIBS (colon-separated), CUDA_HOME and CUDA_PATH,
 * /usr/local/cuda, then the nvidia/<package>/lib folders of Python environments: VIRTUAL_ENV,
 * CONDA_PREFIX, each PATH entry's parent (the python3 a user would run), ~/.local, /usr/local,
 * /usr, and PYTHONPATH's entries. The plugin itself: plugin_candidates below. */
/* dladdr: the file a symbol was loaded from. */
#define _GNU_SOURCE
#include "gpu_plugin.h"
#include "alloc.h"

#include <dlfcn.h>
#include <glob.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define PLUGIN_NAME "libcanzona-cuda.so"
/* The most libraries loaded from the folders for one plugin (cuBLAS, cuBLASLt, cuSOLVER,
 * cuSPARSE, nvJitLink today). */
#define MAX_DEPTH 16

#if defined(__x86_64__)
#define CUDA_TARGET "targets/x86_64-linux/lib"
#elif defined(__aarch64__)
#define CUDA_TARGET "targets/sbsa-linux/lib"
#else
#define CUDA_TARGET "lib64"
#endif

int cz__gpu_built(void)
{
#ifdef CZ_GPU_PLUGIN
    return 1;
#else
    return 0;
#endif
}

/* ---- the folder list: '\0'-separated, ending in an empty string ---- */
typedef struct dir_list {
    char *v;
    size_t len, cap;
} dir_list;

static int is_dir(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static void dirs_add(dir_list *d, const char *dir)
{
    size_t n = strlen(dir);
    if (!n || !is_dir(dir))
        return;
    for (const char *s = d->v; s && *s; s += strlen(s) + 1)
        if (strcmp(s, dir) == 0)
            return;
    if (d->len + n + 2 > d->cap) {
        size_t cap = (d->cap ? 2 * d->cap : 1024) + n + 2;
        char *v = realloc(d->v, cap);
        if (!v)
            return; /* a shorter list: the message says what was searched */
        d->v = v;
        d->cap = cap;
    }
    memcpy(d->v + d->len, dir, n + 1);
    d->len += n + 1;
    d->v[d->len] = '\0';
}

static void dirs_add_cuda(dir_list *d, const char *root)
{
    static const char *sub[] = {"lib64", "lib", CUDA_TARGET};
    char p[PATH_MAX];
    for (size_t i = 0; root && *root && i < sizeof sub / sizeof sub[0]; i++)
        if (snprintf(p, sizeof p, "%s/%s", root, sub[i]) < (int)sizeof p)
            dirs_add(d, p);
}

static void dirs_add_glob(dir_list *d, const char *pattern)
{
    glob_t g;
    if (glob(pattern, GLOB_ONLYDIR, NULL, &g) == 0)
        for (size_t i = 0; i < g.gl_pathc; i++)
            dirs_add(d, g.gl_pathv[i]);
    globfree(&g);
}

/* The nvidia-* wheels of the Python environment at prefix: site-packages/nvidia/<pkg>/lib
 * (CUDA 12 wheels: one package per library) and nvidia/cu13/lib (CUDA 13: one folder). */
static void dirs_add_python(dir_list *d, const char *prefix)
{
    static const char *forms[] = {"%s/lib/python3*/site-packages/nvidia/*/lib",
                                  "%s/lib/python3*/dist-packages/nvidia/*/lib",
                                  "%s/lib64/python3*/site-packages/nvidia/*/lib"};
    char p[PATH_MAX];
    for (size_t i = 0; prefix && *prefix && i < sizeof forms / sizeof forms[0]; i++)
        if (snprintf(p, sizeof p, forms[i], prefix) < (int)sizeof p)
            dirs_add_glob(d, p);
}

/* Applies add to every entry of a colon-separated list (one entry, or all of it, when the
 * entry's transform fails). */
static void each_entry(dir_list *d, const char *list, void (*add)(dir_list *, const char *))
{
    char buf[PATH_MAX];
    while (list && *list) {
        size_t n = strcspn(list, ":");
        if (n && n < sizeof buf) {
            memcpy(buf, list, n);
            buf[n] = '\0';
            add(d, buf);
        }
        list += n + (list[n] == ':');
    }
}

static void add_path_parent(dir_list *d, const char *bin)
{
    char p[PATH_MAX];
    size_t n = strlen(bin);
    while (n > 1 && bin[n - 1] == '/')
        n--;
    if (n < 4 || strncmp(bin + n - 4, "/bin", 4) != 0 || n - 4 >= sizeof p)
        return;
    memcpy(p, bin, n - 4);
    p[n - 4] = '\0';
    if (strcmp(p, "/usr") != 0 && p[0]) /* /usr comes last, below */
        dirs_add_python(d, p);
}

static void add_pythonpath(dir_list *d, const char *entry)
{
    char p[PATH_MAX];
    if (snprintf(p, sizeof p, "%s/nvidia/*/lib", entry) < (int)sizeof p)
        dirs_add_glob(d, p);
}

static void build_dirs(dir_list *d)
{
    char p[PATH_MAX];
    each_entry(d, getenv("CZ_NVIDIA_LIBS"), dirs_add);
    dirs_add_cuda(d, getenv("CUDA_HOME"));
    dirs_add_cuda(d, getenv("CUDA_PATH"));
    dirs_add_cuda(d, "/usr/local/cuda");
    dirs_add_python(d, getenv("VIRTUAL_ENV"));
    dirs_add_python(d, getenv("CONDA_PREFIX"));
    each_entry(d, getenv("PATH"), add_path_parent);
    const char *home = getenv("HOME");
    if (home && snprintf(p, sizeof p, "%s/.local", home) < (int)sizeof p)
        dirs_add_python(d, p);
    dirs_add_python(d, "/usr/local");
    dirs_add_python(d, "/usr");
    each_entry(d, getenv("PYTHONPATH"), add_pythonpath);
}

/* ---- loading ---- */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int loaded;
static int load_rc;
static cz_error load_err;
static const cz_gpu_api *api;
static dir_list dirs;

const char *cz__gpu_search_dirs(void)
{
    pthread_mutex_lock(&lock);
    if (!dirs.v)
        build_dirs(&dirs);
    pthread_mutex_unlock(&lock);
    return dirs.v ? dirs.v : "\0";
}

/* The soname dlopen could not find, from glibc's "NAME: cannot open shared object file: ...";
 * 0 when the failure was something else (a symbol, a wrong ELF class). */
static int missing_name(const char *msg, char *out, size_t len)
{
    const char *tail = msg ? strstr(msg, ": cannot open shared object file") : NULL;
    if (!tail)
        return 0;
    const char *start = tail;
    while (start > msg && start[-1] != ' ')
        start--;
    size_t n = (size_t)(tail - start);
    if (n == 0 || n >= len || memchr(start, '/', n))
        return 0;
    memcpy(out, start, n);
    out[n] = '\0';
    return 1;
}

static int find_in_dirs(const char *list, const char *name, char *out, size_t len)
{
    for (const char *s = list; s && *s; s += strlen(s) + 1) {
        struct stat st;
        if (snprintf(out, len, "%s/%s", s, name) < (int)len && stat(out, &st) == 0)
            return 1;
    }
    return 0;
}

/* The folders searched, as a message lists them: as many as fit. */
static void dirs_text(const char *list, char *out, size_t len)
{
    size_t used = 0;
    int shown = 0, total = 0;
    out[0] = '\0';
    for (const char *s = list; s && *s; s += strlen(s) + 1)
        total++;
    for (const char *s = list; s && *s; s += strlen(s) + 1) {
        size_t need = strlen(s) + 2;
        if (used + need + 40 > len) {
            snprintf(out + used, len - used, " and %d more", total - shown);
            return;
        }
        used += (size_t)snprintf(out + used, len - used, "%s%s", shown ? ", " : "", s);
        shown++;
    }
    if (!shown)
        snprintf(out, len, "(no such folder exists here)");
}

/* dlopen(path) with every missing dependency found in the folders and loaded first. */
void *cz__gpu_dlopen(const char *path, const char *list, cz_error *err)
{
    const int flags = RTLD_NOW | RTLD_LOCAL;
    char stack[MAX_DEPTH][PATH_MAX];
    int top = 0;
    if (strlen(path) >= sizeof stack[0]) {
        cz__error_set(err, CZ_EUNSUPPORTED, "the GPU plugin's path is too long");
        return NULL;
    }
    memcpy(stack[0], path, strlen(path) + 1);
    /* Each round loads one library or finds one missing: a bound that a library whose file
     * name is not its soname (found, loaded, still missing) cannot turn into a loop. */
    for (int round = 0; round < 4 * MAX_DEPTH; round++) {
        void *h = dlopen(stack[top], top ? RTLD_NOW | RTLD_GLOBAL : flags);
        if (h && top == 0)
            return h;
        if (h) {
            top--; /* a dependency is in: retry what needed it (the handle stays open) */
            continue;
        }
        const char *msg = dlerror();
        char name[256], where[640];
        if (!missing_name(msg, name, sizeof name)) {
            cz__error_set(err, CZ_EUNSUPPORTED, "the GPU plugin could not be loaded: %s",
                          msg ? msg : "dlopen failed");
            return NULL;
        }
        if (top + 1 >= MAX_DEPTH || !find_in_dirs(list, name, stack[top + 1], sizeof stack[0])) {
            dirs_text(list, where, sizeof where);
            cz__error_set(err, CZ_EUNSUPPORTED,
                          "the GPU backends need %s, which was not found: searched the system's "
                          "library path (LD_LIBRARY_PATH, ld.so.cache) and %s. It comes with "
                          "the CUDA 13 toolkit or the nvidia-* Python wheels (pip install "
                          "nvidia-cublas nvidia-cusolver); CZ_NVIDIA_LIBS=DIR[:DIR] adds folders",
                          name, where);
            return NULL;
        }
        top++;
    }
    cz__error_set(err, CZ_EUNSUPPORTED,
                  "the GPU plugin could not be loaded: a library found in the folders was loaded "
                  "but did not satisfy the plugin (its file name is not its soname?)");
    return NULL;
}

/* Where the plugin may be: CZ_CUDA_PLUGIN (then only there); beside the object that holds
 * this code (libcanzona-exec.so, or a program linking the static library) and in ../lib from
 * it; by name through that object's run path (a program in libexec/ whose RUNPATH leads to
 * lib/), LD_LIBRARY_PATH and ld.so.cache; the build tree; the install tree. An empty entry
 * stands for "by name". */
static void candidate(char out[][PATH_MAX], int *n, const char *dir, const char *sub)
{
    int len = snprintf(out[*n], PATH_MAX, "%s%s%s", dir, sub, PLUGIN_NAME);
    if (len > 0 && len < PATH_MAX)
        (*n)++;
}

static int plugin_candidates(char out[][PATH_MAX])
{
    int n = 0;
    const char *env = getenv("CZ_CUDA_PLUGIN");
    if (env && *env) {
        int len = snprintf(out[0], PATH_MAX, "%s", env);
        return len > 0 && len < PATH_MAX; /* asked for one file: no other is tried */
    }
    Dl_info info;
    if (dladdr((void *)cz__gpu_load, &info) && info.dli_fname) {
        char dir[PATH_MAX];
        int len = snprintf(dir, sizeof dir, "%s", info.dli_fname);
        char *slash = len > 0 && len < (int)sizeof dir ? strrchr(dir, '/') : NULL;
        if (slash) {
            *slash = '\0';
            candidate(out, &n, dir, "/");
            candidate(out, &n, dir, "/../lib/");
        }
    }
    out[n++][0] = '\0';
#ifdef CZ_GPU_PLUGIN_BUILD_DIR
    candidate(out, &n, CZ_GPU_PLUGIN_BUILD_DIR, "/");
#endif
#ifdef CZ_GPU_PLUGIN_INSTALL_DIR
    candidate(out, &n, CZ_GPU_PLUGIN_INSTALL_DIR, "/");
#endif
    return n;
}

/* Whether the plugin is found by name: a failure naming another library (a dependency of the
 * plugin's) still means the plugin itself was found. */
static bool found_by_name(void)
{
    void *h = dlopen(PLUGIN_NAME, RTLD_NOW | RTLD_LOCAL);
    if (h)
        return true;
    char name[256];
    return missing_name(dlerror(), name, sizeof name) && strcmp(name, PLUGIN_NAME) != 0;
}

/* The candidates, as a message lists them. */
static void candidates_text(char cand[][PATH_MAX], int n, char *out, size_t len)
{
    size_t used = 0;
    out[0] = '\0';
    for (int i = 0; i < n && used + 64 < len; i++)
        used += (size_t)snprintf(out + used, len - used, "%s%s", i ? ", " : "",
                                 cand[i][0] ? cand[i] : "by name on the program's run path");
}

static int load(cz_error *err)
{
    if (!cz__gpu_built())
        return cz__error_set(err, CZ_EUNSUPPORTED,
                             "this build has no GPU backends (it was configured without a CUDA "
                             "toolkit, or with -DCZ_WITH_CUDA=OFF)");
    if (!dirs.v)
        build_dirs(&dirs);
    char cand[5][PATH_MAX], tried[700];
    int n = plugin_candidates(cand), found = -1;
    for (int i = 0; i < n && found < 0; i++) {
        struct stat st;
        if (cand[i][0] ? stat(cand[i], &st) == 0 : found_by_name())
            found = i;
    }
    if (found < 0) {
        candidates_text(cand, n, tried, sizeof tried);
        return cz__error_set(err, CZ_EUNSUPPORTED,
                             "the GPU plugin %s was not found (tried %s); set CZ_CUDA_PLUGIN to "
                             "its path",
                             PLUGIN_NAME, tried);
    }
    if (!cand[found][0])
        snprintf(cand[found], PATH_MAX, "%s", PLUGIN_NAME);
    void *h = cz__gpu_dlopen(cand[found], dirs.v, err);
    if (!h)
        return err ? err->code : CZ_EUNSUPPORTED;
    cz_gpu_entry_fn entry;
    *(void **)&entry = dlsym(h, CZ_GPU_ENTRY);
    if (!entry)
        return cz__error_set(err, CZ_EUNSUPPORTED, "%s is not a canzona GPU plugin (no %s)",
                             cand[found], CZ_GPU_ENTRY);
    /* Static: the plugin keeps the pointer for the life of the process. */
    static cz_gpu_host host;
    host = (cz_gpu_host){CZ_GPU_API_VERSION, cz__exec_malloc, cz__exec_calloc, cz__exec_free,
                         dirs.v ? dirs.v : "\0"};
    const char *why = NULL;
    api = entry(&host, CZ_GPU_ABI, &why);
    if (!api)
        return cz__error_set(err, CZ_EUNSUPPORTED,
                             "%s comes from another build (%s; this library is %s): use the "
                             "plugin built with this libcanzona-exec",
                             cand[found], why ? why : "unknown", CZ_GPU_ABI);
    return CZ_OK;
}

int cz__gpu_load(const cz_gpu_api **out, cz_error *err)
{
    pthread_mutex_lock(&lock);
    if (!loaded) {
        load_rc = load(&load_err);
        loaded = 1;
    }
    int rc = load_rc;
    if (rc && err)
        *err = load_err;
    *out = rc ? NULL : api;
    pthread_mutex_unlock(&lock);
    return rc;
}
