// SPDX-License-Identifier: MIT
/* bench_first.c - `wsrv-bench first-layer`: from wsrvd's start to a worker
 * holding layer 0, serving while loading (issue 22).
 *
 * A worker is started before wsrvd (--serve-while-loading) and connects as
 * soon as the socket answers; it attaches, waits for layer 0, reads every
 * page of it, and notes the time; then waits for the whole model and
 * notes that. The baseline, in the same round, is a raw O_DIRECT read of
 * the same files, cold: the bar is 50 ms plus layer 0's share of that
 * read (its bytes over the model's). The whole model's time is shown
 * against the plain load (wsrvd without early serving) of the same round.
 *
 * Then a stream from a cold start: another early start, whose worker
 * opens a host stream (8 GB/s, compute 1.25x a layer's copy) as soon as it
 * attaches and makes a pass while the model loads, then a pass over the
 * loaded model; a second client of its own notes when the whole model is
 * there. The cold pass should end within 1.1x of max(that load, the warm
 * pass): streaming overlaps the load instead of following it.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#include "bench_files.h"
#include "bench_util.h"
#include "cliarg.h"
#include "clock.h"
#include "load_door.h"
#include "wsrv.h"

#define MAX_REPEAT 10

/* What the worker sends back (times on CLOCK_MONOTONIC, shared by every
 * process of the host). */
struct first_msg {
	double layer0_at, all_at;
	uint64_t layer0_bytes, total_bytes;
};

#define STREAM_GBPS 8.0

/* What the stream worker sends back. */
struct stream_msg {
	double cold_end;            /* CLOCK_MONOTONIC: the pass begun while loading ended */
	double loaded_at;           /* and when the whole model was there */
	double warm_s;              /* a pass over the loaded model */
	double compute_us;          /* per layer */
};

/* The compute of a layer, as a GPU's: the CPU waits while the device
 * works. (A busy wait, as `wsrv-bench pipeline` uses for its precision,
 * would take one of a small machine's cores from the loader, which a GPU
 * computing does not.) */
static void compute(double us)
{
	struct timespec ts = { (time_t)(us / 1e6), (long)(fmod(us, 1e6) * 1e3) };

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

static struct wsrv_client *connect_soon(const char *sock)
{
	struct wsrv_connect_opts co = { .struct_size = sizeof(co), .timeout_ms = 60000 };
	struct timespec ms = { 0, 200000 };
	struct wsrv_client *c = NULL;

	for (int i = 0; i < 300000 && wsrv_connect(sock, &co, &c) < 0; i++)
		nanosleep(&ms, NULL);
	return c;
}

/* One pass over the numbered layers; seconds, or -1. Layer metadata
 * without waiting: the acquire is what waits for a layer still loading. */
static double stream_pass(struct wsrv_model *m, struct wsrv_stream *s, double compute_us)
{
	double t0 = mono_now();

	for (size_t i = 0; i < wsrv_model_layer_count(m); i++) {
		struct wsrv_layer l = { .struct_size = sizeof(l) };
		if (wsrv_model_layer_info(m, i, &l) < 0)
			return -1;
		if (l.index < 0)
			continue;
		if (wsrv_stream_acquire(s, l.index) < 0)
			return -1;
		compute(compute_us);
		wsrv_stream_release(s, l.index);
	}
	return mono_now() - t0;
}

/* A second client of the stream worker's, on a thread: notes when the
 * whole model is there (loaded_at), as the worker streams. */
static void *watch_load(void *arg)
{
	struct stream_msg *msg = arg;
	struct wsrv_client *c = NULL;
	struct wsrv_model *m;

	if (wsrv_connect(getenv("WSRV_BENCH_SOCK"), NULL, &c) == 0 && wsrv_attach(c, "m", &m) == 0) {
		if (wsrv_model_wait(m, WSRV_LAYER_ALL, 60000) == 0)
			msg->loaded_at = mono_now();
		wsrv_detach(m);
	}
	if (c)
		wsrv_disconnect(c);
	return NULL;
}

static int stream_worker(const char *sock, int out)
{
	struct wsrv_host_opts ho = { .struct_size = sizeof(ho), .bandwidth_gbps = STREAM_GBPS, .numa_node = -1 };
	static const char plan[] = "{\"residency\": {\"*\": \"resident\", \"layers.*\": \"streamed\"}}";
	struct wsrv_stream_opts so = { .struct_size = sizeof(so), .slots = 2 };
	struct wsrv_client *c = connect_soon(sock);
	struct stream_msg msg = { 0 };
	struct wsrv_device *d = NULL;
	struct wsrv_stream *s = NULL;
	struct wsrv_plan *p = NULL;
	struct wsrv_model *m;
	uint64_t most = 0;

	pthread_t watch;

	if (!c || wsrv_attach(c, "m", &m) < 0 || wsrv_plan_parse(plan, sizeof(plan) - 1, &p) < 0 ||
	    wsrv_device_host(&ho, &d) < 0 || setenv("WSRV_BENCH_SOCK", sock, 1) < 0 ||
	    pthread_create(&watch, NULL, watch_load, &msg) != 0)
		return 1;
	if (wsrv_stream_open(m, d, p, &so, &s) < 0)
		return 1;
	for (size_t i = 0; i < wsrv_model_layer_count(m); i++) {
		struct wsrv_layer l = { .struct_size = sizeof(l) };
		if (wsrv_model_layer_info(m, i, &l) == 0 && l.index >= 0 && l.bytes > most)
			most = l.bytes;
	}
	msg.compute_us = 1.25 * (double)most / (STREAM_GBPS * 1e3);
	if (stream_pass(m, s, msg.compute_us) < 0)
		return 1;
	msg.cold_end = mono_now();
	pthread_join(watch, NULL);
	if (msg.loaded_at == 0 || (msg.warm_s = stream_pass(m, s, msg.compute_us)) < 0)
		return 1;
	return write(out, &msg, sizeof(msg)) == sizeof(msg) ? 0 : 1;
}

static int first_worker(const char *sock, int out)
{
	struct wsrv_layer l = { .struct_size = sizeof(l) };
	struct first_msg msg = { 0 };
	struct wsrv_client *c = connect_soon(sock);
	struct wsrv_model *m;
	volatile unsigned sum;

	if (!c || wsrv_attach(c, "m", &m) < 0 || wsrv_model_layer(m, 0, &l) < 0)
		return 1;
	sum = touch_pages(l.data, l.length);
	msg.layer0_at = mono_now();
	msg.layer0_bytes = l.bytes;
	if (wsrv_model_wait(m, WSRV_LAYER_ALL, 60000) < 0 ||
	    wsrv_model_progress(m, NULL, &msg.total_bytes) < 0)
		return 1;
	msg.all_at = mono_now();
	(void)sum;
	return write(out, &msg, sizeof(msg)) == sizeof(msg) ? 0 : 1;
}

/* One early start: wsrvd launched after the worker, which writes len
 * bytes into msg; 0 or -EIO. */
static int early_round(const char *path, const char *pages, int (*worker)(const char *, int),
		       void *msg, size_t len, double *t0)
{
	struct bench_server bs = { .extra = { "--serve-while-loading", pages ? "--hugepages" : NULL, pages } };
	char spec[4200];
	const char *specs[1] = { spec };
	int p[2], r = -EIO;
	pid_t w;

	snprintf(spec, sizeof(spec), "m=%s", path);
	if (bench_server_reserve(&bs) < 0 || pipe2(p, O_CLOEXEC) < 0)
		return -EIO;
	if ((w = fork()) == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		close(p[0]);
		_exit(worker(bs.sock, p[1]));
	}
	close(p[1]);
	*t0 = mono_now();
	if (w > 0 && bench_server_launch(&bs, specs, 1) == 0 &&
	    read(p[0], msg, len) == (ssize_t)len)
		r = 0;
	if (w > 0) {
		kill(w, SIGKILL);
		waitpid(w, NULL, 0);
	}
	close(p[0]);
	bench_server_stop(&bs);
	return r;
}

/* The plain start: wsrvd answering once loaded; -1 on failure. */
static double plain_round(const char *path, const char *pages)
{
	struct bench_server bs = { .extra = { "--serve-when-loaded", pages ? "--hugepages" : NULL, pages } };
	char spec[4200];
	const char *specs[1] = { spec };
	double t0 = mono_now(), t = -1;

	snprintf(spec, sizeof(spec), "m=%s", path);
	if (bench_server_start(&bs, specs, 1) == 0)
		t = mono_now() - t0;
	bench_server_stop(&bs);
	return t;
}

struct result {
	double first[MAX_REPEAT], bar[MAX_REPEAT], all[MAX_REPEAT], plain[MAX_REPEAT], odirect[MAX_REPEAT];
	double cold[MAX_REPEAT], warm[MAX_REPEAT], loaded[MAX_REPEAT], cold_ratio[MAX_REPEAT];
	double compute_us;
	uint64_t layer0_bytes;
};

static int first_one_round(const char *path, const char *pages, const struct files *f, struct result *r, int i)
{
	struct first_msg msg;
	struct stream_msg sm;
	double t0;

	drop_cache(f);
	r->odirect[i] = raw_odirect(f, LOADER_DEFAULT_QD, LOADER_DEFAULT_BLOCK, LOADER_DEFAULT_SHARDS);
	drop_cache(f);
	r->plain[i] = plain_round(path, pages);
	drop_cache(f);
	if (r->odirect[i] < 0 || r->plain[i] < 0 ||
	    early_round(path, pages, first_worker, &msg, sizeof(msg), &t0) < 0)
		return -EIO;
	r->first[i] = msg.layer0_at - t0;
	r->all[i] = msg.all_at - t0;
	r->layer0_bytes = msg.layer0_bytes;
	r->bar[i] = 0.05 + r->odirect[i] * (double)msg.layer0_bytes /
			     (double)(msg.total_bytes ? msg.total_bytes : 1);
	drop_cache(f);
	if (early_round(path, pages, stream_worker, &sm, sizeof(sm), &t0) < 0)
		return -EIO;
	r->cold[i] = sm.cold_end - t0;
	r->warm[i] = sm.warm_s;
	r->compute_us = sm.compute_us;
	r->loaded[i] = sm.loaded_at - t0;
	r->cold_ratio[i] = r->cold[i] / (r->loaded[i] > sm.warm_s ? r->loaded[i] : sm.warm_s);
	fprintf(stderr, "run %d: layer 0 held at %.1f ms (bar %.1f ms), whole model %.3f s, "
		"plain start %.3f s, O_DIRECT %.3f s; a stream's cold pass %.3f s (loaded at %.3f s), "
		"warm %.3f s\n", i, r->first[i] * 1e3, r->bar[i] * 1e3, r->all[i], r->plain[i],
		r->odirect[i], r->cold[i], r->loaded[i], r->warm[i]);
	return 0;
}

static void first_print(const struct files *f, int repeat, struct result *r, int json)
{
	double first = median(r->first, repeat), bar = median(r->bar, repeat);
	double all = median(r->all, repeat), plain = median(r->plain, repeat);
	double od = median(r->odirect, repeat), cold = median(r->cold, repeat);
	double warm = median(r->warm, repeat), ratio = median(r->cold_ratio, repeat);
	double loaded = median(r->loaded, repeat);

	if (json) {
		json_t *o = json_pack("{s:I, s:I, s:i, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f}",
			"model_bytes", (json_int_t)f->bytes, "layer0_bytes", (json_int_t)r->layer0_bytes,
			"repeat", repeat, "first_layer_s", first, "bar_s", bar, "first_vs_bar", first / bar,
			"early_all_s", all, "plain_s", plain, "early_vs_plain", all / plain, "odirect_s", od,
			"stream_cold_s", cold, "stream_loaded_s", loaded, "stream_warm_s", warm,
			"stream_cold_vs_max", ratio,
			"stream_gbps", STREAM_GBPS, "stream_compute_us", r->compute_us);
		json_dumpf(o, stdout, JSON_INDENT(2));
		putchar('\n');
		json_decref(o);
		return;
	}
	printf("files: %zu, %.3f GB, layer 0 %.1f MiB; median of %d runs; page cache dropped before each\n",
	       f->n, (double)f->bytes / 1e9, (double)r->layer0_bytes / 1048576.0, repeat);
	printf("  wsrvd start -> a worker holds layer 0       %8.1f ms   %.2fx the bar: %s\n", first * 1e3,
	       first / bar, bench_at_most(first, bar));
	printf("  bar: 50 ms + layer 0's share of the read    %8.1f ms\n", bar * 1e3);
	printf("  the whole model, serving while loading      %8.3f s    %.2fx the plain start\n", all,
	       all / plain);
	printf("  plain start (wsrvd answers once loaded)     %8.3f s\n", plain);
	printf("  raw O_DIRECT read                           %8.3f s\n", od);
	printf("  a stream's pass from a cold start           %8.3f s    %.2fx max(its load, warm pass)\n",
	       cold, ratio);
	printf("  its load (wsrvd start -> the whole model)   %8.3f s\n", loaded);
	printf("  the same stream's pass, model loaded        %8.3f s    (host, %.0f GB/s, %.0f us a layer)\n",
	       warm, STREAM_GBPS, r->compute_us);
}

int bench_first(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "model", required_argument, NULL, 'm' },
		{ "repeat", required_argument, NULL, 'r' },
		{ "json", no_argument, NULL, 'j' },
		{ "hugepages", required_argument, NULL, 'H' },
		{ 0 },
	};
	struct result r = { 0 };
	struct files f = { 0 };
	const char *path = NULL, *pages = NULL;
	int repeat = 3, json = 0, c;

	optind = 1;
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		if (c == 'm') path = optarg;
		else if (c == 'r') repeat = (int)cliarg_long("wsrv-bench first-layer", "--repeat", optarg, 1, MAX_REPEAT);
		else if (c == 'j') json = 1;
		else if (c == 'H') pages = optarg;
		else return 2;
	}
	if (!path || optind != argc) {
		fprintf(stderr, "usage: wsrv-bench first-layer --model DIR [--repeat 1..%d] [--hugepages on|off|auto] [--json]\n", MAX_REPEAT);
		return 2;
	}
	if (model_files(path, NULL, &f) < 0)
		return 1;
	for (int i = 0; i < repeat; i++)
		if (first_one_round(path, pages, &f, &r, i) < 0) {
			fprintf(stderr, "wsrv-bench first-layer: a round failed\n");
			files_free(&f);
			return 1;
		}
	first_print(&f, repeat, &r, json);
	files_free(&f);
	return 0;
}
