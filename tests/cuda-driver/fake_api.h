// SPDX-License-Identifier: MIT
/* fake_api.h - the driver entry points the test driver exports, under the
 * names libwsrv looks up (client/dev/cuda_api.c). */
#ifndef FAKE_API_H
#define FAKE_API_H

#include "cuda_api.h"

CUresult cuCtxGetCurrent(CUcontext *c);
CUresult cuCtxPopCurrent_v2(CUcontext *c);
CUresult cuCtxPushCurrent_v2(CUcontext c);
CUresult cuDeviceGet(CUdevice *d, int ordinal);
CUresult cuDeviceCanAccessPeer(int *can, CUdevice dev, CUdevice peer);
CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t len, CUstream s);
CUresult cuDeviceGetAttribute(int *v, int attr, CUdevice d);
CUresult cuDeviceGetCount(int *n);
CUresult cuDeviceGetName(char *name, int len, CUdevice d);
CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d);
CUresult cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d);
CUresult cuDriverGetVersion(int *v);
CUresult cuEventCreate(CUevent *out, unsigned flags);
CUresult cuEventDestroy_v2(CUevent h);
CUresult cuEventElapsedTime(float *ms, CUevent a, CUevent b);
CUresult cuEventElapsedTime_v2(float *ms, CUevent a, CUevent b);
CUresult cuEventQuery(CUevent h);
CUresult cuEventRecord(CUevent h, CUstream s);
CUresult cuEventSynchronize(CUevent h);
CUresult cuGetErrorString(CUresult e, const char **s);
CUresult cuInit(unsigned flags);
CUresult cuLaunchHostFunc(CUstream h, CUhostFn fn, void *arg);
CUresult cuMemAllocHost_v2(void **out, size_t len);
CUresult cuMemAlloc_v2(CUdeviceptr *out, size_t len);
CUresult cuMemGetInfo_v2(size_t *free_b, size_t *total);
CUresult cuMemFreeHost(void *p);
CUresult cuMemFree_v2(CUdeviceptr p);
CUresult cuMemHostRegister_v2(void *p, size_t len, unsigned flags);
CUresult cuMemHostUnregister(void *p);
CUresult cuMemcpy2DAsync_v2(const struct cu_memcpy2d *m, CUstream s);
CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t len, CUstream s);
CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t len);
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t len, CUstream s);
CUresult cuStreamCreate(CUstream *out, unsigned flags);
CUresult cuStreamDestroy_v2(CUstream h);
CUresult cuStreamSynchronize(CUstream h);
CUresult cuStreamWaitEvent(CUstream s, CUevent h, unsigned flags);
CUresult cuDeviceGetUuid_v2(struct cu_uuid *u, CUdevice d);
CUresult cuMemGetAllocationGranularity(size_t *g, const struct cu_mem_prop *p, int option);
CUresult cuMemCreate(CUmemGenericAllocationHandle *h, size_t len, const struct cu_mem_prop *p,
		     unsigned long long flags);
CUresult cuMemRelease(CUmemGenericAllocationHandle h);
CUresult cuMemExportToShareableHandle(void *out, CUmemGenericAllocationHandle h, int type,
				      unsigned long long flags);
CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *h, void *os_handle, int type);
CUresult cuMemAddressReserve(CUdeviceptr *p, size_t len, size_t align, CUdeviceptr addr,
			     unsigned long long flags);
CUresult cuMemAddressFree(CUdeviceptr p, size_t len);
CUresult cuMemMap(CUdeviceptr p, size_t len, size_t off, CUmemGenericAllocationHandle h,
		  unsigned long long flags);
CUresult cuMemUnmap(CUdeviceptr p, size_t len);
CUresult cuMemGetAllocationPropertiesFromHandle(struct cu_mem_prop *p, CUmemGenericAllocationHandle h);
CUresult cuMemSetAccess(CUdeviceptr p, size_t len, const struct cu_access_desc *d, size_t n);

#endif
