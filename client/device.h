/* device.h - the device backends' interface: allocate, free, an
 * asynchronous host-to-device copy, completion and wait. A backend
 * completes copies in submission order on its copy engine; a "fence" is the
 * number of copies submitted so far, so waiting for a fence waits for every
 * copy up to it. */
#ifndef WSRV_DEVICE_H
#define WSRV_DEVICE_H

#include <stddef.h>
#include <stdint.h>

#include "wsrv.h"

struct device_ops {
	const char *name;
	/* Device memory of len bytes at *out, or a negative errno. */
	int (*alloc)(struct wsrv_device *d, size_t len, void **out);
	void (*free)(struct wsrv_device *d, void *p, size_t len);
	/* Queues a copy of len bytes; returns its fence (> 0), or <0. When
	 * timing is given, the copy's start and end (CLOCK_MONOTONIC seconds)
	 * are written there before the fence completes. */
	int64_t (*copy)(struct wsrv_device *d, void *dst, const void *src, size_t len,
			double *timing);
	/* The same for height rows of width bytes, pitch apart in src, packed
	 * in dst (cudaMemcpy2DAsync's shape). */
	int64_t (*copy2d)(struct wsrv_device *d, void *dst, const void *src, size_t width,
			  size_t height, size_t pitch, double *timing);
	/* Has every copy up to fence completed? */
	int (*done)(struct wsrv_device *d, int64_t fence);
	/* Blocks until every copy up to fence has completed. */
	int (*wait)(struct wsrv_device *d, int64_t fence);
	void (*destroy)(struct wsrv_device *d);
};

struct wsrv_device {
	const struct device_ops *ops;
	double copy_seconds;        /* time the copy engine spent copying; */
	uint64_t copy_bytes;        /* both read under the engine's lock */
};

#endif
