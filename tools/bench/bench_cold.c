// SPDX-License-Identifier: MIT
/* bench_cold.c - `wsrv-bench cold`: N workers to their device from cold,
 * the case wsrv exists for (issue 38).
 *
 * wsrv: the page cache dropped, wsrvd and N worker processes start at
 * once; each connects as soon as the socket answers, attaches, opens a
 * stream on its device (host, or cuda) and is ready when it holds every
 * weight there: at open with the resident plan (every tensor resident),
 * after one pass over the layers with the default plan. The baseline, in
 * the same run: the page cache dropped again, N processes that each read
 * the same safetensors files to the device as safetensors' load_file does
 * (mmap, then a copy from the pageable mapping into device memory), all at
 * once. The order of the two alternates between runs, and each figure is
 * the median of the runs. Reported: the time to all ready, and per worker
 * (the last run's) attach, open, page-locking, copy wait, bytes copied and
 * device memory taken. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <jansson.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#include "bench_crew.h"
#include "bench_cold_hf.h"
#include "bench_files.h"
#include "bench_memstate.h"
#include "bench_util.h"
#include "cliarg.h"
#include "clock.h"
#include "cuda_api.h"
#include "wsrv.h"

#define MAX_WORKERS CREW_MAX
#define MAX_REPEAT 10

struct cold_cfg {
	const char *model;
	int workers, repeat;
	bool cuda, resident;
	bool hf;                    /* also N x from_pretrained (bench_cold_hf.h) */
	enum mem_state mem;         /* the memory state both sides start in */
};

/* What a worker says when it is ready (or failed: ok 0). */
struct cold_report {
	int ok;
	double ready_at;            /* CLOCK_MONOTONIC, when it held everything */
	double attach_s, open_s, pass_s;
	double register_s, wait_s;
	uint64_t register_bytes, copied_bytes, device_bytes;
};

static int send_report(int out, const struct cold_report *r)
{
	return write(out, r, sizeof(*r)) == (ssize_t)sizeof(*r) ? 0 : 1;
}

/* One pass over the layers: every streamed weight reaches the device. */
static int one_pass(struct wsrv_model *m, struct wsrv_stream *s)
{
	for (size_t i = 0; i < wsrv_model_layer_count(m); i++) {
		struct wsrv_layer l;
		if (wsrv_model_layer_info(m, i, &l) < 0 || wsrv_stream_acquire(s, l.index) < 0)
			return -1;
		wsrv_stream_release(s, l.index);
	}
	return 0;
}

/* A wsrv worker: from its start to every weight on its device. */
static int wsrv_worker(const struct cold_cfg *c, const char *sock, int out)
{
	struct wsrv_connect_opts co = { .struct_size = sizeof(co), .timeout_ms = 60000 };
	struct wsrv_stream_opts so = { .struct_size = sizeof(so), .slots = 2 };
	struct cold_report r = { 0 };
	struct timespec ms = { 0, 1000000 };
	struct wsrv_client *cl = NULL;
	struct wsrv_model *m = NULL;
	struct wsrv_device *d = NULL;
	struct wsrv_stream *s = NULL;
	struct wsrv_plan *p = NULL;
	struct wsrv_stream_stats st = { .struct_size = sizeof(st) };
	double t0 = mono_now(), t1;

	for (int i = 0; i < 60000 && wsrv_connect(sock, &co, &cl) < 0; i++)
		nanosleep(&ms, NULL);
	if (!cl || wsrv_attach(cl, "m", &m) < 0 || !(d = bench_open_device(c->cuda)) ||
	    (c->resident && bench_resident_plan(&p) < 0))
		return send_report(out, &r);
	r.attach_s = mono_now() - t0;
	t1 = mono_now();
	if (wsrv_stream_open(m, d, p, &so, &s) < 0)
		return send_report(out, &r);
	r.open_s = mono_now() - t1;
	t1 = mono_now();
	if (!c->resident && one_pass(m, s) < 0)
		return send_report(out, &r);
	r.pass_s = mono_now() - t1;
	r.ready_at = mono_now();
	wsrv_stream_stats(s, &st);
	r.ok = 1;
	r.register_s = st.register_seconds;
	r.register_bytes = st.register_bytes;
	r.wait_s = st.wait_seconds;
	r.copied_bytes = st.resident_bytes + st.bytes_copied;
	r.device_bytes = st.device_bytes;
	if (send_report(out, &r))
		return 1;
	pause(); /* held until the parent has every report */
	return 0;
}

/* load_file's way: the file mmapped, its bytes copied from the pageable
 * mapping into device memory (cuda: one allocation and one copy a file;
 * host: malloc and memcpy). */
static int load_file_like(const struct files *f, bool cuda, struct cold_report *r)
{
	const struct cuda_api *cu = NULL;
	const char *why;
	CUcontext ctx = NULL, was;
	CUdevice dev = 0;

	if (cuda && (cuda_api_get(&cu, &why) < 0 || cu->DeviceGet(&dev, 0) != CUDA_SUCCESS ||
		     cu->PrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS || cu->CtxPushCurrent(ctx) != CUDA_SUCCESS))
		return -1;
	for (size_t i = 0; i < f->n; i++) {
		int fd = open(f->path[i], O_RDONLY | O_CLOEXEC);
		struct stat sb;
		void *map;
		if (fd < 0 || fstat(fd, &sb) < 0)
			return -1;
		map = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_SHARED, fd, 0);
		close(fd);
		if (map == MAP_FAILED)
			return -1;
		if (cuda) {
			CUdeviceptr p;
			if (cu->MemAlloc(&p, (size_t)sb.st_size) != CUDA_SUCCESS ||
			    cu->MemcpyHtoDAsync(p, map, (size_t)sb.st_size, NULL) != CUDA_SUCCESS ||
			    cu->StreamSynchronize(NULL) != CUDA_SUCCESS)
				return -1;
		} else {
			void *p = malloc((size_t)sb.st_size);
			if (!p)
				return -1;
			memcpy(p, map, (size_t)sb.st_size);
		}
		munmap(map, (size_t)sb.st_size); /* as load_file leaves it: the copy stays */
		r->copied_bytes += (uint64_t)sb.st_size;
		r->device_bytes += (uint64_t)sb.st_size;
	}
	if (cuda)
		cu->CtxPopCurrent(&was);
	return 0;
}

static int baseline_worker(const struct cold_cfg *c, const struct files *f, int out)
{
	struct cold_report r = { 0 };
	double t0 = mono_now();

	if (load_file_like(f, c->cuda, &r) == 0) {
		r.ok = 1;
		r.open_s = mono_now() - t0;
		r.ready_at = mono_now();
	}
	if (send_report(out, &r))
		return 1;
	pause();
	return 0;
}

/* from_pretrained in a Python process: its imports reported as the
 * attach, from_pretrained itself as the open. */
static int hf_worker(const struct cold_cfg *c, int out)
{
	struct cold_report r = { 0 };
	struct hf_result h;

	if (hf_load(c->model, &h) == 0)
		r = (struct cold_report){ .ok = 1, .ready_at = h.ready_at, .attach_s = h.import_s,
					  .open_s = h.load_s, .device_bytes = h.device_bytes };
	if (send_report(out, &r))
		return 1;
	pause();
	return 0;
}

/* What a crew's worker runs: the config and, for wsrv, the socket. */
struct cold_arg {
	const struct cold_cfg *c;
	const char *sock;
	const struct files *f;
	bool hf;
};

static int cold_worker(void *arg, int out)
{
	const struct cold_arg *a = arg;

	if (a->hf)
		return hf_worker(a->c, out);
	return a->sock ? wsrv_worker(a->c, a->sock, out) : baseline_worker(a->c, a->f, out);
}

/* Every worker's report into r: the time from t0 to the last one ready,
 * or -1 when one failed. */
static double crew_ready(struct crew *w, double t0, struct cold_report *r)
{
	double last = t0;

	if (crew_collect(w, r, sizeof(*r)) < 0)
		return -1;
	for (int i = 0; i < w->n; i++) {
		if (!r[i].ok)
			return -1;
		if (r[i].ready_at > last)
			last = r[i].ready_at;
	}
	return last - t0;
}

static double run_baseline(const struct cold_cfg *c, const struct files *f, bool hf,
			   struct cold_report *r)
{
	struct cold_arg a = { .c = c, .f = f, .hf = hf };
	struct crew w;
	double t0 = mono_now(), t = -1;

	if (crew_start(&w, c->workers, cold_worker, &a) == 0)
		t = crew_ready(&w, t0, r);
	crew_stop(&w);
	return t;
}

/* wsrvd and the workers start together, as a deployment starts them. */
static double run_wsrv(const struct cold_cfg *c, struct cold_report *r)
{
	struct bench_server bs = { 0 };
	struct crew w;
	char spec[4200], sock[sizeof(bs.sock)];
	const char *specs[1] = { spec };
	struct cold_arg a = { .c = c, .sock = sock };
	double t0, t = -1;

	snprintf(spec, sizeof(spec), "m=%s", c->model);
	if (bench_server_reserve(&bs) < 0)
		return -1;
	snprintf(sock, sizeof(sock), "%s", bs.sock);
	t0 = mono_now();
	if (crew_start(&w, c->workers, cold_worker, &a) == 0 && bench_server_launch(&bs, specs, 1) == 0)
		t = crew_ready(&w, t0, r);
	crew_stop(&w);
	bench_server_stop(&bs);
	return t;
}

static json_t *workers_json(const struct cold_report *r, int n)
{
	json_t *a = json_array();

	for (int i = 0; i < n; i++)
		json_array_append_new(a, json_pack("{s:f, s:f, s:f, s:f, s:f, s:I, s:I, s:I}",
			"attach_ms", r[i].attach_s * 1e3, "open_ms", r[i].open_s * 1e3, "pass_ms", r[i].pass_s * 1e3,
			"register_ms", r[i].register_s * 1e3, "wait_ms", r[i].wait_s * 1e3,
			"register_bytes", (json_int_t)r[i].register_bytes, "copied_bytes", (json_int_t)r[i].copied_bytes,
			"device_bytes", (json_int_t)r[i].device_bytes));
	return a;
}

/* The medians of each side, the last run's workers, and why the
 * from_pretrained side did not run (NULL when it ran or was not asked). */
struct cold_figs {
	double ws, bl, hf;
	struct cold_report wr[MAX_WORKERS], br[MAX_WORKERS], hr[MAX_WORKERS];
	char hf_why[200];
};

static json_t *hf_json(const struct cold_cfg *c, const struct cold_figs *f)
{
	if (!c->hf)
		return json_null();
	if (f->hf_why[0])
		return json_pack("{s:s}", "skipped", f->hf_why);
	return json_pack("{s:f, s:f, s:o}", "all_ready_s", f->hf, "wsrv_vs_from_pretrained", f->ws / f->hf,
			 "workers", workers_json(f->hr, c->workers));
}

static void cold_print_json(const struct cold_cfg *c, const struct cold_figs *f)
{
	json_t *o = json_pack("{s:i, s:s, s:s, s:s, s:i, s:f, s:f, s:f, s:o, s:o, s:o}", "workers", c->workers,
		"device", c->cuda ? "cuda" : "host", "plan", c->resident ? "resident" : "default",
		"memory", bench_memory_state_name(c->mem),
		"repeat", c->repeat, "wsrv_all_ready_s", f->ws, "load_file_all_ready_s", f->bl,
		"wsrv_vs_load_file", f->ws / f->bl, "wsrv_workers", workers_json(f->wr, c->workers),
		"load_file_workers", workers_json(f->br, c->workers), "from_pretrained", hf_json(c, f));

	json_dumpf(o, stdout, JSON_INDENT(2));
	putchar('\n');
	json_decref(o);
}

static void cold_print(const struct cold_cfg *c, const struct cold_figs *f, bool json)
{
	const struct cold_report *wr = f->wr;

	if (json) {
		cold_print_json(c, f);
		return;
	}
	printf("%d workers on %s, %s plan, from cold, memory %s; median of %d runs\n", c->workers,
	       c->cuda ? "cuda" : "host", c->resident ? "resident" : "default", bench_memory_state_name(c->mem),
	       c->repeat);
	printf("  wsrvd + %d workers, all holding every weight   %7.3f s\n", c->workers, f->ws);
	printf("  %d load_file processes (mmap, pageable copy)   %7.3f s   wsrv is %.2fx this\n", c->workers, f->bl,
	       f->ws / f->bl);
	if (c->hf && f->hf_why[0])
		printf("  from_pretrained: not run (%s)\n", f->hf_why);
	else if (c->hf)
		printf("  %d from_pretrained(device_map=\"cuda\")         %7.3f s   wsrv is %.2fx this "
		       "(imports %.1f s, load %.1f s in the last run's first)\n", c->workers, f->hf, f->ws / f->hf,
		       f->hr[0].attach_s, f->hr[0].open_s);
	for (int i = 0; i < c->workers; i++)
		printf("  worker %d: attach %.1f ms, open %.1f ms (locking %.1f ms, %.1f MiB), pass %.1f ms, waited %.1f ms; "
		       "%.1f MiB copied, %.1f MiB of device memory\n", i, wr[i].attach_s * 1e3, wr[i].open_s * 1e3,
		       wr[i].register_s * 1e3, (double)wr[i].register_bytes / 1048576.0, wr[i].pass_s * 1e3,
		       wr[i].wait_s * 1e3, (double)wr[i].copied_bytes / 1048576.0,
		       (double)wr[i].device_bytes / 1048576.0);
}

static int cold_args(int argc, char **argv, struct cold_cfg *c, bool *json)
{
	static const struct option opts[] = {
		{ "model", required_argument, NULL, 'm' }, { "workers", required_argument, NULL, 'w' },
		{ "device", required_argument, NULL, 'd' }, { "plan", required_argument, NULL, 'p' },
		{ "repeat", required_argument, NULL, 'r' }, { "json", no_argument, NULL, 'j' },
		{ "memory", required_argument, NULL, 'M' }, { "from-pretrained", no_argument, NULL, 'H' }, { 0 },
	};
	int o;

	optind = 1;
	while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		if (o == 'm') c->model = optarg;
		else if (o == 'w') c->workers = (int)cliarg_long("wsrv-bench cold", "--workers", optarg, 1, MAX_WORKERS);
		else if (o == 'r') c->repeat = (int)cliarg_long("wsrv-bench cold", "--repeat", optarg, 1, MAX_REPEAT);
		else if (o == 'd' && (!strcmp(optarg, "host") || !strcmp(optarg, "cuda"))) c->cuda = optarg[0] == 'c';
		else if (o == 'p' && (!strcmp(optarg, "default") || !strcmp(optarg, "resident"))) c->resident = optarg[0] == 'r';
		else if (o == 'j') *json = true;
		else if (o == 'H') c->hf = true;
		else if (o == 'M' && (!strcmp(optarg, "fresh") || !strcmp(optarg, "reported")))
			c->mem = optarg[0] == 'r' ? MEM_REPORTED : MEM_FRESH;
		else return -1;
	}
	return c->model && optind == argc ? 0 : -1;
}

/* One run of each side, in c's memory state, the first two alternating
 * with run i: this VM gives freed memory back, and whichever runs second
 * pays to fault it in again (issue 38 item 5). -1 when a worker failed. */
static int cold_round(const struct cold_cfg *c, const struct files *f, int i, struct cold_figs *g,
		      double *ws, double *bl, double *hf)
{
	for (int k = 0; k < 2 + (c->hf && !g->hf_why[0]); k++) {
		bool wsrv = k == i % 2, hfside = k == 2;
		double t;
		drop_cache(f);
		bench_memory_state(c->mem, f->bytes + f->bytes / 4);
		t = wsrv ? run_wsrv(c, g->wr) : run_baseline(c, f, hfside, hfside ? g->hr : g->br);
		if (t < 0) {
			fprintf(stderr, "wsrv-bench cold: run %d: a %s worker failed\n", i,
				wsrv ? "wsrv" : hfside ? "from_pretrained" : "load_file");
			return -1;
		}
		*(wsrv ? ws : hfside ? hf : bl) = t;
	}
	fprintf(stderr, "run %d: wsrv %.3f s, load_file %.3f s\n", i, *ws, *bl);
	return 0;
}

int bench_cold(int argc, char **argv)
{
	struct cold_cfg c = { .workers = 4, .repeat = 3 };
	static struct cold_figs g;
	double ws[MAX_REPEAT], bl[MAX_REPEAT], hf[MAX_REPEAT] = { 0 };
	struct files f = { 0 };
	bool json = false;
	int rc = 0;

	if (cold_args(argc, argv, &c, &json) < 0) {
		fprintf(stderr, "usage: wsrv-bench cold --model DIR [--workers 1..%d] [--device host|cuda] "
			"[--plan default|resident] [--memory fresh|reported] [--from-pretrained] [--repeat 1..%d] "
			"[--json]\n", MAX_WORKERS, MAX_REPEAT);
		return 2;
	}
	if (model_files(c.model, NULL, &f) < 0)
		return 1;
	if (c.hf && hf_probe(g.hf_why, sizeof(g.hf_why)) < 0)
		fprintf(stderr, "wsrv-bench cold: from_pretrained not run: %s\n", g.hf_why);
	for (int i = 0; rc == 0 && i < c.repeat; i++)
		rc = cold_round(&c, &f, i, &g, &ws[i], &bl[i], &hf[i]);
	if (rc == 0) {
		g.ws = median(ws, c.repeat);
		g.bl = median(bl, c.repeat);
		g.hf = median(hf, c.repeat);
		cold_print(&c, &g, json);
	}
	files_free(&f);
	return rc < 0 ? 1 : 0;
}
