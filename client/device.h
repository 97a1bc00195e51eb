// SPDX-License-Identifier: MIT
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
	/* Makes the consumer of the data wait for every copy up to fence:
	 * the host backend blocks; a GPU backend makes its compute stream wait
	 * on the copy's event, so the CPU does not block. NULL: wait. */
	int (*gate)(struct wsrv_device *d, int64_t fence);
	/* The consumer is done with data released now: copies queued later
	 * must not overwrite it before the consumer's queued work has run.
	 * NULL: nothing to do (the host backend's consumer is synchronous). */
	void (*consumed)(struct wsrv_device *d);
	/* Host memory the copies will read (page-locks it on a GPU); called
	 * once per range a stream uses. NULL: nothing to do. */
	int (*register_host)(struct wsrv_device *d, const void *p, size_t len);
	void (*destroy)(struct wsrv_device *d);
};

struct wsrv_device {
	const struct device_ops *ops;
	double copy_seconds;        /* time the copy engine spent copying; */
	uint64_t copy_bytes;        /* both read under the engine's lock */
};

#endif
