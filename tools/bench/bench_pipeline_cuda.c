// SPDX-License-Identifier: MIT
/* bench_pipeline_cuda.c - `wsrv-bench pipeline --device cuda`.
 *
 * In one run on one GPU: the baseline, a pinned cuMemcpyHtoDAsync of each
 * streamed layer's bytes from page-locked memory, timed by events
 * (pinned_peak_gbps); the stream without compute, whose event-timed copies
 * give h2d_gbps; and the stream with compute emulated by a timed wait on
 * the compute stream (a host function that sleeps compute_us per layer),
 * whose stats give hidden_fraction. register_gbps is the stream's own
 * page-locking rate at open. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_pinned.h"
#include "bench_pipeline.h"
#include "bench_util.h"
#include "clock.h"
#include "cuda_api.h"

struct gpu {
	const struct cuda_api *cu;
	CUcontext ctx;
	CUstream compute;
};

static void sleep_us(void *arg)
{
	double us = *(const double *)arg;
	struct timespec t = { (time_t)(us / 1e6), (long)((us - (double)(time_t)(us / 1e6) * 1e6) * 1e3) };

	nanosleep(&t, NULL);
}

/* The pinned peak: every streamed layer's bytes, passes times, from one
 * pinned buffer to one device buffer (bench_pinned.h). */
static double pinned_peak(const struct gpu *g, struct wsrv_model *m, int passes)
{
	size_t nl = wsrv_model_layer_count(m), n = 0;
	uint64_t *lens = calloc((size_t)passes * nl + 1, sizeof(*lens));
	double gbps;

	for (int k = 0; lens && k < passes; k++)
		for (size_t i = 1; i < nl; i++) {
			struct wsrv_layer l;
			wsrv_model_layer_at(m, i, &l);
			lens[n++] = l.length;
		}
	gbps = lens ? bench_pinned_gbps(g->cu, g->ctx, g->compute, lens, n, false) : -1;
	free(lens);
	return gbps;
}

/* passes over every layer; compute_us of sleep on the compute stream per
 * layer (none when 0). Returns the wall time and the stream's stats. */
static double pipeline_cuda_run(const struct gpu *g, struct wsrv_model *m, const struct cfg *c, double compute_us,
		  struct wsrv_stream_stats *st)
{
	struct wsrv_cuda_opts co = { .struct_size = sizeof(co), .compute_stream = g->compute };
	struct wsrv_stream_opts so = { .struct_size = sizeof(so), .slots = c->slots, .trace_path = c->trace };
	struct wsrv_device *d;
	struct wsrv_stream *s;
	double t0, t;
	CUcontext was;

	if (wsrv_device_cuda(&co, &d) < 0 || wsrv_stream_open(m, d, NULL, &so, &s) < 0) {
		fprintf(stderr, "wsrv-bench pipeline: %s\n", wsrv_last_error());
		return -1;
	}
	t0 = mono_now();
	for (int k = 0; k < c->passes; k++)
		for (size_t i = 0; i < wsrv_model_layer_count(m); i++) {
			struct wsrv_layer l;
			wsrv_model_layer_at(m, i, &l);
			if (wsrv_stream_acquire(s, l.index) < 0) {
				fprintf(stderr, "wsrv-bench pipeline: %s\n", wsrv_last_error());
				return -1;
			}
			g->cu->CtxPushCurrent(g->ctx);
			if (compute_us > 0)
				g->cu->LaunchHostFunc(g->compute, sleep_us, &compute_us);
			g->cu->CtxPopCurrent(&was);
			wsrv_stream_release(s, l.index);
		}
	g->cu->CtxPushCurrent(g->ctx);
	g->cu->StreamSynchronize(g->compute);
	g->cu->CtxPopCurrent(&was);
	t = mono_now() - t0;
	wsrv_stream_stats(s, st);
	wsrv_stream_close(s);
	wsrv_device_destroy(d);
	return t;
}

static int pipeline_cuda_report(const struct gpu *g, const struct cfg *c, double peak, const struct wsrv_stream_stats *fast,
		  const struct wsrv_stream_stats *st, double copy_us, double wall, int json)
{
	double h2d = (double)fast->bytes_copied / fast->copy_seconds / 1e9;
	double reg = fast->register_seconds > 0 ? (double)fast->register_bytes / fast->register_seconds / 1e9 : 0;
	char name[128] = "?";
	int ver = 0;

	g->cu->DeviceGetName(name, sizeof(name), 0);
	g->cu->DriverGetVersion(&ver);
	if (json) {
		json_t *o = json_pack("{s:s, s:i, s:i, s:i, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f}",
			"device", name, "driver_version", ver, "passes", c->passes, "slots", (int)c->slots,
			"compute_us", c->compute_us, "copy_us", copy_us, "pinned_peak_gbps", peak,
			"h2d_gbps", h2d, "h2d_vs_peak", h2d / peak, "hidden_fraction", st->hidden_fraction,
			"wait_s", st->wait_seconds, "copy_s", st->copy_seconds, "stream_s", wall,
			"register_gbps", reg);
		json_dumpf(o, stdout, JSON_INDENT(2));
		putchar('\n');
		json_decref(o);
		return 0;
	}
	printf("%s, driver %d: %d passes, %u slots, compute %.0f us/layer, copy %.0f us/layer\n", name, ver,
	       c->passes, c->slots, c->compute_us, copy_us);
	printf("  pinned cuMemcpyHtoDAsync   %8.2f GB/s   (baseline)\n", peak);
	printf("  stream copies              %8.2f GB/s   %.3fx pinned\n", h2d, h2d / peak);
	printf("  copy time hidden           %8.1f %%   (compute waited %.4f s of %.4f s copying)\n",
	       100 * st->hidden_fraction, st->wait_seconds, st->copy_seconds);
	printf("  page-locking at open       %8.2f GB/s   (%.3f s for %.2f GB)\n", reg, fast->register_seconds,
	       (double)fast->register_bytes / 1e9);
	return 0;
}

int pipeline_cuda(struct wsrv_model *m, struct cfg *c, int json)
{
	struct wsrv_stream_stats fast, st;
	struct gpu g = { 0 };
	const char *why;
	double peak, copy_us, wall;
	CUcontext was;
	int r = 1;

	if (cuda_api_get(&g.cu, &why) < 0) {
		fprintf(stderr, "wsrv-bench pipeline: --device cuda: %s\n", why);
		return 1;
	}
	if (g.cu->PrimaryCtxRetain(&g.ctx, 0) != CUDA_SUCCESS) {
		fprintf(stderr, "wsrv-bench pipeline: no primary context on device 0\n");
		return 1;
	}
	g.cu->CtxPushCurrent(g.ctx);
	g.cu->StreamCreate(&g.compute, CU_STREAM_NON_BLOCKING);
	g.cu->CtxPopCurrent(&was);
	peak = pinned_peak(&g, m, c->passes);
	copy_us = (double)bench_max_layer(m) / (peak * 1e9) * 1e6;
	if (c->compute_us < 0)
		c->compute_us = copy_us * 1.25; /* compute at least the copy: copies can hide */
	if (peak > 0 && pipeline_cuda_run(&g, m, c, 0, &fast) >= 0 && (wall = pipeline_cuda_run(&g, m, c, c->compute_us, &st)) >= 0)
		r = pipeline_cuda_report(&g, c, peak, &fast, &st, copy_us, wall, json);
	g.cu->CtxPushCurrent(g.ctx);
	g.cu->StreamDestroy(g.compute);
	g.cu->CtxPopCurrent(&was);
	g.cu->PrimaryCtxRelease(0);
	return r;
}
