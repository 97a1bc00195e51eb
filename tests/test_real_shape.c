// SPDX-License-Identifier: MIT
/* test_real_shape.c - every path at the seeds' own shapes. The shape, not
 * the bytes, is what breaks first. The shape is the run's $WSRV_REAL_SHAPE:
 *
 * - kimi: a Kimi-K2-shaped model (61 layers, 384 routed experts, top-8:
 *   139,583 tensors in 64 shards, 8.56 GiB);
 * - dsv3: DeepSeek-V3's checkpoint as laid out (61 layers, 3 dense, 256
 *   routed experts, top-8, a multi-token prediction layer 61, FP8 weights
 *   with 128x128 block scales: 91,991 tensors in 163 shards, 5.69 GiB).
 *
 * It is made once into a cache that outlives the test
 * ($WSRV_REAL_SHAPE_DIR, else /var/tmp/wsrv-real-shape) and served by one
 * wsrvd:
 *
 * - the attach: every tensor, every layer, names found again;
 * - tensor-parallel views of world 8: under an experts plan (kimi) each
 *   rank holds 48 of each layer's 384 experts, whole; under Hugging Face's
 *   DeepSeek-V3 tp_plan (dsv3) each rank holds 1/8 of every MLP weight
 *   and of its FP8 scales, split in whole blocks;
 * - experts on demand over every MoE layer, top-8 with skewed routing: the
 *   device bytes are the mapping's;
 * - wsrvctl models, tensors, layers, inspect and verify at this count;
 * - the metrics page: as many series as for a model of a few tensors;
 * - a disk tier at half the model: its units (kimi: 23,040, 60 MoE layers of
 *   384), a worker's pass with the same digest as over the model in
 *   memory, the peak within the budget;
 * - generations: a take-over by a successor wsrvd (the attached worker's
 *   mapping stays, its next call reconnects), a reload, and a publish from
 *   the files, each new generation with the checksums of the one before.
 *
 * Skipped (77) only where the disk has no room for the model. Run in the
 * release build (tools/check): the sanitizer build leaves this suite out,
 * its loads of gigabytes being the test's time, not its coverage. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <xxhash.h>

#include "clock.h"
#include "fixture.h"
#include "wsrv.h"

#define WORLD 8
#define TOPK 8

/* The routed experts split among the ranks. (The Kimi stand-in's small
 * attention dimensions do not split at world 8 with their 128x128 FP8
 * scale blocks whole: 1536 rows of q_b_proj, 192 a rank. The seed's own
 * do: 24576 rows, 3072 a rank.) */
static const char EP_PLAN[] = "{\"tp_plan\": {\"layers.*.mlp.experts.*.*\": \"experts\"}}";
/* Hugging Face's base_model_tp_plan of DeepseekV3Config: the MLPs split,
 * attention whole. */
static const char HF_DSV3_PLAN[] = "{\"tp_plan\": {"
	"\"layers.*.mlp.experts.*.gate_proj\": \"local_colwise\", \"layers.*.mlp.experts.*.up_proj\": \"local_colwise\", "
	"\"layers.*.mlp.experts.*.down_proj\": \"local_rowwise\", \"layers.*.mlp.experts.*\": \"local\", "
	"\"layers.*.mlp.shared_experts.gate_proj\": \"local_colwise\", "
	"\"layers.*.mlp.shared_experts.up_proj\": \"local_colwise\", "
	"\"layers.*.mlp.shared_experts.down_proj\": \"local_rowwise\", \"layers.*.mlp.shared_experts\": \"local\", "
	"\"layers.*.mlp.gate_proj\": \"local_colwise\", \"layers.*.mlp.up_proj\": \"local_colwise\", "
	"\"layers.*.mlp.down_proj\": \"local_rowwise\", \"layers.*.mlp\": \"gather\"}}";

struct shape {
	const char *name, *cache; /* $WSRV_REAL_SHAPE's value; the cache's folder */
	const char *preset;
	uint64_t size;
	unsigned layers, shards, experts;
	unsigned groups;          /* layer groups besides the global one */
	unsigned moe_layers;      /* layers with routed experts */
	size_t tensors;
	const char *tp_plan;
	bool whole_experts;       /* the plan gives ranks whole experts, or splits them */
	const char *budget;       /* --memory-budget: about half the model */
	uint64_t need_free;
};

static const struct shape SHAPES[] = {
	{ "kimi", "kimi-k2-shape-1", "deepseek-v3-mini", 2ull << 30, 61, 64, 384, 61, 60, 139583,
	  EP_PLAN, true, "4400M", 12ull << 30 },
	{ "dsv3", "deepseek-v3-shape-1", "deepseek-v3-shape", 1, 61, 163, 256, 62, 59, 91991,
	  HF_DSV3_PLAN, false, "2900M", 8ull << 30 },
};
static const struct shape *S;

/* Experts on demand: a MoE layer's routed experts copied as routed. */
static const char ON_DEMAND[] = "{\"residency\": {\"layers.*.mlp.experts.*.*\": \"experts_on_demand\"}}";

static char model_dir[512];
static const char *why_not; /* set when this machine cannot hold the model */
static struct served srv; /* its ts alone: each case connects */

/* The cache: made once (into a temporary directory, renamed into place
 * when whole), reused after. */
static int cache_model(void)
{
	const char *root = getenv("WSRV_REAL_SHAPE_DIR") ? getenv("WSRV_REAL_SHAPE_DIR") : "/var/tmp/wsrv-real-shape";
	char tmp[600], stamp[600];
	struct statvfs vfs;
	struct stat sb;

	snprintf(model_dir, sizeof(model_dir), "%s/%s", root, S->cache);
	snprintf(stamp, sizeof(stamp), "%s/.whole", model_dir);
	if (stat(stamp, &sb) == 0)
		return 0;
	if (mkdir(root, 0755) < 0 && errno != EEXIST)
		return -errno;
	if (statvfs(root, &vfs) == 0 && (uint64_t)vfs.f_bavail * vfs.f_frsize < S->need_free) {
		why_not = "the disk has too little room for the model of this shape";
		return 0;
	}
	snprintf(tmp, sizeof(tmp), "%s.making", model_dir);
	rm_rf(tmp);
	rm_rf(model_dir);
	fprintf(stderr, "real shape %s: making the model into %s, once (wsrv-mkmodel's progress follows)\n", S->name,
		model_dir);
	if (make_model_moe(tmp, S->preset, S->size, S->layers, S->shards, 7, S->experts, TOPK) < 0 ||
	    rename(tmp, model_dir) < 0)
		return -EIO;
	FILE *f = fopen(stamp, "w");
	if (!f)
		return -errno;
	fclose(f);
	return 0;
}

static int real_shape_setup(void)
{
	const char *want = getenv("WSRV_REAL_SHAPE") ? getenv("WSRV_REAL_SHAPE") : "kimi";
	int r;

	for (size_t i = 0; i < sizeof(SHAPES) / sizeof(SHAPES[0]); i++)
		S = strcmp(SHAPES[i].name, want) ? S : &SHAPES[i];
	if (!S) {
		fprintf(stderr, "WSRV_REAL_SHAPE=%s: kimi or dsv3\n", want);
		return -EINVAL;
	}
	r = cache_model();

	if (r < 0 || why_not)
		return r;
	srv.ts.no_wait = 1;
	/* Minutes of work: said as it goes (issue 70 item 6), a line a phase. */
	fprintf(stderr, "real shape %s: wsrvd loads the model (%s)\n", S->name, model_dir);
	if ((r = server_start_argv(&srv.ts, "m", model_dir,
				   (const char *const[]){ "--metrics-listen", "127.0.0.1:0",
							  "--allow-publish-uid", "0", NULL })) < 0)
		return r;
	double t0 = mono_now();
	r = server_wait_ready(&srv.ts, 600);
	fprintf(stderr, "real shape %s: served after %.1f s; the cases follow\n", S->name, mono_now() - t0);
	return r;
}

static void real_shape_teardown(void)
{
	if (!why_not && server_stop(&srv.ts, SIGTERM) == 0)
		rm_rf(srv.ts.dir);
}

static struct fixture F = { .tag = "realshape", .setup = real_shape_setup, .teardown = real_shape_teardown };

static struct wsrv_client *cl;
static struct wsrv_model *m;

/* Each case: skipped where the model cannot be held, else attached. */
static void attach(void)
{
	struct wsrv_connect_opts o = { .struct_size = sizeof(o), .timeout_ms = 60000 };

	if (why_not) {
		fprintf(stderr, "%s\n", why_not);
		skip();
	}
	if (wsrv_connect(srv.ts.sock, &o, &cl) < 0 || wsrv_attach(cl, "m", &m) < 0)
		fail_msg("attach: %s", wsrv_last_error());
	if (wsrv_model_wait(m, WSRV_LAYER_ALL, 600000) < 0)
		fail_msg("wait: %s", wsrv_last_error());
}

static void detach(void)
{
	wsrv_detach(m);
	wsrv_disconnect(cl);
}

static void every_tensor_attached(void **st)
{
	uint64_t sum = 0;

	attach();
	assert_int_equal(wsrv_model_tensor_count(m), S->tensors);
	assert_int_equal(wsrv_model_layer_count(m), S->groups + 1); /* and the global group */
	for (size_t i = 0; i < S->tensors; i++) {
		struct wsrv_tensor t = { .struct_size = sizeof(t) };
		assert_int_equal(wsrv_model_tensor(m, i, &t), 0);
		sum += t.size;
		/* Names found again, a sample of every kind (every 97th). */
		if (i % 97 == 0 || i == S->tensors - 1) {
			struct wsrv_tensor f = { .struct_size = sizeof(f) };
			assert_int_equal(wsrv_model_find(m, t.name, &f), 0);
			assert_ptr_equal(f.name, t.name);
			assert_int_equal(f.offset, t.offset);
		}
	}
	uint64_t layers = 0;
	for (size_t li = 0; li < wsrv_model_layer_count(m); li++) {
		struct wsrv_layer l;
		assert_int_equal(wsrv_model_layer_at(m, li, &l), 0);
		layers += l.bytes;
	}
	assert_int_equal(sum, layers);
	detach();
}

static bool ends_with(const char *s, const char *tail)
{
	size_t n = strlen(s), k = strlen(tail);

	return n >= k && !strcmp(s + n - k, tail);
}

/* Rank r of 8's views under an experts plan: the routed experts it owns
 * (48 of each layer's 384), whole, and every other tensor whole. */
static void check_rank_ep(const struct wsrv_view_row *rows, size_t n, int r, uint64_t *experts,
			  uint64_t *experts_all, uint32_t *owned)
{
	for (size_t i = 0; i < n; i++) {
		struct wsrv_tensor t = { .struct_size = sizeof(t) };
		wsrv_model_tensor(m, i, &t);
		if (strstr(t.name, ".mlp.experts.")) {
			*experts_all += r == 0 ? t.size : 0;
			if (rows[i].present) {
				assert_int_equal(rows[i].bytes, t.size);
				*experts += t.size;
				*owned += ends_with(t.name, ".gate_proj.weight");
			}
		} else {
			assert_true(rows[i].present);
			assert_int_equal(rows[i].bytes, t.size);
		}
	}
}

/* Rank r of 8's views under Hugging Face's plan: every MLP projection
 * (routed, shared, dense) and its scales an eighth, its scales' blocks
 * whole (a scale's dims are its weight's in 128s, rounded up); attention
 * and the rest whole. */
static void check_rank_split(const struct wsrv_view_row *rows, size_t n, uint64_t *split, uint64_t *split_all)
{
	for (size_t i = 0; i < n; i++) {
		struct wsrv_tensor t = { .struct_size = sizeof(t) };
		wsrv_model_tensor(m, i, &t);
		assert_true(rows[i].present);
		bool proj = strstr(t.name, ".mlp.") && strstr(t.name, "_proj.");
		if (!proj) {
			assert_int_equal(rows[i].bytes, t.size);
			continue;
		}
		if (rows[i].bytes * WORLD != t.size)
			fail_msg("%s: %lu bytes of %lu at world %d", t.name, (unsigned long)rows[i].bytes,
				 (unsigned long)t.size, WORLD);
		*split += rows[i].bytes;
		*split_all += t.size;
		if (ends_with(t.name, ".weight_scale_inv")) {
			/* Its weight comes first (the files' order is by name). */
			struct wsrv_tensor wt = { .struct_size = sizeof(wt) };
			const struct wsrv_view_row *w = &rows[i - 1];
			wsrv_model_tensor(m, i - 1, &wt);
			assert_int_equal(strlen(wt.name) + strlen("_scale_inv"), strlen(t.name));
			assert_memory_equal(wt.name, t.name, strlen(wt.name));
			for (int k = 0; k < 2; k++)
				assert_int_equal(rows[i].shape[k], (w->shape[k] + 127) / 128);
		}
	}
}

static void tp_views_world_8(void **st)
{
	struct wsrv_view_row *rows;
	uint64_t experts_all = 0, split_all = 0;
	struct wsrv_plan *p;

	attach();
	assert_non_null(rows = calloc(S->tensors, sizeof(*rows)));
	assert_int_equal(wsrv_plan_parse(S->tp_plan, strlen(S->tp_plan), &p), 0);
	for (int r = 0; r < WORLD; r++) {
		struct wsrv_stream_opts o = { .struct_size = sizeof(o), .slots = 2, .rank = r, .world = WORLD };
		uint64_t experts = 0, split = 0;
		uint32_t owned = 0;
		struct wsrv_stream *s;
		if (wsrv_stream_open(m, NULL, p, &o, &s) < 0)
			fail_msg("rank %d of %d: %s", r, WORLD, wsrv_last_error());
		assert_int_equal(wsrv_stream_views(s, 0, S->tensors, rows, sizeof(*rows)), 0);
		if (S->whole_experts) {
			check_rank_ep(rows, S->tensors, r, &experts, &experts_all, &owned);
			assert_int_equal(experts * WORLD, experts_all);
			assert_int_equal(owned, S->moe_layers * S->experts / WORLD);
		} else {
			check_rank_split(rows, S->tensors, &split, &split_all);
			assert_true(split > 0);
		}
		wsrv_stream_close(s);
	}
	wsrv_plan_free(p);
	free(rows);
	detach();
}

/* Top-8 of a skewed routing for step k: low ids far more often (a Zipf-
 * like draw by squaring), each once. */
static void route(uint32_t k, uint32_t *ids)
{
	uint64_t x = 0x9e3779b97f4a7c15ull * (k + 1);

	for (int i = 0; i < TOPK; i++) {
		uint32_t id;
		bool again;
		do {
			x ^= x >> 12, x ^= x << 25, x ^= x >> 27;
			double u = (double)(x * 0x2545f4914f6cdd1dull >> 11) / (double)(1ull << 53);
			id = (uint32_t)(u * u * S->experts);
			again = false;
			for (int j = 0; j < i; j++)
				again |= ids[j] == id;
		} while (again);
		ids[i] = id;
	}
}

/* Every tensor of layer l's routed experts ids: the device bytes are the
 * mapping's (a host device: its memory is the process's). */
static int real_shape_check_experts(struct wsrv_stream *s, const struct wsrv_layer *l, const uint32_t *ids)
{
	char want[64];
	int seen = 0;

	for (uint32_t i = l->first; i < l->first + l->count; i++) {
		struct wsrv_tensor t = { .struct_size = sizeof(t) };
		void *d;
		wsrv_model_tensor(m, i, &t);
		for (int k = 0; k < TOPK; k++) {
			snprintf(want, sizeof(want), "layers.%d.mlp.experts.%u.", l->index, ids[k]);
			if (!strstr(t.name, want))
				continue;
			if (wsrv_stream_tensor_at(s, i, &d) < 0)
				fail_msg("%s: %s", t.name, wsrv_last_error());
			if (memcmp(d, t.data, t.size) != 0)
				fail_msg("%s: the device bytes differ from the mapping", t.name);
			seen++;
		}
	}
	return seen;
}

static void experts_every_layer(void **st)
{
	struct wsrv_stream_opts o = { .struct_size = sizeof(o), .slots = 2 };
	struct wsrv_device *d;
	struct wsrv_stream *s;
	struct wsrv_plan *p;
	int moe = 0;

	attach();
	assert_int_equal(wsrv_device_host(NULL, &d), 0);
	assert_int_equal(wsrv_plan_parse(ON_DEMAND, strlen(ON_DEMAND), &p), 0);
	if (wsrv_stream_open(m, d, p, &o, &s) < 0)
		fail_msg("open: %s", wsrv_last_error());
	wsrv_plan_free(p);
	for (size_t li = 0; li < wsrv_model_layer_count(m); li++) {
		struct wsrv_layer l;
		uint32_t ids[TOPK];
		wsrv_model_layer_at(m, li, &l);
		if (wsrv_stream_acquire(s, l.index) < 0)
			fail_msg("layer %d: %s", l.index, wsrv_last_error());
		route((uint32_t)li, ids);
		int r = wsrv_stream_acquire_experts(s, l.index, ids, TOPK, NULL);
		if (r == 0) {
			assert_true(real_shape_check_experts(s, &l, ids) >= TOPK * 3); /* three weights each, and scales */
			assert_int_equal(wsrv_stream_release_experts(s, l.index), 0);
			moe++;
		} else if (r != -ENOENT) { /* a dense layer, or the global group */
			fail_msg("layer %d's experts: %s", l.index, wsrv_last_error());
		}
		assert_int_equal(wsrv_stream_release(s, l.index), 0);
	}
	assert_int_equal(moe, S->moe_layers);
	wsrv_stream_close(s);
	wsrv_device_destroy(d);
	detach();
}

/* Runs wsrvctl with args, its standard output into out; returns its exit
 * status and how many lines it printed. */
static int real_shape_ctl(const char *out, size_t *lines, const char *const *args)
{
	const char *argv[12] = { getenv("WSRV_CTL") };
	size_t n = 1, len;
	uint8_t *text;
	int rc;

	for (; args[n - 1] && n < 11; n++)
		argv[n] = args[n - 1];
	argv[n] = NULL;
	/* A guard against a hang, not a time limit: a publish of 8.56 GiB
	 * into fresh pages takes minutes on a slow day (the case's own limit,
	 * WSRV_TEST_CASE_TIMEOUT, is 900 s). */
	rc = run_prog(argv, NULL, out, pjoin(srv.ts.dir, "ctl.err"), 0, 800);
	*lines = 0;
	if ((text = read_file(out, &len))) {
		for (size_t i = 0; i < len; i++)
			*lines += text[i] == '\n';
		free(text);
	}
	return rc;
}

static void ctl_at_this_count(void **st)
{
	char out[300];
	size_t lines;

	attach();
	snprintf(out, sizeof(out), "%s", pjoin(srv.ts.dir, "ctl.out"));
	assert_int_equal(real_shape_ctl(out, &lines, (const char *const[]){ "--socket", srv.ts.sock, "models", NULL }), 0);
	assert_true(lines >= 1);
	assert_int_equal(real_shape_ctl(out, &lines, (const char *const[]){ "--socket", srv.ts.sock, "tensors", "m", NULL }), 0);
	assert_true(lines >= S->tensors);
	assert_int_equal(real_shape_ctl(out, &lines, (const char *const[]){ "--socket", srv.ts.sock, "layers", "m", NULL }), 0);
	assert_true(lines >= S->groups);
	assert_int_equal(real_shape_ctl(out, &lines, (const char *const[]){ "inspect", model_dir, NULL }), 0);
	assert_true(lines >= 1);
	/* Every checksum in the shared mapping. */
	assert_int_equal(real_shape_ctl(out, &lines, (const char *const[]){ "--socket", srv.ts.sock, "verify", "m", NULL }), 0);
	detach();
}

/* The model's series on a metrics page (wsrv_model_*), and whether any
 * series is labelled by tensor or layer. */
static size_t model_series(int port, bool *per_tensor)
{
	char *body = NULL;
	size_t n = 0;

	assert_int_equal(http_get(port, "/metrics", &body), 200);
	for (char *l = body; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
		char *end = strchr(l, '\n');
		size_t len = end ? (size_t)(end - l) : strlen(l);
		if (*l == '#')
			continue;
		n += !strncmp(l, "wsrv_model_", 11);
		*per_tensor |= memmem(l, len, "tensor=\"", 8) || memmem(l, len, "layer=\"", 7);
	}
	free(body);
	return n;
}

/* What the page says of a model does not grow with its tensors: the same
 * series as for the same preset with a few layers and experts. (Streams
 * and devices have series of their own, per stream: not compared.) */
static void metrics_do_not_grow_with_tensors(void **st)
{
	struct served small = { 0 };
	bool per_tensor = false;
	char dir[300];
	size_t big, few;

	attach();
	big = model_series(server_metrics_port(&srv.ts), &per_tensor);
	snprintf(dir, sizeof(dir), "%s", pjoin(srv.ts.dir, "small"));
	assert_int_equal(make_model_moe(dir, "deepseek-v3-mini", 16 << 20, 4, 2, 3, 32, 4), 0);
	served_start(&small, "m", dir, "--metrics-listen", "127.0.0.1:0", NULL);
	few = model_series(server_metrics_port(&small.ts), &per_tensor);
	served_stop(&small);
	rm_rf(dir);
	assert_false(per_tensor);
	if (big != few)
		fail_msg("the metrics page has %zu series of this model and %zu of the same preset's small one", big, few);
	detach();
}

/* A worker's pass over the model on the server at sock (wsrv-worker:
 * every weight through a small forward computation), its digest into
 * digest[17]: 0, or its exit status. */
static int worker_digest(const char *sock, const char *dir, char *digest)
{
	const char *argv[] = { getenv("WSRV_WORKER"), "--socket", sock, "--model", "m", "--passes", "1", "--no-share",
			       NULL };
	char out[300];
	size_t len;
	uint8_t *text;
	const char *d;
	int rc;

	snprintf(out, sizeof(out), "%s", pjoin(dir, "worker.out"));
	rc = run_prog(argv, NULL, out, pjoin(dir, "worker.err"), 0, 600);
	digest[0] = 0;
	if ((text = read_file(out, &len)) && (d = strstr((char *)text, "digest ")))
		snprintf(digest, 17, "%s", d + 7);
	free(text);
	return rc;
}

/* A second wsrvd with a budget of about half the model: the routed
 * experts of its MoE layers are units of their own, read as a
 * worker's pass routes through them; its digest is the one of the same
 * pass over the whole model in memory. Everything is measured before the
 * server stops, and checked after, so that a failure leaves no server
 * behind. (wsrv-worker --check would also take each layer directly, one
 * attachment a layer: at this count that pass reads the tier 1.5 times
 * over, in minutes; docs/benchmarks.md.) */
static void disk_tier_at_half(void **st)
{
	struct test_server ts = { .no_wait = 1 };
	struct wsrv_tier_info ti = { .struct_size = sizeof(ti) };
	struct wsrv_client *c = NULL;
	char whole[17], tiered[17], said[64];
	int worker = -1, counted = -1;
	bool units;

	attach();
	detach();
	assert_int_equal(worker_digest(srv.ts.sock, srv.ts.dir, whole), 0);
	assert_int_equal(server_start(&ts, "m", model_dir, "--memory-budget", S->budget, NULL), 0);
	if (server_wait_ready(&ts, 600) == 0) {
		worker = worker_digest(ts.sock, ts.dir, tiered);
		if (wsrv_connect(ts.sock, NULL, &c) == 0)
			counted = tier_counters(c, &ti);
		wsrv_disconnect(c);
	}
	snprintf(said, sizeof(said), "%u routed experts on the disk tier", S->moe_layers * S->experts);
	units = server_log_has(&ts, said);
	assert_int_equal(server_stop(&ts, SIGTERM), 0);
	if (worker != 0)
		fail_msg("a worker's pass over the tiered model: exit %d (see %s)", worker, pjoin(ts.dir, "worker.err"));
	rm_rf(ts.dir);
	assert_true(units);
	assert_int_equal(strlen(whole), 16);
	assert_string_equal(tiered, whole);
	assert_int_equal(counted, 0);
	assert_true(ti.read_bytes > 0);
	assert_true(ti.peak_bytes <= ti.budget);
}

static double now_s(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* Until the server has told c that m has generation want or newer. */
static int wait_latest(struct wsrv_client *c, struct wsrv_model *mod, uint64_t want, int seconds)
{
	for (int i = 0; i < seconds * 10; i++) {
		struct pollfd p = { wsrv_client_fd(c), POLLIN, 0 };
		uint64_t mapped, latest;
		if (poll(&p, 1, 100) > 0)
			wsrv_client_poll_events(c);
		if (wsrv_model_generation(mod, &mapped, &latest) == 0 && latest >= want)
			return 0;
	}
	return -ETIMEDOUT;
}

#define SAMPLE 64

/* Every (tensors / SAMPLE)th tensor's checksum, from the manifest. */
static void sample_sums(uint64_t *sums)
{
	for (size_t k = 0; k < SAMPLE; k++) {
		struct wsrv_tensor t = { .struct_size = sizeof(t) };
		assert_int_equal(wsrv_model_tensor(m, k * (S->tensors / SAMPLE), &t), 0);
		sums[k] = t.xxh3;
	}
}

/* 0 when mod is generation gen, with the sampled tensors' sums, and
 * their bytes hash to them; else a line to stderr and -1. */
static int same_weights(struct wsrv_model *mod, uint64_t gen, const uint64_t *sums)
{
	uint64_t mapped = 0;

	if (wsrv_model_generation(mod, &mapped, NULL) < 0 || mapped != gen) {
		fprintf(stderr, "generation %lu mapped, %lu wanted\n", (unsigned long)mapped, (unsigned long)gen);
		return -1;
	}
	for (size_t k = 0; k < SAMPLE; k++) {
		struct wsrv_tensor t = { .struct_size = sizeof(t) };
		if (wsrv_model_tensor(mod, k * (S->tensors / SAMPLE), &t) < 0 || t.xxh3 != sums[k] ||
		    XXH3_64bits(t.data, t.size) != sums[k]) {
			fprintf(stderr, "generation %lu: %s is not the weights of the one before\n", (unsigned long)gen,
				t.name ? t.name : "?");
			return -1;
		}
	}
	return 0;
}

/* Until pid (not a child of this process: the group's server) has
 * exited: 0, or -ETIMEDOUT. */
static int wait_exit(pid_t pid, int seconds)
{
	int fd = (int)syscall(SYS_pidfd_open, pid, 0);
	struct pollfd p = { .fd = fd, .events = POLLIN };
	int r = fd < 0 ? (errno == ESRCH ? 0 : -errno) : poll(&p, 1, seconds * 1000) == 1 ? 0 : -ETIMEDOUT;

	if (fd >= 0)
		close(fd);
	return r;
}

/* What the generations case saw, checked after its server stopped. */
struct gens {
	int take_over, reconnect, reload, publish, weights[3], stopped;
	double take_over_s, call_ms, reload_s, publish_s;
};

/* A successor wsrvd takes the model and the socket over from the group's
 * (whose exit it waits for); the worker's mapping stays, its next call
 * reconnects. */
static void take_over(struct test_server *next, const uint64_t *sums, struct gens *g)
{
	struct wsrv_lease l;

	*next = srv.ts;
	double t0 = now_s();
	g->take_over = server_restart_args(next, "m", model_dir, "--take-over", "--metrics-listen", "127.0.0.1:0",
					   "--allow-publish-uid", "0", NULL);
	if (g->take_over == 0)
		g->take_over = server_wait_ready(next, 600);
	if (g->take_over == 0)
		g->take_over = wait_exit(srv.ts.pid, 120);
	double t1 = now_s();
	g->reconnect = wsrv_fetch_layer(m, 0, &l);
	if (g->reconnect == 0)
		g->reconnect = wsrv_release(m, l.id);
	g->take_over_s = t1 - t0;
	g->call_ms = 1e3 * (now_s() - t1);
	g->weights[0] = same_weights(m, 1, sums);
}

/* A reload from the same files (generation 2), then a publish of the same
 * tensors from them (3): each with the sums of the one before. The old
 * generation goes with its last worker, before the next is made. */
static void reload_publish(const struct test_server *ts, const uint64_t *sums, struct gens *g)
{
	struct wsrv_model *m2 = NULL;
	char out[300];
	size_t lines;

	snprintf(out, sizeof(out), "%s", pjoin(ts->dir, "ctl.out"));
	double t0 = now_s();
	g->reload = real_shape_ctl(out, &lines, (const char *const[]){ "--socket", ts->sock, "reload", "m", NULL });
	if (g->reload == 0)
		g->reload = wait_latest(cl, m, 2, 600);
	g->reload_s = now_s() - t0;
	wsrv_detach(m);
	m = NULL;
	if (wsrv_attach(cl, "m", &m2) == 0) {
		g->weights[1] = same_weights(m2, 2, sums);
		wsrv_detach(m2);
	}
	t0 = now_s();
	g->publish = real_shape_ctl(out, &lines, (const char *const[]){ "--socket", ts->sock, "publish", "m", "--from",
							     model_dir, NULL });
	g->publish_s = now_s() - t0;
	if (wsrv_attach(cl, "m", &m2) == 0) {
		g->weights[2] = same_weights(m2, 3, sums);
		wsrv_detach(m2);
	}
}

/* Each case runs in a process of its own: the group's server is not its
 * child, the successor is, and is stopped here. */
static void generations_at_this_count(void **st)
{
	struct gens g = { .weights = { -1, -1, -1 } };
	struct test_server next = { 0 };
	uint64_t sums[SAMPLE];

	attach();
	sample_sums(sums);
	take_over(&next, sums, &g);
	if (g.take_over == 0)
		reload_publish(&next, sums, &g);
	wsrv_detach(m);
	wsrv_disconnect(cl);
	g.stopped = next.pid > 0 ? server_stop(&next, SIGTERM) : -1;
	fprintf(stderr, "take-over %.2f s to the old server's exit, the worker's next call %.1f ms; reload %.2f s to "
		"the new generation; publish --from %.2f s\n", g.take_over_s, g.call_ms, g.reload_s, g.publish_s);
	assert_int_equal(g.take_over, 0);
	assert_true(server_log_has(&next, "adopted"));
	assert_int_equal(g.reconnect, 0);
	assert_int_equal(g.reload, 0);
	assert_int_equal(g.publish, 0);
	for (int k = 0; k < 3; k++)
		assert_int_equal(g.weights[k], 0);
	assert_int_equal(g.stopped, 0);
}

FIXTURE_MAIN(F, cmocka_unit_test(every_tensor_attached), cmocka_unit_test(tp_views_world_8),
	     cmocka_unit_test(experts_every_layer), cmocka_unit_test(ctl_at_this_count),
	     cmocka_unit_test(metrics_do_not_grow_with_tensors), cmocka_unit_test(disk_tier_at_half),
	     cmocka_unit_test(generations_at_this_count))
