// SPDX-License-Identifier: MIT
/* bench_memstate.h - the host's free memory in a known state before a
 * timed side of a benchmark. */
#ifndef WSRV_BENCH_MEMSTATE_H
#define WSRV_BENCH_MEMSTATE_H

#include <stdint.h>

enum mem_state {
	MEM_FRESH,      /* bytes touched and freed just now: cheap to fault */
	MEM_REPORTED,   /* then handed back to the host (as far as 30 s take it) */
};

/* Touches and frees bytes of memory (more than the model: the pages a
 * side will fault), and for MEM_REPORTED waits until the kernel has
 * reported as many bytes to the host since (reported_kib), at most 30 s;
 * at once where the kernel reports nothing. The state's name says what
 * the last wait got. */
void bench_memory_state(enum mem_state s, uint64_t bytes);
const char *bench_memory_state_name(enum mem_state s);

#endif
