// SPDX-License-Identifier: MIT
/* test_cuda.c - the cuda backend, against whichever libcuda.so.1 the
 * loader finds: the test driver (tests/cuda-driver/, which meson puts on
 * LD_LIBRARY_PATH for the "cuda" test) on every machine, or a real driver
 * on a GPU ("cuda_gpu", which skips without one).
 *
 * Every streamed and resident byte is read back through the compute
 * stream, after the gate, and compared with the shared mapping: whole
 * layers, resident tensors larger than a bounce buffer, tensor-parallel
 * views including a rowwise one (2-D copies), locked and bounced sources.
 * With the test driver the tests also check the contracts it enforces,
 * injected failures, registration in chunks, and that the caller's
 * context is left alone. "--expect-enodev" checks the error without a
 * driver or a device instead. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <dlfcn.h>
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cuda_api.h"
#include "helpers.h"
#include "wsrv.h"

static char *model_dir;
static struct test_server ts;
static struct wsrv_client *cl;
static struct wsrv_model *m;
static const struct cuda_api *cu;
static CUcontext ctx;
static CUstream compute;
static void *pinned;               /* readback buffer, page-locked */
#define PINNED (80u << 20)
static int fds_before;

/* The test driver's controls, NULL on a real driver. */
static int (*fk_set)(const char *, long long);
static long long (*fk_get)(const char *);
static long long (*fk_live)(const char *);

#define NEED_FAKE() do { if (!fk_set) skip(); } while (0)

static void push(void) { assert_int_equal(cu->CtxPushCurrent(ctx), CUDA_SUCCESS); }
static void pop(void) { CUcontext c; assert_int_equal(cu->CtxPopCurrent(&c), CUDA_SUCCESS); }

static struct wsrv_device *cuda_open_dev(uint64_t chunk, bool with_compute)
{
	struct wsrv_cuda_opts co = { .struct_size = sizeof(co), .device = 0,
				     .compute_stream = with_compute ? compute : NULL,
				     .register_chunk_bytes = chunk };
	struct wsrv_device *d;

	if (wsrv_device_cuda(&co, &d) < 0)
		fail_msg("wsrv_device_cuda: %s", wsrv_last_error());
	return d;
}

/* Reads n device bytes at p on the compute stream (ordered after the
 * gates) and waits for them. */
static const void *cuda_read_back(const void *p, size_t n)
{
	assert_true(n <= PINNED);
	push();
	assert_int_equal(cu->MemcpyDtoHAsync(pinned, (CUdeviceptr)(uintptr_t)p, n, compute), CUDA_SUCCESS);
	assert_int_equal(cu->StreamSynchronize(compute), CUDA_SUCCESS);
	pop();
	return pinned;
}

/* What rank's part of tensor t must hold under the tp plan used below:
 * q_proj colwise (rows), o_proj rowwise (columns: a 2-D copy). */
static void check_view(const struct wsrv_tensor *t, const struct wsrv_view *v, const uint8_t *got,
		       int rank, int world)
{
	if (world == 1 || (!strstr(t->name, "q_proj") && !strstr(t->name, "o_proj"))) {
		if (memcmp(got, t->data, v->bytes) != 0)
			fail_msg("%s: device bytes differ from the shared mapping", t->name);
		return;
	}
	if (strstr(t->name, "q_proj")) {
		if (memcmp(got, (const uint8_t *)t->data + v->bytes * (size_t)rank, v->bytes) != 0)
			fail_msg("%s: rank %d's colwise slice differs on the device", t->name, rank);
		return;
	}
	size_t rows = t->shape[0], row = t->size / rows, part = row / (size_t)world;
	for (size_t r = 0; r < rows; r++)
		if (memcmp(got + r * part, (const uint8_t *)t->data + r * row + part * (size_t)rank, part) != 0)
			fail_msg("%s: row %zu of rank %d's rowwise slice differs on the device", t->name, r, rank);
}

static void check_tensors(struct wsrv_stream *s, uint32_t first, uint32_t count, int rank, int world)
{
	for (uint32_t i = first; i < first + count; i++) {
		struct wsrv_tensor t;
		struct wsrv_view v;
		void *d;
		wsrv_model_tensor(m, i, &t);
		wsrv_stream_view(s, i, &v);
		if (!v.present || !v.bytes)
			continue;
		assert_int_equal(wsrv_stream_tensor_at(s, i, &d), 0);
		check_view(&t, &v, cuda_read_back(d, v.bytes), rank, world);
	}
}

static void run_stream(struct wsrv_device *dev, const char *json, int world, int rank, int passes)
{
	struct wsrv_stream_opts o = { .struct_size = sizeof(o), .slots = 2, .rank = rank, .world = world };
	struct wsrv_plan *p = NULL;
	struct wsrv_stream *s;

	if (json)
		assert_int_equal(wsrv_plan_parse(json, strlen(json), &p), 0);
	if (wsrv_stream_open(m, dev, p, &o, &s) < 0)
		fail_msg("wsrv_stream_open: %s", wsrv_last_error());
	for (int pass = 0; pass < passes; pass++)
		for (size_t li = 0; li < wsrv_model_layer_count(m); li++) {
			struct wsrv_layer l;
			wsrv_model_layer_at(m, li, &l);
			assert_int_equal(wsrv_stream_acquire(s, l.index), 0);
			check_tensors(s, l.first, l.count, rank, world);
			assert_int_equal(wsrv_stream_release(s, l.index), 0);
		}
	wsrv_stream_close(s);
	wsrv_plan_free(p);
}

static const char tp_plan[] = "{\"tp_plan\": {\"layers.*.self_attn.q_proj\": \"colwise\","
			      " \"layers.*.self_attn.o_proj\": \"rowwise\"}}";

static void whole_layers(void **st)
{
	struct wsrv_device *d = cuda_open_dev(0, true);

	run_stream(d, NULL, 1, 0, 2);
	run_stream(d, "{\"residency\": {\"layers.*.mlp.*\": \"resident\"}}", 1, 0, 1);
	wsrv_device_destroy(d);
}

/* The rowwise o_proj slice is a 2-D copy: checked row by row. */
static void tp_views_and_2d_copies(void **st)
{
	struct wsrv_device *d = cuda_open_dev(0, true);
	long long before = fk_get ? fk_get("copies_2d") : 0;

	for (int r = 0; r < 2; r++)
		run_stream(d, tp_plan, 2, r, 1);
	if (fk_get)
		assert_true(fk_get("copies_2d") > before);
	wsrv_device_destroy(d);
}

/* The embedding (64 MiB) is larger than a bounce buffer: resident under
 * the default plan, it once failed the open with -E2BIG. Read-only
 * registration refused: every byte bounces, in parts, and arrives. */
static void everything_bounced(void **st)
{
	NEED_FAKE();
	fk_set("ro_supported", 0);
	struct wsrv_device *d = cuda_open_dev(0, true);
	run_stream(d, NULL, 1, 0, 1);
	run_stream(d, tp_plan, 2, 1, 1);
	wsrv_device_destroy(d);
	fk_set("ro_supported", 1);
}

/* Registration covers what the stream copies, in chunks no larger than
 * asked, is timed into the stats, and is undone at close. */
static void registered_in_chunks(void **st)
{
	NEED_FAKE();
	struct wsrv_device *d = cuda_open_dev(3u << 20, true);
	struct wsrv_stream_opts o = { .struct_size = sizeof(o), .slots = 2 };
	struct wsrv_stream_stats ss;
	struct wsrv_stream *s;
	long long regs = fk_get("registrations");

	fk_set("largest_register", 0);
	fk_set("max_register", 4 << 20); /* larger ones are a broken contract */
	assert_int_equal(wsrv_stream_open(m, d, NULL, &o, &s), 0);
	assert_int_equal(wsrv_stream_stats(s, &ss), 0);
	assert_true(fk_get("largest_register") <= (3 << 20));
	assert_true(fk_get("registrations") - regs > 10);
	assert_true(ss.register_bytes > (64u << 20));
	assert_true(ss.register_seconds > 0);
	assert_int_equal(fk_live("registrations"), fk_get("registrations") - regs);
	wsrv_stream_close(s);
	assert_int_equal(fk_live("registrations"), 0);
	fk_set("max_register", 64LL << 30);
	wsrv_device_destroy(d);
}

/* The test driver refuses registrations over its limit, like the real
 * one past 512 GiB: counted as a broken contract, and the copies bounce. */
static void over_large_registration_is_caught(void **st)
{
	NEED_FAKE();
	struct wsrv_device *d = cuda_open_dev(0, true);

	fk_set("max_register", 1 << 20);
	fk_set("violations", 0);
	run_stream(d, NULL, 1, 0, 1);
	assert_true(fk_get("violations") > 0);
	fk_set("violations", 0);
	fk_set("max_register", 64LL << 30);
	wsrv_device_destroy(d);
}

/* Every call leaves the caller's current context as it found it: none,
 * or one the caller pushed. */
static void caller_context_kept(void **st)
{
	struct wsrv_stream_opts o = { .struct_size = sizeof(o), .slots = 2 };
	struct wsrv_device *d;
	struct wsrv_stream *s;
	CUcontext cur = ctx;

	for (int with = 0; with < 2; with++) {
		CUcontext want = with ? ctx : NULL;
		if (with)
			push();
		d = cuda_open_dev(0, true);
		assert_int_equal(cu->CtxGetCurrent(&cur), CUDA_SUCCESS);
		assert_ptr_equal(cur, want);
		assert_int_equal(wsrv_stream_open(m, d, NULL, &o, &s), 0);
		assert_int_equal(wsrv_stream_acquire(s, 0), 0);
		assert_int_equal(wsrv_stream_release(s, 0), 0);
		wsrv_stream_close(s);
		wsrv_device_destroy(d);
		assert_int_equal(cu->CtxGetCurrent(&cur), CUDA_SUCCESS);
		assert_ptr_equal(cur, want);
		if (with)
			pop();
	}
}

/* A copy that fails to queue is an error of that acquire, not a fence:
 * the stream goes on, and the next acquire of the layer works. */
static void failed_copy_is_an_error(void **st)
{
	NEED_FAKE();
	struct wsrv_device *d = cuda_open_dev(0, true);
	struct wsrv_stream_opts o = { .struct_size = sizeof(o), .slots = 1 };
	struct wsrv_stream *s;
	struct wsrv_layer l;

	assert_int_equal(wsrv_stream_open(m, d, NULL, &o, &s), 0);
	/* One slot: layer 0 is prefetched; layer 1 needs a new copy. */
	fk_set("fail_copy", 0);
	int r = wsrv_stream_acquire(s, 1);
	fk_set("fail_copy", -1);
	assert_true(r < 0);
	assert_non_null(strstr(wsrv_last_error(), "cuda"));
	assert_int_equal(wsrv_stream_acquire(s, 1), 0);
	assert_int_equal(wsrv_model_layer(m, 1, &l), 0);
	check_tensors(s, l.first, l.count, 0, 1);
	assert_int_equal(wsrv_stream_release(s, 1), 0);
	wsrv_stream_close(s);
	wsrv_device_destroy(d);
}

/* Allocation and registration failures: a clean error, or (registration)
 * bounced copies; nothing left behind either way. */
static void injected_failures(void **st)
{
	NEED_FAKE();
	/* The private path: a shared region's failures fall back instead
	 * (device_region_failures_fall_back). */
	struct wsrv_stream_opts o = { .struct_size = sizeof(o), .slots = 2, .share = WSRV_SHARE_OFF };
	struct wsrv_device *d = cuda_open_dev(0, true);
	struct wsrv_stream *s;
	long long allocs = fk_live("allocations");

	fk_set("fail_alloc", 1); /* the first slot: after the resident memory */
	assert_int_equal(wsrv_stream_open(m, d, NULL, &o, &s), -ENOMEM);
	assert_int_equal(fk_live("allocations"), allocs);
	assert_int_equal(fk_live("registrations"), 0);
	fk_set("fail_register", 0);
	run_stream(d, NULL, 1, 0, 1);
	fk_set("fail_copy", 2); /* in the resident upload */
	assert_true(wsrv_stream_open(m, d, NULL, &o, &s) < 0);
	fk_set("fail_copy", -1);
	assert_int_equal(fk_live("allocations"), allocs);
	wsrv_device_destroy(d);
	/* Pinned staging is made by the first copy that bounces, not by
	 * the device: a device that cannot lock read-only memory bounces
	 * every copy, and a failure to make it fails the open clearly. */
	struct wsrv_cuda_opts co = { .struct_size = sizeof(co) };
	fk_set("ro_supported", 0);
	assert_int_equal(wsrv_device_cuda(&co, &d), 0);
	assert_int_equal(fk_live("pinned"), 1); /* the test's own: the device made none */
	fk_set("fail_alloc_host", 0);
	assert_true(wsrv_stream_open(m, d, NULL, &o, &s) < 0);
	assert_non_null(strstr(wsrv_last_error(), "bounce buffer"));
	fk_set("fail_alloc_host", -1);
	fk_set("ro_supported", 1);
	wsrv_device_destroy(d);
	assert_int_equal(fk_live("pinned"), 1);
	assert_int_equal(fk_live("primary_refs"), 1);
}

/* Copy time comes from the copies' events; the wait from the gap the
 * compute stream saw. With compute slower than the copies (a host
 * function sleeping on the compute stream), nearly all of it hides. */
static void host_sleep_ms(void *arg)
{
	struct timespec t = { 0, (long)(uintptr_t)arg * 1000000L };
	nanosleep(&t, NULL);
}

static void honest_stats(void **st)
{
	NEED_FAKE();
	struct wsrv_stream_opts o = { .struct_size = sizeof(o), .slots = 2 };
	struct wsrv_device *d = cuda_open_dev(0, true);
	struct wsrv_stream_stats ss;
	struct wsrv_stream *s;

	fk_set("gbps", 2); /* a layer of ~90 MB: at least 45 ms a copy */
	assert_int_equal(wsrv_stream_open(m, d, NULL, &o, &s), 0);
	for (int pass = 0; pass < 2; pass++)
		for (int32_t l = 0; l < 2; l++) {
			assert_int_equal(wsrv_stream_acquire(s, l), 0);
			push();
			assert_int_equal(cu->LaunchHostFunc(compute, host_sleep_ms, (void *)(uintptr_t)100), CUDA_SUCCESS);
			pop();
			assert_int_equal(wsrv_stream_release(s, l), 0);
		}
	push();
	assert_int_equal(cu->StreamSynchronize(compute), CUDA_SUCCESS);
	pop();
	assert_int_equal(wsrv_stream_stats(s, &ss), 0);
	fprintf(stderr, "copy %.3f s (%.0f MB), compute waited %.3f s, hidden %.3f\n", ss.copy_seconds,
		(double)ss.bytes_copied / 1e6, ss.wait_seconds, ss.hidden_fraction);
	/* Paced copies take at least their bytes at 2 GB/s (but for the two
	 * prefetched last, which may still be running); the first layer's
	 * copy, queued at open, cannot hide; the others hide behind 100 ms. */
	assert_true(ss.copy_seconds >= (double)(ss.bytes_copied - 2 * ss.slot_bytes) / 2e9);
	assert_true(ss.wait_seconds > 0);
	assert_true(ss.wait_seconds < ss.copy_seconds);
	wsrv_stream_close(s);
	fk_set("gbps", 0);
	wsrv_device_destroy(d);
}

/* The contracts the test driver enforces, broken on purpose through the
 * driver API: each is counted (and the count taken, so this program still
 * passes). */
static void contracts_are_enforced(void **st)
{
	NEED_FAKE();
	CUstream other;
	CUdeviceptr dev;
	char *pageable = malloc(4096);

	push();
	assert_int_equal(cu->StreamCreate(&other, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
	assert_int_equal(cu->MemAlloc(&dev, 4096), CUDA_SUCCESS);
	fk_set("violations", 0);
	/* An async copy from pageable memory. */
	assert_int_equal(cu->MemcpyHtoDAsync(dev, pageable, 4096, other), CUDA_SUCCESS);
	assert_int_equal(fk_get("violations"), 1);
	/* A read on another stream with no wait on the copy's event. */
	assert_int_equal(cu->MemcpyDtoHAsync(pinned, dev, 4096, compute), CUDA_SUCCESS);
	assert_int_equal(fk_get("violations"), 2);
	assert_int_equal(cu->StreamSynchronize(compute), CUDA_SUCCESS);
	assert_int_equal(cu->StreamSynchronize(other), CUDA_SUCCESS);
	/* Done right: copy, event, wait, read; then a copy into what compute
	 * reads, with no wait on compute. */
	CUevent ev;
	assert_int_equal(cu->EventCreate(&ev, CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);
	assert_int_equal(cu->MemcpyHtoDAsync(dev, pinned, 4096, other), CUDA_SUCCESS);
	assert_int_equal(cu->EventRecord(ev, other), CUDA_SUCCESS);
	assert_int_equal(cu->StreamWaitEvent(compute, ev, 0), CUDA_SUCCESS);
	assert_int_equal(cu->MemcpyDtoHAsync(pinned, dev, 4096, compute), CUDA_SUCCESS);
	assert_int_equal(fk_get("violations"), 2);
	assert_int_equal(cu->MemcpyHtoDAsync(dev, (char *)pinned + 4096, 4096, other), CUDA_SUCCESS);
	assert_int_equal(fk_get("violations"), 3);
	assert_int_equal(cu->StreamSynchronize(other), CUDA_SUCCESS);
	assert_int_equal(cu->StreamSynchronize(compute), CUDA_SUCCESS);
	assert_int_equal(cu->EventDestroy(ev), CUDA_SUCCESS);
	/* A copy into freed memory. */
	assert_int_equal(cu->MemFree(dev), CUDA_SUCCESS);
	assert_int_not_equal(cu->MemcpyHtoDAsync(dev, pinned, 4096, other), CUDA_SUCCESS);
	assert_int_equal(fk_get("violations"), 4);
	/* A write into read-only registered memory. */
	assert_int_equal(cu->MemAlloc(&dev, 4096), CUDA_SUCCESS);
	char *ro = aligned_alloc(4096, 4096);
	assert_int_equal(cu->MemHostRegister(ro, 4096, CU_MEMHOSTREGISTER_READ_ONLY), CUDA_SUCCESS);
	assert_int_equal(cu->MemcpyDtoH(ro, dev, 4096), CUDA_SUCCESS);
	assert_int_equal(fk_get("violations"), 5);
	/* One registration over the limit. */
	fk_set("max_register", 1024);
	assert_int_not_equal(cu->MemHostRegister(pageable, 4096, 0), CUDA_SUCCESS);
	assert_int_equal(fk_get("violations"), 6);
	fk_set("max_register", 64LL << 30);
	fk_set("violations", 0);
	assert_int_equal(cu->MemHostUnregister(ro), CUDA_SUCCESS);
	assert_int_equal(cu->MemFree(dev), CUDA_SUCCESS);
	assert_int_equal(cu->StreamDestroy(other), CUDA_SUCCESS);
	pop();
	free(ro);
	free(pageable);
}

static int cuda_setup(void **st)
{
	const char *why;

	signal(SIGPIPE, SIG_IGN);
	fds_before = count_fds();
	if (cuda_api_get(&cu, &why) < 0) {
		fprintf(stderr, "cuda_api_get: %s\n", why);
		return -1;
	}
	model_dir = test_tmpdir("cuda-model");
	/* h = 2048: a 64 MiB embedding, two layers of about 90 MiB. */
	if (!model_dir || make_model(model_dir, "llama-mini", 420 << 20, 2, 2, 1) < 0 ||
	    server_start(&ts, "m", model_dir, NULL) < 0 || wsrv_connect(ts.sock, NULL, &cl) < 0 ||
	    wsrv_attach(cl, "m", &m) < 0)
		return -1;
	if (cu->PrimaryCtxRetain(&ctx, 0) != CUDA_SUCCESS || cu->CtxPushCurrent(ctx) != CUDA_SUCCESS)
		return -1;
	CUcontext c;
	CUresult e = cu->StreamCreate(&compute, CU_STREAM_NON_BLOCKING);
	if (e == CUDA_SUCCESS)
		e = cu->MemAllocHost(&pinned, PINNED);
	cu->CtxPopCurrent(&c);
	return e == CUDA_SUCCESS ? 0 : -1;
}

static int cuda_teardown(void **st)
{
	CUcontext c;

	cu->CtxPushCurrent(ctx);
	cu->MemFreeHost(pinned);
	cu->StreamDestroy(compute);
	cu->CtxPopCurrent(&c);
	cu->PrimaryCtxRelease(0);
	wsrv_detach(m);
	wsrv_disconnect(cl);
	server_stop(&ts, SIGTERM);
	rm_rf(ts.dir);
	rm_rf(model_dir);
	free(model_dir);
	if (fk_live && (fk_live("allocations") || fk_live("registrations") || fk_live("pinned") ||
			fk_live("streams") || fk_live("primary_refs") || fk_live("events"))) {
		fprintf(stderr, "the test driver has resources left (a leak): %lld allocations, %lld registrations,"
			" %lld pinned, %lld streams, %lld events, %lld primary context references\n",
			fk_live("allocations"), fk_live("registrations"), fk_live("pinned"), fk_live("streams"),
			fk_live("events"), fk_live("primary_refs"));
		return -1;
	}
	return fd_leak_check(fds_before);
}

/* Issue 38: an open locks only what it uploads (the resident tensors);
 * each streamed layer's sources are locked as its copies are queued, at
 * most once, and a registration that costs time (the test driver's
 * reg_mbps) is paid there, not at open. */
static void locked_as_copies_come(void **st)
{
	NEED_FAKE();
	struct wsrv_device *d = cuda_open_dev(0, true);
	/* One slot: the model has two layers, and the open queues a slot's. */
	struct wsrv_stream_opts o = { .struct_size = sizeof(o), .slots = 1 };
	struct wsrv_stream_stats at_open, one, pass, again;
	struct wsrv_stream *s;
	struct wsrv_layer l;

	fk_set("reg_mbps", 4000);
	assert_int_equal(wsrv_stream_open(m, d, NULL, &o, &s), 0);
	assert_int_equal(wsrv_stream_stats(s, &at_open), 0);
	/* The resident upload's sources, and the first slots' layers, which
	 * the open queues: not the whole model (checked after the pass). */
	assert_true(at_open.register_bytes >= at_open.resident_bytes);
	/* Two layers through: the slots they free take the next layers,
	 * whose sources are locked as their copies are queued. */
	for (size_t li = 0; li < 3 && li < wsrv_model_layer_count(m); li++) {
		wsrv_model_layer_at(m, li, &l);
		assert_int_equal(wsrv_stream_acquire(s, l.index), 0);
		assert_int_equal(wsrv_stream_release(s, l.index), 0);
	}
	assert_int_equal(wsrv_stream_stats(s, &one), 0);
	assert_true(one.register_bytes > at_open.register_bytes);
	for (int p = 0; p < 2; p++) {
		for (size_t li = 0; li < wsrv_model_layer_count(m); li++) {
			wsrv_model_layer_at(m, li, &l);
			assert_int_equal(wsrv_stream_acquire(s, l.index), 0);
			check_tensors(s, l.first, l.count, 0, 1);
			assert_int_equal(wsrv_stream_release(s, l.index), 0);
		}
		assert_int_equal(wsrv_stream_stats(s, p ? &again : &pass), 0);
	}
	assert_true(pass.register_bytes >= one.register_bytes);
	assert_true(at_open.register_bytes < pass.register_bytes);
	assert_true(pass.register_bytes >= pass.resident_bytes + pass.pass_copy_bytes);
	assert_int_equal(again.register_bytes, pass.register_bytes); /* locked once */
	wsrv_stream_close(s);
	assert_int_equal(fk_live("registrations"), 0);
	fk_set("reg_mbps", 0);
	wsrv_device_destroy(d);
}

/* Without a driver or a device: -ENODEV, and a sentence that says so. */
static int expect_enodev(void)
{
	struct wsrv_device *d;
	int r = wsrv_device_cuda(NULL, &d);

	fprintf(stderr, "wsrv_device_cuda: %d: %s\n", r, wsrv_last_error());
	return r == -ENODEV && strstr(wsrv_last_error(), "cuda") ? 0 : 1;
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(whole_layers),
		cmocka_unit_test(tp_views_and_2d_copies),
		cmocka_unit_test(everything_bounced),
		cmocka_unit_test(registered_in_chunks),
		cmocka_unit_test(locked_as_copies_come),
		cmocka_unit_test(over_large_registration_is_caught),
		cmocka_unit_test(caller_context_kept),
		cmocka_unit_test(failed_copy_is_an_error),
		cmocka_unit_test(injected_failures),
		cmocka_unit_test(honest_stats),
		cmocka_unit_test(contracts_are_enforced),
	};
	struct wsrv_device *d;
	void *h;

	if (argc > 1 && strcmp(argv[1], "--expect-enodev") == 0)
		return expect_enodev();
	if (wsrv_device_cuda(NULL, &d) < 0) {
		fprintf(stderr, "SKIP: %s\n", wsrv_last_error());
		return 77;
	}
	wsrv_device_destroy(d);
	if ((h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD))) {
		fk_set = (int (*)(const char *, long long))dlsym(h, "fakecuda_set");
		fk_get = (long long (*)(const char *))dlsym(h, "fakecuda_get");
		fk_live = (long long (*)(const char *))dlsym(h, "fakecuda_live");
		dlclose(h);
	}
	fprintf(stderr, "running on %s\n", fk_set ? "the test driver" : "a real CUDA driver");
	/* In one process: the setup holds a CUDA context, which a forked
	 * case could not use on a real driver. */
	return test_group_main(&(struct test_group){ "cuda", tests, sizeof(tests) / sizeof(tests[0]),
						      cuda_setup, cuda_teardown, NULL, NULL, true });
}
