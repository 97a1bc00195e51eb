// SPDX-License-Identifier: MIT
/* bench_copyd.c - `wsrv-bench copyd`: a worker joining a running wsrvd
 * through the copy service (wsrv-copyd), against the same join that
 * page-locks the weights itself, in the same run.
 *
 * One wsrvd holds the model. First today's path (WSRV_COPYD=off): the
 * median of --repeat joins. Then wsrv-copyd starts; a first join has it
 * lock the model (its figure is not counted), then --repeat joins through
 * it, then --workers at once (the slowest is join_n8_s). Each worker
 * reports its context's cost, the bytes it page-locked (0 through the
 * service) and the service's bytes, and checks its device bytes at
 * samples after it is ready. The baseline is the pinned copy of the same
 * bytes in this process; the bar, CUDA's context + 1.3x that + 0.1 s.
 * Workers on one GPU share one device copy of the resident tensors by
 * default (one fills it, through the service; the others map it);
 * --private gives each its own copy, as ranks with shards of their own
 * have: every one is then copied, one after another on the one link.
 * Pinned bytes in all: the test driver's ledger (every process's
 * registrations and pinned buffers, at the peak), or on a GPU the
 * service's registered bytes plus every worker's. */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"
#include "bench_files.h"
#include "bench_join.h"
#include "bench_util.h"
#include "cliarg.h"
#include "clock.h"
#include "copyd_run.h"

#define MAX_REPEAT 20
#define MAX_WORKERS 16

struct cd_cfg {
	const char *model;
	int repeat, workers;
	bool private_copies;
};

struct cd_figs {
	double old_s, join_s, n8_s, context_s, pinned_gbps, pinned_s, import_s;
	struct join_report old, last;
	uint64_t n8_registered, n8_fallbacks, bad_samples, samples, model_bytes, service_registered;
	long long ledger_peak;
	double ratio;
};

/* The median of repeat joins on sock (its last report in *last), or -1. */
static double joins(const char *sock, int repeat, struct join_report *last)
{
	double t[MAX_REPEAT];

	for (int i = 0; i < repeat; i++)
		if ((t[i] = join_once(sock, last)) < 0)
			return -1;
	return median(t, repeat);
}

/* n workers at once: the slowest's seconds, or -1; their page-locked
 * bytes, fallbacks and bad samples summed into f. */
static double at_once(const char *sock, int n, struct cd_figs *f)
{
	struct join_proc j[MAX_WORKERS];
	struct join_report r;
	double worst = 0, t;
	int started = 0;

	for (; started < n; started++)
		if (join_start(sock, &j[started]) < 0)
			break;
	for (int i = 0; i < started; i++) {
		if ((t = join_finish(&j[i], &r)) < 0)
			worst = -1;
		else if (worst >= 0 && t > worst)
			worst = t;
		f->n8_registered += r.register_bytes;
		f->n8_fallbacks += r.service_fallbacks;
		f->bad_samples += r.sampled_bad;
		f->samples += r.samples;
	}
	return started == n ? worst : -1;
}

/* The service's registered bytes, its models' bytes and its import time
 * per import, from `wsrv-copyd --stats`. */
static void service_figures(const char *sock, struct cd_figs *f)
{
	char cmd[600];
	json_t *o, *ms, *m;
	json_error_t err;
	size_t i;
	FILE *p;

	snprintf(cmd, sizeof(cmd), "'%s' --stats --socket '%s'", copyd_path(), sock);
	if (!(p = popen(cmd, "r")))
		return;
	o = json_loadf(p, 0, &err);
	pclose(p);
	if (!o)
		return;
	f->service_registered = (uint64_t)json_integer_value(json_object_get(o, "registered_bytes"));
	if (json_integer_value(json_object_get(o, "imports")) > 0)
		f->import_s = json_real_value(json_object_get(o, "import_seconds")) /
			      (double)json_integer_value(json_object_get(o, "imports"));
	ms = json_object_get(o, "models");
	json_array_foreach(ms, i, m)
		f->model_bytes += (uint64_t)json_integer_value(json_object_get(m, "bytes"));
	json_decref(o);
}

static void pinned_total(struct cd_figs *f)
{
	const char *p = getenv("FAKECUDA_LEDGER");

	/* The ledger is a file the test driver keeps: read it directly. */
	if (p) {
		FILE *fp = fopen(p, "rb");
		long long v[2];
		if (fp && fread(v, sizeof(v[0]), 2, fp) == 2)
			f->ledger_peak = v[1];
		if (fp)
			fclose(fp);
	}
	f->ratio = f->model_bytes ? (f->ledger_peak > 0 ? (double)f->ledger_peak
				     : (double)(f->service_registered + f->n8_registered)) / (double)f->model_bytes : 0;
}

static int with_service(const struct cd_cfg *c, const char *wsrvd_sock, const char *dir, struct cd_figs *f)
{
	struct copyd_proc p = { 0 };
	char sock[200], log[300], ledger[300];
	struct join_report warm;
	int rc = 1;

	snprintf(sock, sizeof(sock), "%s/copyd.sock", dir);
	snprintf(log, sizeof(log), "%s/copyd.log", dir);
	snprintf(ledger, sizeof(ledger), "%s/pinned.ledger", dir);
	if (!getenv("FAKECUDA_LEDGER"))
		setenv("FAKECUDA_LEDGER", ledger, 1); /* the test driver's; a GPU's ignores it */
	if (copyd_start(&p, sock, wsrvd_sock, log, NULL) < 0) {
		fprintf(stderr, "wsrv-bench copyd: wsrv-copyd did not start (%s)\n", log);
		return 1;
	}
	setenv("WSRV_COPYD", sock, 1);
	if (join_once(wsrvd_sock, &warm) >= 0 && (f->join_s = joins(wsrvd_sock, c->repeat, &f->last)) >= 0 &&
	    (f->n8_s = at_once(wsrvd_sock, c->workers, f)) >= 0)
		rc = 0;
	service_figures(sock, f);
	pinned_total(f);
	copyd_stop(&p, SIGTERM);
	return rc;
}

static void print_json(const struct cd_cfg *c, const struct cd_figs *f)
{
	double bar = f->last.context_s + 1.3 * f->pinned_s + 0.1;
	json_t *o = json_pack("{s:s, s:s, s:i, s:i, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:I, s:I, s:I, s:f, s:I,"
			      " s:I, s:f, s:f, s:b, s:f, s:f, s:I, s:I, s:f, s:f, s:n}",
		"device", "cuda", "copies", c->private_copies ? "private" : "shared (the default)",
		"repeat", c->repeat, "workers", c->workers,
		"join_s", f->join_s, "join_n8_s", f->n8_s, "join_n8_vs_one", f->join_s > 0 ? f->n8_s / f->join_s : 0,
		"context_s", f->last.context_s, "pinned_copy_s", f->pinned_s, "pinned_gbps", f->pinned_gbps,
		"import_s", f->import_s, "open_s", f->last.open_s,
		"worker_registered_bytes", (json_int_t)f->last.register_bytes,
		"workers_n8_registered_bytes", (json_int_t)f->n8_registered,
		"service_registered_bytes", (json_int_t)f->service_registered,
		"pinned_bytes_ratio_n8", f->ratio, "model_bytes", (json_int_t)f->model_bytes,
		"service_bytes", (json_int_t)f->last.service_bytes,
		"bar_s", bar, "old_join_s", f->old_s, "within_bar", f->join_s <= bar,
		"old_register_s", f->old.register_s, "old_open_s", f->old.open_s,
		"samples_checked", (json_int_t)(f->samples + f->last.samples + f->old.samples),
		"samples_bad", (json_int_t)(f->bad_samples + f->last.sampled_bad + f->old.sampled_bad),
		"join_vs_old", f->old_s > 0 ? f->join_s / f->old_s : 0, "attach_s", f->last.attach_s,
		"overlap");
	json_dumpf(o, stdout, JSON_INDENT(2));
	putchar('\n');
	json_decref(o);
}

static void print_text(const struct cd_cfg *c, const struct cd_figs *f)
{
	double bar = f->last.context_s + 1.3 * f->pinned_s + 0.1;

	printf("a worker joining through wsrv-copyd vs locking by itself; median of %d; %s device copies\n",
	       c->repeat, c->private_copies ? "private" : "shared (the default)");
	printf("  join, itself (WSRV_COPYD=off)       %7.3f s   (locking %.3f s of its open %.3f s)\n", f->old_s,
	       f->old.register_s, f->old.open_s);
	printf("  join, through the service           %7.3f s   %.2fx; bar context %.3f + 1.3 x pinned %.3f + 0.1 = %.3f s: %s\n",
	       f->join_s, f->old_s > 0 ? f->join_s / f->old_s : 0, f->last.context_s, f->pinned_s, bar,
	       bench_at_most(f->join_s, bar));
	printf("  %d at once, the slowest             %7.3f s   (%.2fx one)\n", c->workers, f->n8_s,
	       f->join_s > 0 ? f->n8_s / f->join_s : 0);
	printf("  page-locked by the workers: %llu bytes (last: %llu); by the service: %llu; pinned in all at the peak %.2fx the model\n",
	       (unsigned long long)f->n8_registered, (unsigned long long)f->last.register_bytes,
	       (unsigned long long)f->service_registered, f->ratio);
	printf("  last join: attach %.3f s (context %.3f s of it), open %.3f s; itself: attach %.3f s, open %.3f s\n",
	       f->last.attach_s, f->last.context_s, f->last.open_s, f->old.attach_s, f->old.open_s);
	printf("  import of a buffer %.4f s; samples checked %llu, bad %llu\n", f->import_s,
	       (unsigned long long)(f->samples + f->last.samples + f->old.samples),
	       (unsigned long long)(f->bad_samples + f->last.sampled_bad + f->old.sampled_bad));
}

static int copyd_runs(const struct cd_cfg *c, bool json)
{
	struct bench_server bs = { 0 };
	struct cd_figs f = { 0 };
	char spec[4200];
	const char *specs[1] = { spec };
	int rc = 1;

	snprintf(spec, sizeof(spec), "m=%s", c->model);
	if (bench_server_start(&bs, specs, 1) < 0)
		return 1;
	if (c->private_copies)
		setenv("WSRV_BENCH_JOIN_SHARE", "off", 1);
	setenv("WSRV_COPYD", "off", 1);
	if ((f.old_s = joins(bs.sock, c->repeat, &f.old)) < 0)
		fprintf(stderr, "wsrv-bench copyd: a join by itself failed\n");
	else if (with_service(c, bs.sock, bs.dir, &f) != 0)
		fprintf(stderr, "wsrv-bench copyd: a join through the service failed\n");
	else if ((f.pinned_gbps = pinned_gbps(f.last.copied_bytes)) <= 0)
		fprintf(stderr, "wsrv-bench copyd: the pinned copy failed\n");
	else
		rc = 0;
	bench_server_stop(&bs);
	if (rc)
		return rc;
	f.pinned_s = (double)f.last.copied_bytes / (f.pinned_gbps * 1e9);
	(json ? print_json : print_text)(c, &f);
	return f.bad_samples || f.last.sampled_bad || f.old.sampled_bad || f.last.register_bytes ? 1 : 0;
}

int bench_copyd(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "model", required_argument, NULL, 'm' }, { "repeat", required_argument, NULL, 'r' },
		{ "workers", required_argument, NULL, 'w' }, { "json", no_argument, NULL, 'j' },
		{ "private", no_argument, NULL, 'p' }, { 0 },
	};
	struct cd_cfg c = { .repeat = 5, .workers = 8 };
	bool json = false, bad = false;
	int o;

	optind = 1;
	while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		if (o == 'm') c.model = optarg;
		else if (o == 'r') c.repeat = (int)cliarg_long("wsrv-bench copyd", "--repeat", optarg, 1, MAX_REPEAT);
		else if (o == 'w') c.workers = (int)cliarg_long("wsrv-bench copyd", "--workers", optarg, 1, MAX_WORKERS);
		else if (o == 'j') json = true;
		else if (o == 'p') c.private_copies = true;
		else bad = true;
	}
	if (bad || !c.model || optind != argc) {
		fprintf(stderr, "usage: wsrv-bench copyd --model DIR [--repeat 1..%d] [--workers 1..%d] [--private] [--json]\n",
			MAX_REPEAT, MAX_WORKERS);
		return 2;
	}
	return copyd_runs(&c, json);
}
