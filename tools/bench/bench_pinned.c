// SPDX-License-Identifier: MIT
/* bench_pinned.c - pinned host-to-device copies, timed (bench_pinned.h). */
#include <stdbool.h>
#include <string.h>

#include "bench_pinned.h"

double bench_pinned_gbps(const struct cuda_api *cu, CUcontext ctx, CUstream st, const uint64_t *lens, size_t n,
			 bool warm)
{
	uint64_t max = 0, bytes = 0;
	CUevent a = NULL, b = NULL;
	CUdeviceptr dev = 0;
	void *host = NULL;
	float ms = 0;
	CUcontext was;

	for (size_t i = 0; i < n; i++)
		max = lens[i] > max ? lens[i] : max;
	if (!max)
		return -1;
	cu->CtxPushCurrent(ctx);
	if (cu->MemAllocHost(&host, max) == CUDA_SUCCESS && cu->MemAlloc(&dev, max) == CUDA_SUCCESS &&
	    cu->EventCreate(&a, 0) == CUDA_SUCCESS && cu->EventCreate(&b, 0) == CUDA_SUCCESS) {
		memset(host, 1, max);
		if (warm)
			cu->MemcpyHtoDAsync(dev, host, lens[0], st);
		cu->EventRecord(a, st);
		for (size_t i = 0; i < n; i++) {
			cu->MemcpyHtoDAsync(dev, host, lens[i], st);
			bytes += lens[i];
		}
		cu->EventRecord(b, st);
		cu->EventSynchronize(b);
		cu->EventElapsedTime(&ms, a, b);
	}
	if (a)
		cu->EventDestroy(a);
	if (b)
		cu->EventDestroy(b);
	if (dev)
		cu->MemFree(dev);
	if (host)
		cu->MemFreeHost(host);
	cu->CtxPopCurrent(&was);
	return ms > 0 ? (double)bytes / (ms / 1e3) / 1e9 : -1;
}
