// SPDX-License-Identifier: MIT
/* dev_cuda.c - the CUDA device backend, over the driver API loaded at run
 * time (cuda_api.c), in the device's primary context so its pointers work
 * in the worker's own CUDA or PyTorch code.
 *
 * Copies run on a stream of ours, each between two timing events: the
 * second is the copy's fence, and the time between them is the copy's
 * time. Acquiring a layer makes the worker's compute stream wait on the
 * fence (cuStreamWaitEvent) between two events of its own, whose distance
 * is the time compute stood still; the CPU does not block. Releasing a
 * layer records an event on the compute stream that later copies wait for
 * before they overwrite its slot. Event times are put on the host's clock
 * through one base event recorded at setup. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "wire.h"
#include "clock.h"
#include "dev_cuda.h"

static int c_alloc(struct wsrv_device *d, size_t len, void **out)
{
	struct cuda_dev *c = (struct cuda_dev *)d;
	CUdeviceptr p = 0;
	CUresult e;

	pthread_mutex_lock(&c->lock);
	cu_enter(c);
	e = c->cu->MemAlloc(&p, len ? len : 1);
	cu_leave(c);
	pthread_mutex_unlock(&c->lock);
	if (e != CUDA_SUCCESS)
		return cu_fail(c, e, "cuMemAlloc");
	*out = (void *)(uintptr_t)p;
	return 0;
}

/* Freed only once both streams are past their use of it: the copies,
 * and the compute stream's work queued so far. */
static void c_free(struct wsrv_device *d, void *p, size_t len)
{
	struct cuda_dev *c = (struct cuda_dev *)d;

	if (!p)
		return;
	pthread_mutex_lock(&c->lock);
	cu_enter(c);
	c->cu->StreamSynchronize(c->copy);
	if (c->compute)
		c->cu->StreamSynchronize(c->compute);
	c->cu->MemFree((CUdeviceptr)(uintptr_t)p);
	cu_leave(c);
	pthread_mutex_unlock(&c->lock);
}

/* Before a copy: wait for the consumer's work on memory released since. */
static int order_after_release(struct cuda_dev *c)
{
	CUresult e;

	if (!c->release_pending)
		return 0;
	if ((e = c->cu->StreamWaitEvent(c->copy, c->released, 0)) != CUDA_SUCCESS)
		return cu_fail(c, e, "cuStreamWaitEvent (release)");
	c->release_pending = false;
	return 0;
}

/* The fence's events, free for reuse: the copy CU_FENCES fences ago is
 * long finished, but is waited for all the same. */
static struct cu_fence *take_fence(struct cuda_dev *c, int64_t fence)
{
	struct cu_fence *f = &c->f[fence % CU_FENCES];

	if (f->fence)
		c->cu->EventSynchronize(f->end);
	f->fence = 0;
	f->timing = NULL;
	return f;
}

/* Device to device on the copy stream: from memory this device reads
 * (another device's, mapped through peer access). 0 or <0. */
static int copy_dtod(struct cuda_dev *c, void *dst, const void *src, size_t len)
{
	CUresult e;

	if (!c->cu->MemcpyDtoDAsync)
		return cl_err(-EOPNOTSUPP, "this driver has no cuMemcpyDtoDAsync");
	e = c->cu->MemcpyDtoDAsync((CUdeviceptr)(uintptr_t)dst, (CUdeviceptr)(uintptr_t)src, len, c->copy);
	return e == CUDA_SUCCESS ? 0 : cu_fail(c, e, "cuMemcpyDtoDAsync");
}

/* Queues a copy (from the host, or from device memory when dtod) between
 * two events, as the next fence. */
static int64_t queue_copy(struct cuda_dev *c, void *dst, const void *src, size_t width, size_t height,
			  size_t pitch, bool dtod, double *timing)
{
	struct cu_fence *f;
	int64_t fence;
	CUresult e;
	int r;

	pthread_mutex_lock(&c->lock);
	fence = c->submitted + 1;
	cu_enter(c);
	f = take_fence(c, fence);
	if ((r = order_after_release(c)) == 0 &&
	    (e = c->cu->EventRecord(f->start, c->copy)) != CUDA_SUCCESS)
		r = cu_fail(c, e, "cuEventRecord");
	if (r == 0)
		r = dtod ? copy_dtod(c, dst, src, width) : cu_copy_rows(c, dst, src, width, height, pitch);
	if (r == 0 && (e = c->cu->EventRecord(f->end, c->copy)) != CUDA_SUCCESS)
		r = cu_fail(c, e, "cuEventRecord");
	if (r == 0) {
		f->fence = fence;
		f->timing = timing;
		c->submitted = fence;
	}
	cu_leave(c);
	pthread_mutex_unlock(&c->lock);
	return r < 0 ? r : fence;
}

static int64_t c_copy2d(struct wsrv_device *d, void *dst, const void *src, size_t width,
			size_t height, size_t pitch, double *timing)
{
	return queue_copy((struct cuda_dev *)d, dst, src, width, height, pitch, false, timing);
}

static int64_t c_copy(struct wsrv_device *d, void *dst, const void *src, size_t len, double *timing)
{
	return c_copy2d(d, dst, src, len, 1, len, timing);
}

static int64_t c_copy_peer(struct wsrv_device *d, void *dst, const void *src, size_t len, double *timing)
{
	return queue_copy((struct cuda_dev *)d, dst, src, len, 1, len, true, timing);
}

/* A completed copy's times go where its caller asked. */
static void fill_timing(struct cuda_dev *c, struct cu_fence *f)
{
	float since = 0, took = 0;

	if (!f->timing)
		return;
	if (c->cu->EventElapsedTime(&since, c->base, f->start) != CUDA_SUCCESS ||
	    c->cu->EventElapsedTime(&took, f->start, f->end) != CUDA_SUCCESS) {
		f->timing[0] = f->timing[1] = NAN; /* unknown: not counted */
	} else {
		f->timing[0] = c->base_host + since / 1e3;
		f->timing[1] = f->timing[0] + took / 1e3;
	}
	f->timing = NULL;
}

/* Copies complete in order: once fence is, so is every one before it. */
static void fill_timings(struct cuda_dev *c, int64_t fence)
{
	int64_t k = c->timed_upto + 1;

	if (k < fence - CU_FENCES + 1)
		k = fence - CU_FENCES + 1;
	for (; k <= fence; k++)
		if (c->f[k % CU_FENCES].fence == k)
			fill_timing(c, &c->f[k % CU_FENCES]);
	if (fence > c->timed_upto)
		c->timed_upto = fence;
}

/* 1 when done, 0 when not; with block, waits. */
static int cuda_finish(struct cuda_dev *c, int64_t fence, bool block)
{
	struct cu_fence *f;
	CUresult e;
	int r = 1;

	if (fence <= 0)
		return 1;
	pthread_mutex_lock(&c->lock);
	f = &c->f[fence % CU_FENCES];
	if (f->fence == fence && fence > c->timed_upto) {
		cu_enter(c);
		e = block ? c->cu->EventSynchronize(f->end) : c->cu->EventQuery(f->end);
		if (e == CUDA_SUCCESS)
			fill_timings(c, fence);
		else if (e == CUDA_ERROR_NOT_READY && !block)
			r = 0;
		else
			r = cu_fail(c, e, block ? "cuEventSynchronize" : "cuEventQuery");
		cu_leave(c);
	}
	pthread_mutex_unlock(&c->lock);
	return r;
}

static int c_done(struct wsrv_device *d, int64_t fence)
{
	/* An error reads as not done: the wait or gate that follows reports it. */
	return cuda_finish((struct cuda_dev *)d, fence, false) == 1;
}

static int c_wait(struct wsrv_device *d, int64_t fence)
{
	int r = cuda_finish((struct cuda_dev *)d, fence, true);

	return r < 0 ? r : 0;
}

static int c_gate(struct wsrv_device *d, int64_t fence, int64_t *ticket)
{
	struct cuda_dev *c = (struct cuda_dev *)d;
	struct cu_fence *f = &c->f[fence % CU_FENCES];
	struct cu_gate *g;
	CUresult e;

	*ticket = 0;
	if (!c->compute)
		return c_wait(d, fence);
	pthread_mutex_lock(&c->lock);
	if (f->fence != fence) { /* long done */
		pthread_mutex_unlock(&c->lock);
		return 0;
	}
	cu_enter(c);
	g = &c->g[++c->gates % CU_GATES];
	g->ticket = 0;
	if ((e = c->cu->EventRecord(g->before, c->compute)) == CUDA_SUCCESS &&
	    (e = c->cu->StreamWaitEvent(c->compute, f->end, 0)) == CUDA_SUCCESS &&
	    (e = c->cu->EventRecord(g->after, c->compute)) == CUDA_SUCCESS)
		*ticket = g->ticket = c->gates;
	cu_leave(c);
	pthread_mutex_unlock(&c->lock);
	return e == CUDA_SUCCESS ? 0 : cu_fail(c, e, "making the compute stream wait for a copy");
}

static int c_gap(struct wsrv_device *d, int64_t ticket, bool block, double span[2])
{
	struct cuda_dev *c = (struct cuda_dev *)d;
	struct cu_gate *g = &c->g[ticket % CU_GATES];
	float since = 0, ms = 0;
	CUresult e;
	int r = 0;

	pthread_mutex_lock(&c->lock);
	if (ticket <= 0 || g->ticket != ticket) {
		pthread_mutex_unlock(&c->lock);
		return -ENOENT;
	}
	cu_enter(c);
	e = block ? c->cu->EventSynchronize(g->after) : c->cu->EventQuery(g->after);
	if (e == CUDA_ERROR_NOT_READY)
		r = -EAGAIN;
	else if (e != CUDA_SUCCESS ||
		 (e = c->cu->EventElapsedTime(&since, c->base, g->before)) != CUDA_SUCCESS ||
		 (e = c->cu->EventElapsedTime(&ms, g->before, g->after)) != CUDA_SUCCESS)
		r = cu_fail(c, e, "timing the compute stream's wait");
	else {
		span[0] = c->base_host + since / 1e3;
		span[1] = span[0] + ms / 1e3;
	}
	if (r != -EAGAIN)
		g->ticket = 0;
	cu_leave(c);
	pthread_mutex_unlock(&c->lock);
	return r;
}

static void c_consumed(struct wsrv_device *d)
{
	struct cuda_dev *c = (struct cuda_dev *)d;

	if (!c->compute)
		return;
	pthread_mutex_lock(&c->lock);
	cu_enter(c);
	/* A failed record leaves the flag down: the copies then wait for
	 * nothing, so say so. */
	if (c->cu->EventRecord(c->released, c->compute) == CUDA_SUCCESS)
		c->release_pending = true;
	else
		cl_debug("cuda: cuEventRecord on the compute stream failed; later copies may overwrite a slot in use");
	cu_leave(c);
	pthread_mutex_unlock(&c->lock);
}

static void destroy_events(struct cuda_dev *c)
{
	for (int i = 0; i < CU_FENCES; i++) {
		if (c->f[i].start)
			c->cu->EventDestroy(c->f[i].start);
		if (c->f[i].end)
			c->cu->EventDestroy(c->f[i].end);
	}
	for (int i = 0; i < CU_GATES; i++) {
		if (c->g[i].before)
			c->cu->EventDestroy(c->g[i].before);
		if (c->g[i].after)
			c->cu->EventDestroy(c->g[i].after);
	}
	for (int i = 0; i < CU_NBOUNCE; i++) {
		if (c->bounce_ev[i])
			c->cu->EventDestroy(c->bounce_ev[i]);
		if (c->bounce[i])
			c->cu->MemFreeHost(c->bounce[i]);
	}
	if (c->released)
		c->cu->EventDestroy(c->released);
	if (c->base)
		c->cu->EventDestroy(c->base);
}

static void c_destroy(struct wsrv_device *d)
{
	struct cuda_dev *c = (struct cuda_dev *)d;

	if (c->ctx) {
		cu_enter(c);
		if (c->copy)
			c->cu->StreamSynchronize(c->copy);
		cu_unregister_all(c);
		destroy_events(c);
		if (c->copy)
			c->cu->StreamDestroy(c->copy);
		cu_leave(c);
		c->cu->PrimaryCtxRelease(c->device);
	}
	pthread_mutex_destroy(&c->lock);
	free(c);
}

static const struct device_ops cuda_ops = {
	.name = "cuda", .alloc = c_alloc, .free = c_free, .copy = c_copy, .copy2d = c_copy2d,
	.copy_peer = c_copy_peer,
	.done = c_done, .wait = c_wait, .gate = c_gate, .gap = c_gap, .consumed = c_consumed,
	.register_host = cu_register, .unregister_host = cu_unregister,
	.share_info = cu_share_info, .share_create = cu_share_create, .share_seal = cu_share_seal,
	.share_import = cu_share_import, .share_free = cu_share_free, .destroy = c_destroy,
};

static CUresult make_events(struct cuda_dev *c)
{
	CUresult e = CUDA_SUCCESS;

	for (int i = 0; i < CU_FENCES && e == CUDA_SUCCESS; i++)
		if ((e = c->cu->EventCreate(&c->f[i].start, CU_EVENT_DEFAULT)) == CUDA_SUCCESS)
			e = c->cu->EventCreate(&c->f[i].end, CU_EVENT_DEFAULT);
	for (int i = 0; i < CU_GATES && e == CUDA_SUCCESS; i++)
		if ((e = c->cu->EventCreate(&c->g[i].before, CU_EVENT_DEFAULT)) == CUDA_SUCCESS)
			e = c->cu->EventCreate(&c->g[i].after, CU_EVENT_DEFAULT);
	for (int i = 0; i < CU_NBOUNCE && e == CUDA_SUCCESS; i++)
		e = c->cu->EventCreate(&c->bounce_ev[i], CU_EVENT_DISABLE_TIMING);
	if (e == CUDA_SUCCESS)
		e = c->cu->EventCreate(&c->released, CU_EVENT_DISABLE_TIMING);
	if (e == CUDA_SUCCESS)
		e = c->cu->EventCreate(&c->base, CU_EVENT_DEFAULT);
	return e;
}

/* The stream, events and buffers, in the primary context; the base event
 * recorded and waited for, so event times map to the host's clock. */
static int cuda_setup(struct cuda_dev *c)
{
	int ro = 0;
	CUresult e;

	cu_enter(c);
	c->cu->DeviceGetAttribute(&ro, CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED, c->device);
	c->ro_ok = ro != 0;
	if ((e = c->cu->StreamCreate(&c->copy, CU_STREAM_NON_BLOCKING)) == CUDA_SUCCESS &&
	    (e = make_events(c)) == CUDA_SUCCESS &&
	    (e = c->cu->EventRecord(c->base, c->copy)) == CUDA_SUCCESS)
		e = c->cu->EventSynchronize(c->base);
	c->base_host = mono_now();
	cu_leave(c);
	if (!c->ro_ok)
		cl_debug("cuda: device %d cannot lock read-only memory; every copy bounces", c->device);
	return e == CUDA_SUCCESS ? 0 : cu_fail(c, e, "setting up the copy stream");
}

/* The device's primary context, retained; -ENODEV with a sentence when
 * there is no such device. */
static int open_device(struct cuda_dev *c, int ordinal)
{
	const char *why;
	int n = 0, r;
	CUresult e;

	if ((r = cuda_api_get(&c->cu, &why)) < 0)
		return cl_err(r, "cuda: %s", why);
	if ((e = c->cu->DeviceGetCount(&n)) != CUDA_SUCCESS || n == 0)
		return cl_err(-ENODEV, "cuda: no GPU here (the driver sees none)");
	if (ordinal < 0 || ordinal >= n)
		return cl_err(-ENODEV, "cuda: no device %d (the driver sees %d)", ordinal, n);
	if ((e = c->cu->DeviceGet(&c->device, ordinal)) != CUDA_SUCCESS ||
	    (e = c->cu->PrimaryCtxRetain(&c->ctx, c->device)) != CUDA_SUCCESS) {
		c->ctx = NULL;
		return cu_fail(c, e, "the device's primary context");
	}
	return 0;
}

WSRV_EXPORT int wsrv_device_cuda(const struct wsrv_cuda_opts *o, struct wsrv_device **out)
{
	struct wsrv_cuda_opts co;
	struct cuda_dev *c;
	int r;

	CL_NEED(out);
	if ((r = CL_OPTS(o, &co)) < 0)
		return r;
#ifdef WSRV_NO_CUDA
	return cl_err(-EOPNOTSUPP, "libwsrv was built without its cuda backend (-Dcuda=disabled)");
#endif
	if (!(c = calloc(1, sizeof(*c))))
		return cl_err(-ENOMEM, "out of memory");
	pthread_mutex_init(&c->lock, NULL);
	c->dev.ops = &cuda_ops;
	c->compute = (CUstream)co.compute_stream;
	c->reg_chunk = co.register_chunk_bytes ? co.register_chunk_bytes : CU_REG_CHUNK;
	if ((r = open_device(c, co.device)) < 0 || (r = cuda_setup(c)) < 0) {
		c_destroy(&c->dev);
		return r;
	}
	*out = &c->dev;
	return 0;
}
