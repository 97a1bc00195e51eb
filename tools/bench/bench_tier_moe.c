// SPDX-License-Identifier: MIT
/* bench_tier_moe.c - `wsrv-bench tier --moe`: a MoE model larger than its
 * memory budget, one worker with its routed experts on demand (a quarter
 * of them cached on its device) at batch 1, Zipf routing (s = 1.0, 1.2).
 *
 * The same seeded trace runs twice: against wsrvd serving the model under
 * --memory-budget, and against wsrvd serving it whole (the baseline).
 * Each step hashes the device bytes of every expert it uses (the
 * "logits"): the two must agree bit for bit. Figures over the timed steps:
 * bytes the tier read from disk per token (against the bytes of the
 * experts a token routes to: top-8 of each MoE layer), the tier's
 * host-cache hit rate (takes served from memory, of all takes), and time
 * per token against the whole model resident. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "bench_experts.h"
#include "bench_tier.h"
#include "bench_util.h"
#include "wsrv.h"

#define P "wsrv-bench tier --moe"

/* The tier's counters as the timed steps begin. */
struct mark {
	const char *sock;
	struct wsrv_tier_info at;
	int ok;
};

static void mark_now(void *arg)
{
	struct mark *k = arg;

	k->ok = tier_now(k->sock, &k->at) == 0;
}

/* The bytes of the experts a token routes to: topk of each MoE layer
 * (the experts of a layer are alike). */
static double routed_bytes(const struct moe *x, unsigned topk)
{
	uint64_t one = 0;

	for (uint32_t j = 0; x->ntens && j < x->ntens[0]; j++) {
		struct wsrv_tensor t;
		if (wsrv_model_tensor(x->m, x->tens[0][j], &t) == 0)
			one += t.size;
	}
	return (double)one * topk * (double)x->nl;
}

/* One run of trace zipf on a server at sock serving "m" (tier: it has a
 * budget, and its counters go into *tier); *routed: the bytes of the
 * experts a token routes to. 0 or -1. */
static int moe_run(const char *sock, double zipf, bool tier, struct xp_result *out, struct wsrv_tier_info *delta,
		   double *routed)
{
	struct xp_cfg c = { .bandwidth = 8, .cache = 0.25, .topk = 8, .steps = 32, .warm = 8, .prefetch = true };
	struct mark k = { .sock = sock };
	struct wsrv_tier_info end;
	struct wsrv_client *cl;
	struct wsrv_model *m;
	struct moe x = { 0 };
	int r = -1;

	if (tier) {
		c.mark = mark_now;
		c.mark_arg = &k;
	}
	if (wsrv_connect(sock, NULL, &cl) < 0)
		return -1;
	if (wsrv_attach(cl, "m", &m) == 0) {
		if (moe_index(m, &x) < 0)
			fprintf(stderr, P ": the model has no routed experts (model.layers.L.mlp.experts.N...)\n");
		else if ((r = experts_run(&x, &c, ON_DEMAND, zipf, 1, out)) == 0 && routed)
			*routed = routed_bytes(&x, c.topk);
		moe_free(&x);
		wsrv_detach(m);
	}
	wsrv_disconnect(cl);
	if (r == 0 && tier) {
		if (!k.ok || tier_now(sock, &end) < 0)
			return -1;
		delta->read_bytes = end.read_bytes - k.at.read_bytes;
		delta->hits = end.hits - k.at.hits;
		delta->misses = end.misses - k.at.misses;
		delta->resident_bytes = end.resident_bytes;
	}
	return r;
}

/* Both servers' runs of one trace, as JSON (NULL on a failure). */
static json_t *moe_trace(const char *tsock, const char *wsock, const char *name, double zipf)
{
	struct xp_result t, w;
	struct wsrv_tier_info d = { 0 };
	const double tokens = 32;
	double routed = 0;

	if (moe_run(tsock, zipf, true, &t, &d, &routed) < 0 || moe_run(wsock, zipf, false, &w, NULL, NULL) < 0)
		return NULL;
	return json_pack("{s:s, s:i, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:b}", "trace", name, "batch", 1,
		"disk_bytes_per_token", (double)d.read_bytes / tokens, "routed_bytes_per_token", routed,
		"disk_vs_routed", routed > 0 ? (double)d.read_bytes / tokens / routed : 0.0,
		"host_hit_rate", d.hits + d.misses ? (double)d.hits / (double)(d.hits + d.misses) : 0.0,
		"time_per_token_s", t.seconds / tokens, "resident_time_per_token_s", w.seconds / tokens,
		"time_vs_resident", t.seconds / w.seconds, "bit_identical", t.logits == w.logits);
}

int bench_tier_moe(const char *model, uint64_t budget, bool json)
{
	static const struct { const char *name; double s; } traces[] = { { "zipf1.0", 1.0 }, { "zipf1.2", 1.2 } };
	struct bench_server tiered = { 0 }, whole = { 0 };
	json_t *runs = json_array();
	char spec[4200], b[32];
	int rc = 1;

	snprintf(spec, sizeof(spec), "m=%s", model);
	snprintf(b, sizeof(b), "%llu", (unsigned long long)budget);
	tiered.extra[0] = "--memory-budget";
	tiered.extra[1] = b;
	if (bench_server_start(&tiered, (const char *[]){ spec }, 1) < 0 ||
	    bench_server_start(&whole, (const char *[]){ spec }, 1) < 0) {
		fprintf(stderr, P ": wsrvd did not start (with --memory-budget %s, and without)\n", b);
		goto out;
	}
	for (size_t i = 0; i < sizeof(traces) / sizeof(traces[0]); i++) {
		json_t *o = moe_trace(tiered.sock, whole.sock, traces[i].name, traces[i].s);
		if (!o) {
			fprintf(stderr, P ": a run failed\n");
			goto out;
		}
		json_object_set_new(o, "budget", json_integer((json_int_t)budget));
		if (!json)
			printf("  %s batch 1: %.0f B read from disk per token (%.2fx the experts it routes to), host "
			       "cache hits %.1f%%, %.3f ms/token (%.2fx the whole model resident, %.3f ms), %s\n",
			       traces[i].name, json_real_value(json_object_get(o, "disk_bytes_per_token")),
			       json_real_value(json_object_get(o, "disk_vs_routed")),
			       100 * json_real_value(json_object_get(o, "host_hit_rate")),
			       1e3 * json_real_value(json_object_get(o, "time_per_token_s")),
			       json_real_value(json_object_get(o, "time_vs_resident")),
			       1e3 * json_real_value(json_object_get(o, "resident_time_per_token_s")),
			       json_is_true(json_object_get(o, "bit_identical")) ? "bit-identical" : "LOGITS DIFFER");
		json_array_append_new(runs, o);
	}
	if (json) {
		json_dumpf(runs, stdout, JSON_INDENT(2));
		putchar('\n');
	}
	rc = 0;
out:
	if (tiered.pid > 0)
		bench_server_stop(&tiered);
	if (whole.pid > 0)
		bench_server_stop(&whole);
	json_decref(runs);
	return rc;
}
