// SPDX-License-Identifier: MIT
/* bench_resolve.c - `wsrv-bench resolve`: resolving tensors and layers of an
 * attached model, locally. Counts the system calls made while resolving
 * every tensor by name and every layer by index (seccomp, see syscount.c)
 * and times a lookup, next to the baseline of asking the server for a layer
 * (a FetchLayer round trip), in the same run. */
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "bench_util.h"
#include "progress.h"
#include "syscount.h"
#include "wsrv.h"

struct work {
	struct wsrv_model *m;
	char **names;
	size_t n;
	int rounds;
	uint64_t sink;
};

/* Resolves every tensor by name and every layer by index, rounds times. */
static void resolve_all(void *arg)
{
	struct work *w = arg;

	for (int r = 0; r < w->rounds; r++) {
		for (size_t i = 0; i < w->n; i++) {
			struct wsrv_tensor t;
			if (wsrv_model_find(w->m, w->names[i], &t) == 0)
				w->sink += t.size + ((const uint8_t *)t.data)[0];
		}
		for (size_t i = 0; i < wsrv_model_layer_count(w->m); i++) {
			struct wsrv_layer l, l2;
			if (wsrv_model_layer_at(w->m, i, &l) == 0 && wsrv_model_layer(w->m, l.index, &l2) == 0)
				w->sink += l2.length;
		}
	}
}

static double fetch_us(struct wsrv_model *m)
{
	double v[2000];

	for (int i = 0; i < 2000; i++) {
		struct wsrv_lease l;
		double t0 = mono_now();
		if (wsrv_fetch_layer(m, 0, &l) < 0)
			return -1;
		v[i] = (mono_now() - t0) * 1e6;
		wsrv_release(m, l.id);
	}
	return percentile(v, 2000, 50);
}

int bench_resolve(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "model", required_argument, NULL, 'm' },
		{ "json", no_argument, NULL, 'j' },
		{ 0 },
	};
	struct work w = { .rounds = 200 };
	struct bench_server bs = { 0 };
	struct wsrv_client *c;
	const char *path = NULL;
	int json = 0, o;
	char spec[4200];

	optind = 1;
	while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		if (o == 'm') path = optarg;
		else if (o == 'j') json = 1;
		else return 2;
	}
	if (!path) {
		fprintf(stderr, "usage: wsrv-bench resolve --model DIR [--json]\n");
		return 2;
	}
	snprintf(spec, sizeof(spec), "m=%s", path);
	if (bench_server_start(&bs, (const char *[]){ spec }, 1) < 0 ||
	    wsrv_connect(bs.sock, NULL, &c) < 0 || wsrv_attach(c, "m", &w.m) < 0) {
		fprintf(stderr, "wsrv-bench resolve: cannot attach: %s\n", wsrv_last_error());
		return 1;
	}
	w.n = wsrv_model_tensor_count(w.m);
	w.names = calloc(w.n, sizeof(char *));
	for (size_t i = 0; i < w.n; i++) {
		struct wsrv_tensor t;
		wsrv_model_tensor(w.m, i, &t);
		w.names[i] = strdup(t.name);
	}
	int64_t calls = count_syscalls(resolve_all, &w);
	double t0 = mono_now();
	resolve_all(&w);
	double per = (mono_now() - t0) * 1e9 / ((double)w.rounds * (double)(w.n + 2 * wsrv_model_layer_count(w.m)));
	double rpc = fetch_us(w.m);
	size_t lookups = (size_t)w.rounds * (w.n + 2 * wsrv_model_layer_count(w.m));

	if (json)
		printf("{\"lookups\": %zu, \"syscalls\": %" PRId64 ", \"lookup_ns\": %.1f, \"fetch_rpc_us\": %.2f}\n",
		       lookups, calls, per, rpc);
	else
		printf("%zu local lookups (every tensor by name, every layer by index, %d rounds):\n"
		       "  system calls made        %" PRId64 "\n"
		       "  time per lookup          %.1f ns\n"
		       "  baseline: FetchLayer RPC %.2f us (%.0fx a local lookup)\n",
		       lookups, w.rounds, calls, per, rpc, rpc * 1e3 / per);
	for (size_t i = 0; i < w.n; i++)
		free(w.names[i]);
	free(w.names);
	wsrv_detach(w.m);
	wsrv_disconnect(c);
	bench_server_stop(&bs);
	return calls == 0 ? 0 : 1;
}
