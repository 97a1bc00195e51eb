// SPDX-License-Identifier: MIT
/* file_open.h - opening a file that must be a regular file, without ever
 * blocking on a FIFO or a device in its place. */
#ifndef WSRV_FILE_OPEN_H
#define WSRV_FILE_OPEN_H

#include <stddef.h>
#include <sys/stat.h>

#include "errinfo.h"

/* Opens path with flags (O_CLOEXEC and O_NOCTTY added) without blocking:
 * O_NONBLOCK for the open itself, cleared once fstat has shown a regular
 * file. Fills *st when non-NULL. Returns the fd (owned by the caller) or a
 * negative errno with e set: -EINVAL "not a regular file" for a FIFO, a
 * directory, a device or a socket. */
int file_open_regular(const char *path, int flags, struct stat *st, struct errinfo *e);

/* Reads the whole regular file at path into *out (malloc'd, owned by the
 * caller, NUL-terminated; *len bytes without the NUL), in as few reads as
 * its size allows. A file over max bytes is refused (-EFBIG). 0, or a
 * negative errno with e set. */
int file_read_all(const char *path, size_t max, char **out, size_t *len, struct errinfo *e);

#endif
