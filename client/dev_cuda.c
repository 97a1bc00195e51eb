// SPDX-License-Identifier: MIT
/* dev_cuda.c - the CUDA device backend.
 *
 * The host ranges a stream copies from (the model's shared segments) are
 * page-locked once with cudaHostRegister, read-only where the device
 * supports it; where registering fails, copies go through a ring of pinned
 * bounce buffers instead. Copies are cudaMemcpyAsync / cudaMemcpy2DAsync on
 * a dedicated copy stream with an event per copy (the fence); acquiring a
 * layer makes the worker's compute stream wait on that event
 * (cudaStreamWaitEvent), so the CPU does not block on a copy; releasing one
 * records an event on the compute stream that later copies wait for before
 * they overwrite the slot. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "client_internal.h"
#include "device.h"

#ifdef HAVE_CUDA
#include <cuda_runtime_api.h>

#define EVENTS 1024
#define BOUNCE (32u << 20)
#define NBOUNCE 2
#define MAX_REG 64

struct reg { const void *p; size_t len; };

struct cuda_dev {
	struct wsrv_device dev;
	int device;
	cudaStream_t copy, compute;  /* compute: the worker's, may be 0 */
	cudaEvent_t ev[EVENTS];
	int64_t submitted;
	cudaEvent_t released;
	bool release_pending;
	bool ro_ok;                  /* cudaHostRegisterReadOnly supported */
	struct reg regs[MAX_REG];
	int nregs;
	void *bounce[NBOUNCE];       /* pinned staging, used when unregistered */
	cudaEvent_t bounce_ev[NBOUNCE];
	int next_bounce;
};

static int cu_err(cudaError_t e, const char *what)
{
	return cl_err(-EIO, "cuda: %s: %s", what, cudaGetErrorString(e));
}

static bool registered(const struct cuda_dev *c, const void *p, size_t len)
{
	for (int i = 0; i < c->nregs; i++)
		if ((const char *)p >= (const char *)c->regs[i].p &&
		    (const char *)p + len <= (const char *)c->regs[i].p + c->regs[i].len)
			return true;
	return false;
}

static int c_alloc(struct wsrv_device *d, size_t len, void **out)
{
	struct cuda_dev *c = (struct cuda_dev *)d;
	cudaError_t e;

	cudaSetDevice(c->device);
	e = cudaMalloc(out, len ? len : 1);
	return e == cudaSuccess ? 0 : cu_err(e, "cudaMalloc");
}

static void c_free(struct wsrv_device *d, void *p, size_t len)
{
	if (p)
		cudaFree(p);
}

/* The event for a new fence; an event is reused only once its old copy is
 * done. */
static int64_t next_fence(struct cuda_dev *c, cudaStream_t on)
{
	int64_t f = ++c->submitted;
	cudaEvent_t ev = c->ev[f % EVENTS];

	cudaEventSynchronize(ev); /* the copy EVENTS fences ago, long finished */
	if (cudaEventRecord(ev, on) != cudaSuccess)
		return cu_err(cudaGetLastError(), "cudaEventRecord");
	return f;
}

/* Before a copy: wait for the consumer's work on memory released since. */
static void order_after_release(struct cuda_dev *c)
{
	if (c->release_pending) {
		cudaStreamWaitEvent(c->copy, c->released, 0);
		c->release_pending = false;
	}
}

/* An unregistered source: staged through the pinned bounce ring, in
 * chunks, rows packed. */
static int bounced(struct cuda_dev *c, void *dst, const void *src, size_t width, size_t height,
		   size_t pitch)
{
	size_t rows_per = width ? BOUNCE / width : 0, done = 0;

	if (rows_per == 0)
		return cl_err(-E2BIG, "cuda: a row of %zu bytes is larger than the bounce buffer", width);
	while (done < height) {
		size_t n = height - done < rows_per ? height - done : rows_per;
		int b = c->next_bounce;
		c->next_bounce = (b + 1) % NBOUNCE;
		cudaEventSynchronize(c->bounce_ev[b]); /* its last copy has left */
		for (size_t r = 0; r < n; r++)
			memcpy((char *)c->bounce[b] + r * width, (const char *)src + (done + r) * pitch, width);
		if (cudaMemcpyAsync((char *)dst + done * width, c->bounce[b], n * width,
				    cudaMemcpyHostToDevice, c->copy) != cudaSuccess)
			return cu_err(cudaGetLastError(), "cudaMemcpyAsync");
		cudaEventRecord(c->bounce_ev[b], c->copy);
		done += n;
	}
	return 0;
}

static void CUDART_CB stamp(void *arg)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	*(double *)arg = (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int64_t c_copy2d(struct wsrv_device *d, void *dst, const void *src, size_t width,
			size_t height, size_t pitch, double *timing)
{
	struct cuda_dev *c = (struct cuda_dev *)d;
	cudaError_t e = cudaSuccess;
	int r = 0;

	cudaSetDevice(c->device);
	order_after_release(c);
	if (timing)
		cudaLaunchHostFunc(c->copy, stamp, &timing[0]);
	if (!registered(c, src, (height - 1) * pitch + width))
		r = bounced(c, dst, src, width, height, pitch);
	else if (height == 1)
		e = cudaMemcpyAsync(dst, src, width, cudaMemcpyHostToDevice, c->copy);
	else
		e = cudaMemcpy2DAsync(dst, width, src, pitch, width, height, cudaMemcpyHostToDevice, c->copy);
	if (e != cudaSuccess)
		return cu_err(e, "cudaMemcpyAsync");
	if (r < 0)
		return r;
	if (timing)
		cudaLaunchHostFunc(c->copy, stamp, &timing[1]);
	c->dev.copy_bytes += width * height;
	return next_fence(c, c->copy);
}

static int64_t c_copy(struct wsrv_device *d, void *dst, const void *src, size_t len, double *timing)
{
	return c_copy2d(d, dst, src, len, 1, len, timing);
}

static int c_done(struct wsrv_device *d, int64_t fence)
{
	struct cuda_dev *c = (struct cuda_dev *)d;

	return fence <= c->submitted - EVENTS || cudaEventQuery(c->ev[fence % EVENTS]) == cudaSuccess;
}

static int c_wait(struct wsrv_device *d, int64_t fence)
{
	struct cuda_dev *c = (struct cuda_dev *)d;
	cudaError_t e;

	if (fence <= c->submitted - EVENTS)
		return 0;
	e = cudaEventSynchronize(c->ev[fence % EVENTS]);
	return e == cudaSuccess ? 0 : cu_err(e, "cudaEventSynchronize");
}

static int c_gate(struct wsrv_device *d, int64_t fence)
{
	struct cuda_dev *c = (struct cuda_dev *)d;

	if (!c->compute)
		return c_wait(d, fence);
	if (fence <= c->submitted - EVENTS)
		return 0;
	return cudaStreamWaitEvent(c->compute, c->ev[fence % EVENTS], 0) == cudaSuccess
		? 0 : cu_err(cudaGetLastError(), "cudaStreamWaitEvent");
}

static void c_consumed(struct wsrv_device *d)
{
	struct cuda_dev *c = (struct cuda_dev *)d;

	if (c->compute) {
		cudaEventRecord(c->released, c->compute);
		c->release_pending = true;
	}
}

static int c_register(struct wsrv_device *d, const void *p, size_t len)
{
	struct cuda_dev *c = (struct cuda_dev *)d;
	cudaError_t e;

	if (registered(c, p, len) || c->nregs >= MAX_REG)
		return 0;
	cudaSetDevice(c->device);
	/* A read-only mapping can only be registered read-only; without that
	 * support the copies bounce through pinned memory. */
	e = cudaHostRegister((void *)p, len, c->ro_ok ? cudaHostRegisterReadOnly : cudaHostRegisterDefault);
	if (e != cudaSuccess) {
		cudaGetLastError();
		cl_debug("cudaHostRegister of %zu bytes failed (%s); copies will bounce", len, cudaGetErrorString(e));
		return 0;
	}
	c->regs[c->nregs++] = (struct reg){ p, len };
	return 0;
}

static void c_destroy(struct wsrv_device *d)
{
	struct cuda_dev *c = (struct cuda_dev *)d;

	cudaSetDevice(c->device);
	cudaStreamSynchronize(c->copy);
	for (int i = 0; i < c->nregs; i++)
		cudaHostUnregister((void *)c->regs[i].p);
	for (int i = 0; i < EVENTS; i++)
		cudaEventDestroy(c->ev[i]);
	for (int i = 0; i < NBOUNCE; i++) {
		cudaEventDestroy(c->bounce_ev[i]);
		cudaFreeHost(c->bounce[i]);
	}
	cudaEventDestroy(c->released);
	cudaStreamDestroy(c->copy);
	free(c);
}

static const struct device_ops cuda_ops = {
	.name = "cuda", .alloc = c_alloc, .free = c_free, .copy = c_copy, .copy2d = c_copy2d,
	.done = c_done, .wait = c_wait, .gate = c_gate, .consumed = c_consumed,
	.register_host = c_register, .destroy = c_destroy,
};

static int setup(struct cuda_dev *c)
{
	int ro = 0;

	if (cudaSetDevice(c->device) != cudaSuccess)
		return cu_err(cudaGetLastError(), "cudaSetDevice");
	cudaDeviceGetAttribute(&ro, cudaDevAttrHostRegisterReadOnlySupported, c->device);
	c->ro_ok = ro != 0;
	if (cudaStreamCreateWithFlags(&c->copy, cudaStreamNonBlocking) != cudaSuccess ||
	    cudaEventCreateWithFlags(&c->released, cudaEventDisableTiming) != cudaSuccess)
		return cu_err(cudaGetLastError(), "cuda stream or event");
	for (int i = 0; i < EVENTS; i++)
		if (cudaEventCreateWithFlags(&c->ev[i], cudaEventDisableTiming) != cudaSuccess)
			return cu_err(cudaGetLastError(), "cudaEventCreate");
	for (int i = 0; i < NBOUNCE; i++)
		if (cudaHostAlloc(&c->bounce[i], BOUNCE, cudaHostAllocDefault) != cudaSuccess ||
		    cudaEventCreateWithFlags(&c->bounce_ev[i], cudaEventDisableTiming) != cudaSuccess)
			return cu_err(cudaGetLastError(), "pinned bounce buffers");
	return 0;
}

WSRV_EXPORT int wsrv_device_cuda(const struct wsrv_cuda_opts *o, struct wsrv_device **out)
{
	struct wsrv_cuda_opts co;
	struct cuda_dev *c;
	int n = 0, r;

	CL_NEED(out);
	if ((r = CL_OPTS(o, &co)) < 0)
		return r;
	if (!(c = calloc(1, sizeof(*c))))
		return cl_err(-ENOMEM, "out of memory");
	if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
		free(c);
		return cl_err(-ENODEV, "cuda: no GPU here");
	}
	c->dev.ops = &cuda_ops;
	c->device = co.device;
	c->compute = (cudaStream_t)co.compute_stream;
	r = setup(c);
	if (r < 0) {
		c_destroy(&c->dev);
		return r;
	}
	*out = &c->dev;
	return 0;
}

#else

WSRV_EXPORT int wsrv_device_cuda(const struct wsrv_cuda_opts *o, struct wsrv_device **out)
{
	struct wsrv_cuda_opts co;
	int r;

	CL_NEED(out);
	if ((r = CL_OPTS(o, &co)) < 0)
		return r;
	return cl_err(-EOPNOTSUPP, "libwsrv was built without CUDA (meson -Dcuda=enabled needs the toolkit)");
}

#endif
