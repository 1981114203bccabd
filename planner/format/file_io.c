/* Reading input files and writing output files under one policy (see cz_format.h, "files"). */
#include "cz_format.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Symbolic links followed before giving up, as the kernel's own limit (ELOOP). */
#define CZ_MAX_SYMLINKS 40

static const char *node_kind(mode_t m)
{
    if (S_ISDIR(m))
        return "a folder";
    if (S_ISCHR(m))
        return "a character device";
    if (S_ISBLK(m))
        return "a block device";
    if (S_ISFIFO(m))
        return "a FIFO";
    if (S_ISSOCK(m))
        return "a socket";
    if (S_ISLNK(m))
        return "a symbolic link";
    return "not a regular file";
}

int cz__file_read_all(const char *path, size_t max, char **out, size_t *len, cz_error *err)
{
    int rc = CZ_OK;
    char *buf = NULL;
    size_t cap = 0, n = 0;
    struct stat st;
    *out = NULL;
    *len = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
    if (fd < 0)
        return cz__error_set(err, CZ_EIO, "%s: cannot open: %s", path, strerror(errno));
    if (fstat(fd, &st) != 0) {
        rc = cz__error_set(err, CZ_EIO, "%s: cannot read: %s", path, strerror(errno));
        goto done;
    }
    /* Pipes are read (a process substitution gives one); devices such as /dev/zero would never
     * end, folders cannot be read. */
    if (!S_ISREG(st.st_mode) && !S_ISFIFO(st.st_mode)) {
        rc = cz__error_set(err, CZ_EIO, "%s: is %s, not a regular file; expected a JSON file", path,
                           node_kind(st.st_mode));
        goto done;
    }
    if (S_ISREG(st.st_mode) && (uintmax_t)st.st_size > (uintmax_t)max) {
        rc = cz__error_set(err, CZ_EINVALID,
                           "%s: is %jd bytes; files larger than %zu bytes are refused", path,
                           (intmax_t)st.st_size, max);
        goto done;
    }
    /* A regular file's buffer holds its size, one byte to see the end and the NUL. */
    cap = S_ISREG(st.st_mode) ? (size_t)st.st_size + 2 : 65536;
    if (!(buf = malloc(cap))) {
        rc = cz__error_set(err, CZ_ENOMEM, "%s: out of memory while reading", path);
        goto done;
    }
    for (;;) {
        if (n + 1 >= cap) {
            /* A pipe, or a regular file that grew since fstat: grow, within the cap. */
            size_t ncap = cap > max / 2 ? max + 2 : cap * 2;
            char *nb = realloc(buf, ncap);
            if (!nb) {
                rc = cz__error_set(err, CZ_ENOMEM, "%s: out of memory while reading", path);
                goto done;
            }
            buf = nb;
            cap = ncap;
        }
        ssize_t got = read(fd, buf + n, cap - 1 - n);
        if (got < 0) {
            if (errno == EINTR)
                continue;
            rc = cz__error_set(err, CZ_EIO, "%s: cannot read: %s", path, strerror(errno));
            goto done;
        }
        if (got == 0)
            break;
        n += (size_t)got;
        if (n > max) {
            rc = cz__error_set(err, CZ_EINVALID,
                               "%s: more than %zu bytes; files larger than that are refused", path,
                               max);
            goto done;
        }
    }
    buf[n] = '\0';
    *out = buf;
    *len = n;
    buf = NULL;
done:
    close(fd);
    free(buf);
    return rc;
}

static int write_fd_all(int fd, const char *p, size_t len)
{
    while (len > 0) {
        ssize_t w = write(fd, p, len);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        p += w;
        len -= (size_t)w;
    }
    return 0;
}

/* Whether the kernel would follow the symbolic link at link (lstat'ed into st) for this
 * process under fs.protected_symlinks: not when it lies in a sticky, world-writable folder
 * (/tmp) and is owned neither by this process's user nor by the folder's owner. The writer
 * resolves links itself (to write beside the final target), so the kernel never gets to
 * apply its rule: it is applied here, on every hop. */
static int check_link_owner(const char *shown, const char *link, const struct stat *st,
                            cz_error *err)
{
    const char *slash = strrchr(link, '/');
    size_t n = slash ? (size_t)(slash - link) : 0;
    char *dir = malloc(n + 2);
    if (!dir)
        return cz__error_set(err, CZ_ENOMEM, "%s: out of memory", shown);
    if (!slash)
        memcpy(dir, ".", 2);
    else if (n == 0)
        memcpy(dir, "/", 2);
    else {
        memcpy(dir, link, n);
        dir[n] = '\0';
    }
    struct stat ds;
    int rc = CZ_OK;
    if (stat(dir, &ds) == 0 && (ds.st_mode & S_ISVTX) && (ds.st_mode & S_IWOTH) &&
        st->st_uid != geteuid() && st->st_uid != ds.st_uid)
        rc = cz__error_set(err, CZ_EIO,
                           "%s: %s is a symbolic link owned by another user (uid %u) in the "
                           "sticky world-writable folder %s; following it is refused, as the "
                           "kernel refuses it (fs.protected_symlinks); give the target's own "
                           "path",
                           shown, link, (unsigned)st->st_uid, dir);
    free(dir);
    return rc;
}

/* The final target of path after following symbolic links (path itself when it is none). A
 * target that does not exist yet is returned as well: it is where the output will be created.
 * Fails on a loop, an unreadable link, or a link the kernel would not follow. */
static int resolve_links(const char *path, char **out, cz_error *err)
{
    int rc = CZ_OK;
    char *cur = cz__strdup(path);
    *out = NULL;
    if (!cur)
        return cz__error_set(err, CZ_ENOMEM, "%s: out of memory", path);
    for (int hops = 0;; hops++) {
        struct stat st;
        if (lstat(cur, &st) != 0 || !S_ISLNK(st.st_mode)) {
            *out = cur;
            return CZ_OK;
        }
        if (hops == CZ_MAX_SYMLINKS) {
            rc = cz__error_set(err, CZ_EIO, "%s: too many levels of symbolic links", path);
            break;
        }
        if ((rc = check_link_owner(path, cur, &st, err)) != CZ_OK)
            break;
        char target[PATH_MAX];
        ssize_t n = readlink(cur, target, sizeof target - 1);
        if (n < 0) {
            rc = cz__error_set(err, CZ_EIO, "%s: cannot read the symbolic link %s: %s", path, cur,
                               strerror(errno));
            break;
        }
        target[n] = '\0';
        const char *slash = strrchr(cur, '/');
        size_t dir_len = target[0] == '/' || !slash ? 0 : (size_t)(slash - cur) + 1;
        char *next = malloc(dir_len + (size_t)n + 1);
        if (!next) {
            rc = cz__error_set(err, CZ_ENOMEM, "%s: out of memory", path);
            break;
        }
        memcpy(next, cur, dir_len);
        memcpy(next + dir_len, target, (size_t)n + 1);
        free(cur);
        cur = next;
    }
    free(cur);
    return rc;
}

/* Writes data to a temporary file beside target, syncs it and renames it over target, so that a
 * reader sees the old file or the new one, never a mix. shown is the path the user gave. */
static int write_atomic_to(const char *shown, const char *target, mode_t mode, const void *data,
                           size_t len, cz_error *err)
{
    int rc = CZ_OK;
    size_t n = strlen(target) + sizeof ".tmp.XXXXXX";
    char *tmp = malloc(n);
    if (!tmp)
        return cz__error_set(err, CZ_ENOMEM, "%s: out of memory", shown);
    snprintf(tmp, n, "%s.tmp.XXXXXX", target);
    int fd = mkstemp(tmp);
    if (fd < 0) {
        rc = cz__error_set(err, CZ_EIO, "%s: cannot create a temporary file next to %s: %s", shown,
                           target, strerror(errno));
        free(tmp);
        return rc;
    }
    /* mkstemp creates the file 0600: give it the mode of the file it replaces, or the mode a
     * plain creation would. */
    if (fchmod(fd, mode) != 0 || write_fd_all(fd, data, len) != 0 || fsync(fd) != 0) {
        rc = cz__error_set(err, CZ_EIO, "%s: cannot write %s: %s", shown, tmp, strerror(errno));
        close(fd);
        goto done;
    }
    if (close(fd) != 0) {
        rc = cz__error_set(err, CZ_EIO, "%s: cannot write %s: %s", shown, tmp, strerror(errno));
        goto done;
    }
    if (rename(tmp, target) != 0) {
        rc =
            cz__error_set(err, CZ_EIO, "%s: cannot replace %s: %s", shown, target, strerror(errno));
        goto done;
    }
done:
    if (rc != CZ_OK) /* the temporary file is never left behind */
        unlink(tmp);
    free(tmp);
    return rc;
}

/* The same with the signals that end a process by default (a user's Ctrl-C, a job scheduler's
 * SIGTERM, a closed terminal, a file-size limit) held back while the temporary file exists:
 * one that arrives then takes effect once the file is renamed or removed, instead of leaving
 * PATH.tmp.XXXXXX behind (up to the whole output's size). */
static int write_atomic(const char *shown, const char *target, mode_t mode, const void *data,
                        size_t len, cz_error *err)
{
    sigset_t hold, old;
    sigemptyset(&hold);
    sigaddset(&hold, SIGINT);
    sigaddset(&hold, SIGTERM);
    sigaddset(&hold, SIGHUP);
    sigaddset(&hold, SIGQUIT);
    sigaddset(&hold, SIGXFSZ); /* held, a write past the limit fails (EFBIG) and is cleaned up */
    int masked = pthread_sigmask(SIG_BLOCK, &hold, &old) == 0;
    int rc = write_atomic_to(shown, target, mode, data, len, err);
    if (masked)
        pthread_sigmask(SIG_SETMASK, &old, NULL);
    return rc;
}

/* Devices and FIFOs are written where they are: replacing /dev/null by a regular file, or a
 * FIFO a reader waits on, would break whatever else uses them. */
static int write_in_place(const char *shown, const char *target, const void *data, size_t len,
                          cz_error *err)
{
    int fd = open(target, O_WRONLY | O_CLOEXEC | O_NOCTTY);
    if (fd < 0)
        return cz__error_set(err, CZ_EIO, "%s: cannot open for writing: %s", shown,
                             strerror(errno));
    int saved = 0;
    if (write_fd_all(fd, data, len) != 0)
        saved = errno;
    if (close(fd) != 0 && !saved)
        saved = errno;
    if (saved)
        return cz__error_set(err, CZ_EIO, "%s: cannot write: %s", shown, strerror(saved));
    return CZ_OK;
}

int cz__file_write(const char *path, const void *data, size_t len, cz_error *err)
{
    if (!strcmp(path, "-")) {
        if (fwrite(data, 1, len, stdout) != len || fflush(stdout) != 0)
            return cz__error_set(err, CZ_EIO, "cannot write to standard output: %s",
                                 strerror(errno));
        return CZ_OK;
    }
    char *target = NULL;
    int rc = resolve_links(path, &target, err);
    if (rc != CZ_OK)
        return rc;
    struct stat st;
    if (lstat(target, &st) != 0) {
        if (errno != ENOENT) {
            rc = cz__error_set(err, CZ_EIO, "%s: cannot write: %s", path, strerror(errno));
            goto done;
        }
        mode_t mask = umask(0);
        umask(mask);
        rc = write_atomic(path, target, 0666 & ~mask, data, len, err);
    } else if (S_ISREG(st.st_mode)) {
        /* Renaming needs only the folder's permission; a file its owner made read-only must
         * stay as it is (root passes access(), hence the mode test). */
        if ((st.st_mode & 0222) == 0 || access(target, W_OK) != 0) {
            rc = cz__error_set(err, CZ_EIO,
                               "%s: is read-only; make it writable or choose another output "
                               "path",
                               path);
            goto done;
        }
        rc = write_atomic(path, target, st.st_mode & 07777, data, len, err);
    } else if (S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode)) {
        rc = write_in_place(path, target, data, len, err);
    } else {
        rc = cz__error_set(err, CZ_EIO,
                           "%s: is %s; expected a regular file, a character device, a FIFO or "
                           "'-' (standard output)",
                           path, node_kind(st.st_mode));
    }
done:
    free(target);
    return rc;
}

int cz__file_check_output(const char *output, const char *const *inputs, const char *const *what,
                          size_t n, cz_error *err)
{
    struct stat out_st, in_st;
    if (!output || !strcmp(output, "-") || stat(output, &out_st) != 0)
        return CZ_OK;
    for (size_t i = 0; i < n; i++) {
        if (!inputs[i] || stat(inputs[i], &in_st) != 0)
            continue;
        if (in_st.st_dev == out_st.st_dev && in_st.st_ino == out_st.st_ino)
            return cz__error_set(err, CZ_EINVALID,
                                 "%s: the output is the same file as %s (%s); writing it would "
                                 "destroy the input; choose another output path",
                                 output, what[i], inputs[i]);
    }
    return CZ_OK;
}
