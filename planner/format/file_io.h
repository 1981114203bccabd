/*
 * file_io.h — how the planner reads its input files and writes its output files (internal).
 *
 * Reading: only regular files and pipes (FIFOs, `<(cmd)`) are read, with a size cap that is
 * checked before reading (regular files) or while reading (pipes), so that a device such as
 * /dev/zero or a huge file fails at once with a message instead of after gigabytes.
 *
 * Writing (cz_file_write): one policy for every output of the CLI and the library:
 *  - "-" is standard output;
 *  - a new path or an existing regular file is replaced atomically (a temporary file in the
 *    same folder, synced, then renamed over it), keeping the existing file's permission bits;
 *  - a symbolic link is followed: its final target is written (atomically, in the target's own
 *    folder when the target is a regular file or does not exist), the link itself stays;
 *  - a character device (/dev/null, a terminal) or a FIFO is written in place, never replaced;
 *  - a read-only regular file, a folder, a socket or a block device is refused with the reason.
 */
#ifndef CZ_FILE_IO_H
#define CZ_FILE_IO_H

#include "cz_types.h"

#include <stddef.h>

/* Reads the whole of path into a malloc'ed buffer with a NUL after the last byte (*len does not
 * count it). Files larger than max bytes are refused (CZ_EINVALID) before they are read; so are
 * folders and devices (CZ_EIO, "not a regular file"). */
int cz_file_read_all(const char *path, size_t max, char **out, size_t *len, cz_error *err);

/* Writes len bytes to path under the policy above. Messages name path and the reason. */
int cz_file_write(const char *path, const void *data, size_t len, cz_error *err);

/* Refuses (CZ_EINVALID, naming both paths) an output that is the same file as one of the n
 * inputs: same device and inode, so a second path, a hard link or a symbolic link to an input
 * is caught too. NULL entries and an output of "-" or one that does not exist yet pass. what
 * names the inputs in the message (e.g. "the model"), one per input. */
int cz_file_check_output(const char *output, const char *const *inputs, const char *const *what,
                         size_t n, cz_error *err);

#endif /* CZ_FILE_IO_H */
