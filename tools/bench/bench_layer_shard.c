// SPDX-License-Identifier: MIT
/* bench_layer_shard.c - `wsrv-bench layer-shard`: a group of K workers,
 * each its own process on its own device (cuda: ordinals 0..K-1), over a
 * model's layer-sharded series (DeepSeek-V3's o_proj and q_b_proj:
 * layer_shard:K), the rest of the model resident. Once with the series'
 * source on the owner's device (layer_shard:K:peer), once on host memory
 * (the baseline), in the same run. Each worker acquires every layer,
 * "computes" for --compute-us, releases, for --passes passes.
 *
 * Reported per source: the series' host-to-device bytes over the run (the
 * owners' fills, and every layer a rank streams from host memory), bytes
 * copied from peers, the link's rate (bytes over the copy engine's time
 * on the layers), the hidden fraction (the median worker's), a pass's
 * wall time (the slowest worker's), and each device's bytes for the
 * series. Bars: the peer run's host-to-device bytes of the series at most
 * 1.05x one copy of it; its hidden fraction at least 0.9. */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#include "bench_util.h"
#include "cliarg.h"
#include "clock.h"
#include "wsrv.h"

#define LS_MAX 8
#define P "wsrv-bench layer-shard"

struct ls_opts {
	const char *sock;
	bool cuda, peer;
	int k, passes;
	long compute_us;
};

struct ls_report {
	int ok;
	double pass_s;              /* its passes' time over their number */
	struct wsrv_stream_stats st;
};

static bool in_series(const char *name)
{
	return strstr(name, ".self_attn.o_proj.") || strstr(name, ".self_attn.q_b_proj.");
}

/* The plan: the series layer-sharded (from peers or host memory), every
 * other tensor of a layer resident, so that only the series streams. */
static int make_plan(const struct ls_opts *o, struct wsrv_plan **out)
{
	char json[1024];
	const char *src = o->peer ? ":peer" : "";

	snprintf(json, sizeof(json),
		 "{\"residency\": {\"layers.*.self_attn.o_proj\": \"layer_shard:%d%s\","
		 " \"layers.*.self_attn.q_b_proj\": \"layer_shard:%d%s\","
		 " \"layers.*.*\": \"resident\", \"layers.*.*.*\": \"resident\", \"layers.*.*.*.*\": \"resident\","
		 " \"layers.*.*.*.*.*\": \"resident\", \"layers.*.*.*.*.*.*\": \"resident\"}}",
		 o->k, src, o->k, src);
	return wsrv_plan_parse(json, strlen(json), out);
}

static struct wsrv_device *ls_device(const struct ls_opts *o, int rank)
{
	struct wsrv_device *d = NULL;
	char name[32];

	if (o->cuda) {
		struct wsrv_cuda_opts co = { .struct_size = sizeof(co), .device = rank };
		wsrv_device_cuda(&co, &d);
	} else {
		snprintf(name, sizeof(name), "host:shard%d", rank);
		struct wsrv_host_opts ho = { .struct_size = sizeof(ho), .numa_node = -1, .device_name = name };
		wsrv_device_host(&ho, &d);
	}
	return d;
}

static int ls_passes(struct wsrv_model *m, struct wsrv_stream *s, const struct ls_opts *o)
{
	for (int k = 0; k < o->passes; k++)
		for (size_t li = 0; li < wsrv_model_layer_count(m); li++) {
			struct wsrv_layer l;
			wsrv_model_layer_at(m, li, &l);
			if (l.index < 0)
				continue;
			if (wsrv_stream_acquire(s, l.index) < 0)
				return -1;
			nanosleep(&(struct timespec){ o->compute_us / 1000000, o->compute_us % 1000000 * 1000 }, NULL);
			wsrv_stream_release(s, l.index);
		}
	return 0;
}

/* Worker rank: opens its stream, says so, waits for the go, makes its
 * passes, reports. */
static int ls_worker(const struct ls_opts *o, int rank, int out, int go)
{
	struct wsrv_stream_opts so = { .struct_size = sizeof(so), .slots = 2, .rank = rank, .world = o->k };
	struct ls_report r = { 0 };
	struct wsrv_client *c;
	struct wsrv_model *m;
	struct wsrv_device *d;
	struct wsrv_plan *p = NULL;
	struct wsrv_stream *s = NULL;
	double t0;
	char b = 'o';

	if (wsrv_connect(o->sock, NULL, &c) < 0 || wsrv_attach(c, "m", &m) < 0 || !(d = ls_device(o, rank)) ||
	    make_plan(o, &p) < 0 || wsrv_stream_open(m, d, p, &so, &s) < 0) {
		fprintf(stderr, "wsrv-bench layer-shard: rank %d: %s\n", rank, wsrv_last_error());
		b = 'x';
	}
	if (write(out, &b, 1) != 1 || read(go, &b, 1) != 1 || !s)
		return 1;
	t0 = mono_now();
	if (ls_passes(m, s, o) == 0) {
		r.ok = 1;
		r.pass_s = (mono_now() - t0) / o->passes;
		r.st.struct_size = sizeof(r.st);
		wsrv_stream_stats(s, &r.st);
	} else {
		fprintf(stderr, "wsrv-bench layer-shard: rank %d: %s\n", rank, wsrv_last_error());
	}
	wsrv_stream_close(s);
	return write(out, &r, sizeof(r)) == (ssize_t)sizeof(r) ? 0 : 1;
}

struct ls_result {
	bool ok;
	double pass_s, hidden, link_gbps;
	uint64_t h2d_series, peer_bytes, device_series_max;
};

/* K workers at once, opened first, then timed together. */
static void ls_run(const struct ls_opts *o, uint64_t series, struct ls_result *res)
{
	pid_t kid[LS_MAX];
	int out[LS_MAX][2], go[LS_MAX][2], n = 0;
	struct ls_report r[LS_MAX];
	double hidden[LS_MAX], copy_s = 0;
	uint64_t copied = 0;
	char b;

	memset(res, 0, sizeof(*res));
	for (; n < o->k; n++) {
		if (pipe(out[n]) < 0 || pipe(go[n]) < 0 || (kid[n] = fork()) < 0)
			break;
		if (kid[n] == 0) {
			close(out[n][0]);
			close(go[n][1]);
			_exit(ls_worker(o, n, out[n][1], go[n][0]));
		}
		close(out[n][1]);
		close(go[n][0]);
	}
	res->ok = n == o->k;
	for (int i = 0; i < n; i++)
		res->ok = read(out[i][0], &b, 1) == 1 && b == 'o' && res->ok;
	for (int i = 0; i < n; i++)
		if (write(go[i][1], "g", 1) != 1)
			res->ok = false;
	for (int i = 0; i < n; i++) {
		res->ok = read(out[i][0], &r[i], sizeof(r[i])) == (ssize_t)sizeof(r[i]) && r[i].ok && res->ok;
		close(out[i][0]);
		close(go[i][1]);
		waitpid(kid[i], NULL, 0);
	}
	for (int i = 0; res->ok && i < n; i++) {
		uint64_t region = r[i].st.device_bytes - r[i].st.resident_bytes - r[i].st.slots * r[i].st.slot_bytes;
		res->pass_s = r[i].pass_s > res->pass_s ? r[i].pass_s : res->pass_s;
		hidden[i] = r[i].st.hidden_fraction;
		res->peer_bytes += r[i].st.peer_bytes;
		/* Host to device: each layer its owner fills (peer source), and
		 * what a rank streams from host memory. */
		res->h2d_series += o->peer ? r[i].st.peer_host_bytes : r[i].st.bytes_copied;
		copied += r[i].st.bytes_copied;
		copy_s += r[i].st.copy_seconds;
		res->device_series_max = region > res->device_series_max ? region : res->device_series_max;
	}
	if (!res->ok)
		return;
	res->h2d_series += series; /* the owners' fills (or resident uploads): each layer once */
	qsort(hidden, (size_t)n, sizeof(double), cmp_double);
	res->hidden = hidden[n / 2];
	res->link_gbps = copy_s > 0 ? (double)copied / copy_s / 1e9 : 0;
}

/* The series' bytes, from the served model. */
static uint64_t series_of(const char *sock)
{
	struct wsrv_client *c;
	struct wsrv_model *m;
	uint64_t n = 0;

	if (wsrv_connect(sock, NULL, &c) < 0)
		return 0;
	if (wsrv_attach(c, "m", &m) == 0) {
		for (size_t i = 0; i < wsrv_model_tensor_count(m); i++) {
			struct wsrv_tensor t;
			wsrv_model_tensor(m, i, &t);
			if (in_series(t.name) && t.layer >= 0)
				n += t.size;
		}
		wsrv_detach(m);
	}
	wsrv_disconnect(c);
	return n;
}

static json_t *ls_json(const struct ls_result *r)
{
	return json_pack("{s:f, s:f, s:f, s:I, s:I, s:I}", "pass_s", r->pass_s, "hidden_fraction", r->hidden,
			 "link_gbps", r->link_gbps, "h2d_series_bytes", (json_int_t)r->h2d_series,
			 "peer_bytes", (json_int_t)r->peer_bytes, "device_series_bytes_max",
			 (json_int_t)r->device_series_max);
}

static void ls_print(const struct ls_opts *o, uint64_t series, const struct ls_result *pe,
		     const struct ls_result *ho, bool json)
{
	double x = series ? (double)pe->h2d_series / (double)series : 0;

	if (json) {
		json_t *j = json_pack("{s:i, s:s, s:i, s:I, s:o, s:o, s:f, s:b, s:b}", "workers", o->k,
				      "device", o->cuda ? "cuda" : "host", "passes", o->passes,
				      "series_bytes", (json_int_t)series, "peer", ls_json(pe), "host", ls_json(ho),
				      "peer_h2d_vs_one_copy", x, "h2d_within_bar", x <= 1.05,
				      "hidden_within_bar", pe->hidden >= 0.9);
		json_dumpf(j, stdout, JSON_INDENT(2));
		putchar('\n');
		json_decref(j);
		return;
	}
	printf("%d workers on %d %s devices, layer_shard:%d over o_proj and q_b_proj (%.1f MiB), %d passes\n", o->k,
	       o->k, o->cuda ? "cuda" : "host", o->k, (double)series / 1048576, o->passes);
	printf("  from the owner's device: host-to-device %.1f MiB = %.2fx one copy (bar 1.05: %s); %.1f MiB from "
	       "peers at %.1f GB/s; hidden %.2f (bar 0.9: %s); a pass %.3f s; a device holds %.1f MiB of it\n",
	       (double)pe->h2d_series / 1048576, x, bench_at_most(x, 1.05), (double)pe->peer_bytes / 1048576,
	       pe->link_gbps, pe->hidden, bench_at_least(pe->hidden, 0.9), pe->pass_s,
	       (double)pe->device_series_max / 1048576);
	printf("  from host memory (baseline): host-to-device %.1f MiB = %.2fx one copy at %.1f GB/s; hidden %.2f; "
	       "a pass %.3f s\n", (double)ho->h2d_series / 1048576,
	       series ? (double)ho->h2d_series / (double)series : 0, ho->link_gbps, ho->hidden, ho->pass_s);
}

int bench_layer_shard(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "model", required_argument, NULL, 'm' }, { "workers", required_argument, NULL, 'w' },
		{ "device", required_argument, NULL, 'd' }, { "passes", required_argument, NULL, 'p' },
		{ "compute-us", required_argument, NULL, 'c' }, { "json", no_argument, NULL, 'j' }, { 0 } };
	struct ls_opts o = { .k = 4, .passes = 3, .compute_us = 500 };
	struct bench_server bs = { 0 };
	struct ls_result pe, ho;
	const char *model = NULL;
	char spec[4200];
	bool json = false;
	int c, rc = 1;

	optind = 1;
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 'm': model = optarg; break;
		case 'w': o.k = (int)cliarg_long(P, "--workers", optarg, 2, LS_MAX); break;
		case 'p': o.passes = (int)cliarg_long(P, "--passes", optarg, 1, 100); break;
		case 'c': o.compute_us = cliarg_long(P, "--compute-us", optarg, 0, 1000000); break;
		case 'd':
			if (strcmp(optarg, "host") && strcmp(optarg, "cuda"))
				goto usage;
			o.cuda = strcmp(optarg, "cuda") == 0;
			break;
		case 'j': json = true; break;
		default: goto usage;
		}
	}
	if (!model || optind != argc)
		goto usage;
	snprintf(spec, sizeof(spec), "m=%s", model);
	if (bench_server_start(&bs, (const char *[]){ spec }, 1) < 0) {
		fprintf(stderr, "wsrv-bench layer-shard: wsrvd did not start on %s\n", model);
		return 1;
	}
	o.sock = bs.sock;
	uint64_t series = series_of(bs.sock);
	o.peer = true;
	ls_run(&o, series, &pe);
	o.peer = false;
	ls_run(&o, series, &ho);
	if (!series || !pe.ok || !ho.ok)
		fprintf(stderr, "wsrv-bench layer-shard: %s\n",
			!series ? "the model has no o_proj or q_b_proj series (a DeepSeek-V3 layout)" : "a worker failed");
	else {
		ls_print(&o, series, &pe, &ho, json);
		rc = 0;
	}
	bench_server_stop(&bs);
	return rc;
usage:
	fprintf(stderr, "usage: wsrv-bench layer-shard --model DIR [--workers 2..%d] [--device host|cuda] [--passes N] "
		"[--compute-us US] [--json]\n", LS_MAX);
	return 2;
}
