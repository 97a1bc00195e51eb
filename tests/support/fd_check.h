// SPDX-License-Identifier: MIT
/* fd_check.h - a process's open fds, counted for leak checks. */
#ifndef WSRV_TEST_FD_CHECK_H
#define WSRV_TEST_FD_CHECK_H

#include <stdbool.h>

/* Open fds of this process (from /proc/self/fd), less the NVIDIA
 * driver's device files (/dev/nvidia*), which a real CUDA driver opens at
 * cuInit and keeps for the life of the process. */
int count_fds(void);

/* Which fds below FD_MAP are open (map[fd]), to find the ones a library
 * opened and keeps for the life of the process (a real CUDA driver's):
 * fd_map_take(a) before, fd_map_new(a, b) after: b is what opened between;
 * later, fd_map_kept(b) counts those still open, as count_fds counts. */
#define FD_MAP 1024
void fd_map_take(bool *map);
void fd_map_new(const bool *before, bool *opened);
int fd_map_kept(const bool *opened);

/* 0 when this process has as many fds open as `before`; else -1 and, on
 * stderr, a line and what each open fd is (for a cmocka group teardown). */
int fd_leak_check(int before);

#endif
