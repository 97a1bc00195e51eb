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
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <jansson.h>
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
#include "loader.h"
#include "wsrv.h"

#define MAX_REPEAT 10

/* What the worker sends back (times on CLOCK_MONOTONIC, shared by every
 * process of the host). */
struct first_msg {
	double layer0_at, all_at;
	uint64_t layer0_bytes, total_bytes;
};

static int first_worker(const char *sock, int out)
{
	struct wsrv_connect_opts co = { .struct_size = sizeof(co), .timeout_ms = 60000 };
	struct timespec ms = { 0, 200000 };
	struct wsrv_layer l = { .struct_size = sizeof(l) };
	struct first_msg msg = { 0 };
	struct wsrv_client *c = NULL;
	struct wsrv_model *m;
	volatile unsigned sum;

	for (int i = 0; i < 300000 && wsrv_connect(sock, &co, &c) < 0; i++)
		nanosleep(&ms, NULL);
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

/* One early start: wsrvd launched after the worker; 0 or -EIO. */
static int early_round(const char *path, const char *pages, struct first_msg *msg, double *t0)
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
		_exit(first_worker(bs.sock, p[1]));
	}
	close(p[1]);
	*t0 = mono_now();
	if (w > 0 && bench_server_launch(&bs, specs, 1) == 0 &&
	    read(p[0], msg, sizeof(*msg)) == (ssize_t)sizeof(*msg))
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
	struct bench_server bs = { .extra = { pages ? "--hugepages" : NULL, pages } };
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
	uint64_t layer0_bytes;
};

static int one_round(const char *path, const char *pages, const struct files *f, struct result *r, int i)
{
	struct first_msg msg;
	double t0;

	drop_cache(f);
	r->odirect[i] = raw_odirect(f, LOADER_DEFAULT_QD, LOADER_DEFAULT_BLOCK, LOADER_DEFAULT_SHARDS);
	drop_cache(f);
	r->plain[i] = plain_round(path, pages);
	drop_cache(f);
	if (r->odirect[i] < 0 || r->plain[i] < 0 || early_round(path, pages, &msg, &t0) < 0)
		return -EIO;
	r->first[i] = msg.layer0_at - t0;
	r->all[i] = msg.all_at - t0;
	r->layer0_bytes = msg.layer0_bytes;
	r->bar[i] = 0.05 + r->odirect[i] * (double)msg.layer0_bytes /
			     (double)(msg.total_bytes ? msg.total_bytes : 1);
	fprintf(stderr, "run %d: layer 0 held at %.1f ms (bar %.1f ms), whole model %.3f s, "
		"plain start %.3f s, O_DIRECT %.3f s\n", i, r->first[i] * 1e3, r->bar[i] * 1e3,
		r->all[i], r->plain[i], r->odirect[i]);
	return 0;
}

static void print(const struct files *f, int repeat, struct result *r, int json)
{
	double first = median(r->first, repeat), bar = median(r->bar, repeat);
	double all = median(r->all, repeat), plain = median(r->plain, repeat);
	double od = median(r->odirect, repeat);

	if (json) {
		json_t *o = json_pack("{s:I, s:I, s:i, s:f, s:f, s:f, s:f, s:f, s:f, s:f}",
			"model_bytes", (json_int_t)f->bytes, "layer0_bytes", (json_int_t)r->layer0_bytes,
			"repeat", repeat, "first_layer_s", first, "bar_s", bar, "first_vs_bar", first / bar,
			"early_all_s", all, "plain_s", plain, "early_vs_plain", all / plain, "odirect_s", od);
		json_dumpf(o, stdout, JSON_INDENT(2));
		putchar('\n');
		json_decref(o);
		return;
	}
	printf("files: %zu, %.3f GB, layer 0 %.1f MiB; median of %d runs; page cache dropped before each\n",
	       f->n, (double)f->bytes / 1e9, (double)r->layer0_bytes / 1048576.0, repeat);
	printf("  wsrvd start -> a worker holds layer 0       %8.1f ms   %.2fx the bar\n", first * 1e3,
	       first / bar);
	printf("  bar: 50 ms + layer 0's share of the read    %8.1f ms\n", bar * 1e3);
	printf("  the whole model, serving while loading      %8.3f s    %.2fx the plain start\n", all,
	       all / plain);
	printf("  plain start (wsrvd answers once loaded)     %8.3f s\n", plain);
	printf("  raw O_DIRECT read                           %8.3f s\n", od);
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
		if (one_round(path, pages, &f, &r, i) < 0) {
			fprintf(stderr, "wsrv-bench first-layer: a round failed\n");
			files_free(&f);
			return 1;
		}
	print(&f, repeat, &r, json);
	files_free(&f);
	return 0;
}
