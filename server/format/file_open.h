// SPDX-License-Identifier: MIT
/* file_open.h - opening a file that must be a regular file, without ever
 * blocking on a FIFO or a device in its place. */
#ifndef WSRV_FILE_OPEN_H
#define WSRV_FILE_OPEN_H

#include <sys/stat.h>

#include "errinfo.h"

/* Opens path with flags (O_CLOEXEC and O_NOCTTY added) without blocking:
 * O_NONBLOCK for the open itself, cleared once fstat has shown a regular
 * file. Fills *st when non-NULL. Returns the fd (owned by the caller) or a
 * negative errno with e set: -EINVAL "not a regular file" for a FIFO, a
 * directory, a device or a socket. */
int file_open_regular(const char *path, int flags, struct stat *st, struct errinfo *e);

#endif
