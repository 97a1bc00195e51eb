// SPDX-License-Identifier: MIT
/* fake_ctx.c - the test driver's device, contexts, errors, and the
 * controls the tests call (fakecuda_*: failure injection, knobs, counts). */
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fake.h"
#include "fakecuda.h"

struct fake fk = {
	.lock = PTHREAD_MUTEX_INITIALIZER,
	.cond = PTHREAD_COND_INITIALIZER,
	.ro_supported = 1,
	.max_register = 64LL << 30,
	.vmm_supported = 1,
	.granule = 2LL << 20,
	.fail_alloc = -1, .fail_copy = -1, .fail_register = -1, .fail_alloc_host = -1, .fail_record = -1,
	.devices = 1,
};

/* The contexts there are: each device's primary context. */
struct CUctx_st { int device; bool made; };
static struct CUctx_st primary[FK_MAX_DEVICES] = { { 0 }, { 1 }, { 2 }, { 3 } };
#define DEPTH 8
static __thread CUcontext stack[DEPTH];
static __thread int depth;

double fk_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

void fk_violation(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fprintf(stderr, "fake libcuda: CONTRACT BROKEN: ");
	vfprintf(stderr, fmt, ap);
	fprintf(stderr, "\n");
	va_end(ap);
	__atomic_add_fetch(&fk.violations, 1, __ATOMIC_SEQ_CST);
}

/* Counts a call down; true when this one is to fail. */
bool fk_fail_now(long long *counter)
{
	return __atomic_fetch_sub(counter, 1, __ATOMIC_SEQ_CST) == 0;
}

CUresult fk_need_ctx(void)
{
	if (!fk.inited)
		return CUDA_ERROR_NOT_INITIALIZED;
	return depth > 0 && stack[depth - 1] ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

int fk_cur_device(void)
{
	return depth > 0 && stack[depth - 1] ? stack[depth - 1]->device : 0;
}

static bool valid_device(CUdevice d)
{
	return d >= 0 && d < fk.devices;
}

CUresult cuInit(unsigned flags)
{
	if (flags)
		return CUDA_ERROR_INVALID_VALUE;
	if (getenv("FAKECUDA_NO_DEVICE"))
		return CUDA_ERROR_NO_DEVICE;
	fk_costs_from_env();
	fk.inited = true;
	return CUDA_SUCCESS;
}

CUresult cuDriverGetVersion(int *v)
{
	*v = 13000;
	return CUDA_SUCCESS;
}

CUresult cuGetErrorString(CUresult e, const char **s)
{
	switch (e) {
	case CUDA_SUCCESS: *s = "no error"; break;
	case CUDA_ERROR_INVALID_VALUE: *s = "invalid argument"; break;
	case CUDA_ERROR_OUT_OF_MEMORY: *s = "out of memory"; break;
	case CUDA_ERROR_NOT_INITIALIZED: *s = "initialization error"; break;
	case CUDA_ERROR_NO_DEVICE: *s = "no CUDA-capable device is detected"; break;
	case CUDA_ERROR_INVALID_CONTEXT: *s = "invalid device context"; break;
	case CUDA_ERROR_INVALID_HANDLE: *s = "invalid resource handle"; break;
	case CUDA_ERROR_NOT_READY: *s = "device not ready"; break;
	case CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED: *s = "part or all of the requested memory range is already mapped"; break;
	case CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED: *s = "pointer does not correspond to a registered memory region"; break;
	case CUDA_ERROR_NOT_SUPPORTED: *s = "operation not supported"; break;
	default: *s = "unknown error"; break;
	}
	return CUDA_SUCCESS;
}

CUresult cuDeviceGetCount(int *n)
{
	if (!fk.inited)
		return CUDA_ERROR_NOT_INITIALIZED;
	*n = (int)fk.devices;
	return CUDA_SUCCESS;
}

/* Two devices read each other's memory unless FAKECUDA_NO_PEER; a device
 * is not its own peer (as the real driver answers). */
CUresult cuDeviceCanAccessPeer(int *can, CUdevice dev, CUdevice peer)
{
	if (!fk.inited)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!can || !valid_device(dev) || !valid_device(peer))
		return CUDA_ERROR_INVALID_DEVICE;
	*can = dev != peer && !fk.no_peer;
	return CUDA_SUCCESS;
}

CUresult cuDeviceGet(CUdevice *d, int ordinal)
{
	if (!valid_device(ordinal))
		return CUDA_ERROR_INVALID_DEVICE;
	*d = ordinal;
	return CUDA_SUCCESS;
}

CUresult cuDeviceGetAttribute(int *v, int attr, CUdevice d)
{
	if (!valid_device(d))
		return CUDA_ERROR_INVALID_DEVICE;
	switch (attr) {
	case CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED: *v = (int)fk.ro_supported; break;
	case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
	case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED: *v = (int)fk.vmm_supported; break;
	default: *v = 0;
	}
	return CUDA_SUCCESS;
}

CUresult cuDeviceGetName(char *name, int len, CUdevice d)
{
	snprintf(name, (size_t)len, "wsrv test driver (host memory)");
	return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d)
{
	if (!fk.inited)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!valid_device(d))
		return CUDA_ERROR_INVALID_DEVICE;
	/* A device's first context in a process costs what the driver's
	 * setup does (FAKECUDA_CTX_MS): once, like the real one's. */
	pthread_mutex_lock(&fk.lock);
	if (!primary[d].made) {
		fk_sleep((double)fk.ctx_ms / 1e3);
		primary[d].made = true;
	}
	pthread_mutex_unlock(&fk.lock);
	__atomic_add_fetch(&fk.primary_refs, 1, __ATOMIC_SEQ_CST);
	*c = &primary[d];
	return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d)
{
	if (__atomic_sub_fetch(&fk.primary_refs, 1, __ATOMIC_SEQ_CST) < 0)
		fk_violation("cuDevicePrimaryCtxRelease without a retain");
	return CUDA_SUCCESS;
}

CUresult cuCtxPushCurrent_v2(CUcontext c)
{
	if (!c)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (depth == DEPTH)
		return CUDA_ERROR_UNKNOWN;
	stack[depth++] = c;
	return CUDA_SUCCESS;
}

CUresult cuCtxPopCurrent_v2(CUcontext *c)
{
	if (depth == 0)
		return CUDA_ERROR_INVALID_CONTEXT;
	depth--;
	if (c)
		*c = stack[depth];
	return CUDA_SUCCESS;
}

CUresult cuCtxGetCurrent(CUcontext *c)
{
	*c = depth ? stack[depth - 1] : NULL;
	return CUDA_SUCCESS;
}

/* ---- controls ---- */

static long long *knob(const char *name)
{
	static const struct { const char *name; size_t off; } knobs[] = {
		{ "ro_supported", offsetof(struct fake, ro_supported) },
		{ "max_register", offsetof(struct fake, max_register) },
		{ "gbps", offsetof(struct fake, gbps) },
		{ "mbps", offsetof(struct fake, mbps) },
		{ "reg_mbps", offsetof(struct fake, reg_mbps) },
		{ "vmm_supported", offsetof(struct fake, vmm_supported) },
		{ "granule", offsetof(struct fake, granule) },
		{ "uuid", offsetof(struct fake, uuid) },
		{ "ro_writes", offsetof(struct fake, ro_writes) },
		{ "fail_alloc", offsetof(struct fake, fail_alloc) },
		{ "fail_copy", offsetof(struct fake, fail_copy) },
		{ "fail_register", offsetof(struct fake, fail_register) },
		{ "fail_alloc_host", offsetof(struct fake, fail_alloc_host) },
		{ "fail_record", offsetof(struct fake, fail_record) },
		{ "violations", offsetof(struct fake, violations) },
		{ "registrations", offsetof(struct fake, registrations) },
		{ "largest_register", offsetof(struct fake, largest_register) },
		{ "copies", offsetof(struct fake, copies) },
		{ "copies_2d", offsetof(struct fake, copies_2d) },
		{ "live_events", offsetof(struct fake, live_events) },
		{ "ctx_ms", offsetof(struct fake, ctx_ms) },
		{ "import_ms", offsetof(struct fake, import_ms) },
		{ "sampled", offsetof(struct fake, sampled) },
		{ "devices", offsetof(struct fake, devices) },
		{ "pinned_bytes", offsetof(struct fake, pinned_bytes) },
		{ "pinned_peak", offsetof(struct fake, pinned_peak) },
		{ "imports", offsetof(struct fake, imports) },
		{ "p2p_gbps", offsetof(struct fake, p2p_gbps) },
		{ "no_peer", offsetof(struct fake, no_peer) },
		{ "peer_copies", offsetof(struct fake, peer_copies) },
		{ "peer_bytes", offsetof(struct fake, peer_bytes) },
		{ "h2d_bytes", offsetof(struct fake, h2d_bytes) },
	};

	for (size_t i = 0; i < sizeof(knobs) / sizeof(knobs[0]); i++)
		if (strcmp(knobs[i].name, name) == 0)
			return (long long *)((char *)&fk + knobs[i].off);
	return NULL;
}

int fakecuda_set(const char *name, long long v)
{
	long long *k = knob(name);

	if (!k)
		return -1;
	__atomic_store_n(k, v, __ATOMIC_SEQ_CST);
	return 0;
}

long long fakecuda_get(const char *name)
{
	long long *k = knob(name);

	if (!k)
		return -1;
	return __atomic_load_n(k, __ATOMIC_SEQ_CST);
}

long long fakecuda_live(const char *what)
{
	long long n = 0;

	pthread_mutex_lock(&fk.lock);
	if (strcmp(what, "registrations") == 0)
		for (size_t i = 0; i < fk.nregs; i++)
			n += !fk.regs[i].pinned;
	else if (strcmp(what, "pinned") == 0)
		for (size_t i = 0; i < fk.nregs; i++)
			n += fk.regs[i].pinned;
	else if (strcmp(what, "allocations") == 0)
		n = (long long)fk.nallocs;
	else if (strcmp(what, "streams") == 0)
		for (int i = 1; i < FK_STREAMS; i++)
			n += fk.streams[i] != NULL;
	else if (strcmp(what, "events") == 0)
		n = fk.live_events;
	else if (strcmp(what, "primary_refs") == 0)
		n = fk.primary_refs;
	else if (strncmp(what, "ledger_", 7) == 0)
		n = fk_ledger(what);
	else
		n = fk_vmm_live(what);
	pthread_mutex_unlock(&fk.lock);
	return n;
}

/* At exit: a broken contract fails the program that broke it. */
__attribute__((destructor)) static void verdict(void)
{
	long long v = __atomic_load_n(&fk.violations, __ATOMIC_SEQ_CST);

	if (v > 0) {
		fprintf(stderr, "fake libcuda: %lld contract(s) broken: failing this program\n", v);
		_exit(3);
	}
}
