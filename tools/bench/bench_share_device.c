// SPDX-License-Identifier: MIT
/* bench_share_device.c - `wsrv-bench share-device`: what N workers on one
 * device cost in device memory, and how fast the later ones open, with
 * their resident tensors in one shared device region against the same N
 * workers each holding a private copy (the baseline, same run).
 *
 * The workers start one after another, each once the previous one has its
 * stream open: the first fills the region, the later ones map it. Device
 * bytes with sharing: on the host backend the region's PSS summed over the
 * workers (measured: every page counted once however many map it) plus
 * each worker's private device memory (its slots); on cuda, the region's
 * size once plus the private bytes. Without sharing: every worker's device
 * bytes. On cuda each worker also measures what its stream took from the
 * device (cuMemGetInfo's free bytes before and after the open, the workers
 * one at a time): `device_used_*`, the driver's figure beside ours. */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"
#include "bench_util.h"
#include "cliarg.h"
#include "clock.h"
#include "cuda_api.h"
#include "wsrv.h"

#define MAX_CLIENTS 32

struct sd_opts {
	const char *sock, *plan;
	bool cuda;
	unsigned slots;
	uint32_t share;
};

struct sd_report {
	int ok;
	int role;
	double open_ms;
	uint64_t resident, shared, private_bytes, device, region;
	int64_t used;               /* cuda: the device's free bytes the open took */
};

/* The device's free bytes (cuMemGetInfo in device 0's primary context,
 * which the cuda device has made); 0 when it cannot say. */
static uint64_t device_free(void)
{
	const struct cuda_api *cu;
	const char *why;
	CUcontext ctx, was;
	size_t f = 0, t;

	if (cuda_api_get(&cu, &why) < 0 || cu->PrimaryCtxRetain(&ctx, 0) != CUDA_SUCCESS)
		return 0;
	if (cu->CtxPushCurrent(ctx) == CUDA_SUCCESS) {
		if (cu->MemGetInfo(&f, &t) != CUDA_SUCCESS)
			f = 0;
		cu->CtxPopCurrent(&was);
	}
	cu->PrimaryCtxRelease(0);
	return f;
}

/* One worker: opens its stream (timed), reports, holds until told. */
static int sd_worker(const struct sd_opts *o, int out, int go)
{
	struct wsrv_stream_opts so = { .struct_size = sizeof(so), .slots = o->slots, .share = o->share };
	struct sd_report r = { 0 };
	struct wsrv_client *c;
	struct wsrv_model *m;
	struct wsrv_device *d;
	struct wsrv_plan *p = NULL;
	struct wsrv_stream *s;
	struct wsrv_stream_stats st;
	struct wsrv_sharing sh;
	double t0;
	uint64_t free0 = 0;
	char b;

	if (wsrv_connect(o->sock, NULL, &c) < 0 || wsrv_attach(c, "m", &m) < 0 ||
	    (o->plan && wsrv_plan_load(o->plan, &p) < 0) ||
	    (o->cuda ? wsrv_device_cuda(NULL, &d) : wsrv_device_host(NULL, &d)) < 0) {
		fprintf(stderr, "wsrv-bench share-device: worker: %s\n", wsrv_last_error());
		return write(out, &r, sizeof(r)) == sizeof(r) ? 1 : 1;
	}
	if (o->cuda)
		free0 = device_free();
	t0 = mono_now();
	if (wsrv_stream_open(m, d, p, &so, &s) == 0) {
		r.open_ms = (mono_now() - t0) * 1e3;
		wsrv_stream_stats(s, &st);
		wsrv_stream_sharing(s, &sh);
		r = (struct sd_report){ 1, sh.role, r.open_ms, st.resident_bytes, st.shared_bytes,
					st.private_bytes, st.device_bytes, sh.region_bytes,
					o->cuda && free0 ? (int64_t)free0 - (int64_t)device_free() : -1 };
	} else {
		fprintf(stderr, "wsrv-bench share-device: stream: %s\n", wsrv_last_error());
	}
	if (write(out, &r, sizeof(r)) != sizeof(r) || read(go, &b, 1) < 0)
		return 1;
	return 0; /* the process's exit frees everything */
}

struct sd_result {
	double first_ms, later_ms;
	uint64_t device_bytes, resident, private_sum, region_pss;
	int64_t used;               /* cuda: the device's bytes all n took; else -1 */
	int readers, writers;
	bool ok;
};

/* n workers one after another; then measures and releases them. */
static void sd_run(const struct sd_opts *o, int n, struct sd_result *res)
{
	pid_t kids[MAX_CLIENTS];
	int out[2], go[2];
	struct sd_report r[MAX_CLIENTS];
	double later[MAX_CLIENTS];
	int k;

	memset(res, 0, sizeof(*res));
	if (pipe(out) < 0 || pipe(go) < 0)
		return;
	for (k = 0; k < n; k++) {
		if ((kids[k] = fork()) == 0) {
			close(out[0]);
			close(go[1]);
			_exit(sd_worker(o, out[1], go[0]));
		}
		if (kids[k] < 0 || read(out[0], &r[k], sizeof(r[k])) != sizeof(r[k]) || !r[k].ok)
			break;
	}
	res->ok = k == n;
	res->used = res->ok && o->cuda ? 0 : -1;
	for (int i = 0; res->ok && i < n; i++) {
		res->used = res->used < 0 || r[i].used < 0 ? -1 : res->used + r[i].used;
		mapping_mem(kids[i], "memfd:wsrv-region", &res->region_pss, NULL);
		res->private_sum += r[i].private_bytes;
		res->writers += r[i].role == WSRV_SHARE_WRITER;
		res->readers += r[i].role == WSRV_SHARE_READER;
		res->device_bytes += r[i].role ? r[i].private_bytes : r[i].device;
		if (i > 0)
			later[i - 1] = r[i].open_ms;
	}
	if (res->ok) {
		/* The region once: measured on the host, its size on a GPU. */
		res->device_bytes += o->cuda ? r[0].region : res->region_pss;
		res->resident = r[0].resident;
		res->first_ms = r[0].open_ms;
		qsort(later, (size_t)n - 1, sizeof(double), cmp_double);
		res->later_ms = n > 1 ? later[(n - 1) / 2] : 0;
	}
	close(out[0]);
	close(out[1]);
	for (int i = 0; i < k + (k < n); i++)
		if (write(go[1], "g", 1) != 1)
			break;
	close(go[0]);
	close(go[1]);
	for (int i = 0; i < k + (k < n && kids[k] > 0); i++)
		waitpid(kids[i], NULL, 0);
}

static void sd_print(bool json, int n, const struct sd_result *sh, const struct sd_result *pv)
{
	double bar_bytes = 1.05 * (double)sh->resident + (double)sh->private_sum;
	double ratio = sh->first_ms > 0 ? sh->later_ms / sh->first_ms : 0;

	if (json) {
		json_t *j = json_pack("{s:i, s:I, s:I, s:f, s:I, s:I, s:f, s:f, s:f, s:f, s:f, s:i, s:i, s:b, s:b}",
			"clients", n, "resident_bytes", (json_int_t)sh->resident,
			"device_bytes_shared", (json_int_t)sh->device_bytes, "bar_bytes", bar_bytes,
			"device_bytes_private", (json_int_t)pv->device_bytes,
			"region_pss_bytes", (json_int_t)sh->region_pss,
			"private_vs_shared", (double)pv->device_bytes / (double)sh->device_bytes,
			"first_open_ms", sh->first_ms, "later_open_ms", sh->later_ms,
			"later_vs_first", ratio, "private_open_ms", pv->later_ms,
			"writers", sh->writers, "readers", sh->readers,
			"bytes_within_bar", (double)sh->device_bytes <= bar_bytes,
			"open_within_bar", ratio <= 0.1);
		if (sh->used >= 0 && pv->used > 0)
			json_object_update_new(j, json_pack("{s:I, s:I, s:f}",
				"device_used_shared", (json_int_t)sh->used, "device_used_private", (json_int_t)pv->used,
				"device_used_private_vs_shared", (double)pv->used / (double)sh->used));
		json_dumpf(j, stdout, JSON_INDENT(2));
		putchar('\n');
		json_decref(j);
		return;
	}
	printf("%d workers, %.1f MiB resident each (%d filled the region, %d mapped it)\n", n,
	       (double)sh->resident / 1048576, sh->writers, sh->readers);
	printf("  device bytes, shared:  %9.1f MiB (region PSS %.1f MiB + slots %.1f MiB; bar <= %.1f MiB: %s)\n",
	       (double)sh->device_bytes / 1048576, (double)sh->region_pss / 1048576,
	       (double)sh->private_sum / 1048576, bar_bytes / 1048576,
	       bench_at_most((double)sh->device_bytes, bar_bytes));
	printf("  device bytes, private: %9.1f MiB   %.2fx shared\n", (double)pv->device_bytes / 1048576,
	       (double)pv->device_bytes / (double)sh->device_bytes);
	if (sh->used >= 0 && pv->used > 0)
		printf("  device memory taken (cuMemGetInfo): shared %.1f MiB, private %.1f MiB = %.2fx\n",
		       (double)sh->used / 1048576, (double)pv->used / 1048576, (double)pv->used / (double)sh->used);
	printf("  stream open: first %.1f ms, later (median) %.1f ms = %.3fx (bar <= 0.1x: %s); private %.1f ms\n",
	       sh->first_ms, sh->later_ms, ratio, bench_at_most(ratio, 0.1), pv->later_ms);
}

int bench_share_device(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "model", required_argument, NULL, 'm' }, { "clients", required_argument, NULL, 'n' },
		{ "device", required_argument, NULL, 'd' }, { "plan", required_argument, NULL, 'p' },
		{ "slots", required_argument, NULL, 's' }, { "json", no_argument, NULL, 'j' }, { 0 },
	};
	struct sd_opts o = { .slots = 2 };
	struct sd_result sh, pv;
	const char *path = NULL;
	struct bench_server bs = { 0 };
	int n = 4, json = 0, c;
	char spec[4200];

	optind = 1;
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 'm': path = optarg; break;
		case 'n': n = (int)cliarg_long("wsrv-bench share-device", "--clients", optarg, 2, MAX_CLIENTS); break;
		case 'd': o.cuda = strcmp(optarg, "cuda") == 0; break;
		case 'p': o.plan = optarg; break;
		case 's': o.slots = (unsigned)cliarg_long("wsrv-bench share-device", "--slots", optarg, 1, 64); break;
		case 'j': json = 1; break;
		default: return 2;
		}
	}
	if (!path || optind != argc) {
		fprintf(stderr, "usage: wsrv-bench share-device --model DIR [--clients 2..%d] [--device host|cuda]\n"
				"       [--plan FILE] [--slots D] [--json]\n", MAX_CLIENTS);
		return 2;
	}
	snprintf(spec, sizeof(spec), "m=%s", path);
	if (bench_server_start(&bs, (const char *[]){ spec }, 1) < 0) {
		fprintf(stderr, "wsrv-bench share-device: cannot start wsrvd\n");
		return 1;
	}
	signal(SIGPIPE, SIG_IGN);
	o.sock = bs.sock;
	o.share = WSRV_SHARE_ON;
	sd_run(&o, n, &sh);
	o.share = WSRV_SHARE_OFF;
	sd_run(&o, n, &pv);
	bench_server_stop(&bs);
	if (!sh.ok || !pv.ok) {
		fprintf(stderr, "wsrv-bench share-device: a worker failed\n");
		return 1;
	}
	sd_print(json, n, &sh, &pv);
	return 0;
}
