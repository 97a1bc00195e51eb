// SPDX-License-Identifier: MIT
/* test_cuda.c - the CUDA backend on a real GPU: every layer streamed with
 * the compute stream gated on the copy events, copied back and compared
 * with the shared mapping, whole and as tensor-parallel views (2-D copies).
 * Exits 77 (SKIP) without a GPU, or when built without CUDA. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "wsrv.h"

#ifdef HAVE_CUDA
#include <cuda_runtime_api.h>

static char *model_dir;
static struct test_server ts;
static struct wsrv_client *cl;
static struct wsrv_model *m;
static struct wsrv_device *dev;
static cudaStream_t compute;

static void check_stream(const char *json, int world, int rank)
{
	struct wsrv_stream_opts o = { .struct_size = sizeof(o), .slots = 2, .rank = rank, .world = world };
	struct wsrv_plan *p = NULL;
	struct wsrv_stream *s;
	uint8_t *host = malloc(16 << 20);

	if (json)
		assert_int_equal(wsrv_plan_parse(json, strlen(json), &p), 0);
	if (wsrv_stream_open(m, dev, p, &o, &s) < 0)
		fail_msg("%s", wsrv_last_error());
	for (int pass = 0; pass < 3; pass++)
		for (size_t li = 0; li < wsrv_model_layer_count(m); li++) {
			struct wsrv_layer l;
			wsrv_model_layer_at(m, li, &l);
			assert_int_equal(wsrv_stream_acquire(s, l.index), 0);
			/* The kernels of this layer would run on compute; the
			 * test reads back what they would read, in order. */
			for (uint32_t i = l.first; i < l.first + l.count; i++) {
				struct wsrv_tensor t;
				struct wsrv_view v;
				void *d;
				wsrv_model_tensor(m, i, &t);
				wsrv_stream_view(s, i, &v);
				if (!v.present || wsrv_stream_tensor_at(s, i, &d) < 0)
					continue;
				assert_int_equal(cudaMemcpyAsync(host, d, v.bytes, cudaMemcpyDeviceToHost, compute), cudaSuccess);
				assert_int_equal(cudaStreamSynchronize(compute), cudaSuccess);
				if (world == 1 && memcmp(host, t.data, t.size) != 0)
					fail_msg("%s: GPU bytes differ from the shared mapping", t.name);
				if (world > 1 && strstr(t.name, "q_proj") &&
				    memcmp(host, (const uint8_t *)t.data + v.bytes * (size_t)rank, v.bytes) != 0)
					fail_msg("%s: rank %d's colwise slice differs on the GPU", t.name, rank);
			}
			assert_int_equal(wsrv_stream_release(s, l.index), 0);
		}
	wsrv_stream_close(s);
	wsrv_plan_free(p);
	free(host);
}

static void whole_layers(void **st) { check_stream(NULL, 1, 0); }
static void resident_and_streamed(void **st)
{
	check_stream("{\"residency\": {\"layers.*.mlp.*\": \"resident\"}}", 1, 0);
}
static void tp_views(void **st)
{
	for (int r = 0; r < 2; r++)
		check_stream("{\"tp_plan\": {\"layers.*.self_attn.q_proj\": \"colwise\","
			     " \"layers.*.self_attn.o_proj\": \"rowwise\"}}", 2, r);
}

static int setup(void **st)
{
	signal(SIGPIPE, SIG_IGN);
	model_dir = test_tmpdir("cuda-model");
	if (!model_dir || make_model(model_dir, "llama-mini", 8 << 20, 3, 2, 1) < 0 ||
	    server_start(&ts, "m", model_dir, NULL) < 0 || wsrv_connect(ts.sock, NULL, &cl) < 0 ||
	    wsrv_attach(cl, "m", &m) < 0 || cudaStreamCreate(&compute) != cudaSuccess)
		return -1;
	struct wsrv_cuda_opts co = { .struct_size = sizeof(co), .device = 0, .compute_stream = compute };
	return wsrv_device_cuda(&co, &dev);
}

static int teardown(void **st)
{
	wsrv_device_destroy(dev);
	cudaStreamDestroy(compute);
	wsrv_detach(m);
	wsrv_disconnect(cl);
	server_stop(&ts, SIGTERM);
	rm_rf(ts.dir);
	rm_rf(model_dir);
	free(model_dir);
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(whole_layers),
		cmocka_unit_test(resident_and_streamed),
		cmocka_unit_test(tp_views),
	};
	int n = 0;

	if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
		fprintf(stderr, "SKIP: no GPU on this machine\n");
		return 77;
	}
	return cmocka_run_group_tests(tests, setup, teardown);
}

#else

int main(void)
{
	struct wsrv_device *d;

	/* Built without CUDA: the backend says so, and there is nothing to test. */
	if (wsrv_device_cuda(NULL, &d) != -EOPNOTSUPP)
		return 1;
	fprintf(stderr, "SKIP: libwsrv was built without CUDA\n");
	return 77;
}

#endif
