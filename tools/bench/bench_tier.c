// SPDX-License-Identifier: MIT
/* bench_tier.c - `wsrv-bench tier`: a model larger than its memory budget
 * (wsrvd --memory-budget, issue 39), passes of 1 and of N workers.
 *
 * wsrv: wsrvd serves the model under the budget; a crew of workers each
 * attaches, opens a host stream (2 slots) and makes one pass over the
 * layers; the tier's counters before and after give the bytes read from
 * disk for the pass, against the model's bytes not resident. The crew runs
 * twice, and the second is reported (the first warms nothing a pass would
 * not). Baselines in the same run: a raw O_DIRECT read of the same files
 * (the disk's rate: the pass's bar is 1.25x the time its bytes take at
 * that rate), and the page-cache peer: the same number of processes
 * mmapping the files and touching every page, inside a memory cgroup (v1,
 * memory.limit_in_bytes) limited to the same budget, the page cache
 * dropped first. Bars: bytes read per pass <= 1.1x the bytes not
 * resident; pass time <= 1.25x the bytes read at the O_DIRECT rate; N
 * workers' pass <= 0.5x the peer's. Then one worker computes each layer
 * for as long as its bytes take at the O_DIRECT rate: of the time its
 * reads take at that rate, the share it did not wait for is the hidden
 * fraction (bar 0.9). The compute is the accelerator's by default: the
 * worker's thread sleeps, as a GPU worker's host thread waits on its
 * stream; --compute cpu makes it a busy loop on a host core instead.
 * --moe gives the MoE figures instead (bench_tier_moe.c). */
#include <errno.h>
#include <math.h>
#include <fcntl.h>
#include <getopt.h>
#include <jansson.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#include "bench_crew.h"
#include "bench_files.h"
#include "bench_tier.h"
#include "bench_util.h"
#include "cliarg.h"
#include "clock.h"
#include "load_door.h"
#include "units.h"
#include "wsrv.h"

#define CGROUP_V1 "/sys/fs/cgroup/memory"

struct tier_cfg {
	const char *model;
	uint64_t budget;
	int workers;
	bool compute_cpu;           /* --compute cpu: a busy loop, not a sleep */
	bool moe;                   /* --moe: the MoE figures (bench_tier_moe.c) */
};

struct pass_report {
	int ok;
	double begin_at, done_at;   /* CLOCK_MONOTONIC: the measured passes */
	double compute_s;           /* of them, emulated compute */
	uint64_t read_begin, read_end; /* the tier's bytes read then (passes > 1) */
};

/* What a crew's worker does: the socket, and seconds of emulated compute
 * per byte of a layer (0: none). */
struct pass_arg {
	const char *sock;
	double compute_per_byte;
	bool cpu;                   /* busy on a host core, or asleep */
	int passes;                 /* over the model; all but the first are
	                             * measured when more than one */
};

/* s seconds of a layer's compute, emulated: on a host core (a busy loop),
 * or on an accelerator (the thread sleeps, as it would wait on a GPU). */
static void compute(double s, bool cpu)
{
	double until = mono_now() + s;

	if (!cpu && s > 0) {
		struct timespec ts = { (time_t)s, (long)((s - (double)(time_t)s) * 1e9) };
		nanosleep(&ts, NULL);
	}
	while (mono_now() < until)
		;
}

static int pass_worker(void *arg, int out)
{
	struct wsrv_stream_opts so = { .struct_size = sizeof(so), .slots = 2 };
	struct pass_report r = { 0 };
	const struct pass_arg *pa = arg;
	const char *sock = pa->sock;
	struct wsrv_client *c;
	struct wsrv_model *m;
	struct wsrv_device *d;
	struct wsrv_stream *s;

	if (wsrv_connect(sock, NULL, &c) == 0 && wsrv_attach(c, "m", &m) == 0 &&
	    wsrv_device_host(NULL, &d) == 0 && wsrv_stream_open(m, d, NULL, &so, &s) == 0) {
		r.ok = 1;
		r.begin_at = mono_now();
		for (int p = 0; p < pa->passes && r.ok; p++) {
			if (p == 1) { /* steady state from here */
				struct wsrv_tier_info ti = { 0 };
				r.ok = tier_now(sock, &ti) == 0;
				r.read_begin = ti.read_bytes;
				r.begin_at = mono_now();
				r.compute_s = 0;
			}
			for (size_t i = 0; i < wsrv_model_layer_count(m) && r.ok; i++) {
				struct wsrv_layer l;
				r.ok = wsrv_model_layer_info(m, i, &l) == 0 && wsrv_stream_acquire(s, l.index) == 0;
				if (r.ok && pa->compute_per_byte > 0) {
					double t = mono_now();
					compute(pa->compute_per_byte * (double)l.bytes, pa->cpu);
					r.compute_s += mono_now() - t;
				}
				r.ok = r.ok && wsrv_stream_release(s, l.index) == 0;
			}
		}
		r.done_at = mono_now();
		if (pa->passes > 1) {
			struct wsrv_tier_info ti = { 0 };
			r.ok = r.ok && tier_now(sock, &ti) == 0;
			r.read_end = ti.read_bytes;
		}
	}
	if (write(out, &r, sizeof(r)) != (ssize_t)sizeof(r))
		return 1;
	pause();
	return 0;
}

/* One crew of n workers, one pass each (compute_per_byte: emulated
 * compute, its seconds into *compute): seconds to the last done, and the
 * bytes the tier read meanwhile. With compute, 3 passes, and the time,
 * compute and bytes read are those of the last 2: a worker makes pass
 * after pass, and the steady state is what it sees. -1 on a failure. */
static double wsrv_pass(const char *sock, int n, double compute_per_byte, bool cpu, double *compute, uint64_t *read)
{
	struct pass_arg pa = { sock, compute_per_byte, cpu, compute_per_byte > 0 ? 3 : 1 };
	struct pass_report r[CREW_MAX];
	struct wsrv_tier_info a = { 0 }, b = { 0 };
	struct crew w;
	double t0, last = -1;

	if (tier_now(sock, &a) < 0)
		return -1;
	t0 = mono_now();
	if (crew_start(&w, n, pass_worker, &pa) == 0 && crew_collect(&w, r, sizeof(*r)) == 0) {
		last = t0;
		for (int i = 0; i < n; i++)
			last = !r[i].ok || last < 0 ? -1 : r[i].done_at > last ? r[i].done_at : last;
		if (compute)
			*compute = r[0].compute_s;
	}
	crew_stop(&w);
	if (last < 0 || tier_now(sock, &b) < 0)
		return -1;
	*read = b.read_bytes - a.read_bytes;
	if (pa.passes > 1) { /* one worker: its steady passes */
		*read = r[0].read_end - r[0].read_begin;
		return last - r[0].begin_at;
	}
	return last - t0;
}

/* The peer: n processes in a memory cgroup of budget bytes, each mmapping
 * every file and touching every page. Seconds, or -1 (no cgroup v1 memory
 * controller: not run). */
static double peer_pass(const struct files *f, int n, uint64_t budget)
{
	char dir[128], p[200], v[32];
	pid_t pid[CREW_MAX];
	double t0;
	int ok = 1, fd;

	snprintf(dir, sizeof(dir), CGROUP_V1 "/wsrv-bench-tier-%d", (int)getpid());
	if (mkdir(dir, 0755) < 0)
		return -1;
	snprintf(p, sizeof(p), "%s/memory.limit_in_bytes", dir);
	snprintf(v, sizeof(v), "%llu", (unsigned long long)budget);
	if ((fd = open(p, O_WRONLY | O_CLOEXEC)) < 0 || write(fd, v, strlen(v)) < 0) {
		if (fd >= 0)
			close(fd);
		rmdir(dir);
		return -1;
	}
	close(fd);
	drop_cache(f);
	snprintf(p, sizeof(p), "%s/cgroup.procs", dir);
	t0 = mono_now();
	for (int i = 0; i < n; i++) {
		if ((pid[i] = fork()) == 0) {
			int cfd = open(p, O_WRONLY | O_CLOEXEC);
			unsigned sum = 0;
			if (cfd < 0 || write(cfd, "0", 1) < 0)
				_exit(1);
			close(cfd);
			if (files_touch_all(f, &sum) < 0)
				_exit(1);
			_exit(sum == 1234567 ? 2 : 0);
		}
	}
	for (int i = 0; i < n; i++) {
		int st;
		ok = ok && pid[i] > 0 && waitpid(pid[i], &st, 0) == pid[i] && WIFEXITED(st) && WEXITSTATUS(st) == 0;
	}
	t0 = mono_now() - t0;
	rmdir(dir);
	return ok ? t0 : -1;
}

static int tier_args(int argc, char **argv, struct tier_cfg *c, bool *json)
{
	static const struct option opts[] = {
		{ "model", required_argument, NULL, 'm' }, { "budget", required_argument, NULL, 'b' },
		{ "workers", required_argument, NULL, 'w' }, { "json", no_argument, NULL, 'j' },
		{ "compute", required_argument, NULL, 'c' }, { "moe", no_argument, NULL, 'e' }, { 0 },
	};
	int o;

	optind = 1;
	while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		if (o == 'm') c->model = optarg;
		else if (o == 'b' && parse_size(optarg, &c->budget) == 0 && c->budget) ;
		else if (o == 'w') c->workers = (int)cliarg_long("wsrv-bench tier", "--workers", optarg, 1, CREW_MAX);
		else if (o == 'j') *json = true;
		else if (o == 'e') c->moe = true;
		else if (o == 'c' && (!strcmp(optarg, "cpu") || !strcmp(optarg, "device"))) c->compute_cpu = !strcmp(optarg, "cpu");
		else return -1;
	}
	return c->model && c->budget && optind == argc ? 0 : -1;
}

struct tier_figs {
	double one_s, n_s, odirect_s, peer_one_s, peer_n_s;
	double hid_s, hid_compute_s;  /* 1 worker with compute emulated at the disk's time */
	uint64_t one_read, n_read, hid_read, not_resident;
};

/* Of the time the bytes read take at the O_DIRECT rate, the share the
 * worker did not wait for (it computed meanwhile). */
static double hidden(const struct files *f, const struct tier_figs *g)
{
	double read_s = (double)g->hid_read * g->odirect_s / (double)f->bytes;
	double exposed = g->hid_s - g->hid_compute_s;

	/* Reading that took longer than the pass's time beyond its compute
	 * hid nothing: 0, not below. */
	double h = read_s > 0 ? 1 - (exposed > 0 ? exposed : 0) / read_s : NAN;

	return h < 0 ? 0 : h;
}

static void tier_print(const struct tier_cfg *c, const struct files *f, const struct tier_figs *g, bool json)
{
	double rate = (double)f->bytes / g->odirect_s;
	double want_one = (double)g->one_read / rate, want_n = (double)g->n_read / rate;
	double r1 = (double)g->one_read / (double)(g->not_resident ? g->not_resident : 1);
	double rn = (double)g->n_read / (double)(g->not_resident ? g->not_resident : 1);

	if (json) {
		json_t *o = json_pack("{s:I, s:I, s:I, s:i, s:f, s:f, s:I, s:I, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f}",
			"model_bytes", (json_int_t)f->bytes, "budget", (json_int_t)c->budget,
			"not_resident_bytes", (json_int_t)g->not_resident, "workers", c->workers,
			"pass_one_s", g->one_s, "pass_n_s", g->n_s, "read_one_bytes", (json_int_t)g->one_read,
			"read_n_bytes", (json_int_t)g->n_read, "read_one_vs_not_resident", r1, "read_n_vs_not_resident", rn,
			"odirect_s", g->odirect_s, "pass_one_vs_disk", g->one_s / want_one, "pass_n_vs_disk", g->n_s / want_n,
			"peer_one_s", g->peer_one_s, "peer_n_s", g->peer_n_s,
			"pass_n_vs_peer", g->peer_n_s > 0 ? g->n_s / g->peer_n_s : 0.0,
			"compute_pass_s", g->hid_s, "compute_s", g->hid_compute_s, "hidden_fraction", hidden(f, g));
		json_object_set_new(o, "compute_on", json_string(c->compute_cpu ? "cpu" : "device"));
		json_dumpf(o, stdout, JSON_INDENT(2));
		putchar('\n');
		json_decref(o);
		return;
	}
	printf("model %.2f GB, budget %.2f GB (%.2f GB of it resident: what always stays; the rest the cache), "
	       "%.2f GB on disk only; %d workers\n", (double)f->bytes / 1e9, (double)c->budget / 1e9,
	       (double)(f->tensor_bytes - g->not_resident) / 1e9, (double)g->not_resident / 1e9, c->workers);
	if (!g->not_resident) {
		printf("  the budget holds the whole model: nothing is read from disk, no bar applies\n");
		return;
	}
	printf("  1 worker's pass   %7.3f s, %.2f GB read from disk (%.2fx the bytes on disk only; bar 1.1: %s), "
	       "%.2fx the time at the O_DIRECT rate (bar 1.25: %s)\n", g->one_s, (double)g->one_read / 1e9, r1,
	       bench_at_most(r1, 1.1), g->one_s / want_one, bench_at_most(g->one_s / want_one, 1.25));
	printf("  %d workers' pass  %7.3f s, %.2f GB read from disk (%.2fx; bar 1.1: %s), %.2fx the time at the "
	       "O_DIRECT rate (bar 1.25: %s)\n", c->workers, g->n_s, (double)g->n_read / 1e9, rn, bench_at_most(rn, 1.1),
	       g->n_s / want_n, bench_at_most(g->n_s / want_n, 1.25));
	printf("  raw O_DIRECT read of the files %7.3f s (%.2f GB/s)\n", g->odirect_s, rate / 1e9);
	printf("  1 worker computing each layer (on %s) for its bytes' time at that rate, 2 passes after a "
	       "first: %.3f s, compute %.3f s; %.2f of the read time hidden (bar 0.9: %s)\n",
	       c->compute_cpu ? "a host core" : "the device", g->hid_s, g->hid_compute_s, hidden(f, g),
	       bench_at_least(hidden(f, g), 0.9));
	if (g->peer_n_s > 0)
		printf("  page-cache peer in a %.2f GB memory cgroup: 1 process %.3f s, %d processes %.3f s; "
		       "wsrv's %d-worker pass is %.2fx it (bar 0.5: %s)\n", (double)c->budget / 1e9, g->peer_one_s,
		       c->workers, g->peer_n_s, c->workers, g->n_s / g->peer_n_s, bench_at_most(g->n_s / g->peer_n_s, 0.5));
	else
		printf("  page-cache peer: not run (no cgroup v1 memory controller at " CGROUP_V1 ", or not root)\n");
}

int bench_tier(int argc, char **argv)
{
	struct tier_cfg c = { .workers = 4 };
	struct bench_server bs = { 0 };
	struct tier_figs g = { 0 };
	struct wsrv_tier_info t;
	struct files f = { 0 };
	char spec[4200], budget[32];
	bool json = false;
	int rc = 1;

	if (tier_args(argc, argv, &c, &json) < 0) {
		fprintf(stderr, "usage: wsrv-bench tier --model DIR --budget SIZE [--workers 1..%d] [--compute device|cpu] [--moe] [--json]\n", CREW_MAX);
		return 2;
	}
	if (c.moe)
		return bench_tier_moe(c.model, c.budget, json);
	if (model_files(c.model, NULL, &f) < 0)
		return 1;
	drop_cache(&f);
	g.odirect_s = raw_odirect(&f, LOADER_DEFAULT_QD, LOADER_DEFAULT_BLOCK, LOADER_DEFAULT_SHARDS);
	snprintf(spec, sizeof(spec), "m=%s", c.model);
	snprintf(budget, sizeof(budget), "%llu", (unsigned long long)c.budget);
	bs.extra[0] = "--memory-budget";
	bs.extra[1] = budget;
	drop_cache(&f);
	if (bench_server_start(&bs, (const char *[]){ spec }, 1) < 0 || tier_now(bs.sock, &t) < 0) {
		fprintf(stderr, "wsrv-bench tier: wsrvd did not start with --memory-budget %s\n", budget);
		goto out;
	}
	g.not_resident = f.tensor_bytes > t.resident_bytes ? f.tensor_bytes - t.resident_bytes : 0;
	double per_byte = g.odirect_s / (double)f.bytes;
	if (wsrv_pass(bs.sock, 1, 0, false, NULL, &g.one_read) < 0 ||
	    (g.one_s = wsrv_pass(bs.sock, 1, 0, false, NULL, &g.one_read)) < 0 ||
	    wsrv_pass(bs.sock, c.workers, 0, false, NULL, &g.n_read) < 0 ||
	    (g.n_s = wsrv_pass(bs.sock, c.workers, 0, false, NULL, &g.n_read)) < 0 ||
	    (g.hid_s = wsrv_pass(bs.sock, 1, per_byte, c.compute_cpu, &g.hid_compute_s, &g.hid_read)) < 0) {
		fprintf(stderr, "wsrv-bench tier: a worker failed\n");
		goto out;
	}
	bench_server_stop(&bs);
	bs.pid = 0;
	g.peer_one_s = peer_pass(&f, 1, c.budget);
	g.peer_n_s = peer_pass(&f, c.workers, c.budget);
	tier_print(&c, &f, &g, json);
	rc = 0;
out:
	if (bs.pid > 0)
		bench_server_stop(&bs);
	files_free(&f);
	return rc;
}
