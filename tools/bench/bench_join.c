// SPDX-License-Identifier: MIT
/* bench_join.c - `wsrv-bench join`: a replica added to a running host.
 *
 * wsrvd already holds the model (loaded, its folios made). A new worker
 * process is started with exec, as a deployment starts one: it connects,
 * attaches, opens its device and a stream with every tensor resident, and
 * is ready when every weight is on its device. Timed from just before the
 * exec to ready, median of the runs. The baseline, in the same run and
 * process: the model's bytes copied from page-locked memory to the device
 * (cuMemcpyHtoDAsync of one pinned buffer, timed by events), the least a
 * join can take once the process is up. The bar is 1.3x that plus 0.1 s
 * for the process, the driver's context and the attach. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <jansson.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"
#include "bench_files.h"
#include "bench_join.h"
#include "bench_pinned.h"
#include "bench_util.h"
#include "cliarg.h"
#include "clock.h"
#include "cuda_api.h"
#include "wsrv.h"

#define MAX_REPEAT 20
#define PINNED_CHUNK (256ull << 20)

extern char **environ;

struct join_cfg {
	const char *model;
	int repeat;
};

/* The worker, in the exec'd process: from its start to every weight on
 * its device; the report is written to fd out. */
static int join_worker(const char *sock, int out)
{
	struct wsrv_connect_opts co = { .struct_size = sizeof(co), .timeout_ms = 30000 };
	/* $WSRV_BENCH_JOIN_SHARE=off (wsrv-bench copyd --private): a private
	 * copy each, as ranks with shards of their own have. */
	const char *sh = getenv("WSRV_BENCH_JOIN_SHARE");
	struct wsrv_stream_opts so = { .struct_size = sizeof(so), .slots = 2,
				       .share = sh && !strcmp(sh, "off") ? WSRV_SHARE_OFF : WSRV_SHARE_DEFAULT };
	struct wsrv_stream_stats st = { .struct_size = sizeof(st) };
	struct join_report r = { 0 };
	struct wsrv_client *cl = NULL;
	struct wsrv_model *m = NULL;
	struct wsrv_device *d = NULL;
	struct wsrv_stream *s = NULL;
	struct wsrv_plan *p = NULL;
	double t0 = mono_now(), t1, tc = 0;

	if (wsrv_connect(sock, &co, &cl) == 0 && wsrv_attach(cl, "m", &m) == 0 &&
	    ((tc = mono_now()), (d = bench_open_device(true))) && bench_resident_plan(&p) == 0) {
		r.context_s = mono_now() - tc;
		r.attach_s = mono_now() - t0;
		t1 = mono_now();
		if (wsrv_stream_open(m, d, p, &so, &s) == 0) {
			r.open_s = mono_now() - t1;
			r.ready_at = mono_now();
			wsrv_stream_stats(s, &st);
			r = (struct join_report){ .ok = 1, .ready_at = r.ready_at, .attach_s = r.attach_s,
						  .context_s = r.context_s, .open_s = r.open_s,
						  .register_s = st.register_seconds, .wait_s = st.wait_seconds,
						  .copied_bytes = st.resident_bytes + st.bytes_copied,
						  .register_bytes = st.register_bytes, .service_bytes = st.service_bytes,
						  .service_fallbacks = st.service_fallbacks };
			r.sampled_bad = join_check_samples(m, s, &r.samples);
		}
	}
	if (!r.ok)
		fprintf(stderr, "wsrv-bench join: the worker: %s\n", wsrv_last_error());
	return write(out, &r, sizeof(r)) == (ssize_t)sizeof(r) && r.ok ? 0 : 1;
}

int join_start(const char *sock, struct join_proc *j)
{
	char fdarg[16];
	int p[2];

	if (pipe(p) < 0)
		return -errno;
	fcntl(p[0], F_SETFD, FD_CLOEXEC);
	snprintf(fdarg, sizeof(fdarg), "%d", p[1]);
	char *argv[] = { "wsrv-bench", "join", "--worker", (char *)sock, "--report-fd", fdarg, NULL };
	j->t0 = mono_now();
	if (posix_spawn(&j->pid, "/proc/self/exe", NULL, NULL, argv, environ) != 0) {
		close(p[0]);
		close(p[1]);
		return -EAGAIN;
	}
	close(p[1]);
	j->fd = p[0];
	return 0;
}

double join_finish(struct join_proc *j, struct join_report *r)
{
	ssize_t n = read(j->fd, r, sizeof(*r));
	int st;

	close(j->fd);
	waitpid(j->pid, &st, 0);
	if (n != (ssize_t)sizeof(*r) || !r->ok)
		return -1;
	return r->ready_at - j->t0;
}

/* One join: the worker exec'd from this program, timed from the exec to
 * its report. Seconds, or -1. */
double join_once(const char *sock, struct join_report *r)
{
	struct join_proc j;

	return join_start(sock, &j) < 0 ? -1 : join_finish(&j, r);
}

/* The pinned baseline: bytes from one page-locked buffer to the device,
 * PINNED_CHUNK at a time (bench_pinned.h). GB/s, or -1. */
double pinned_gbps(uint64_t bytes)
{
	uint64_t chunk = bytes < PINNED_CHUNK ? bytes : PINNED_CHUNK;
	size_t n = chunk ? (size_t)((bytes + chunk - 1) / chunk) : 0;
	uint64_t *lens = calloc(n + 1, sizeof(*lens));
	const struct cuda_api *cu;
	const char *why;
	CUcontext ctx = NULL;
	CUdevice dev;
	double gbps = -1;

	for (size_t i = 0; lens && i < n; i++)
		lens[i] = i + 1 < n ? chunk : bytes - (uint64_t)i * chunk;
	if (lens && n && cuda_api_get(&cu, &why) == 0 && cu->DeviceGet(&dev, 0) == CUDA_SUCCESS &&
	    cu->PrimaryCtxRetain(&ctx, dev) == CUDA_SUCCESS) {
		gbps = bench_pinned_gbps(cu, ctx, NULL, lens, n, true);
		cu->PrimaryCtxRelease(dev);
	}
	free(lens);
	return gbps;
}

static void join_print(const struct join_cfg *c, double join_s, double gbps, const struct join_report *r,
		       bool json)
{
	double pinned_s = gbps > 0 ? (double)r->copied_bytes / (gbps * 1e9) : 0;
	double bar = 1.3 * pinned_s + 0.1;

	if (json) {
		json_t *o = json_pack("{s:s, s:s, s:i, s:f, s:I, s:f, s:f, s:f, s:b, s:f, s:f, s:f, s:f}",
			"device", "cuda", "plan", "resident", "repeat", c->repeat,
			"join_s", join_s, "bytes", (json_int_t)r->copied_bytes, "pinned_gbps", gbps,
			"pinned_s", pinned_s, "bar_s", bar, "within_bar", join_s <= bar,
			"attach_ms", r->attach_s * 1e3, "open_ms", r->open_s * 1e3,
			"register_ms", r->register_s * 1e3, "wait_ms", r->wait_s * 1e3);
		json_dumpf(o, stdout, JSON_INDENT(2));
		putchar('\n');
		json_decref(o);
		return;
	}
	printf("a worker joining a running wsrvd, to every weight on its GPU; median of %d\n", c->repeat);
	printf("  exec to ready                        %7.3f s\n", join_s);
	printf("  %.1f MiB at the pinned rate %.2f GB/s %7.3f s   join is %.2fx this; bar 1.3x + 0.1 s = %.3f s: %s\n",
	       (double)r->copied_bytes / 1048576.0, gbps, pinned_s, join_s / pinned_s, bar,
	       bench_at_most(join_s, bar));
	printf("  last run: attach %.1f ms, open %.1f ms (locking %.1f ms, copy wait %.1f ms)\n", r->attach_s * 1e3,
	       r->open_s * 1e3, r->register_s * 1e3, r->wait_s * 1e3);
}

/* The runs: joins on one wsrvd that holds the model, then the baseline. */
static int join_runs(const struct join_cfg *c, bool json)
{
	struct bench_server bs = { 0 };
	struct join_report r = { 0 };
	double t[MAX_REPEAT], gbps = -1;
	char spec[4200];
	const char *specs[1] = { spec };
	int rc = 0;

	snprintf(spec, sizeof(spec), "m=%s", c->model);
	if (bench_server_start(&bs, specs, 1) < 0)
		return 1;
	for (int i = 0; rc == 0 && i < c->repeat; i++)
		if ((t[i] = join_once(bs.sock, &r)) < 0) {
			fprintf(stderr, "wsrv-bench join: run %d: the worker failed\n", i);
			rc = 1;
		}
	bench_server_stop(&bs);
	if (rc == 0 && (gbps = pinned_gbps(r.copied_bytes)) < 0) {
		fprintf(stderr, "wsrv-bench join: the pinned copy failed\n");
		rc = 1;
	}
	if (rc == 0)
		join_print(c, median(t, c->repeat), gbps, &r, json);
	return rc;
}

int bench_join(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "model", required_argument, NULL, 'm' },
		{ "repeat", required_argument, NULL, 'r' }, { "json", no_argument, NULL, 'j' },
		{ "worker", required_argument, NULL, 'W' }, { "report-fd", required_argument, NULL, 'F' }, { 0 },
	};
	struct join_cfg c = { .repeat = 5 };
	const char *worker = NULL;
	bool json = false, bad = false;
	int o, fd = -1;

	optind = 1;
	while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		if (o == 'm') c.model = optarg;
		else if (o == 'r') c.repeat = (int)cliarg_long("wsrv-bench join", "--repeat", optarg, 1, MAX_REPEAT);
		else if (o == 'j') json = true;
		else if (o == 'W') worker = optarg;
		else if (o == 'F') fd = (int)cliarg_long("wsrv-bench join", "--report-fd", optarg, 0, 1 << 20);
		else bad = true;
	}
	if (worker && fd >= 0)
		return join_worker(worker, fd);
	if (bad || !c.model || optind != argc) {
		fprintf(stderr, "usage: wsrv-bench join --model DIR [--repeat 1..%d] [--json]\n",
			MAX_REPEAT);
		return 2;
	}
	return join_runs(&c, json);
}
