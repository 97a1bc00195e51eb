// SPDX-License-Identifier: MIT
/* fake_mem.c - device memory, pinned and registered host memory, and the
 * copies of the test driver, with their contracts. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fake.h"

/* Under fk.lock: the live allocation holding [p, p+len), or NULL. */
struct fk_alloc *fk_alloc_at(uintptr_t p, size_t len)
{
	for (size_t i = 0; i < fk.nallocs; i++)
		if (p >= fk.allocs[i].a && p + len <= fk.allocs[i].b)
			return &fk.allocs[i];
	return NULL;
}

/* Under fk.lock: the registration or pinned block holding all of
 * [p, p+len), or NULL. */
const struct fk_reg *fk_reg_over(uintptr_t p, size_t len)
{
	for (size_t i = 0; i < fk.nregs; i++)
		if (p >= fk.regs[i].a && p + len <= fk.regs[i].b)
			return &fk.regs[i];
	return NULL;
}

static bool overlaps_reg(uintptr_t a, uintptr_t b)
{
	for (size_t i = 0; i < fk.nregs; i++)
		if (a < fk.regs[i].b && b > fk.regs[i].a)
			return true;
	return false;
}

/* Under fk.lock: an access to device memory by stream idx at its seq,
 * which knows vc of the others. */
void fk_access(struct fk_alloc *a, int idx, const uint64_t *vc, uint64_t seq, bool write,
	       const char *what)
{
	for (int s = 0; s < FK_STREAMS; s++) {
		if (s == idx)
			continue;
		if (a->wr[s] > vc[s])
			fk_violation("%s %s device memory that stream %d writes, without waiting for that write"
				     " (a read of a slot before its copy's event was waited on)",
				     what, write ? "overwrites" : "reads", s);
		if (write && a->rd[s] > vc[s])
			fk_violation("%s overwrites device memory that stream %d may still be reading"
				     " (a copy into a slot its consumer has not released)", what, s);
	}
	if (write)
		a->wr[idx] = seq;
	else
		a->rd[idx] = seq;
}

CUresult cuMemAlloc_v2(CUdeviceptr *out, size_t len)
{
	void *p;
	CUresult e;

	if ((e = fk_need_ctx()) != CUDA_SUCCESS)
		return e;
	if (!out || !len)
		return CUDA_ERROR_INVALID_VALUE;
	if (fk_fail_now(&fk.fail_alloc) || !(p = aligned_alloc(256, (len + 255) & ~(size_t)255)))
		return CUDA_ERROR_OUT_OF_MEMORY;
	pthread_mutex_lock(&fk.lock);
	struct fk_alloc *n = realloc(fk.allocs, (fk.nallocs + 1) * sizeof(*n));
	if (!n) {
		pthread_mutex_unlock(&fk.lock);
		free(p);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	fk.allocs = n;
	fk.allocs[fk.nallocs++] = (struct fk_alloc){ .a = (uintptr_t)p, .b = (uintptr_t)p + len,
						     .device = fk_cur_device(), .home = fk_cur_device() };
	pthread_mutex_unlock(&fk.lock);
	*out = (CUdeviceptr)(uintptr_t)p;
	return CUDA_SUCCESS;
}

CUresult cuMemFree_v2(CUdeviceptr p)
{
	pthread_mutex_lock(&fk.lock);
	fk_sync_all(); /* as the driver does: nothing queued still uses it */
	for (size_t i = 0; i < fk.nallocs; i++)
		if (fk.allocs[i].a == (uintptr_t)p && !fk.allocs[i].vmm) {
			free((void *)(uintptr_t)p);
			fk.allocs[i] = fk.allocs[--fk.nallocs];
			pthread_mutex_unlock(&fk.lock);
			return CUDA_SUCCESS;
		}
	pthread_mutex_unlock(&fk.lock);
	fk_violation("cuMemFree of %#llx, which is not a live allocation", (unsigned long long)p);
	return CUDA_ERROR_INVALID_VALUE;
}

/* The device's memory is this process's: its cuMemAlloc allocations and
 * the handles it created count against FK_DEVICE_BYTES (a real GPU counts
 * every process's, a test compares what one process added). */
CUresult cuMemGetInfo_v2(size_t *free_b, size_t *total)
{
	size_t used = 0;
	CUresult e;

	if ((e = fk_need_ctx()) != CUDA_SUCCESS)
		return e;
	if (!free_b || !total)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&fk.lock);
	for (size_t i = 0; i < fk.nallocs; i++)
		used += fk.allocs[i].vmm ? 0 : fk.allocs[i].b - fk.allocs[i].a;
	used += fk_vmm_created_bytes();
	pthread_mutex_unlock(&fk.lock);
	*total = FK_DEVICE_BYTES;
	*free_b = used < FK_DEVICE_BYTES ? FK_DEVICE_BYTES - used : 0;
	return CUDA_SUCCESS;
}

static CUresult add_reg(uintptr_t a, uintptr_t b, unsigned flags, bool pinned)
{
	struct fk_reg *n;

	if (overlaps_reg(a, b))
		return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
	if (!(n = realloc(fk.regs, (fk.nregs + 1) * sizeof(*n))))
		return CUDA_ERROR_OUT_OF_MEMORY;
	fk.regs = n;
	fk.regs[fk.nregs++] = (struct fk_reg){ a, b, flags, pinned };
	fk_pinned((long long)(b - a));
	return CUDA_SUCCESS;
}

static CUresult drop_reg(uintptr_t a, bool pinned)
{
	for (size_t i = 0; i < fk.nregs; i++)
		if (fk.regs[i].a == a && fk.regs[i].pinned == pinned) {
			fk_pinned(-(long long)(fk.regs[i].b - fk.regs[i].a));
			fk.regs[i] = fk.regs[--fk.nregs];
			return CUDA_SUCCESS;
		}
	return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
}

CUresult cuMemAllocHost_v2(void **out, size_t len)
{
	CUresult e;
	void *p;

	if ((e = fk_need_ctx()) != CUDA_SUCCESS)
		return e;
	if (fk_fail_now(&fk.fail_alloc_host) || !(p = aligned_alloc(4096, (len + 4095) & ~(size_t)4095)))
		return CUDA_ERROR_OUT_OF_MEMORY;
	pthread_mutex_lock(&fk.lock);
	e = add_reg((uintptr_t)p, (uintptr_t)p + len, 0, true);
	pthread_mutex_unlock(&fk.lock);
	if (e != CUDA_SUCCESS)
		free(p);
	else
		*out = p;
	return e;
}

CUresult cuMemFreeHost(void *p)
{
	CUresult e;

	pthread_mutex_lock(&fk.lock);
	fk_sync_all();
	e = drop_reg((uintptr_t)p, true);
	pthread_mutex_unlock(&fk.lock);
	if (e == CUDA_SUCCESS)
		free(p);
	else
		fk_violation("cuMemFreeHost of %p, which cuMemAllocHost did not return", p);
	return e;
}

/* Whether every page of [a, b) is mapped writable (/proc/self/maps). */
static bool writable(uintptr_t a, uintptr_t b)
{
	FILE *f = fopen("/proc/self/maps", "re");
	char line[512];
	uintptr_t cur = a;
	bool ok = false;

	if (!f)
		return true;
	while (!ok && fgets(line, sizeof(line), f)) {
		unsigned long lo, hi;
		char perm[8];
		if (sscanf(line, "%lx-%lx %7s", &lo, &hi, perm) != 3 || hi <= cur || lo > cur)
			continue;
		if (perm[1] != 'w')
			break;
		cur = hi;
		ok = cur >= b;
	}
	fclose(f);
	return ok;
}

CUresult cuMemHostRegister_v2(void *p, size_t len, unsigned flags)
{
	uintptr_t a = (uintptr_t)p;
	CUresult e;

	if ((e = fk_need_ctx()) != CUDA_SUCCESS)
		return e;
	if (!p || !len)
		return CUDA_ERROR_INVALID_VALUE;
	if ((long long)len > fk.max_register) {
		fk_violation("cuMemHostRegister of %zu bytes in one call (this driver's limit: %lld)", len,
			     fk.max_register);
		return CUDA_ERROR_INVALID_VALUE;
	}
	if ((flags & CU_MEMHOSTREGISTER_READ_ONLY) && !fk.ro_supported)
		return CUDA_ERROR_NOT_SUPPORTED;
	if (!(flags & CU_MEMHOSTREGISTER_READ_ONLY) && !writable(a, a + len))
		return CUDA_ERROR_INVALID_VALUE; /* a read-only mapping, registered writable */
	if (fk_fail_now(&fk.fail_register))
		return CUDA_ERROR_OUT_OF_MEMORY;
	if (fk.reg_mbps > 0) { /* the real driver pins page by page: time the caller pays */
		double s = (double)len / ((double)fk.reg_mbps * 1e6);
		struct timespec ts = { (time_t)s, (long)((s - (time_t)s) * 1e9) };
		nanosleep(&ts, NULL);
	}
	pthread_mutex_lock(&fk.lock);
	e = add_reg(a, a + len, flags, false);
	if (e == CUDA_SUCCESS) {
		fk.registrations++;
		if ((long long)len > fk.largest_register)
			fk.largest_register = (long long)len;
	}
	pthread_mutex_unlock(&fk.lock);
	return e;
}

CUresult cuMemHostUnregister(void *p)
{
	CUresult e;

	pthread_mutex_lock(&fk.lock);
	fk_sync_all(); /* copies from it still queued finish first */
	e = drop_reg((uintptr_t)p, false);
	pthread_mutex_unlock(&fk.lock);
	if (e != CUDA_SUCCESS)
		fk_violation("cuMemHostUnregister of %p, which is not the start of a registration", p);
	return e;
}
