// SPDX-License-Identifier: MIT
/* bench_memstate.c - the host's free memory put in a known state before a
 * timed side (issue 38 item 5). This VM hands freed memory back to its
 * host within seconds (free page reporting), and memory handed back costs
 * several times more to fault in: a side run right after another freed
 * memory is faster than one run after a pause. Both sides of a comparison
 * get the same state. */
#include "bench_memstate.h"

#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "bench_util.h"
#include "clock.h"

#define REPORTED_KIB "/sys/module/page_reporting/parameters/reported_kib"

/* The kernel's count of memory reported free to the host; -1 without
 * free page reporting (a real host: nothing is handed back). */
static long long reported_kib(void)
{
	FILE *f = fopen(REPORTED_KIB, "re");
	long long v = -1;

	if (f) {
		if (fscanf(f, "%lld", &v) != 1)
			v = -1;
		fclose(f);
	}
	return v;
}

/* bytes of anonymous memory touched and freed: the pages the next faults
 * take are ones the VM has just had. */
static void touch_and_free(uint64_t bytes)
{
	void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED)
		return;
	for (uint64_t o = 0; o < bytes; o += 4096)
		((volatile char *)p)[o] = 1;
	munmap(p, bytes);
}

/* Until reported_kib has not grown for 2 s (at most 60 s): what was freed
 * has gone back to the host. */
static void wait_reported(void)
{
	long long last = reported_kib(), now;
	double quiet_since = mono_now(), t0 = quiet_since;
	struct timespec tick = { 0, 200000000 };

	if (last < 0)
		return;
	while (mono_now() - quiet_since < 2.0 && mono_now() - t0 < 60.0) {
		nanosleep(&tick, NULL);
		if ((now = reported_kib()) != last) {
			last = now;
			quiet_since = mono_now();
		}
	}
}

void bench_memory_state(enum mem_state s, uint64_t bytes)
{
	touch_and_free(bytes);
	if (s == MEM_REPORTED)
		wait_reported();
}

const char *bench_memory_state_name(enum mem_state s)
{
	if (s == MEM_FRESH)
		return "fresh";
	return reported_kib() < 0 ? "reported (no page reporting here: as fresh)" : "reported";
}
