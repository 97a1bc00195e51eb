// SPDX-License-Identifier: MIT
/* bench_publish.c - `wsrv-bench publish`: a producer publishing a new
 * generation of a model, against a single-thread memcpy of the same bytes
 * into fresh memory (the baseline, same run).
 *
 * publish_gbps: the model's bytes over the time from wsrv_publish_begin
 * through filling every tensor (wsrv_publish_write from the producer's
 * own memory) to wsrv_publish_commit returning (sealed, checksummed,
 * published). The bar is a memcpy of the same bytes into fresh memory,
 * which the publish's bytes are too.
 * switch_ms: from the start of the commit until a worker that streams the
 * model (another process, polling for events between passes) has run a
 * whole pass on the new generation. */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"
#include "bench_util.h"
#include "cliarg.h"
#include "clock.h"
#include "wsrv.h"

/* One pass: every layer acquired and released. */
static int pass(struct wsrv_model *m, struct wsrv_stream *s)
{
	for (size_t i = 0; i < wsrv_model_layer_count(m); i++) {
		struct wsrv_layer l;
		wsrv_model_layer_at(m, i, &l);
		if (wsrv_stream_acquire(s, l.index) < 0)
			return -1;
		wsrv_stream_release(s, l.index);
	}
	return 0;
}

/* The worker: streams; when told of a new generation, switches and writes
 * the time its first pass on it ended. */
static int publish_worker(const char *sock, int out)
{
	struct wsrv_client *c;
	struct wsrv_model *m;
	struct wsrv_device *d;
	struct wsrv_stream *s;
	char ready = 'r';

	if (wsrv_connect(sock, NULL, &c) < 0 || wsrv_attach(c, "m", &m) < 0 ||
	    wsrv_device_host(NULL, &d) < 0 || wsrv_stream_open(m, d, NULL, NULL, &s) < 0)
		return 1;
	if (write(out, &ready, 1) != 1)
		return 1;
	for (double end = mono_now() + 120; mono_now() < end;) {
		if (pass(m, s) < 0)
			return 1;
		if (wsrv_client_poll_events(c) > 0) {
			wsrv_stream_close(s);
			wsrv_detach(m);
			if (wsrv_attach(c, "m", &m) < 0 || wsrv_stream_open(m, d, NULL, NULL, &s) < 0 || pass(m, s) < 0)
				return 1;
			double t = mono_now();
			return write(out, &t, sizeof(t)) == sizeof(t) ? 0 : 1;
		}
	}
	return 1;
}

/* Copies of every tensor's bytes, in the producer's own memory. */
static uint8_t *source(struct wsrv_model *m, uint64_t *total)
{
	uint8_t *buf, *p;

	*total = 0;
	for (size_t i = 0; i < wsrv_model_tensor_count(m); i++) {
		struct wsrv_tensor t;
		wsrv_model_tensor(m, i, &t);
		*total += t.size;
	}
	if (!(buf = malloc(*total ? *total : 1)))
		return NULL;
	p = buf;
	for (size_t i = 0; i < wsrv_model_tensor_count(m); i++) {
		struct wsrv_tensor t;
		wsrv_model_tensor(m, i, &t);
		memcpy(p, t.data, t.size);
		p[0] ^= 1; /* other bytes than the current generation's */
		p += t.size;
	}
	return buf;
}

static int publish(struct wsrv_client *c, struct wsrv_model *m, const uint8_t *src, double *t_commit)
{
	struct wsrv_publish *p;
	int r = wsrv_publish_begin(c, "m", &p);

	for (size_t i = 0; r == 0 && i < wsrv_model_tensor_count(m); i++) {
		struct wsrv_tensor t;
		wsrv_model_tensor(m, i, &t);
		r = wsrv_publish_write(p, t.name, 0, src, t.size);
		src += t.size;
	}
	if (r < 0)
		return r;
	*t_commit = mono_now();
	return wsrv_publish_commit(p, NULL);
}

/* The baselines: one memcpy of total bytes into fresh memory (*fresh, as
 * the publish writes into new pages), and again into the same, now
 * present, pages (the return value: the copy alone). */
static double memcpy_gbps(const uint8_t *src, uint64_t total, double *fresh)
{
	uint8_t *dst = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	double t0 = mono_now(), t;

	if (dst == MAP_FAILED)
		return 0;
	memcpy(dst, src, total);
	*fresh = (double)total / (mono_now() - t0) / 1e9;
	t0 = mono_now();
	memcpy(dst, src, total);
	t = mono_now() - t0;
	munmap(dst, total);
	return (double)total / t / 1e9;
}

int bench_publish(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "model", required_argument, NULL, 'm' }, { "json", no_argument, NULL, 'j' }, { 0 },
	};
	struct bench_server bs = { 0 };
	struct wsrv_client *c;
	struct wsrv_model *m;
	const char *path = NULL;
	char spec[4200], uid[16], ready;
	int json = 0, o, pfd[2];
	double t_commit = 0, t_switch = 0;
	uint64_t total;

	optind = 1;
	while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		if (o == 'm') path = optarg;
		else if (o == 'j') json = 1;
		else return 2;
	}
	if (!path || optind != argc) {
		fprintf(stderr, "usage: wsrv-bench publish --model DIR [--json]\n");
		return 2;
	}
	snprintf(spec, sizeof(spec), "m=%s", path);
	snprintf(uid, sizeof(uid), "%u", (unsigned)getuid());
	bs.extra[0] = "--allow-publish-uid";
	bs.extra[1] = uid;
	if (bench_server_start(&bs, (const char *[]){ spec }, 1) < 0 || pipe(pfd) < 0) {
		fprintf(stderr, "wsrv-bench publish: cannot start wsrvd\n");
		return 1;
	}
	pid_t w = fork();
	if (w == 0) {
		close(pfd[0]);
		_exit(publish_worker(bs.sock, pfd[1]));
	}
	close(pfd[1]);
	if (wsrv_connect(bs.sock, NULL, &c) < 0 || wsrv_attach(c, "m", &m) < 0 || read(pfd[0], &ready, 1) != 1) {
		fprintf(stderr, "wsrv-bench publish: %s\n", wsrv_last_error());
		bench_server_stop(&bs);
		return 1;
	}
	uint8_t *src = source(m, &total);
	double fresh = 0, base = src ? memcpy_gbps(src, total, &fresh) : 0;
	double t0 = mono_now();
	int r = src ? publish(c, m, src, &t_commit) : -ENOMEM;
	double took = mono_now() - t0;
	if (r == 0 && read(pfd[0], &t_switch, sizeof(t_switch)) != sizeof(t_switch))
		r = -EIO;
	waitpid(w, NULL, 0);
	close(pfd[0]);
	free(src);
	wsrv_detach(m);
	wsrv_disconnect(c);
	bench_server_stop(&bs);
	if (r < 0) {
		fprintf(stderr, "wsrv-bench publish: %s\n", wsrv_last_error());
		return 1;
	}
	double gbps = (double)total / took / 1e9, sw = (t_switch - t_commit) * 1e3;
	double fill_s = t_commit - t0, commit_s = took - fill_s;
	if (json) {
		json_t *j = json_pack("{s:s, s:I, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:b}", "model", path,
				      "bytes", (json_int_t)total, "publish_gbps", gbps, "memcpy_gbps", base,
				      "fill_s", fill_s, "commit_s", commit_s,
				      "memcpy_fresh_gbps", fresh, "publish_vs_memcpy", gbps / base,
				      "publish_vs_fresh", gbps / fresh, "switch_ms", sw,
				      "within_bar", gbps >= 0.8 * fresh);
		json_dumpf(j, stdout, JSON_INDENT(2));
		putchar('\n');
		json_decref(j);
	} else {
		printf("%s: %.1f MiB\n  memcpy, single thread, into fresh pages %6.2f GB/s (baseline; %.2f GB/s into present ones)\n"
		       "  publish (write, seal, checksum, publish) %6.2f GB/s = %.2fx the fresh memcpy (bar >= 0.8x: %s), %.2fx the other\n"
		       "    writing %.3f s, committing (seal, checksum, publish) %.3f s\n"
		       "  commit to a streaming worker's first pass on it: %.1f ms\n",
		       path, (double)total / 1048576, fresh, base, gbps, gbps / fresh, bench_at_least(gbps / fresh, 0.8),
		       gbps / base, fill_s, commit_s, sw);
	}
	return 0;
}
