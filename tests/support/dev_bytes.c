// SPDX-License-Identifier: MIT
/* dev_bytes.c - reading device bytes back in tests (dev_bytes.h). */
#include "dev_bytes.h"

#include <xxhash.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_api.h"
#include "helpers.h"
#include "wsrv.h"

/* The fds opened while the device and a first stream were made. */
static bool driver_window[FD_MAP];

int dev_test_open(struct wsrv_model *m, struct wsrv_device **dev)
{
	struct wsrv_stream *s;
	bool before[FD_MAP];

	fd_map_take(before);
	if (dev_on_cuda()) {
		if (wsrv_device_cuda(NULL, dev) < 0 || wsrv_stream_open(m, *dev, NULL, NULL, &s) < 0) {
			fprintf(stderr, "cuda: %s\n", wsrv_last_error());
			return -1;
		}
		wsrv_stream_close(s);
		fd_map_new(before, driver_window);
		return 0;
	}
	return wsrv_device_host(NULL, dev) < 0 ? -1 : 0;
}

int dev_test_close(struct wsrv_device *dev)
{
	wsrv_device_destroy(dev);
	return fd_map_kept(driver_window);
}

bool dev_on_cuda(void)
{
	const char *d = getenv("WSRV_TEST_DEVICE");

	return d && strcmp(d, "cuda") == 0;
}

/* Runs fn in device 0's primary context; its CUresult. */
static CUresult in_primary(CUresult (*fn)(const struct cuda_api *cu, void *arg), void *arg)
{
	const struct cuda_api *cu;
	const char *why;
	CUcontext ctx, was;
	CUresult e;

	if (cuda_api_get(&cu, &why) < 0) {
		fprintf(stderr, "dev_bytes: %s\n", why);
		return CUDA_ERROR_NOT_INITIALIZED;
	}
	if ((e = cu->PrimaryCtxRetain(&ctx, 0)) != CUDA_SUCCESS)
		return e;
	if ((e = cu->CtxPushCurrent(ctx)) == CUDA_SUCCESS) {
		e = fn(cu, arg);
		cu->CtxPopCurrent(&was);
	}
	cu->PrimaryCtxRelease(0);
	return e;
}

struct copy_arg { void *dst; const void *src; size_t n; };

static CUresult copy_out(const struct cuda_api *cu, void *arg)
{
	struct copy_arg *c = arg;

	return cu->MemcpyDtoH(c->dst, (CUdeviceptr)(uintptr_t)c->src, c->n);
}

int dev_read(void *dst, const void *src, size_t n)
{
	struct copy_arg c = { dst, src, n };
	CUresult e;

	if (!dev_on_cuda()) {
		memcpy(dst, src, n);
		return 0;
	}
	if (n == 0)
		return 0;
	if ((e = in_primary(copy_out, &c)) != CUDA_SUCCESS) {
		fprintf(stderr, "dev_read: cuMemcpyDtoH of %zu bytes at %p: CUDA error %d\n", n, src, (int)e);
		return -EIO;
	}
	return 0;
}

int dev_cmp_host(const void *dev, const void *host, size_t n)
{
	uint8_t *buf;
	int ret;

	if (!dev_on_cuda())
		return memcmp(dev, host, n) != 0;
	if (!(buf = malloc(n ? n : 1)))
		return -ENOMEM;
	ret = dev_read(buf, dev, n);
	if (ret == 0)
		ret = memcmp(buf, host, n) != 0;
	free(buf);
	return ret;
}

int dev_cmp_dev(const void *a, const void *b, size_t n)
{
	uint8_t *buf;
	int ret;

	if (!dev_on_cuda())
		return memcmp(a, b, n) != 0;
	if (!(buf = malloc(n ? n : 1)))
		return -ENOMEM;
	ret = dev_read(buf, b, n);
	if (ret == 0)
		ret = dev_cmp_host(a, buf, n);
	free(buf);
	return ret;
}

struct info_arg { size_t free_b, total; };

static CUresult mem_info(const struct cuda_api *cu, void *arg)
{
	struct info_arg *i = arg;

	return cu->MemGetInfo(&i->free_b, &i->total);
}

int dev_mem_info(uint64_t *free_b, uint64_t *total)
{
	struct info_arg i;

	if (!dev_on_cuda())
		return -ENOTSUP;
	if (in_primary(mem_info, &i) != CUDA_SUCCESS)
		return -EIO;
	*free_b = i.free_b;
	*total = i.total;
	return 0;
}

uint64_t dev_xxh3(const void *dev, size_t n)
{
	void *b = malloc(n ? n : 1);
	uint64_t h = b && dev_read(b, dev, n) == 0 ? XXH3_64bits(b, n) : 0;

	free(b);
	return h;
}
