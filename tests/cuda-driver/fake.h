// SPDX-License-Identifier: MIT
/* fake.h - the test driver's state: a libcuda.so.1 stand-in over host
 * memory, for machines without a GPU, used by the tests only
 * (LD_LIBRARY_PATH). It implements the driver calls libwsrv makes and
 * enforces the contracts a real driver enforces or leaves undefined; a
 * broken one is a "violation": printed, counted, and at exit turned into a
 * failed test (exit status 3) unless a test took the count.
 *
 * Streams are in-order queues, each run by a thread. Ordering between
 * streams is checked logically, not by timing: every stream carries a
 * vector clock (how far into each other stream it is ordered after),
 * merged through events and host synchronisation, and each device
 * allocation remembers how far into each stream it was last written and
 * read. A read not ordered after a write on another stream, or a write not
 * ordered after another stream's read, is a violation even if the timing
 * happened to work out. */
#ifndef FAKE_H
#define FAKE_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "cuda_api.h"
#include "fake_api.h"

#define FK_DEVICE_BYTES (80ull << 30) /* what cuMemGetInfo says the device has */
#define FK_STREAMS 32               /* live streams at most; slot 0: the host */
#define FK_MAX_DEVICES 4            /* FAKECUDA_DEVICES at most */
#define FK_SAMPLE 64                /* sampled mode: bytes a sample keeps ... */
#define FK_SAMPLE_EVERY (16u << 20) /* ... at each multiple of this offset in its allocation */

enum fk_op { OP_COPY, OP_RECORD, OP_WAIT, OP_HOSTFN };

struct fk_event {
	unsigned flags;
	uint64_t gen, done_gen;     /* records queued, records run */
	double t;                   /* when the last one ran */
	uint64_t vc[FK_STREAMS];    /* what its last record is ordered after */
};

struct fk_job {
	enum fk_op op;
	struct fk_job *next;
	char *dst;
	const char *src;
	size_t width, height, spitch, dpitch;
	struct fk_event *ev;
	uint64_t gen;
	CUhostFn fn;
	void *arg;
	uintptr_t base;             /* the destination allocation's first byte */
	bool d2d;                   /* device to device: within one, unpaced; */
	bool peer;                  /* from another device's memory: the link's rate */
};

struct CUstream_st {
	int idx;                    /* its component of the clocks */
	pthread_t thread;
	struct fk_job *head, *tail;
	bool busy, stop;
	uint64_t vc[FK_STREAMS];
};

struct fk_alloc {
	uintptr_t a, b;
	int device;                 /* the device that accesses it here */
	int home;                   /* the device it lies on (another's: a peer mapping) */
	bool vmm;                   /* a cuMemMap mapping (fake_vmm.c), not cuMemAlloc's */
	bool readonly;              /* mapped with CU_MEM_ACCESS_FLAGS_PROT_READ */
	uint64_t wr[FK_STREAMS], rd[FK_STREAMS];
};

struct fk_reg {
	uintptr_t a, b;
	unsigned flags;
	bool pinned;                /* cuMemAllocHost's, not a registration */
};

struct fake {
	pthread_mutex_t lock;       /* everything below */
	pthread_cond_t cond;        /* any queue or event changed */
	bool inited;
	int primary_refs;
	struct CUstream_st *streams[FK_STREAMS];
	uint64_t host_vc[FK_STREAMS];
	struct fk_alloc *allocs;
	size_t nallocs;
	struct fk_reg *regs;
	size_t nregs;
	/* knobs (fakecuda_set) */
	long long ro_supported, max_register, gbps, mbps;
	long long reg_mbps;         /* registration's cost: MB locked a second (0: free);
	                             * also $FAKECUDA_REG_MBPS, for processes a test starts */
	long long vmm_supported, granule, uuid;
	long long ctx_ms, import_ms;  /* a first context, an import (fake_cost.c) */
	long long sampled;          /* device memory keeps samples only */
	long long devices;          /* FAKECUDA_DEVICES (1) */
	long long p2p_gbps;         /* copies between devices: FAKECUDA_P2P_GBPS (0: unpaced) */
	long long no_peer;          /* FAKECUDA_NO_PEER=1: no device reads another's memory */
	/* failure injection: the (n+1)-th next call of a kind fails */
	long long fail_alloc, fail_copy, fail_register, fail_alloc_host, fail_record;
	/* observations (fakecuda_get) */
	long long violations, registrations, largest_register, copies_2d, copies;
	long long ro_writes;        /* copies refused: into a read-only mapping */
	long long live_events;
	long long pinned_bytes, pinned_peak;  /* registered + cuMemAllocHost's, here */
	long long imports;
	long long peer_copies, peer_bytes;  /* device to device, across devices */
	long long h2d_bytes;        /* host to device */
};

extern struct fake fk;

void fk_violation(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
bool fk_fail_now(long long *counter);
CUresult fk_need_ctx(void);
/* The device of the current context (fk_need_ctx succeeded). */
int fk_cur_device(void);

/* Costs, devices, pinned bytes and sampling (fake_cost.c). */
void fk_costs_from_env(void);
void fk_sleep(double s);
void fk_pinned(long long delta);
long long fk_ledger(const char *what);
void fk_copy_rows(char *dst, const char *src, size_t width, size_t height, size_t spitch, size_t dpitch,
		  uintptr_t base);
double fk_now(void);

/* Streams (fake_stream.c). */
void fk_enqueue(struct CUstream_st *s, struct fk_job *j);
void fk_host_learns(const uint64_t *vc);
void fk_sync_all(void);
struct CUstream_st *fk_stream(CUstream s);

/* Memory (fake_mem.c). */
struct fk_alloc *fk_alloc_at(uintptr_t p, size_t len);
const struct fk_reg *fk_reg_over(uintptr_t p, size_t len);
/* Virtual memory management (fake_vmm.c): live handles, mappings,
 * reservations; -1 for another name. Under fk.lock. */
long long fk_vmm_live(const char *what);
/* Bytes of the handles cuMemCreate made in this process and nobody has
 * freed yet (imports are another process's). Under fk.lock. */
size_t fk_vmm_created_bytes(void);

void fk_access(struct fk_alloc *a, int idx, const uint64_t *vc, uint64_t seq, bool write,
	       const char *what);

#endif
