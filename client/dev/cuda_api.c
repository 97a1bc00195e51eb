// SPDX-License-Identifier: MIT
/* cuda_api.c - loading the CUDA driver at run time. */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>

#include "cuda_api.h"

/* Each entry point's offset in struct cuda_api and the names to try, the
 * versioned one first (the names cuda.h maps the plain ones to). */
struct entry { size_t off; const char *name, *alt; };

#define E(f, n, a) { offsetof(struct cuda_api, f), n, a }
static const struct entry entries[] = {
	E(Init, "cuInit", NULL),
	E(DriverGetVersion, "cuDriverGetVersion", NULL),
	E(GetErrorString, "cuGetErrorString", NULL),
	E(DeviceGetCount, "cuDeviceGetCount", NULL),
	E(DeviceGet, "cuDeviceGet", NULL),
	E(DeviceGetAttribute, "cuDeviceGetAttribute", NULL),
	E(DeviceGetName, "cuDeviceGetName", NULL),
	E(PrimaryCtxRetain, "cuDevicePrimaryCtxRetain", NULL),
	E(PrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxRelease"),
	E(CtxPushCurrent, "cuCtxPushCurrent_v2", NULL),
	E(CtxPopCurrent, "cuCtxPopCurrent_v2", NULL),
	E(CtxGetCurrent, "cuCtxGetCurrent", NULL),
	E(StreamCreate, "cuStreamCreate", NULL),
	E(StreamDestroy, "cuStreamDestroy_v2", NULL),
	E(StreamWaitEvent, "cuStreamWaitEvent", NULL),
	E(StreamSynchronize, "cuStreamSynchronize", NULL),
	E(LaunchHostFunc, "cuLaunchHostFunc", NULL),
	E(EventCreate, "cuEventCreate", NULL),
	E(EventDestroy, "cuEventDestroy_v2", NULL),
	E(EventRecord, "cuEventRecord", NULL),
	E(EventQuery, "cuEventQuery", NULL),
	E(EventSynchronize, "cuEventSynchronize", NULL),
	E(EventElapsedTime, "cuEventElapsedTime_v2", "cuEventElapsedTime"),
	E(MemAlloc, "cuMemAlloc_v2", NULL),
	E(MemFree, "cuMemFree_v2", NULL),
	E(MemAllocHost, "cuMemAllocHost_v2", NULL),
	E(MemFreeHost, "cuMemFreeHost", NULL),
	E(MemHostRegister, "cuMemHostRegister_v2", NULL),
	E(MemHostUnregister, "cuMemHostUnregister", NULL),
	E(MemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2", NULL),
	E(MemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2", NULL),
	E(MemcpyDtoH, "cuMemcpyDtoH_v2", NULL),
	E(MemGetInfo, "cuMemGetInfo_v2", NULL),
	E(Memcpy2DAsync, "cuMemcpy2DAsync_v2", NULL),
};

/* Optional: their absence only turns device sharing off. */
static const struct entry vmm_entries[] = {
	E(DeviceGetUuid, "cuDeviceGetUuid_v2", "cuDeviceGetUuid"),
	E(MemGetAllocationGranularity, "cuMemGetAllocationGranularity", NULL),
	E(MemCreate, "cuMemCreate", NULL),
	E(MemRelease, "cuMemRelease", NULL),
	E(MemExportToShareableHandle, "cuMemExportToShareableHandle", NULL),
	E(MemImportFromShareableHandle, "cuMemImportFromShareableHandle", NULL),
	E(MemAddressReserve, "cuMemAddressReserve", NULL),
	E(MemAddressFree, "cuMemAddressFree", NULL),
	E(MemMap, "cuMemMap", NULL),
	E(MemUnmap, "cuMemUnmap", NULL),
	E(MemSetAccess, "cuMemSetAccess", NULL),
};

/* Optional too, and not part of has_vmm: the copy service checks with it
 * which device an imported allocation lies on (NULL: it trusts the map). */
static const struct entry extra_entries[] = {
	E(MemGetAllocationPropertiesFromHandle, "cuMemGetAllocationPropertiesFromHandle", NULL),
	/* A layer shard's peer source: whether another device's memory can be
	 * read, and the copy from it. */
	E(DeviceCanAccessPeer, "cuDeviceCanAccessPeer", NULL),
	E(MemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2", NULL),
};
#undef E

static void *lookup(void *h, const struct entry *e)
{
	void *f = dlsym(h, e->name);

	return f || !e->alt ? f : dlsym(h, e->alt);
}

static struct cuda_api api;

/* Fills api's pointers for n entries; the name of the first one the
 * driver lacks (its pointer left NULL, the rest filled), or NULL. */
static const char *fill(void *h, const struct entry *e, size_t n)
{
	const char *missing = NULL;

	for (size_t i = 0; i < n; i++) {
		void *f = lookup(h, &e[i]);
		*(void **)((char *)&api + e[i].off) = f;
		if (!f && !missing)
			missing = e[i].name;
	}
	return missing;
}
static const char *load_error;
static char why_buf[256];
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void api_load(void)
{
	void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	CUresult e;

	if (!h) {
		load_error = "no CUDA driver here (libcuda.so.1 cannot be loaded)";
		return;
	}
	api.has_vmm = fill(h, vmm_entries, sizeof(vmm_entries) / sizeof(vmm_entries[0])) == NULL;
	fill(h, extra_entries, sizeof(extra_entries) / sizeof(extra_entries[0]));
	const char *missing = fill(h, entries, sizeof(entries) / sizeof(entries[0]));
	if (missing) {
		snprintf(why_buf, sizeof(why_buf), "the CUDA driver has no %s (too old?)", missing);
		load_error = why_buf;
		return; /* the handle stays open: harmless, and once */
	}
	if ((e = api.Init(0)) != CUDA_SUCCESS) {
		snprintf(why_buf, sizeof(why_buf), "cuInit failed: %s (no GPU, or the driver is not loaded)",
			 cuda_api_strerror(&api, e));
		load_error = why_buf;
	}
}

int cuda_api_get(const struct cuda_api **out, const char **why)
{
	pthread_once(&once, api_load);
	if (load_error) {
		*why = load_error;
		return -ENODEV;
	}
	*out = &api;
	return 0;
}

const char *cuda_api_strerror(const struct cuda_api *a, CUresult e)
{
	static __thread char buf[32];
	const char *s = NULL;

	if (a->GetErrorString && a->GetErrorString(e, &s) == CUDA_SUCCESS && s)
		return s;
	snprintf(buf, sizeof(buf), "CUDA error %d", e);
	return buf;
}
