// SPDX-License-Identifier: MIT
/* dev_cuda.h - the cuda backend's state, shared by its files: dev_cuda.c
 * (setup, memory, fences, gates), dev_cuda_copy.c (the copies) and
 * dev_cuda_reg.c (page-locking the host memory the copies read). */
#ifndef WSRV_DEV_CUDA_H
#define WSRV_DEV_CUDA_H

#include <pthread.h>
#include <stdbool.h>

#include "cuda_api.h"
#include "device.h"

#define CU_FENCES 1024              /* copies in flight at most, per device */
#define CU_GATES 1024               /* gates whose gap can still be asked */
#define CU_BOUNCE (32u << 20)       /* one pinned staging buffer */
#define CU_NBOUNCE 2
#define CU_PIECE (256u << 20)       /* the largest single driver copy */
#define CU_REG_CHUNK (2ULL << 30)   /* the largest single registration */

struct cu_fence {
	CUevent start, end;         /* around the copy; end is the fence */
	int64_t fence;              /* which fence the events are now, 0: none */
	double *timing;             /* the caller's, filled once (device.h) */
};

struct cu_gate {
	CUevent before, after;      /* on the compute stream, around its wait */
	int64_t ticket;             /* 0: free or taken */
};

/* One page-locked range. refs counts the register_host calls that cover
 * it; locked is false where the driver refused (its copies bounce);
 * borrowed: another context of this process locked it (portable), which
 * unlocks it too, so this one never unregisters it. */
struct cu_reg {
	uintptr_t a, b;
	unsigned refs;
	bool locked, borrowed;
};

struct cuda_dev {
	struct wsrv_device dev;
	const struct cuda_api *cu;
	pthread_mutex_t lock;       /* one caller at a time */
	CUdevice device;
	CUcontext ctx;              /* the device's primary context */
	CUstream copy;              /* ours */
	CUstream compute;           /* the worker's; NULL: gates block */
	struct cu_fence f[CU_FENCES];
	int64_t submitted;
	int64_t timed_upto;         /* every copy up to it has its times */
	struct cu_gate g[CU_GATES];
	int64_t gates;
	CUevent released;           /* the last release, on compute */
	bool release_pending;
	CUevent base;               /* the copy stream's zero ... */
	double base_host;           /* ... on the host's clock */
	bool ro_ok;                 /* read-only registration supported */
	unsigned reg_flags;         /* beside READ_ONLY: PORTABLE in the copy service */
	uint64_t reg_chunk;
	struct cu_reg *regs;        /* sorted by address, disjoint */
	size_t nregs, cap_regs;
	void *bounce[CU_NBOUNCE];   /* pinned staging for unlocked sources, made
	                             * at the first copy that needs it */
	CUevent bounce_ev[CU_NBOUNCE];
	int next_bounce;
};

/* Every entry point runs with the device's primary context pushed on the
 * caller's thread and pops it before returning, so the caller's current
 * context (and CUDA runtime device) is what it was. */
void cu_enter(struct cuda_dev *c);
void cu_leave(struct cuda_dev *c);

/* A driver error as a negative errno with its text in wsrv_last_error(). */
int cu_fail(struct cuda_dev *c, CUresult e, const char *what);

/* Queues the driver copies of height rows of width bytes (pitch apart in
 * src) to dst, packed: from locked memory directly, in pieces that each
 * lie in one registration, and through the bounce buffers elsewhere. */
int cu_copy_rows(struct cuda_dev *c, void *dst, const void *src, size_t width, size_t height,
		 size_t pitch);

/* The registration holding address p, or NULL. */
const struct cu_reg *cu_reg_at(const struct cuda_dev *c, uintptr_t p);

int cu_register(struct wsrv_device *d, const void *p, size_t len, uint64_t *added);
void cu_unregister(struct wsrv_device *d, const void *p, size_t len);
void cu_unregister_all(struct cuda_dev *c);

/* Device regions (dev_cuda_share.c): device.h's share_* operations. */
int cu_share_info(struct wsrv_device *d, struct dev_share_info *out);
int cu_share_create(struct wsrv_device *d, size_t len, struct dev_share *sh);
int cu_share_seal(struct wsrv_device *d, struct dev_share *sh);
int cu_share_import(struct wsrv_device *d, int fd, size_t len, struct dev_share *sh);
void cu_share_free(struct wsrv_device *d, struct dev_share *sh);

/* The copy service's (dev_serve.h): a worker's exported allocation mapped
 * writable here (dev_cuda_serve.c). */
int cu_serve_import(struct wsrv_device *d, int fd, size_t len, struct dev_share *sh);

#endif
