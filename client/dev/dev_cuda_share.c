// SPDX-License-Identifier: MIT
/* dev_cuda_share.c - the cuda backend's device regions, through CUDA's
 * virtual memory management: cuMemCreate with a POSIX fd handle type,
 * exported with cuMemExportToShareableHandle; readers import the fd, map it
 * at an address they reserve, and get read-only access
 * (CU_MEM_ACCESS_FLAGS_PROT_READ). The writer's own access drops to read
 * once the fill is done. Sizes are multiples of the allocation granularity. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "wire.h"
#include "dev_cuda.h"
#include "wsrv.pb-c.h"

static struct cu_mem_prop prop_of(const struct cuda_dev *c)
{
	struct cu_mem_prop p;

	memset(&p, 0, sizeof(p));
	p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	p.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
	p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	p.location.id = c->device;
	return p;
}

static CUresult set_access(struct cuda_dev *c, CUdeviceptr p, size_t len, int flags)
{
	struct cu_access_desc a = { { CU_MEM_LOCATION_TYPE_DEVICE, c->device }, flags };

	return c->cu->MemSetAccess(p, len, &a, 1);
}

/* Under the lock, in the context: can this device share? 0, or a reason. */
static int can_share(struct cuda_dev *c, const char **why)
{
	int vmm = 0, fd = 0;

	if (!c->cu->has_vmm) {
		*why = "the CUDA driver has no virtual memory management calls";
		return -EOPNOTSUPP;
	}
	c->cu->DeviceGetAttribute(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, c->device);
	c->cu->DeviceGetAttribute(&fd, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED,
				  c->device);
	if (!vmm || !fd) {
		*why = !vmm ? "the GPU does not support virtual memory management"
			    : "the GPU cannot export memory as a POSIX file descriptor";
		return -EOPNOTSUPP;
	}
	return 0;
}

int cu_share_info(struct wsrv_device *d, struct dev_share_info *out)
{
	struct cuda_dev *c = (struct cuda_dev *)d;
	struct cu_mem_prop p = prop_of(c);
	const unsigned char *u;
	struct cu_uuid uuid;
	const char *why = NULL;
	CUresult e = CUDA_SUCCESS;
	int r;

	memset(out, 0, sizeof(*out));
	pthread_mutex_lock(&c->lock);
	cu_enter(c);
	if ((r = can_share(c, &why)) == 0 &&
	    (e = c->cu->DeviceGetUuid(&uuid, c->device)) == CUDA_SUCCESS)
		e = c->cu->MemGetAllocationGranularity(&out->granule, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
	cu_leave(c);
	pthread_mutex_unlock(&c->lock);
	if (r < 0)
		return cl_err(r, "cuda: no shared device regions: %s", why);
	if (e != CUDA_SUCCESS)
		return cu_fail(c, e, "cuDeviceGetUuid / cuMemGetAllocationGranularity");
	if (!out->granule)
		out->granule = 2u << 20;
	u = (const unsigned char *)uuid.bytes;
	snprintf(out->id, sizeof(out->id),
		 "cuda:GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
		 u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12],
		 u[13], u[14], u[15]);
	out->kind = WSRV__REGION_KIND__REGION_CUDA;
	return 0;
}

/* Under the lock, in the context: reserves an address for h and maps it
 * with access flags. */
static CUresult map_handle(struct cuda_dev *c, CUmemGenericAllocationHandle h, size_t len,
			   int flags, CUdeviceptr *out)
{
	CUdeviceptr p = 0;
	CUresult e = c->cu->MemAddressReserve(&p, len, 0, 0, 0);

	if (e != CUDA_SUCCESS)
		return e;
	if ((e = c->cu->MemMap(p, len, 0, h, 0)) != CUDA_SUCCESS) {
		c->cu->MemAddressFree(p, len);
		return e;
	}
	if ((e = set_access(c, p, len, flags)) != CUDA_SUCCESS) {
		c->cu->MemUnmap(p, len);
		c->cu->MemAddressFree(p, len);
		return e;
	}
	*out = p;
	return CUDA_SUCCESS;
}

int cu_share_create(struct wsrv_device *d, size_t len, struct dev_share *sh)
{
	struct cuda_dev *c = (struct cuda_dev *)d;
	struct cu_mem_prop p = prop_of(c);
	CUmemGenericAllocationHandle h = 0;
	CUdeviceptr ptr = 0;
	int fd = -1;
	const char *what = "cuMemCreate";
	CUresult e;

	pthread_mutex_lock(&c->lock);
	cu_enter(c);
	e = c->cu->MemCreate(&h, len, &p, 0);
	if (e == CUDA_SUCCESS) {
		what = "cuMemExportToShareableHandle";
		e = c->cu->MemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
		if (e == CUDA_SUCCESS) {
			what = "cuMemMap";
			e = map_handle(c, h, len, CU_MEM_ACCESS_FLAGS_PROT_READWRITE, &ptr);
		}
		if (e != CUDA_SUCCESS)
			c->cu->MemRelease(h);
	}
	cu_leave(c);
	pthread_mutex_unlock(&c->lock);
	if (e != CUDA_SUCCESS) {
		if (fd >= 0)
			close(fd);
		return cu_fail(c, e, what);
	}
	*sh = (struct dev_share){ .ptr = (void *)(uintptr_t)ptr, .len = len, .fd = fd, .handle = h,
				  .writable = true };
	return 0;
}

int cu_share_seal(struct wsrv_device *d, struct dev_share *sh)
{
	struct cuda_dev *c = (struct cuda_dev *)d;
	CUresult e;

	pthread_mutex_lock(&c->lock);
	cu_enter(c);
	/* The fill's copies are done (the caller waited); from now on this
	 * process only reads, like every other. */
	e = set_access(c, (CUdeviceptr)(uintptr_t)sh->ptr, sh->len, CU_MEM_ACCESS_FLAGS_PROT_READ);
	cu_leave(c);
	pthread_mutex_unlock(&c->lock);
	if (e != CUDA_SUCCESS)
		return cu_fail(c, e, "cuMemSetAccess (read-only)");
	sh->writable = false;
	return 0;
}

/* Under the lock, in the context: whether this device may read h, which
 * may lie on another device (a layer shard's peer source): 0, or
 * -EOPNOTSUPP with a sentence when it lies elsewhere and this device has
 * no peer access to it. */
static int readable_here(struct cuda_dev *c, CUmemGenericAllocationHandle h)
{
	struct cu_mem_prop p;
	int can = 0;

	if (!c->cu->MemGetAllocationPropertiesFromHandle ||
	    c->cu->MemGetAllocationPropertiesFromHandle(&p, h) != CUDA_SUCCESS || p.location.id == c->device)
		return 0; /* this device's own (or unknown: the map says) */
	if (!c->cu->DeviceCanAccessPeer || c->cu->DeviceCanAccessPeer(&can, c->device, p.location.id) != CUDA_SUCCESS)
		return cl_err(-EOPNOTSUPP, "device %d cannot tell whether it reads device %d's memory "
			      "(no cuDeviceCanAccessPeer)", c->device, p.location.id);
	if (!can)
		return cl_err(-EOPNOTSUPP, "device %d has no peer access to device %d's memory", c->device,
			      p.location.id);
	return 0;
}

int cu_share_import(struct wsrv_device *d, int fd, size_t len, struct dev_share *sh)
{
	struct cuda_dev *c = (struct cuda_dev *)d;
	CUmemGenericAllocationHandle h = 0;
	CUdeviceptr ptr = 0;
	const char *what = "cuMemImportFromShareableHandle";
	CUresult e;
	int r = 0;

	pthread_mutex_lock(&c->lock);
	cu_enter(c);
	e = c->cu->MemImportFromShareableHandle(&h, (void *)(uintptr_t)fd,
						CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
	if (e == CUDA_SUCCESS && (r = readable_here(c, h)) < 0) {
		c->cu->MemRelease(h);
		cu_leave(c);
		pthread_mutex_unlock(&c->lock);
		return r;
	}
	if (e == CUDA_SUCCESS) {
		what = "cuMemMap";
		if ((e = map_handle(c, h, len, CU_MEM_ACCESS_FLAGS_PROT_READ, &ptr)) != CUDA_SUCCESS)
			c->cu->MemRelease(h);
	}
	cu_leave(c);
	pthread_mutex_unlock(&c->lock);
	if (e != CUDA_SUCCESS)
		return cu_fail(c, e, what);
	*sh = (struct dev_share){ .ptr = (void *)(uintptr_t)ptr, .len = len, .fd = -1, .handle = h };
	return 0;
}

void cu_share_free(struct wsrv_device *d, struct dev_share *sh)
{
	struct cuda_dev *c = (struct cuda_dev *)d;
	CUdeviceptr p = (CUdeviceptr)(uintptr_t)sh->ptr;

	if (sh->ptr) {
		pthread_mutex_lock(&c->lock);
		cu_enter(c);
		/* As c_free: nothing queued may still read it. */
		c->cu->StreamSynchronize(c->copy);
		if (c->compute)
			c->cu->StreamSynchronize(c->compute);
		c->cu->MemUnmap(p, sh->len);
		c->cu->MemAddressFree(p, sh->len);
		c->cu->MemRelease(sh->handle);
		cu_leave(c);
		pthread_mutex_unlock(&c->lock);
	}
	if (sh->fd >= 0)
		close(sh->fd);
	*sh = (struct dev_share){ .fd = -1 };
}
