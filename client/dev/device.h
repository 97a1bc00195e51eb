// SPDX-License-Identifier: MIT
/* device.h - the device backends' interface: allocate, free, an
 * asynchronous host-to-device copy, completion and wait. A backend
 * completes copies in submission order on its copy engine; a "fence" is the
 * number of copies submitted so far (> 0), so waiting for a fence waits for
 * every copy up to it. */
#ifndef WSRV_DEVICE_H
#define WSRV_DEVICE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "wsrv.h"

/* One shared allocation (a device region) as this process maps it. */
struct dev_share {
	void *ptr;                  /* its first byte, in this process */
	size_t len;                 /* a multiple of the granule */
	int fd;                     /* the exported handle (the writer's, until sent); -1: none */
	uint64_t handle;            /* the backend's own (cuda: the allocation handle) */
	bool writable;
};

/* What a backend says about sharing (share_info). */
struct dev_share_info {
	char id[64];                /* the device's identity: "host:numa0", "cuda:GPU-..." */
	int kind;                   /* WSRV__REGION_KIND__REGION_HOST or _CUDA */
	size_t granule;             /* shared allocations are multiples of it */
};

struct device_ops {
	const char *name;
	/* Device memory of len bytes at *out, or a negative errno. */
	int (*alloc)(struct wsrv_device *d, size_t len, void **out);
	void (*free)(struct wsrv_device *d, void *p, size_t len);
	/* Queues a copy of len bytes; returns its fence (> 0), or <0 when
	 * nothing of it is queued (copies queued before stay valid). When
	 * timing is given, the copy's start and end (CLOCK_MONOTONIC seconds)
	 * are written there by the first done() or wait() that finds the
	 * fence complete; timing must stay valid until then. */
	int64_t (*copy)(struct wsrv_device *d, void *dst, const void *src, size_t len,
			double *timing);
	/* The same for height rows of width bytes, pitch apart in src, packed
	 * in dst (cuMemcpy2DAsync's shape). */
	int64_t (*copy2d)(struct wsrv_device *d, void *dst, const void *src, size_t width,
			  size_t height, size_t pitch, double *timing);
	/* The same from device memory mapped here (another device's, through
	 * share_import with peer access: a layer shard's peer source). NULL:
	 * the backend cannot. */
	int64_t (*copy_peer)(struct wsrv_device *d, void *dst, const void *src, size_t len, double *timing);
	/* Has every copy up to fence completed? 1 or 0. */
	int (*done)(struct wsrv_device *d, int64_t fence);
	/* Blocks until every copy up to fence has completed. */
	int (*wait)(struct wsrv_device *d, int64_t fence);
	/* Makes the consumer of the data wait for every copy up to fence:
	 * a GPU backend makes its compute stream wait on the copy's event, so
	 * the CPU does not block, and sets *ticket (> 0) for gap(); a backend
	 * that blocked instead sets *ticket to 0. NULL: wait. */
	int (*gate)(struct wsrv_device *d, int64_t fence, int64_t *ticket);
	/* When the consumer stood still at a gate (start and end, on the
	 * host's clock): 0, -EAGAIN while it has not passed it yet (block: wait
	 * until it has), -ENOENT when the ticket is too old to know. */
	int (*gap)(struct wsrv_device *d, int64_t ticket, bool block, double span[2]);
	/* The consumer is done with data released now: copies queued later
	 * must not overwrite it before the consumer's queued work has run.
	 * NULL: nothing to do (the host backend's consumer is synchronous). */
	void (*consumed)(struct wsrv_device *d);
	/* Host memory the copies will read (page-locks it on a GPU), counted:
	 * each call is undone by one unregister_host of the same range. *added:
	 * the bytes newly locked. NULL: nothing to do. */
	int (*register_host)(struct wsrv_device *d, const void *p, size_t len, uint64_t *added);
	void (*unregister_host)(struct wsrv_device *d, const void *p, size_t len);
	/* Device regions (shared allocations). share_info: 0, or -EOPNOTSUPP
	 * with a sentence saying why this device cannot share; NULL: it
	 * cannot. share_create: len bytes (a multiple of the granule), mapped
	 * writable here, exported as sh->fd. share_seal: after the fill, this
	 * process's mapping becomes read-only and the handle is sealed where
	 * the kind allows. share_import: maps a handle from the server
	 * read-only (fd stays the caller's). share_free: unmaps, releases,
	 * closes sh->fd if open. Each returns 0 or a negative errno with a
	 * sentence; nothing is left behind on failure. share_import of another
	 * device's memory: -EOPNOTSUPP when this device cannot read it. */
	int (*share_info)(struct wsrv_device *d, struct dev_share_info *out);
	int (*share_create)(struct wsrv_device *d, size_t len, struct dev_share *sh);
	int (*share_seal)(struct wsrv_device *d, struct dev_share *sh);
	int (*share_import)(struct wsrv_device *d, int fd, size_t len, struct dev_share *sh);
	void (*share_free)(struct wsrv_device *d, struct dev_share *sh);
	void (*destroy)(struct wsrv_device *d);
};

struct wsrv_device {
	const struct device_ops *ops;
};

#endif
