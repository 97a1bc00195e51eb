// SPDX-License-Identifier: MIT
/* dev_cuda_serve.c - the cuda backend's part in the copy service
 * (dev_serve.h): portable registrations, and workers' allocations mapped
 * writable in the service's context of their device. */
#include <errno.h>

#include "wire.h"
#include "dev_cuda.h"
#include "dev_serve.h"

void dev_serve_portable(struct wsrv_device *d)
{
	struct cuda_dev *c = (struct cuda_dev *)d;

	pthread_mutex_lock(&c->lock);
	c->reg_flags |= CU_MEMHOSTREGISTER_PORTABLE;
	pthread_mutex_unlock(&c->lock);
}

/* Under the lock, in the context: where the allocation h lies is d's
 * device (when the driver can say). */
static int on_this_device(struct cuda_dev *c, CUmemGenericAllocationHandle h)
{
	struct cu_mem_prop p;

	if (!c->cu->MemGetAllocationPropertiesFromHandle)
		return 0;
	if (c->cu->MemGetAllocationPropertiesFromHandle(&p, h) != CUDA_SUCCESS)
		return cl_err(-EBADF, "the driver cannot say where the allocation lies");
	if (p.location.type != CU_MEM_LOCATION_TYPE_DEVICE || p.location.id != c->device)
		return cl_err(-EXDEV, "the allocation lies on device %d (location type %d), not on device %d",
			      p.location.id, p.location.type, c->device);
	return 0;
}

/* Under the lock, in the context: h mapped writable at a reserved address. */
static int map_rw(struct cuda_dev *c, CUmemGenericAllocationHandle h, size_t len, CUdeviceptr *out)
{
	struct cu_access_desc a = { { CU_MEM_LOCATION_TYPE_DEVICE, c->device }, CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
	CUdeviceptr p = 0;
	CUresult e;

	if ((e = c->cu->MemAddressReserve(&p, len, 0, 0, 0)) != CUDA_SUCCESS)
		return cu_fail(c, e, "cuMemAddressReserve");
	if ((e = c->cu->MemMap(p, len, 0, h, 0)) != CUDA_SUCCESS) {
		c->cu->MemAddressFree(p, len);
		return cl_err(-EINVAL, "the allocation is smaller than %zu bytes (cuMemMap: %s)", len,
			      cuda_api_strerror(c->cu, e));
	}
	if ((e = c->cu->MemSetAccess(p, len, &a, 1)) != CUDA_SUCCESS) {
		c->cu->MemUnmap(p, len);
		c->cu->MemAddressFree(p, len);
		return cu_fail(c, e, "cuMemSetAccess (read-write)");
	}
	*out = p;
	return 0;
}

int dev_serve_import(struct wsrv_device *d, int fd, size_t len, struct dev_share *sh)
{
	struct cuda_dev *c = (struct cuda_dev *)d;
	CUmemGenericAllocationHandle h = 0;
	CUdeviceptr ptr = 0;
	CUresult e;
	int r;

	if (d->ops->share_import != cu_share_import || !c->cu->has_vmm)
		return cl_err(-EOPNOTSUPP, "this device cannot import allocations");
	pthread_mutex_lock(&c->lock);
	cu_enter(c);
	e = c->cu->MemImportFromShareableHandle(&h, (void *)(uintptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
	if (e != CUDA_SUCCESS)
		r = cl_err(-EBADF, "the fd is not an exported device allocation (%s)", cuda_api_strerror(c->cu, e));
	else if ((r = on_this_device(c, h)) < 0 || (r = map_rw(c, h, len, &ptr)) < 0)
		c->cu->MemRelease(h);
	cu_leave(c);
	pthread_mutex_unlock(&c->lock);
	if (r < 0)
		return r;
	*sh = (struct dev_share){ .ptr = (void *)(uintptr_t)ptr, .len = len, .fd = -1, .handle = h,
				  .writable = true };
	return 0;
}

void dev_serve_free(struct wsrv_device *d, struct dev_share *sh)
{
	cu_share_free(d, sh);
}
