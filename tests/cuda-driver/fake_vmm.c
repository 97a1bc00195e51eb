// SPDX-License-Identifier: MIT
/* fake_vmm.c - the test driver's virtual memory management: allocations
 * are memfds (so an exported handle is an fd another process can import,
 * as with the real driver's POSIX fd handles), address ranges are
 * PROT_NONE reservations, a mapping is the memfd mapped over part of one,
 * and cuMemSetAccess sets its protection: a read-only mapping is really
 * read-only, and a copy into it is refused. The contracts: sizes are
 * multiples of the granularity, maps go inside reservations and never over
 * each other, access is set on mapped ranges only, reservations are freed
 * empty, handles are released once. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fake.h"

struct fk_handle {
	unsigned long long id;
	int fd;                     /* the memfd */
	size_t size;
	unsigned maps;              /* live mappings of it */
	bool released, exportable;
	bool created;               /* cuMemCreate's, not an import */
	int device;                 /* where it lies */
};

struct fk_resv {
	uintptr_t a, b;
};

struct fk_map {
	uintptr_t a, b;
	unsigned long long handle;
};

static struct fk_handle *handles;
static size_t nhandles;
static unsigned long long next_handle = 1;
static struct fk_resv *resvs;
static size_t nresvs;
static struct fk_map *maps;
static size_t nmaps;

static bool granular(size_t n)
{
	return n && fk.granule > 0 && n % (size_t)fk.granule == 0;
}

static struct fk_handle *handle_of(unsigned long long id)
{
	for (size_t i = 0; i < nhandles; i++)
		if (handles[i].id == id && !handles[i].released)
			return &handles[i];
	return NULL;
}

/* Forgets a handle nobody uses any more (released, unmapped). */
static void reap(unsigned long long id)
{
	for (size_t i = 0; i < nhandles; i++)
		if (handles[i].id == id && handles[i].released && !handles[i].maps) {
			close(handles[i].fd);
			handles[i] = handles[--nhandles];
			return;
		}
}

static CUresult add_handle(int fd, size_t size, bool exportable, int device, CUmemGenericAllocationHandle *out)
{
	struct fk_handle *n = realloc(handles, (nhandles + 1) * sizeof(*n));

	if (!n)
		return CUDA_ERROR_OUT_OF_MEMORY;
	handles = n;
	handles[nhandles++] = (struct fk_handle){ next_handle, fd, size, 0, false, exportable, false, device };
	*out = next_handle++;
	return CUDA_SUCCESS;
}

CUresult cuMemGetAllocationGranularity(size_t *g, const struct cu_mem_prop *p, int option)
{
	if (!g || !p || option != CU_MEM_ALLOC_GRANULARITY_MINIMUM)
		return CUDA_ERROR_INVALID_VALUE;
	*g = (size_t)fk.granule;
	return CUDA_SUCCESS;
}

CUresult cuDeviceGetUuid_v2(struct cu_uuid *u, CUdevice d)
{
	if (d < 0 || d >= fk.devices || !u)
		return CUDA_ERROR_INVALID_DEVICE;
	memset(u->bytes, 0x5a, sizeof(u->bytes));
	memcpy(u->bytes, &fk.uuid, sizeof(fk.uuid)); /* a knob: "another GPU" */
	u->bytes[15] = (char)(0x5a + d);           /* each device its own */
	return CUDA_SUCCESS;
}

CUresult cuMemCreate(CUmemGenericAllocationHandle *h, size_t len, const struct cu_mem_prop *p,
		     unsigned long long flags)
{
	CUresult e;
	int fd;

	if ((e = fk_need_ctx()) != CUDA_SUCCESS)
		return e;
	if (!h || !p || flags || p->type != CU_MEM_ALLOCATION_TYPE_PINNED ||
	    p->location.type != CU_MEM_LOCATION_TYPE_DEVICE || p->location.id < 0 || p->location.id >= fk.devices)
		return CUDA_ERROR_INVALID_VALUE;
	if (!granular(len)) {
		fk_violation("cuMemCreate of %zu bytes, not a multiple of the granularity %lld", len, fk.granule);
		return CUDA_ERROR_INVALID_VALUE;
	}
	if (fk_fail_now(&fk.fail_alloc))
		return CUDA_ERROR_OUT_OF_MEMORY;
	char name[32];
	snprintf(name, sizeof(name), "fakecuda-vmm-d%d", p->location.id); /* import reads it */
	fd = memfd_create(name, MFD_CLOEXEC);
	if (fd < 0 || ftruncate(fd, (off_t)len) < 0) {
		if (fd >= 0)
			close(fd);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	pthread_mutex_lock(&fk.lock);
	e = add_handle(fd, len, p->requestedHandleTypes & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, p->location.id, h);
	if (e == CUDA_SUCCESS)
		handles[nhandles - 1].created = true;
	pthread_mutex_unlock(&fk.lock);
	if (e != CUDA_SUCCESS)
		close(fd);
	return e;
}

CUresult cuMemRelease(CUmemGenericAllocationHandle h)
{
	struct fk_handle *x;

	pthread_mutex_lock(&fk.lock);
	if ((x = handle_of(h))) {
		x->released = true;
		reap(h);
	}
	pthread_mutex_unlock(&fk.lock);
	if (!x)
		fk_violation("cuMemRelease of handle %llu, which is not live", h);
	return x ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuMemExportToShareableHandle(void *out, CUmemGenericAllocationHandle h, int type,
				      unsigned long long flags)
{
	struct fk_handle *x;
	int fd = -1;

	pthread_mutex_lock(&fk.lock);
	x = handle_of(h);
	if (x && x->exportable && type == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR && !flags)
		fd = fcntl(x->fd, F_DUPFD_CLOEXEC, 0);
	pthread_mutex_unlock(&fk.lock);
	if (!x)
		fk_violation("cuMemExportToShareableHandle of handle %llu, which is not live", h);
	if (fd < 0)
		return CUDA_ERROR_INVALID_VALUE;
	*(int *)out = fd;
	return CUDA_SUCCESS;
}

CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *h, void *os_handle, int type)
{
	int fd = (int)(uintptr_t)os_handle, own, device = 0;
	const char *dn;
	char link[64], target[128];
	struct stat st;
	ssize_t n;
	CUresult e;

	if ((e = fk_need_ctx()) != CUDA_SUCCESS)
		return e;
	snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	n = readlink(link, target, sizeof(target) - 1);
	target[n > 0 ? n : 0] = 0;
	if (type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR || fstat(fd, &st) < 0 ||
	    !strstr(target, "fakecuda-vmm"))
		return CUDA_ERROR_INVALID_VALUE; /* not an exported allocation */
	if ((dn = strstr(target, "fakecuda-vmm-d")))
		device = atoi(dn + strlen("fakecuda-vmm-d"));
	fk_sleep((double)fk.import_ms / 1e3); /* the driver maps it: FAKECUDA_IMPORT_MS */
	__atomic_add_fetch(&fk.imports, 1, __ATOMIC_SEQ_CST);
	if ((own = fcntl(fd, F_DUPFD_CLOEXEC, 0)) < 0)
		return CUDA_ERROR_OUT_OF_MEMORY;
	pthread_mutex_lock(&fk.lock);
	e = add_handle(own, (size_t)st.st_size, true, device, h);
	pthread_mutex_unlock(&fk.lock);
	if (e != CUDA_SUCCESS)
		close(own);
	return e;
}

CUresult cuMemAddressReserve(CUdeviceptr *p, size_t len, size_t align, CUdeviceptr addr,
			     unsigned long long flags)
{
	size_t al = align ? align : (size_t)fk.granule;
	uint8_t *m;
	uintptr_t a;
	struct fk_resv *n;

	if (!p || addr || flags || !granular(len)) {
		fk_violation("cuMemAddressReserve of %zu bytes (granularity %lld), fixed address or flags",
			     len, fk.granule);
		return CUDA_ERROR_INVALID_VALUE;
	}
	m = mmap(NULL, len + al, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (m == MAP_FAILED)
		return CUDA_ERROR_OUT_OF_MEMORY;
	a = ((uintptr_t)m + al - 1) & ~(uintptr_t)(al - 1);
	if (a > (uintptr_t)m)
		munmap(m, a - (uintptr_t)m);
	munmap((void *)(a + len), (uintptr_t)m + len + al - (a + len));
	pthread_mutex_lock(&fk.lock);
	n = realloc(resvs, (nresvs + 1) * sizeof(*n));
	if (n) {
		resvs = n;
		resvs[nresvs++] = (struct fk_resv){ a, a + len };
	}
	pthread_mutex_unlock(&fk.lock);
	if (!n) {
		munmap((void *)a, len);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	*p = a;
	return CUDA_SUCCESS;
}

CUresult cuMemAddressFree(CUdeviceptr p, size_t len)
{
	bool found = false, busy = false;

	pthread_mutex_lock(&fk.lock);
	for (size_t i = 0; i < nmaps; i++)
		busy |= maps[i].a >= p && maps[i].b <= p + len;
	for (size_t i = 0; !busy && i < nresvs; i++)
		if (resvs[i].a == p && resvs[i].b == p + len) {
			resvs[i] = resvs[--nresvs];
			found = true;
		}
	pthread_mutex_unlock(&fk.lock);
	if (busy || !found) {
		fk_violation("cuMemAddressFree of %#llx + %zu: %s", p, len,
			     busy ? "still mapped" : "not a reservation");
		return CUDA_ERROR_INVALID_VALUE;
	}
	munmap((void *)(uintptr_t)p, len);
	return CUDA_SUCCESS;
}

CUresult cuMemMap(CUdeviceptr p, size_t len, size_t off, CUmemGenericAllocationHandle h,
		  unsigned long long flags)
{
	struct fk_handle *x;
	struct fk_map *n = NULL;
	bool inside = false, over = false;

	pthread_mutex_lock(&fk.lock);
	x = handle_of(h);
	for (size_t i = 0; i < nresvs; i++)
		inside |= p >= resvs[i].a && p + len <= resvs[i].b;
	for (size_t i = 0; i < nmaps; i++)
		over |= p < maps[i].b && p + len > maps[i].a;
	if (x && inside && !over && !off && !flags && granular(len) && len <= x->size &&
	    mmap((void *)(uintptr_t)p, len, PROT_NONE, MAP_SHARED | MAP_FIXED, x->fd, 0) != MAP_FAILED &&
	    (n = realloc(maps, (nmaps + 1) * sizeof(*n)))) {
		maps = n;
		maps[nmaps++] = (struct fk_map){ p, p + len, h };
		x->maps++;
	}
	pthread_mutex_unlock(&fk.lock);
	/* Larger than the allocation: an error the driver checks (the copy
	 * service maps what a worker says it sent), not a broken contract. */
	if (!n && x && inside && !over && granular(len) && len > x->size)
		return CUDA_ERROR_INVALID_VALUE;
	if (!n)
		fk_violation("cuMemMap of %#llx + %zu: %s", p, len,
			     !x ? "not a live handle" : !inside ? "outside any reservation"
			     : over ? "over another mapping" : "bad size, offset or flags");
	return n ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* Under fk.lock: the device allocation a mapping shows as, for copies:
 * accessed by device, lying on home. */
static void set_alloc(uintptr_t a, uintptr_t b, bool readonly, int device, int home)
{
	struct fk_alloc *x = fk_alloc_at(a, b - a), *n;

	if (x && x->a == a && x->b == b) {
		x->readonly = readonly;
		x->device = device;
		return;
	}
	if (!(n = realloc(fk.allocs, (fk.nallocs + 1) * sizeof(*n))))
		return;
	fk.allocs = n;
	fk.allocs[fk.nallocs++] = (struct fk_alloc){ .a = a, .b = b, .device = device, .home = home, .vmm = true,
						     .readonly = readonly };
}

CUresult cuMemSetAccess(CUdeviceptr p, size_t len, const struct cu_access_desc *d, size_t count)
{
	int prot, device = 0;
	bool mapped = false, peer = false;

	if (!d || count != 1 || d->location.type != CU_MEM_LOCATION_TYPE_DEVICE || d->location.id < 0 ||
	    d->location.id >= fk.devices ||
	    (d->flags != CU_MEM_ACCESS_FLAGS_PROT_READ && d->flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE))
		return CUDA_ERROR_INVALID_VALUE;
	prot = d->flags == CU_MEM_ACCESS_FLAGS_PROT_READ ? PROT_READ : PROT_READ | PROT_WRITE;
	pthread_mutex_lock(&fk.lock);
	for (size_t i = 0; i < nmaps; i++)
		if (maps[i].a == p && maps[i].b == p + len) {
			struct fk_handle *x = handle_of(maps[i].handle);
			mapped = true;
			device = x ? x->device : 0;
		}
	/* Another device's memory: read only through peer access, as the
	 * real driver grants it (an error, not a broken contract: the caller
	 * asks cuDeviceCanAccessPeer first, or falls back on it). */
	peer = mapped && d->location.id != device;
	if (peer && fk.no_peer) {
		pthread_mutex_unlock(&fk.lock);
		return CUDA_ERROR_INVALID_DEVICE;
	}
	if (mapped) {
		fk_sync_all(); /* copies queued into it land before its protection changes */
		mprotect((void *)(uintptr_t)p, len, prot);
		set_alloc(p, p + len, prot == PROT_READ, d->location.id, device);
	}
	pthread_mutex_unlock(&fk.lock);
	if (!mapped) {
		fk_violation("cuMemSetAccess of %#llx + %zu, which is not one mapping", p, len);
		return CUDA_ERROR_INVALID_VALUE;
	}
	return CUDA_SUCCESS;
}

CUresult cuMemUnmap(CUdeviceptr p, size_t len)
{
	unsigned long long h = 0;

	pthread_mutex_lock(&fk.lock);
	fk_sync_all(); /* nothing queued still uses it */
	for (size_t i = 0; i < nmaps; i++)
		if (maps[i].a == p && maps[i].b == p + len) {
			h = maps[i].handle;
			maps[i] = maps[--nmaps];
			break;
		}
	for (size_t i = 0; h && i < fk.nallocs; i++)
		if (fk.allocs[i].a == p && fk.allocs[i].vmm)
			fk.allocs[i--] = fk.allocs[--fk.nallocs];
	for (size_t i = 0; h && i < nhandles; i++)
		if (handles[i].id == h) {
			handles[i].maps--;
			reap(h);
			break;
		}
	if (h)
		mmap((void *)(uintptr_t)p, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED,
		     -1, 0);
	pthread_mutex_unlock(&fk.lock);
	if (!h) {
		fk_violation("cuMemUnmap of %#llx + %zu, which is not one mapping", p, len);
		return CUDA_ERROR_INVALID_VALUE;
	}
	return CUDA_SUCCESS;
}

CUresult cuMemGetAllocationPropertiesFromHandle(struct cu_mem_prop *p, CUmemGenericAllocationHandle h)
{
	struct fk_handle *x;

	pthread_mutex_lock(&fk.lock);
	if ((x = handle_of(h)) && p) {
		memset(p, 0, sizeof(*p));
		p->type = CU_MEM_ALLOCATION_TYPE_PINNED;
		p->requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
		p->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
		p->location.id = x->device;
	}
	pthread_mutex_unlock(&fk.lock);
	return x && p ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

size_t fk_vmm_created_bytes(void)
{
	size_t n = 0;

	for (size_t i = 0; i < nhandles; i++)
		n += handles[i].created ? handles[i].size : 0;
	return n;
}

long long fk_vmm_live(const char *what)
{
	if (strcmp(what, "vmm_handles") == 0)
		return (long long)nhandles;
	if (strcmp(what, "vmm_mappings") == 0)
		return (long long)nmaps;
	if (strcmp(what, "reservations") == 0)
		return (long long)nresvs;
	return -1;
}
