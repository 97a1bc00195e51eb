// SPDX-License-Identifier: MIT
/* bench_samples.c - a joined worker's device bytes checked at samples
 * (bench_join.h): read back with cuMemcpyDtoH in the device's primary
 * context, so the same check runs on a GPU and on the test driver, whose
 * sampled mode keeps only these bytes: 64 at each multiple of 16 MiB from
 * the start of the allocation, which for resident memory is its first
 * tensor's. */
#include <string.h>

#include "bench_join.h"
#include "cuda_api.h"

#define SAMPLE 64u
#define EVERY (16u << 20)   /* the test driver's FK_SAMPLE_EVERY */

/* Tensor i's samples (base: the resident memory's first byte): the bad
 * ones, counting the checked into *n. */
static uint64_t check_tensor(const struct cuda_api *cu, struct wsrv_model *m, struct wsrv_stream *s, size_t i,
			     uintptr_t base, uint64_t *n)
{
	struct wsrv_tensor t = { .struct_size = sizeof(t) };
	struct wsrv_view v = { .struct_size = sizeof(v) };
	uint8_t got[SAMPLE];
	uint64_t bad = 0;
	void *d;

	if (wsrv_model_tensor(m, i, &t) < 0 || wsrv_stream_view(s, i, &v) < 0 || !v.present || !v.bytes ||
	    v.bytes != t.size || wsrv_stream_residency(s, i) != WSRV_RESIDENT || wsrv_stream_tensor_at(s, i, &d) < 0)
		return 0;
	for (uintptr_t a = base + (((uintptr_t)d - base + EVERY - 1) & ~(uintptr_t)(EVERY - 1));
	     a < (uintptr_t)d + v.bytes; a += EVERY) {
		size_t off = a - (uintptr_t)d, len = v.bytes - off < SAMPLE ? v.bytes - off : SAMPLE;
		(*n)++;
		if (cu->MemcpyDtoH(got, (CUdeviceptr)a, len) != CUDA_SUCCESS ||
		    memcmp(got, (const uint8_t *)t.data + off, len) != 0)
			bad++;
	}
	return bad;
}

uint64_t join_check_samples(struct wsrv_model *m, struct wsrv_stream *s, uint64_t *checked)
{
	const struct cuda_api *cu;
	const char *why;
	CUcontext ctx = NULL, was;
	CUdevice dev;
	uint64_t bad = 0;
	uintptr_t base = 0;

	*checked = 0;
	if (cuda_api_get(&cu, &why) < 0 || cu->DeviceGet(&dev, 0) != CUDA_SUCCESS ||
	    cu->PrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS)
		return 0;
	cu->CtxPushCurrent(ctx);
	for (size_t i = 0; i < wsrv_model_tensor_count(m); i++) {
		void *d;
		if (wsrv_stream_residency(s, i) == WSRV_RESIDENT && wsrv_stream_tensor_at(s, i, &d) == 0 &&
		    (!base || (uintptr_t)d < base))
			base = (uintptr_t)d;
	}
	for (size_t i = 0; i < wsrv_model_tensor_count(m); i++)
		bad += check_tensor(cu, m, s, i, base, checked);
	cu->CtxPopCurrent(&was);
	cu->PrimaryCtxRelease(dev);
	return bad;
}
