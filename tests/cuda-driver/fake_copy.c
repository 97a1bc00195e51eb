// SPDX-License-Identifier: MIT
/* fake_copy.c - the test driver's copies: host to device (flat and 2-D)
 * and device to host, checked against the contracts before they queue. */
#include <stdlib.h>
#include <string.h>

#include "fake.h"

struct shape {
	char *dst;
	const char *src;
	size_t width, height, spitch, dpitch;
};

static size_t extent(size_t width, size_t height, size_t pitch)
{
	return height ? (height - 1) * pitch + width : 0;
}

/* Under fk.lock: the device side's allocation, or NULL (a violation). */
static struct fk_alloc *device_side(const char *p, size_t len, const char *what)
{
	struct fk_alloc *a = fk_alloc_at((uintptr_t)p, len);

	if (!a)
		fk_violation("%s: %p + %zu is not in live device memory (freed, or never allocated)", what,
			     (const void *)p, len);
	return a;
}

/* Under fk.lock: an async copy's host side must be page-locked; a write
 * into it must not be to read-only registered memory. */
static void host_side(const char *p, size_t len, bool written, bool async, const char *what)
{
	const struct fk_reg *g = fk_reg_over((uintptr_t)p, len);

	if (!g && async)
		fk_violation("%s: an async copy from pageable host memory %p + %zu (not registered or pinned;"
			     " the driver copies it synchronously)", what, (const void *)p, len);
	else if (g && written && (g->flags & CU_MEMHOSTREGISTER_READ_ONLY))
		fk_violation("%s: a write into read-only registered host memory %p", what, (const void *)p);
}

/* A copy's job, before it is checked: the context, the failure
 * injection, the memory. NULL with *e set when it cannot be. */
static struct fk_job *new_job(CUresult *e)
{
	struct fk_job *j;

	*e = fk_need_ctx() != CUDA_SUCCESS ? CUDA_ERROR_INVALID_CONTEXT
	   : fk_fail_now(&fk.fail_copy) ? CUDA_ERROR_UNKNOWN : CUDA_SUCCESS;
	if (*e != CUDA_SUCCESS)
		return NULL;
	if (!(j = calloc(1, sizeof(*j))))
		*e = CUDA_ERROR_OUT_OF_MEMORY;
	return j;
}

static CUresult queue_copy(CUstream h, const struct shape *c, bool to_device, const char *what)
{
	size_t dlen = extent(c->width, c->height, c->dpitch), slen = extent(c->width, c->height, c->spitch);
	struct CUstream_st *s;
	struct fk_alloc *a;
	struct fk_job *j;
	CUresult e;

	if (!(j = new_job(&e)))
		return e;
	pthread_mutex_lock(&fk.lock);
	s = fk_stream(h);
	a = to_device ? device_side(c->dst, dlen, what) : device_side(c->src, slen, what);
	if (!s || !a) {
		pthread_mutex_unlock(&fk.lock);
		free(j);
		return s ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_INVALID_HANDLE;
	}
	if (a->device != fk_cur_device())
		fk_violation("%s: device %d's memory from a context of device %d", what, a->device,
			     fk_cur_device());
	if (to_device && a->readonly) {
		fk.ro_writes++;
		pthread_mutex_unlock(&fk.lock);
		free(j);
		return CUDA_ERROR_INVALID_VALUE; /* access is CU_MEM_ACCESS_FLAGS_PROT_READ */
	}
	if (to_device)
		host_side(c->src, slen, false, true, what);
	else
		host_side(c->dst, dlen, true, true, what);
	s->vc[s->idx]++;
	fk_access(a, s->idx, s->vc, s->vc[s->idx], to_device, what);
	*j = (struct fk_job){ .op = OP_COPY, .dst = c->dst, .src = c->src, .width = c->width,
			      .height = c->height, .spitch = c->spitch, .dpitch = c->dpitch,
			      .base = to_device ? a->a : (uintptr_t)c->dst };
	fk.copies++;
	fk.copies_2d += c->height > 1;
	if (to_device)
		fk.h2d_bytes += (long long)(c->width * c->height);
	fk_enqueue(s, j);
	pthread_mutex_unlock(&fk.lock);
	return CUDA_SUCCESS;
}

CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t len, CUstream s)
{
	struct shape c = { (char *)(uintptr_t)dst, src, len, 1, len, len };

	return queue_copy(s, &c, true, "cuMemcpyHtoDAsync");
}

CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t len, CUstream s)
{
	struct shape c = { dst, (const char *)(uintptr_t)src, len, 1, len, len };

	return queue_copy(s, &c, false, "cuMemcpyDtoHAsync");
}

CUresult cuMemcpy2DAsync_v2(const struct cu_memcpy2d *m, CUstream s)
{
	struct shape c;

	if (!m || m->srcMemoryType != CU_MEMORYTYPE_HOST || m->dstMemoryType != CU_MEMORYTYPE_DEVICE ||
	    m->srcXInBytes || m->srcY || m->dstXInBytes || m->dstY || m->WidthInBytes > m->srcPitch ||
	    m->WidthInBytes > m->dstPitch)
		return CUDA_ERROR_INVALID_VALUE; /* only what libwsrv uses: host rows to device */
	c = (struct shape){ (char *)(uintptr_t)m->dstDevice, m->srcHost, m->WidthInBytes, m->Height,
			    m->srcPitch, m->dstPitch };
	return queue_copy(s, &c, true, "cuMemcpy2DAsync");
}

/* Device to device: dst on this context's device, src memory this device
 * may read (its own, or another's mapped through peer access). Across
 * devices it runs at the link's rate (FAKECUDA_P2P_GBPS). */
CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t len, CUstream h)
{
	struct CUstream_st *s;
	struct fk_alloc *da, *sa;
	struct fk_job *j;
	CUresult e;

	if (!(j = new_job(&e)))
		return e;
	pthread_mutex_lock(&fk.lock);
	s = fk_stream(h);
	da = device_side((const char *)(uintptr_t)dst, len, "cuMemcpyDtoDAsync (destination)");
	sa = device_side((const char *)(uintptr_t)src, len, "cuMemcpyDtoDAsync (source)");
	if (!s || !da || !sa) {
		pthread_mutex_unlock(&fk.lock);
		free(j);
		return s ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_INVALID_HANDLE;
	}
	if (da->device != fk_cur_device() || sa->device != fk_cur_device())
		fk_violation("cuMemcpyDtoDAsync: memory device %d or %d may not access, from a context of device %d "
			     "(another device's memory is read through a peer mapping)", da->device, sa->device,
			     fk_cur_device());
	if (da->readonly) {
		fk.ro_writes++;
		pthread_mutex_unlock(&fk.lock);
		free(j);
		return CUDA_ERROR_INVALID_VALUE;
	}
	s->vc[s->idx]++;
	fk_access(sa, s->idx, s->vc, s->vc[s->idx], false, "cuMemcpyDtoDAsync");
	fk_access(da, s->idx, s->vc, s->vc[s->idx], true, "cuMemcpyDtoDAsync");
	*j = (struct fk_job){ .op = OP_COPY, .dst = (char *)(uintptr_t)dst, .src = (const char *)(uintptr_t)src,
			      .width = len, .height = 1, .spitch = len, .dpitch = len, .base = da->a,
			      .d2d = true, .peer = sa->home != da->home };
	fk.copies++;
	if (j->peer) {
		fk.peer_copies++;
		fk.peer_bytes += (long long)len;
	}
	fk_enqueue(s, j);
	pthread_mutex_unlock(&fk.lock);
	return CUDA_SUCCESS;
}

/* Synchronous, on the host's behalf: ordered after what the host waited
 * for, not after every stream (these are non-blocking streams). */
CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t len)
{
	struct fk_alloc *a;

	if (fk_need_ctx() != CUDA_SUCCESS)
		return CUDA_ERROR_INVALID_CONTEXT;
	pthread_mutex_lock(&fk.lock);
	if (!(a = device_side((const char *)(uintptr_t)src, len, "cuMemcpyDtoH"))) {
		pthread_mutex_unlock(&fk.lock);
		return CUDA_ERROR_INVALID_VALUE;
	}
	host_side(dst, len, true, false, "cuMemcpyDtoH");
	fk.host_vc[0]++;
	fk_access(a, 0, fk.host_vc, fk.host_vc[0], false, "cuMemcpyDtoH");
	pthread_mutex_unlock(&fk.lock);
	memcpy(dst, (const void *)(uintptr_t)src, len);
	return CUDA_SUCCESS;
}
