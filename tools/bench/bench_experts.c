// SPDX-License-Identifier: MIT
/* bench_experts.c - `wsrv-bench experts`: a MoE worker whose device holds
 * a quarter of the experts, fetching the routed ones on demand, against
 * streaming whole layers and against everything resident, in one run.
 *
 * The host backend plays the device, its copy engine paced to a PCIe-like
 * link. Each step is one forward pass of a batch: every layer acquired in
 * turn, and in a MoE layer the union of the batch's routed experts "used"
 * by hashing each one's device bytes (XXH3), which stands in for the
 * expert GEMMs and gives the step's "logits": the three modes must agree
 * bit for bit. On demand, the next layer's experts are prefetched with the
 * previous step's routing. Routing: uniform and Zipf (s = 1.0, 1.2), batch
 * 1 and 16; the first steps warm the cache and are not timed. */
#include <errno.h>
#include <getopt.h>
#include <stdbool.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "bench.h"
#include "bench_experts.h"
#include "bench_routing.h"
#include "bench_util.h"
#include "cliarg.h"
#include "clock.h"
#include "wsrv.h"

#define P "wsrv-bench experts"
#define RULE "\"layers.*.mlp.experts.*.*\": \"experts_on_demand\""

/* Tensor i's layer and expert, when it is a routed expert's (layers
 * below 8192). */
static bool expert_at(struct wsrv_model *m, size_t i, int32_t *layer, long *expert)
{
	struct wsrv_tensor t;
	const char *p;

	wsrv_model_tensor(m, i, &t);
	p = strstr(t.name, ".experts.");
	if (!p || sscanf(t.name, "model.layers.%d.", layer) != 1 || *layer < 0 || *layer >= 8192)
		return false;
	*expert = strtol(p + 9, NULL, 10);
	return *expert >= 0;
}

int moe_index(struct wsrv_model *m, struct moe *x)
{
	size_t n = wsrv_model_tensor_count(m), nlayers = wsrv_model_layer_count(m);
	uint32_t *pos = calloc(nlayers + 8192, sizeof(*pos));

	x->m = m;
	x->layer = calloc(nlayers + 1, sizeof(*x->layer));
	if (!pos || !x->layer)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) { /* the MoE layers and the experts' count */
		int32_t l;
		long e;
		if (!expert_at(m, i, &l, &e))
			continue;
		if (!pos[l])
			x->layer[(pos[l] = (uint32_t)++x->nl) - 1] = l;
		if ((uint32_t)e + 1 > x->experts)
			x->experts = (uint32_t)e + 1;
	}
	if (!x->nl || x->experts > 4096) {
		free(pos);
		return -EINVAL;
	}
	x->tens = calloc(x->nl * x->experts, sizeof(*x->tens));
	x->ntens = calloc(x->nl * x->experts, sizeof(*x->ntens));
	for (size_t i = 0; x->tens && x->ntens && i < n; i++) {
		int32_t l;
		long e;
		if (!expert_at(m, i, &l, &e))
			continue;
		size_t k = (pos[l] - 1) * x->experts + (size_t)e;
		uint32_t *v = realloc(x->tens[k], (x->ntens[k] + 1) * sizeof(*v));
		if (!v)
			break;
		v[x->ntens[k]++] = (uint32_t)i;
		x->tens[k] = v;
	}
	free(pos);
	return x->tens && x->ntens ? 0 : -ENOMEM;
}

void moe_free(struct moe *x)
{
	for (size_t k = 0; x->tens && k < x->nl * x->experts; k++)
		free(x->tens[k]);
	free(x->tens);
	free(x->ntens);
	free(x->layer);
}

/* "Computes" with experts ids of MoE layer l: hashes each one's device
 * bytes into h. */
static int use_experts(struct wsrv_stream *s, const struct moe *x, size_t l, const uint32_t *ids,
		       size_t n, XXH64_hash_t *h)
{
	for (size_t k = 0; k < n; k++) {
		size_t e = l * x->experts + ids[k];
		for (uint32_t j = 0; j < x->ntens[e]; j++) {
			struct wsrv_tensor t;
			void *d;
			wsrv_model_tensor(x->m, x->tens[e][j], &t);
			if (wsrv_stream_tensor_at(s, x->tens[e][j], &d) < 0)
				return -1;
			*h = XXH3_64bits_withSeed(d, t.size, *h);
		}
	}
	return 0;
}

/* The same resident set in every mode, all but the routed experts (the
 * attention, router and shared expert: a few percent of a MoE layer);
 * the experts stream with their layer, come on demand, or stay too. */
static const char *plan_for(enum xp_mode md, double cache, char *buf, size_t cap)
{
	if (md == RESIDENT)
		return "{\"budget\": \"1T\"}";
	if (md == LAYERS)
		return "{\"residency\": {\"layers.*.mlp.experts.*.*\": \"streamed\"}, \"budget\": \"1T\"}";
	snprintf(buf, cap, "{\"residency\": {" RULE "}, \"budget\": \"1T\", \"expert_cache\": {\"fraction\": %g}}",
		 cache);
	return buf;
}

static struct wsrv_stream *open_mode(const struct moe *x, struct wsrv_device *d, enum xp_mode md,
				     double cache)
{
	struct wsrv_stream_opts so = { .struct_size = sizeof(so), .slots = 2, .share = WSRV_SHARE_OFF };
	struct wsrv_plan *p = NULL;
	struct wsrv_stream *s = NULL;
	char buf[256];
	const char *json = plan_for(md, cache, buf, sizeof(buf));

	if ((json && wsrv_plan_parse(json, strlen(json), &p) < 0) || wsrv_stream_open(x->m, d, p, &so, &s) < 0)
		fprintf(stderr, P ": %s\n", wsrv_last_error());
	wsrv_plan_free(p);
	return s;
}

/* One step: every layer acquired in order; MoE layers use routing[l]. */
static int step(struct wsrv_stream *s, const struct moe *x, enum xp_mode md, bool prefetch,
		uint32_t **ids, size_t *n, uint32_t **prev, size_t *nprev, XXH64_hash_t *h)
{
	size_t moe = 0;

	for (size_t i = 0; i < wsrv_model_layer_count(x->m); i++) {
		struct wsrv_layer L;
		wsrv_model_layer_at(x->m, i, &L);
		if (L.index < 0)
			continue;
		if (wsrv_stream_acquire(s, L.index) < 0)
			return -1;
		if (moe < x->nl && x->layer[moe] == L.index) {
			if (md == ON_DEMAND && prefetch && moe + 1 < x->nl && nprev[moe + 1])
				wsrv_stream_prefetch_experts(s, x->layer[moe + 1], prev[moe + 1], nprev[moe + 1]);
			if ((md == ON_DEMAND && wsrv_stream_acquire_experts(s, L.index, ids[moe], n[moe], NULL) < 0) ||
			    use_experts(s, x, moe, ids[moe], n[moe], h) < 0 ||
			    (md == ON_DEMAND && wsrv_stream_release_experts(s, L.index) < 0))
				return -1;
			moe++;
		}
		if (wsrv_stream_release(s, L.index) < 0)
			return -1;
	}
	return 0;
}

/* Counters now: bytes the stream copied (layers and experts) and the
 * expert cache's. */
static void counters(struct wsrv_stream *s, struct xp_result *r)
{
	struct wsrv_stream_stats st;
	struct wsrv_expert_stats xs = { 0 };

	wsrv_stream_stats(s, &st);
	if (wsrv_stream_expert_stats(s, WSRV_LAYER_ALL, &xs) < 0)
		memset(&xs, 0, sizeof(xs));
	r->bytes = st.bytes_copied + xs.bytes_copied;
	r->hits = xs.hits;
	r->misses = xs.misses;
	r->prefetches = xs.prefetches;
	r->prefetch_hits = xs.prefetch_hits;
}

int experts_run(const struct moe *x, const struct xp_cfg *c, enum xp_mode md, double zipf, unsigned batch,
		struct xp_result *out)
{
	struct wsrv_host_opts ho = { .struct_size = sizeof(ho), .bandwidth_gbps = c->bandwidth, .numa_node = -1 };
	uint32_t **ids = calloc(x->nl, sizeof(*ids)), **prev = calloc(x->nl, sizeof(*prev));
	size_t *n = calloc(x->nl, sizeof(*n)), *np = calloc(x->nl, sizeof(*np));
	struct xp_result c0 = { 0 }, c1;
	struct routing rt;
	struct wsrv_device *d = NULL;
	struct wsrv_stream *s = NULL;
	int r = -1;

	memset(out, 0, sizeof(*out));
	if (!ids || !prev || !n || !np || routing_init(&rt, x->nl, x->experts, c->topk, zipf, 42) < 0)
		goto out;
	for (size_t l = 0; l < x->nl; l++)
		if (!(ids[l] = calloc(x->experts, sizeof(**ids))) || !(prev[l] = calloc(x->experts, sizeof(**prev))))
			goto out;
	if (wsrv_device_host(&ho, &d) < 0 || !(s = open_mode(x, d, md, c->cache)))
		goto out;
	for (unsigned k = 0; k < c->warm + c->steps; k++) {
		if (k == c->warm) {
			counters(s, &c0);
			if (c->mark)
				c->mark(c->mark_arg);
			out->seconds = mono_now();
		}
		for (size_t l = 0; l < x->nl; l++) {
			memcpy(prev[l], ids[l], n[l] * sizeof(**ids));
			np[l] = n[l];
			n[l] = routing_step(&rt, l, batch, ids[l]);
		}
		if (step(s, x, md, c->prefetch, ids, n, prev, np, &out->logits) < 0) {
			fprintf(stderr, P ": step %u: %s\n", k, wsrv_last_error());
			goto out;
		}
	}
	out->seconds = mono_now() - out->seconds;
	counters(s, &c1);
	out->bytes = c1.bytes - c0.bytes;
	out->hits = c1.hits - c0.hits;
	out->misses = c1.misses - c0.misses;
	out->prefetches = c1.prefetches - c0.prefetches;
	out->prefetch_hits = c1.prefetch_hits - c0.prefetch_hits;
	r = 0;
out:
	wsrv_stream_close(s);
	wsrv_device_destroy(d);
	for (size_t l = 0; ids && prev && l < x->nl; l++) {
		free(ids[l]);
		free(prev[l]);
	}
	routing_free(&rt);
	free(ids);
	free(prev);
	free(n);
	free(np);
	return r;
}

static const struct trace {
	const char *name;
	double s;
} traces[] = { { "uniform", 0 }, { "zipf1.0", 1.0 }, { "zipf1.2", 1.2 } };

static json_t *experts_one(const struct moe *x, const struct xp_cfg *c, const struct trace *t, unsigned batch)
{
	struct xp_result od, ly, rs;
	double tokens = (double)c->steps * batch;

	if (experts_run(x, c, ON_DEMAND, t->s, batch, &od) < 0 || experts_run(x, c, LAYERS, t->s, batch, &ly) < 0 ||
	    experts_run(x, c, RESIDENT, t->s, batch, &rs) < 0)
		return NULL;
	json_t *o = json_pack("{s:s, s:i, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:b, s:f, s:f, s:b}",
		"trace", t->name, "batch", (int)batch, "cache_fraction", c->cache,
		"bytes_per_token", od.bytes / tokens, "layer_stream_bytes_per_token", ly.bytes / tokens,
		"time_per_token_s", od.seconds / tokens, "layer_stream_time_per_token_s", ly.seconds / tokens,
		"resident_time_per_token_s", rs.seconds / tokens,
		"hit_rate", od.hits + od.misses ? (double)od.hits / (double)(od.hits + od.misses) : 0.0,
		"bit_identical", od.logits == ly.logits && od.logits == rs.logits,
		"bytes_vs_layer_stream", ly.bytes ? (double)od.bytes / (double)ly.bytes : 0.0,
		"time_vs_layer_stream", od.seconds / ly.seconds, "prefetch", c->prefetch);

	json_object_set_new(o, "prefetches_per_token", json_real(od.prefetches / tokens));
	json_object_set_new(o, "prefetch_hits_per_token", json_real(od.prefetch_hits / tokens));
	return o;
}

static void print_run(const json_t *o)
{
	printf("  %-8s batch %2d   %9.0f B/token (%.3fx layers)   %7.3f ms/token (%.3fx layers %.3f, resident %.3f)   hits %4.1f%% (prefetched %.1f of %.1f/token)   %s\n",
	       json_string_value(json_object_get(o, "trace")), (int)json_integer_value(json_object_get(o, "batch")),
	       json_real_value(json_object_get(o, "bytes_per_token")),
	       json_real_value(json_object_get(o, "bytes_vs_layer_stream")),
	       1e3 * json_real_value(json_object_get(o, "time_per_token_s")),
	       json_real_value(json_object_get(o, "time_vs_layer_stream")),
	       1e3 * json_real_value(json_object_get(o, "layer_stream_time_per_token_s")),
	       1e3 * json_real_value(json_object_get(o, "resident_time_per_token_s")),
	       100 * json_real_value(json_object_get(o, "hit_rate")),
	       json_real_value(json_object_get(o, "prefetch_hits_per_token")),
	       json_real_value(json_object_get(o, "prefetches_per_token")),
	       json_is_true(json_object_get(o, "bit_identical")) ? "bit-identical" : "LOGITS DIFFER");
}

static int experts_measure(struct wsrv_model *m, const struct xp_cfg *c, int json)
{
	static const unsigned batches[] = { 1, 16 };
	json_t *runs = json_array();
	struct moe x = { 0 };
	int r = 0;

	if (moe_index(m, &x) < 0) {
		fprintf(stderr, P ": the model has no routed experts (model.layers.L.mlp.experts.N...)\n");
		moe_free(&x);
		return 1;
	}
	if (!json)
		printf("%zu MoE layers x %u experts, top-%u, cache %.0f%% of the experts, %.1f GB/s link, %u steps after %u to warm\n",
		       x.nl, x.experts, c->topk, 100 * c->cache, c->bandwidth, c->steps, c->warm);
	for (size_t t = 0; t < sizeof(traces) / sizeof(traces[0]) && r == 0; t++)
		for (size_t b = 0; b < 2 && r == 0; b++) {
			json_t *o = experts_one(&x, c, &traces[t], batches[b]);
			if (!o) {
				r = 1;
				break;
			}
			if (!json)
				print_run(o);
			json_array_append_new(runs, o);
		}
	if (r == 0 && json) {
		json_dumpf(runs, stdout, JSON_INDENT(2));
		putchar('\n');
	}
	json_decref(runs);
	moe_free(&x);
	return r;
}

int bench_experts(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "model", required_argument, NULL, 'm' },
		{ "bandwidth", required_argument, NULL, 'b' },
		{ "cache", required_argument, NULL, 'c' },
		{ "topk", required_argument, NULL, 'k' },
		{ "steps", required_argument, NULL, 's' },
		{ "no-prefetch", no_argument, NULL, 'n' },
		{ "json", no_argument, NULL, 'j' },
		{ 0 },
	};
	struct xp_cfg c = { .bandwidth = 8, .cache = 0.25, .topk = 8, .steps = 24, .warm = 8, .prefetch = true };
	struct bench_server bs = { 0 };
	const char *path = NULL;
	struct wsrv_client *cl;
	struct wsrv_model *m;
	int json = 0, o, r;
	char spec[4200];

	optind = 1;
	while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (o) {
		case 'm': path = optarg; break;
		case 'b': c.bandwidth = cliarg_double(P, "--bandwidth", optarg, 1e-3, 1e4); break;
		case 'c': c.cache = cliarg_double(P, "--cache", optarg, 1e-6, 1); break;
		case 'k': c.topk = (unsigned)cliarg_long(P, "--topk", optarg, 1, 64); break;
		case 's': c.steps = (unsigned)cliarg_long(P, "--steps", optarg, 1, 100000); break;
		case 'n': c.prefetch = false; break;
		case 'j': json = 1; break;
		default: return 2;
		}
	}
	if (!path || optind != argc) {
		fprintf(stderr, "usage: wsrv-bench experts --model DIR [--bandwidth GBPS] [--cache F] [--topk K] [--steps N] [--no-prefetch] [--json]\n");
		return 2;
	}
	snprintf(spec, sizeof(spec), "m=%s", path);
	if (bench_server_start(&bs, (const char *[]){ spec }, 1) < 0 ||
	    wsrv_connect(bs.sock, NULL, &cl) < 0 || wsrv_attach(cl, "m", &m) < 0) {
		fprintf(stderr, P ": cannot attach: %s\n", wsrv_last_error());
		bench_server_stop(&bs);
		return 1;
	}
	r = experts_measure(m, &c, json);
	wsrv_detach(m);
	wsrv_disconnect(cl);
	bench_server_stop(&bs);
	return r;
}
