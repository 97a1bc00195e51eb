// SPDX-License-Identifier: MIT
/* proc_mem.h - a process's memory as the kernel counts it, for tests and
 * benchmarks: from /proc/PID/smaps and smaps_rollup. */
#ifndef WSRV_HARNESS_PROC_MEM_H
#define WSRV_HARNESS_PROC_MEM_H

#include <stdint.h>
#include <sys/types.h>

/* PSS and RSS (bytes, added to *pss and *rss; either may be NULL) of pid's
 * mappings whose /proc/PID/smaps line names `what` (a memfd's name). */
void mapping_mem(pid_t pid, const char *what, uint64_t *pss, uint64_t *rss);

/* PSS of a process in bytes (smaps_rollup); 0 when unknown. */
uint64_t pss_bytes(pid_t pid);

#endif
