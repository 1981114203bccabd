/* Resolves the NCCL functions the plane calls (nccl_api.h) from libnccl.so.2 at run time. */
#include "nccl_api.h"

#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

cz_nccl_fns cz_nccl_fn;

#define LIB "libnccl.so.2"

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int tried, ok, found_version;
static char found_why[512], found_path[PATH_MAX];

/* The system's search first (a process that already loaded NCCL, such as PyTorch, gets that
 * copy), then each folder. */
static void *open_nccl(const char *dirs, char *path, size_t plen)
{
    void *h = dlopen(LIB, RTLD_NOW | RTLD_GLOBAL);
    if (h) {
        snprintf(path, plen, "%s (the system's library path)", LIB);
        return h;
    }
    for (const char *d = dirs; d && *d; d += strlen(d) + 1) {
        struct stat st;
        if (snprintf(path, plen, "%s/%s", d, LIB) < (int)plen && stat(path, &st) == 0 &&
            (h = dlopen(path, RTLD_NOW | RTLD_GLOBAL)) != NULL)
            return h;
    }
    return NULL;
}

static int resolve(void *h, char *why, size_t len)
{
    static const struct {
        const char *name;
        size_t off;
    } fns[] = {
#define FN(x) {"nccl" #x, offsetof(cz_nccl_fns, x)}
        FN(GetVersion),
        FN(GetErrorString),
        FN(GetUniqueId),
        FN(CommInitRankConfig),
        FN(CommSplit),
        FN(CommFinalize),
        FN(CommDestroy),
        FN(CommAbort),
        FN(CommGetAsyncError),
        FN(CommCount),
        FN(CommUserRank),
        FN(AllReduce),
        FN(Reduce),
        FN(ReduceScatter),
        FN(AllGather),
        FN(Broadcast),
        FN(Send),
        FN(Recv),
        FN(GroupStart),
        FN(GroupEnd),
#undef FN
    };
    for (size_t i = 0; i < sizeof fns / sizeof fns[0]; i++) {
        void *f = dlsym(h, fns[i].name);
        if (!f) {
            snprintf(why, len, "%s has no %s (NCCL %d.%d or newer is needed)", found_path,
                     fns[i].name, CZ_NCCL_MIN_VERSION / 10000, CZ_NCCL_MIN_VERSION / 100 % 100);
            return 0;
        }
        memcpy((char *)&cz_nccl_fn + fns[i].off, &f, sizeof f);
    }
    return 1;
}

static void load(const char *dirs)
{
    void *h = open_nccl(dirs, found_path, sizeof found_path);
    if (!h) {
        char list[384];
        size_t used = 0;
        list[0] = '\0';
        for (const char *d = dirs; d && *d && used + strlen(d) + 40 < sizeof list;
             d += strlen(d) + 1)
            used += (size_t)snprintf(list + used, sizeof list - used, "%s%s", used ? ", " : "", d);
        snprintf(found_why, sizeof found_why,
                 "%s not found: searched the system's library path (LD_LIBRARY_PATH, "
                 "ld.so.cache)%s%s; it comes with NCCL's packages or the nvidia-nccl Python "
                 "wheel, and CZ_NVIDIA_LIBS=DIR adds a folder",
                 LIB, used ? " and " : "", list);
        found_path[0] = '\0';
        return;
    }
    if (!resolve(h, found_why, sizeof found_why))
        return;
    int v = 0;
    if (cz_nccl_fn.GetVersion(&v) != ncclSuccess) {
        snprintf(found_why, sizeof found_why, "%s: ncclGetVersion failed", found_path);
        return;
    }
    found_version = v;
    char why[400];
    ok = cz__nccl_version_usable(v, NCCL_VERSION_CODE, why, sizeof why);
    if (!ok)
        snprintf(found_why, sizeof found_why, "%s: %s", found_path, why);
}

int cz__nccl_load(const char *dirs, char *why, size_t len, int *version, char *path, size_t plen)
{
    pthread_mutex_lock(&lock);
    if (!tried) {
        load(dirs);
        tried = 1;
    }
    if (why && len)
        snprintf(why, len, "%s", ok ? "" : found_why);
    if (version)
        *version = found_version;
    if (path && plen)
        snprintf(path, plen, "%s", found_path);
    int r = ok;
    pthread_mutex_unlock(&lock);
    return r;
}
