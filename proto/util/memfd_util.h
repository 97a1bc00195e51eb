// SPDX-License-Identifier: MIT
/* memfd_util.h - a sealed memfd's life, written once (after systemd's
 * memfd-util): create and size, map, fill, seal, and check one received
 * from another process. Every function returns an fd or 0 on success and
 * a negative errno on failure, and says nothing: the caller words the
 * error (the server as a reply or a log line, libwsrv with cl_err).
 *
 * Ownership: an fd returned is the caller's to close; a mapping returned
 * through *map is the caller's to munmap. */
#ifndef WSRV_MEMFD_UTIL_H
#define WSRV_MEMFD_UTIL_H

#include <fcntl.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Every seal: the size and the bytes are fixed, and so are the seals. */
#define MEMFD_SEAL_ALL (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL)

/* A new close-on-exec, sealable memfd named name, size bytes long (flags:
 * more MFD_* flags, such as MFD_HUGETLB). The fd, or -errno. */
int memfd_new(const char *name, unsigned flags, uint64_t size);

/* memfd_new, and mapped shared and writable at *map. The fd, or -errno
 * (nothing left open or mapped). */
int memfd_new_mapped(const char *name, uint64_t size, void **map);

/* A new memfd of len bytes (at least 1 is allocated) that fill(map, arg)
 * writes through a mapping, unmapped before MEMFD_SEAL_ALL is added: a
 * read-only snapshot for other processes. The fd, or -errno. */
int memfd_new_sealed(const char *name, size_t len, void (*fill)(void *map, void *arg), void *arg);

/* A read-only fd of the same memfd (through /proc/self/fd): a shared
 * mapping made from it has no VM_MAYWRITE, so F_SEAL_WRITE can be added
 * while it stays mapped. The new fd (CLOEXEC), or -errno. */
int memfd_reopen_ro(int fd);

/* Makes *fd fit to give to another process: *fd becomes a new O_RDONLY
 * file description of the same file (memfd_reopen_ro; the old one is
 * closed) and the file's mode 0400. A receiver can then neither fill its
 * holes (fallocate needs a writable description; seals do not stop it)
 * nor reopen it writable through /proc without CAP_DAC_OVERRIDE. Mappings
 * already made stay as they are. 0, or -errno with *fd unchanged. */
int memfd_readers_only(int *fd);

/* Adds seals to fd: 0 or -errno (-EBUSY: a writable mapping is still
 * there, for F_SEAL_WRITE). */
int memfd_seal(int fd, int seals);

/* Checks an fd from another process that this one will map and read: a
 * regular file of at least want bytes (exactly want when exact), sealed
 * against resizing and writes (F_SEAL_SHRINK, F_SEAL_GROW, and F_SEAL_WRITE
 * or F_SEAL_FUTURE_WRITE), and carrying the seals in extra too. *size gets
 * its size and *seals its seals whenever they could be read (either may
 * be NULL). 0; -EBADF when it is not a regular file or has the wrong
 * size; -EPERM when seals are missing; fstat's errno. */
int memfd_check(int fd, uint64_t want, bool exact, int extra, uint64_t *size, int *seals);

/* memfd_check of a disk tier's piece, which the server cuts to nothing
 * once every holder let it go (memfd_cut): F_SEAL_SHRINK is not asked
 * for, the others are. */
int memfd_check_cuttable(int fd, uint64_t want, uint64_t *size, int *seals);

/* Cuts fd's file to nothing, whoever still maps it (their pages go, and
 * a read there faults SIGBUS): for a file sealed against writes and
 * growth but not shrinking, whose owner is this process (the mode is
 * made 0600 for a writable reopen through /proc, as memfd_readers_only
 * left it 0400). 0 or -errno. */
int memfd_cut(int fd);

#endif
