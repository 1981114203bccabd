/* A test helper preloaded into canzona (LD_PRELOAD): when CZ_TEST_RAISE_IN_FSYNC names a signal
 * number, fsync raises that signal first, so that it arrives exactly while the atomic writer's
 * temporary file exists (signals.sh). Without the variable, fsync is the C library's. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

int fsync(int fd)
{
    static int (*real)(int);
    if (!real)
        real = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
    const char *sig = getenv("CZ_TEST_RAISE_IN_FSYNC");
    if (sig && atoi(sig) > 0)
        raise(atoi(sig));
    return real ? real(fd) : -1;
}
