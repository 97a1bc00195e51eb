// SPDX-License-Identifier: MIT
/* cuda_api.h - the part of the CUDA driver API that wsrv calls, declared
 * here so that nothing needs CUDA's headers to build, and loaded at run time
 * with dlopen("libcuda.so.1"): libwsrv has no link-time CUDA dependency.
 * Types, values and layouts are those of cuda.h (CUDA 12 and 13); the
 * versioned entry points are looked up by the names cuda.h maps to. The
 * test stand-in (tests/cuda-driver/) implements the same table. */
#ifndef WSRV_CUDA_API_H
#define WSRV_CUDA_API_H

#include <stddef.h>

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef struct CUctx_st *CUcontext;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;
typedef void (*CUhostFn)(void *user);
typedef unsigned long long CUmemGenericAllocationHandle;

enum {
	CUDA_SUCCESS = 0,
	CUDA_ERROR_INVALID_VALUE = 1,
	CUDA_ERROR_OUT_OF_MEMORY = 2,
	CUDA_ERROR_NOT_INITIALIZED = 3,
	CUDA_ERROR_NO_DEVICE = 100,
	CUDA_ERROR_INVALID_DEVICE = 101,
	CUDA_ERROR_INVALID_CONTEXT = 201,
	CUDA_ERROR_INVALID_HANDLE = 400,
	CUDA_ERROR_NOT_READY = 600,
	CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED = 712,
	CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED = 713,
	CUDA_ERROR_NOT_SUPPORTED = 801,
	CUDA_ERROR_UNKNOWN = 999,
};

enum {
	CU_STREAM_NON_BLOCKING = 0x1,
	CU_EVENT_DEFAULT = 0x0,
	CU_EVENT_DISABLE_TIMING = 0x2,
	CU_MEMHOSTREGISTER_PORTABLE = 0x01,
	CU_MEMHOSTREGISTER_READ_ONLY = 0x08,
	CU_DEVICE_ATTRIBUTE_PCI_BUS_ID = 33,
	CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED = 113,
	CU_MEMORYTYPE_HOST = 0x01,
	CU_MEMORYTYPE_DEVICE = 0x02,
	CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED = 102,
	CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED = 103,
	CU_MEM_ALLOCATION_TYPE_PINNED = 0x1,
	CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR = 0x1,
	CU_MEM_LOCATION_TYPE_DEVICE = 0x1,
	CU_MEM_ACCESS_FLAGS_PROT_READ = 0x1,
	CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 0x3,
	CU_MEM_ALLOC_GRANULARITY_MINIMUM = 0x0,
};

/* cuda.h's CUmemLocation, CUmemAllocationProp, CUmemAccessDesc, CUuuid. */
struct cu_mem_location {
	int type;
	int id;
};

struct cu_mem_prop {
	int type;                   /* CU_MEM_ALLOCATION_TYPE_PINNED */
	int requestedHandleTypes;
	struct cu_mem_location location;
	void *win32HandleMetaData;
	struct {
		unsigned char compressionType, gpuDirectRDMACapable;
		unsigned short usage;
		unsigned char reserved[4];
	} allocFlags;
};

struct cu_access_desc {
	struct cu_mem_location location;
	int flags;
};

struct cu_uuid {
	char bytes[16];
};

/* cuda.h's CUDA_MEMCPY2D (the _v2 layout). */
struct cu_memcpy2d {
	size_t srcXInBytes, srcY;
	int srcMemoryType;
	const void *srcHost;
	CUdeviceptr srcDevice;
	void *srcArray;
	size_t srcPitch;
	size_t dstXInBytes, dstY;
	int dstMemoryType;
	void *dstHost;
	CUdeviceptr dstDevice;
	void *dstArray;
	size_t dstPitch;
	size_t WidthInBytes, Height;
};

/* The entry points, by what they do; cuda_api.c lists the symbol names. */
struct cuda_api {
	CUresult (*Init)(unsigned flags);
	CUresult (*DriverGetVersion)(int *version);
	CUresult (*GetErrorString)(CUresult e, const char **s);
	CUresult (*DeviceGetCount)(int *n);
	CUresult (*DeviceGet)(CUdevice *d, int ordinal);
	CUresult (*DeviceGetAttribute)(int *v, int attr, CUdevice d);
	CUresult (*DeviceGetName)(char *name, int len, CUdevice d);
	CUresult (*PrimaryCtxRetain)(CUcontext *c, CUdevice d);
	CUresult (*PrimaryCtxRelease)(CUdevice d);
	CUresult (*CtxPushCurrent)(CUcontext c);
	CUresult (*CtxPopCurrent)(CUcontext *c);
	CUresult (*CtxGetCurrent)(CUcontext *c);
	CUresult (*StreamCreate)(CUstream *s, unsigned flags);
	CUresult (*StreamDestroy)(CUstream s);
	CUresult (*StreamWaitEvent)(CUstream s, CUevent e, unsigned flags);
	CUresult (*StreamSynchronize)(CUstream s);
	CUresult (*LaunchHostFunc)(CUstream s, CUhostFn fn, void *user);
	CUresult (*EventCreate)(CUevent *e, unsigned flags);
	CUresult (*EventDestroy)(CUevent e);
	CUresult (*EventRecord)(CUevent e, CUstream s);
	CUresult (*EventQuery)(CUevent e);
	CUresult (*EventSynchronize)(CUevent e);
	CUresult (*EventElapsedTime)(float *ms, CUevent start, CUevent end);
	CUresult (*MemAlloc)(CUdeviceptr *p, size_t len);
	CUresult (*MemFree)(CUdeviceptr p);
	CUresult (*MemAllocHost)(void **p, size_t len);
	CUresult (*MemFreeHost)(void *p);
	CUresult (*MemHostRegister)(void *p, size_t len, unsigned flags);
	CUresult (*MemHostUnregister)(void *p);
	CUresult (*MemcpyHtoDAsync)(CUdeviceptr dst, const void *src, size_t len, CUstream s);
	CUresult (*MemcpyDtoHAsync)(void *dst, CUdeviceptr src, size_t len, CUstream s);
	CUresult (*MemcpyDtoH)(void *dst, CUdeviceptr src, size_t len);
	CUresult (*MemGetInfo)(size_t *free_b, size_t *total);
	CUresult (*Memcpy2DAsync)(const struct cu_memcpy2d *c, CUstream s);
	/* Optional (NULL when the driver lacks them): virtual memory
	 * management, for shared device regions. */
	CUresult (*DeviceGetUuid)(struct cu_uuid *u, CUdevice d);
	CUresult (*MemGetAllocationGranularity)(size_t *g, const struct cu_mem_prop *p, int option);
	CUresult (*MemCreate)(CUmemGenericAllocationHandle *h, size_t len, const struct cu_mem_prop *p,
			      unsigned long long flags);
	CUresult (*MemRelease)(CUmemGenericAllocationHandle h);
	CUresult (*MemExportToShareableHandle)(void *out, CUmemGenericAllocationHandle h, int type,
					       unsigned long long flags);
	CUresult (*MemImportFromShareableHandle)(CUmemGenericAllocationHandle *h, void *os_handle,
						 int type);
	CUresult (*MemAddressReserve)(CUdeviceptr *p, size_t len, size_t align, CUdeviceptr addr,
				      unsigned long long flags);
	CUresult (*MemAddressFree)(CUdeviceptr p, size_t len);
	CUresult (*MemMap)(CUdeviceptr p, size_t len, size_t off, CUmemGenericAllocationHandle h,
			   unsigned long long flags);
	CUresult (*MemUnmap)(CUdeviceptr p, size_t len);
	CUresult (*MemSetAccess)(CUdeviceptr p, size_t len, const struct cu_access_desc *d, size_t n);
	int has_vmm;                /* every one of them was found */
	/* Optional, outside has_vmm (NULL when absent). */
	CUresult (*MemGetAllocationPropertiesFromHandle)(struct cu_mem_prop *p, CUmemGenericAllocationHandle h);
	CUresult (*DeviceCanAccessPeer)(int *can, CUdevice dev, CUdevice peer);
	CUresult (*MemcpyDtoDAsync)(CUdeviceptr dst, CUdeviceptr src, size_t len, CUstream s);
};

/* The driver, loaded and initialised once per process (cuInit(0)); *out
 * lives as long as the process. -ENODEV when there is none: *why (static)
 * says why (no libcuda.so.1, a missing entry point, cuInit failing). */
int cuda_api_get(const struct cuda_api **out, const char **why);

/* CUDA's name for an error, "CUDA error 999" when the driver has none. */
const char *cuda_api_strerror(const struct cuda_api *api, CUresult e);

#endif
