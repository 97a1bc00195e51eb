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
#define REPORTED_WAIT_S 30.0

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

/* What the last wait saw, for the name. */
static double waited_s;
static long long reported_got_kib;

/* Until the kernel has reported as much memory to the host as was just
 * freed (from0 on), or REPORTED_WAIT_S have passed. Reporting trickles
 * here (measured: 44 MiB of 640 MiB freed within 8 s, 202 MiB within 40
 * s, in bursts seconds apart, over all free memory), so "quiet for a
 * while" would stop before it starts: the wait is on the amount. */
static void wait_reported(long long from0, uint64_t bytes)
{
	struct timespec tick = { 0, 250000000 };
	double t0 = mono_now();
	long long now = from0;

	if (from0 < 0)
		return;
	while (now - from0 < (long long)(bytes >> 10) && mono_now() - t0 < REPORTED_WAIT_S) {
		nanosleep(&tick, NULL);
		now = reported_kib();
	}
	waited_s = mono_now() - t0;
	reported_got_kib = now - from0;
}

void bench_memory_state(enum mem_state s, uint64_t bytes)
{
	long long r0 = reported_kib();

	touch_and_free(bytes);
	if (s == MEM_REPORTED)
		wait_reported(r0, bytes);
}

const char *bench_memory_state_name(enum mem_state s)
{
	static char name[128];

	if (s == MEM_FRESH)
		return "fresh";
	if (reported_kib() < 0)
		return "reported (no page reporting here: as fresh)";
	snprintf(name, sizeof(name), "reported (the last wait: %.0f s, %lld MiB reported)", waited_s,
		 reported_got_kib >> 10);
	return name;
}
