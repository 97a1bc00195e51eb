// SPDX-License-Identifier: MIT
/* fake_cost.c - what the test driver models beyond correctness, so that a
 * join on it is a prediction (docs/design/copy-service.md, "The copy service"):
 *
 *   - costs, from the environment of every process that loads it:
 *     FAKECUDA_GBPS (copies; 55 on the H200; FAKECUDA_MBPS when slower), FAKECUDA_REG_MBPS
 *     (page-locking; 29000), FAKECUDA_CTX_MS (a device's first context in
 *     a process; 250), FAKECUDA_IMPORT_MS (importing an exported
 *     allocation, each time);
 *   - FAKECUDA_DEVICES: how many devices (1 to FK_MAX_DEVICES), each with
 *     its own UUID and primary context; FAKECUDA_P2P_GBPS, the link between
 *     two of them (a copy from another device's memory), and
 *     FAKECUDA_NO_PEER=1, devices that cannot read each other's;
 *   - pinned bytes (registered and cuMemAllocHost's), counted in this
 *     process and, with FAKECUDA_LEDGER=FILE, in every process that names
 *     the same file (now and at the peak);
 *   - FAKECUDA_SAMPLED=1: device memory that keeps no bytes. A copy is
 *     timed at the modelled rate but writes only FK_SAMPLE bytes at each
 *     offset in its destination's allocation that is a multiple of
 *     FK_SAMPLE_EVERY (and at its first byte), so an 8.57 GiB join fits a
 *     small machine and is still checked, at those samples (an offset,
 *     not an address: the service and the worker map an allocation at
 *     different addresses). Each sample is a fresh page: this VM's 18 us
 *     a page, which a GPU does not pay, is why they are 16 MiB apart. */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "fake.h"

struct ledger {
	long long now, peak;
};

static struct ledger *ledger;

static long long env_ll(const char *name, long long dflt)
{
	const char *v = getenv(name);

	return v && *v ? atoll(v) : dflt;
}

void fk_sleep(double s)
{
	struct timespec ts;

	if (s <= 0)
		return;
	ts.tv_sec = (time_t)s;
	ts.tv_nsec = (long)((s - (double)ts.tv_sec) * 1e9);
	while (nanosleep(&ts, &ts) < 0)
		;
}

static void open_ledger(const char *path)
{
	int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	void *p;

	if (fd < 0)
		return;
	if (ftruncate(fd, 4096) == 0 &&
	    (p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) != MAP_FAILED)
		ledger = p;
	close(fd);
}

void fk_costs_from_env(void)
{
	const char *l = getenv("FAKECUDA_LEDGER");

	fk.gbps = env_ll("FAKECUDA_GBPS", fk.gbps);
	fk.mbps = env_ll("FAKECUDA_MBPS", fk.mbps);
	fk.reg_mbps = env_ll("FAKECUDA_REG_MBPS", fk.reg_mbps);
	fk.ctx_ms = env_ll("FAKECUDA_CTX_MS", fk.ctx_ms);
	fk.import_ms = env_ll("FAKECUDA_IMPORT_MS", fk.import_ms);
	fk.sampled = env_ll("FAKECUDA_SAMPLED", fk.sampled);
	fk.devices = env_ll("FAKECUDA_DEVICES", fk.devices);
	fk.p2p_gbps = env_ll("FAKECUDA_P2P_GBPS", fk.p2p_gbps);
	fk.no_peer = env_ll("FAKECUDA_NO_PEER", fk.no_peer);
	if (fk.devices < 1 || fk.devices > FK_MAX_DEVICES)
		fk.devices = 1;
	if (l && *l && !ledger)
		open_ledger(l);
}

void fk_pinned(long long delta)
{
	long long now = __atomic_add_fetch(&fk.pinned_bytes, delta, __ATOMIC_SEQ_CST), peak;

	while (now > (peak = __atomic_load_n(&fk.pinned_peak, __ATOMIC_SEQ_CST)) &&
	       !__atomic_compare_exchange_n(&fk.pinned_peak, &peak, now, false, __ATOMIC_SEQ_CST,
					    __ATOMIC_SEQ_CST))
		;
	if (!ledger)
		return;
	now = __atomic_add_fetch(&ledger->now, delta, __ATOMIC_SEQ_CST);
	while (now > (peak = __atomic_load_n(&ledger->peak, __ATOMIC_SEQ_CST)) &&
	       !__atomic_compare_exchange_n(&ledger->peak, &peak, now, false, __ATOMIC_SEQ_CST,
					    __ATOMIC_SEQ_CST))
		;
}

long long fk_ledger(const char *what)
{
	if (!ledger)
		return -1;
	return __atomic_load_n(strcmp(what, "ledger_peak") == 0 ? &ledger->peak : &ledger->now,
			       __ATOMIC_SEQ_CST);
}

/* Rows of a copy: every byte, or (sampled) FK_SAMPLE bytes at each
 * multiple of FK_SAMPLE_EVERY from base, the allocation's first byte, and
 * at the copy's first byte. */
void fk_copy_rows(char *dst, const char *src, size_t width, size_t height, size_t spitch, size_t dpitch,
		  uintptr_t base)
{
	if (!fk.sampled) {
		for (size_t r = 0; r < height; r++)
			memcpy(dst + r * dpitch, src + r * spitch, width);
		return;
	}
	for (size_t r = 0; r < height; r++) {
		uintptr_t a = (uintptr_t)(dst + r * dpitch), b = a + width;
		uintptr_t k = base + ((a - base + FK_SAMPLE_EVERY - 1) & ~(uintptr_t)(FK_SAMPLE_EVERY - 1));
		if (r == 0)
			memcpy((void *)a, src, width < FK_SAMPLE ? width : FK_SAMPLE);
		for (; k < b; k += FK_SAMPLE_EVERY)
			memcpy((void *)k, src + r * spitch + (k - a), b - k < FK_SAMPLE ? b - k : FK_SAMPLE);
	}
}
