// SPDX-License-Identifier: MIT
/* bench_pipeline.c - `wsrv-bench pipeline`: do the copies hide behind
 * compute?
 *
 * L layers, a simulated compute of C microseconds per layer (a busy wait on
 * the worker's thread), copies on the host backend paced to a link's
 * bandwidth. In one run: all weights resident (no copies: the floor),
 * synchronous offload (one slot: copy, then compute), and the stream (D
 * slots: the next layers copy while this one computes). Also the host
 * backend's uncapped copy bandwidth next to a plain memcpy of the same
 * layers. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cliarg.h"
#include "bench.h"
#include "bench_pipeline.h"
#include "bench_util.h"
#include "progress.h"
#include "wsrv.h"


static void spin(double us)
{
	double end = mono_now() + us / 1e6;

	while (mono_now() < end)
		;
}

/* Runs `passes` passes over every layer; returns seconds, and the stream's
 * stats when st is given. */
static double pipeline_run(struct wsrv_model *m, const char *plan_json, double bw, unsigned slots,
		  const struct cfg *c, const char *trace, struct wsrv_stream_stats *st)
{
	struct wsrv_host_opts ho = { .struct_size = sizeof(ho), .bandwidth_gbps = bw, .numa_node = -1 };
	struct wsrv_stream_opts so = { .struct_size = sizeof(so), .slots = slots, .trace_path = trace };
	struct wsrv_plan *p = NULL;
	struct wsrv_device *d;
	struct wsrv_stream *s;
	double t0, t;

	if (plan_json && wsrv_plan_parse(plan_json, strlen(plan_json), &p) < 0)
		return -1;
	if (wsrv_device_host(&ho, &d) < 0 || wsrv_stream_open(m, d, p, &so, &s) < 0) {
		fprintf(stderr, "wsrv-bench pipeline: %s\n", wsrv_last_error());
		return -1;
	}
	wsrv_plan_free(p);
	t0 = mono_now();
	for (int k = 0; k < c->passes; k++)
		for (size_t i = 0; i < wsrv_model_layer_count(m); i++) {
			struct wsrv_layer l;
			wsrv_model_layer_at(m, i, &l);
			if (wsrv_stream_acquire(s, l.index) < 0)
				return -1;
			spin(c->compute_us);
			wsrv_stream_release(s, l.index);
		}
	t = mono_now() - t0;
	if (st)
		wsrv_stream_stats(s, st);
	wsrv_stream_close(s);
	wsrv_device_destroy(d);
	return t;
}

/* A plain memcpy of every streamed layer's bytes, as many times. */
static double memcpy_gbps(struct wsrv_model *m, int passes)
{
	uint64_t bytes = 0, max = 0;
	double t0, t;
	void *dst;

	for (size_t i = 0; i < wsrv_model_layer_count(m); i++) {
		struct wsrv_layer l;
		wsrv_model_layer_at(m, i, &l);
		max = l.length > max ? l.length : max;
	}
	dst = mmap(NULL, max, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	memset(dst, 0, max);
	t0 = mono_now();
	for (int k = 0; k < passes; k++)
		for (size_t i = 1; i < wsrv_model_layer_count(m); i++) {
			struct wsrv_layer l;
			wsrv_model_layer_at(m, i, &l);
			memcpy(dst, l.data, l.length);
			bytes += l.length;
		}
	t = mono_now() - t0;
	munmap(dst, max);
	return (double)bytes / t / 1e9;
}

/* The host copy engine uncapped, against memcpy: best of three each,
 * alternating, since both share the machine with everything else. */
static int engine_rate(struct wsrv_model *m, const struct cfg *c, double *eng, double *mc)
{
	*eng = *mc = 0;
	for (int i = 0; i < 3; i++) {
		struct cfg nocompute = { 0, 0, 0, c->passes, NULL };
		struct wsrv_stream_stats fast;
		double g, mg;
		if (pipeline_run(m, NULL, 0, c->slots, &nocompute, NULL, &fast) < 0)
			return -1;
		g = (double)fast.bytes_copied / fast.copy_seconds / 1e9;
		mg = memcpy_gbps(m, c->passes);
		*eng = g > *eng ? g : *eng;
		*mc = mg > *mc ? mg : *mc;
	}
	return 0;
}

static int pipeline_measure(struct wsrv_model *m, struct cfg *c, int json)
{
	static const char all_resident[] = "{\"budget\": \"1T\"}";
	size_t layers = wsrv_model_layer_count(m) - 1; /* the global group stays resident */
	struct wsrv_stream_stats st;
	double res, syn, str, mc, eng, expect, rate, copy_us;

	/* The engine first: a copy runs at the cap or at the engine's rate,
	 * whichever is lower, and compute is set from that. (It was set from
	 * the cap alone: with a cap above what memcpy reaches here, compute was
	 * shorter than the copies and the stream could not hide them.) */
	if (engine_rate(m, c, &eng, &mc) < 0)
		return 1;
	rate = c->bandwidth < eng ? c->bandwidth : eng;
	if (c->bandwidth >= eng)
		fprintf(stderr, "wsrv-bench pipeline: the cap (%.1f GB/s) is at or above the measured copy engine (%.1f GB/s); copies run at the engine's rate\n",
			c->bandwidth, eng);
	copy_us = (double)bench_max_layer(m) / (rate * 1e9) * 1e6;
	if (c->compute_us < 0)
		c->compute_us = copy_us * 1.25; /* compute at least the copy: copies can hide */
	res = pipeline_run(m, all_resident, c->bandwidth, c->slots, c, NULL, NULL);
	syn = pipeline_run(m, NULL, c->bandwidth, 1, c, NULL, NULL);
	str = pipeline_run(m, NULL, c->bandwidth, c->slots, c, c->trace, &st);
	if (res < 0 || syn < 0 || str < 0)
		return 1;
	/* Copy-bound: L x max(compute, copy) plus the one copy that cannot hide. */
	expect = c->passes * (double)layers * (c->compute_us > copy_us ? c->compute_us : copy_us) / 1e6 +
		 copy_us / 1e6;
	if (json) {
		json_t *o = json_pack("{s:i, s:i, s:i, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f}",
			"layers", (int)layers, "passes", c->passes, "slots", (int)c->slots,
			"compute_us", c->compute_us, "copy_us", copy_us, "bandwidth_gbps", rate, "cap_gbps", c->bandwidth,
			"resident_s", res, "sync_s", syn, "stream_s", str, "expected_s", expect,
			"stream_vs_resident", str / res, "hidden_fraction", st.hidden_fraction,
			"copy_gbps", eng, "memcpy_gbps", mc);
		json_dumpf(o, stdout, JSON_INDENT(2));
		putchar('\n');
		json_decref(o);
		return 0;
	}
	printf("%zu layers x %d passes, compute %.0f us/layer, copy %.0f us/layer at %.1f GB/s (cap %.1f), %u slots\n",
	       layers, c->passes, c->compute_us, copy_us, rate, c->bandwidth, c->slots);
	printf("  all resident (no copies)   %8.4f s   (baseline)\n", res);
	printf("  synchronous offload        %8.4f s   %.3fx resident\n", syn, syn / res);
	printf("  stream                     %8.4f s   %.3fx resident, %.3fx L*max(compute,copy)+copy\n",
	       str, str / res, str / expect);
	printf("  copy time hidden           %8.1f %%   (waited %.4f s of %.4f s copying)\n",
	       100 * st.hidden_fraction, st.wait_seconds, st.copy_seconds);
	printf("  host copy engine, uncapped %8.2f GB/s   memcpy %.2f GB/s   (%.2fx, best of 3 each)\n",
	       eng, mc, eng / mc);
	return 0;
}

#define P "wsrv-bench pipeline"

/* The trace goes where --trace says, or the run fails: tried before the
 * run (exit 2), checked after it (the stream writes it as it closes). */
static int trace_writable(const char *path)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);

	if (fd < 0) {
		fprintf(stderr, P ": --trace %s: %s\n", path, strerror(errno));
		return 2;
	}
	close(fd);
	return 0;
}

static int trace_written(const char *path)
{
	struct stat st;

	if (stat(path, &st) < 0 || st.st_size == 0) {
		fprintf(stderr, P ": the trace was not written to %s\n", path);
		return 1;
	}
	return 0;
}

int bench_pipeline(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "model", required_argument, NULL, 'm' },
		{ "compute-us", required_argument, NULL, 'c' },
		{ "bandwidth", required_argument, NULL, 'b' },
		{ "slots", required_argument, NULL, 's' },
		{ "passes", required_argument, NULL, 'p' },
		{ "trace", required_argument, NULL, 't' },
		{ "json", no_argument, NULL, 'j' },
		{ "device", required_argument, NULL, 'd' },
		{ 0 },
	};
	struct cfg c = { .compute_us = -1, .bandwidth = 8, .slots = 2, .passes = 5 };
	const char *path = NULL;
	struct bench_server bs = { 0 };
	struct wsrv_client *cl;
	struct wsrv_model *m;
	int json = 0, cuda = 0, o, r;
	char spec[4200];

	optind = 1;
	while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (o) {
		case 'm': path = optarg; break;
		case 'c': c.compute_us = cliarg_double(P, "--compute-us", optarg, 0, 1e9); break;
		case 'b': c.bandwidth = cliarg_double(P, "--bandwidth", optarg, 1e-6, 1e6); break;
		case 's': c.slots = (unsigned)cliarg_long(P, "--slots", optarg, 1, 64); break;
		case 'p': c.passes = (int)cliarg_long(P, "--passes", optarg, 1, 1000000); break;
		case 't': c.trace = optarg; break;
		case 'j': json = 1; break;
		case 'd':
			if (strcmp(optarg, "cuda") && strcmp(optarg, "host")) {
				fprintf(stderr, P ": --device is host or cuda, not '%s'\n", optarg);
				return 2;
			}
			cuda = strcmp(optarg, "cuda") == 0;
			break;
		default: return 2;
		}
	}
	if (!path || optind != argc) {
		fprintf(stderr, "usage: wsrv-bench pipeline --model DIR [--device host|cuda] [--compute-us C]\n"
				"                          [--bandwidth GBPS] [--slots D] [--passes P] [--trace FILE] [--json]\n");
		return 2;
	}
	if (c.trace && (r = trace_writable(c.trace)) != 0)
		return r;
	snprintf(spec, sizeof(spec), "m=%s", path);
	if (bench_server_start(&bs, (const char *[]){ spec }, 1) < 0 ||
	    wsrv_connect(bs.sock, NULL, &cl) < 0 || wsrv_attach(cl, "m", &m) < 0) {
		fprintf(stderr, "wsrv-bench pipeline: cannot attach: %s\n", wsrv_last_error());
		return 1;
	}
	r = cuda ? pipeline_cuda(m, &c, json) : pipeline_measure(m, &c, json);
	if (r == 0 && c.trace)
		r = trace_written(c.trace);
	wsrv_detach(m);
	wsrv_disconnect(cl);
	bench_server_stop(&bs);
	return r;
}
