// SPDX-License-Identifier: MIT
/* test_tier_experts.c - a MoE model's routed experts on the disk tier one
 * by one (issue 39), with a real wsrvd and real worker processes: taking
 * two experts reads exactly their pages and nothing else of the layer; a
 * lookup gives no bytes for an expert not taken, and the range faults
 * rather than read zeros; wsrv_model_wait on a layer maps its experts;
 * four workers taking random experts under eviction pressure read
 * exactly the loaded bytes; a budget below what must stay says so. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <xxhash.h>

#include "dev_bytes.h"
#include "fixture.h"
#include "wsrv.h"

/* 34 MB: layer 0 dense, 1-3 with 16 routed experts each (about 0.38 MiB
 * an expert). Under a 24M budget, 15.8 MiB stays (the global group and
 * every layer but its experts), layer 0's segment and the 48 experts
 * (18 MiB) share about 8 MiB of cache. */
static struct fixture F = { .tag = "tierx", .models = {
	{ "deepseek-v3-mini", 32 << 20, 4, 2, 5 } } };

#define BUDGET "24M"
#define EXPERTS 16
#define PLAN "{\"residency\": {\"layers.*.mlp.experts.*.*\": \"experts_on_demand\"}, " \
	     "\"expert_cache\": {\"slots\": 4}}"
#define WORKERS 4
#define PAGE 4096u

static struct wsrv_tier_info tier_now(struct wsrv_client *c)
{
	struct wsrv_tier_info t = { .struct_size = sizeof(t) };

	assert_int_equal(tier_counters(c, &t), 0);
	return t;
}

/* Whether tensor t is routed expert x of layer. */
static bool of_expert(const struct wsrv_tensor *t, int32_t layer, uint32_t x)
{
	char want[64];

	snprintf(want, sizeof(want), "layers.%d.mlp.experts.%u.", layer, x);
	return strstr(t->name, want) != NULL;
}

/* How many tensors expert x of layer has. */
static int expert_tensors(struct wsrv_model *m, int32_t layer, uint32_t x)
{
	int n = 0;

	for (size_t i = 0; i < wsrv_model_tensor_count(m); i++) {
		struct wsrv_tensor t;
		if (wsrv_model_tensor(m, i, &t) == 0 && of_expert(&t, layer, x))
			n++;
	}
	return n;
}

/* The pages expert x of layer takes in its segment: from its first
 * tensor's offset to its last one's end, rounded up to a page. */
static uint64_t expert_pages(struct wsrv_model *m, int32_t layer, uint32_t x)
{
	uint64_t lo = UINT64_MAX, hi = 0;

	for (size_t i = 0; i < wsrv_model_tensor_count(m); i++) {
		struct wsrv_tensor t;
		assert_int_equal(wsrv_model_tensor(m, i, &t), 0);
		if (!of_expert(&t, layer, x))
			continue;
		lo = t.offset < lo ? t.offset : lo;
		hi = t.offset + t.size > hi ? t.offset + t.size : hi;
	}
	assert_true(hi > 0 && lo % PAGE == 0);
	return (hi + PAGE - 1) / PAGE * PAGE - lo;
}

/* Every tensor of experts ids of layer, at its device address, hashes to
 * the first load's checksum: how many, or -EIO. */
static int check_experts(struct wsrv_model *m, struct wsrv_stream *s, int32_t layer, const uint32_t *ids, size_t n)
{
	int seen = 0;

	for (size_t i = 0; i < wsrv_model_tensor_count(m); i++) {
		struct wsrv_tensor t;
		void *d;
		if (wsrv_model_tensor(m, i, &t) < 0)
			return -EIO;
		for (size_t k = 0; k < n; k++) {
			if (!of_expert(&t, layer, ids[k]))
				continue;
			if (wsrv_stream_tensor_at(s, i, &d) < 0 || dev_xxh3(d, t.size) != t.xxh3)
				return -EIO;
			seen++;
		}
	}
	return seen;
}

static struct wsrv_stream *open_stream(struct wsrv_model *m, struct wsrv_device *d)
{
	struct wsrv_stream_opts so = { .struct_size = sizeof(so) };
	struct wsrv_stream *s = NULL;
	struct wsrv_plan *p;

	if (wsrv_plan_parse(PLAN, strlen(PLAN), &p) < 0)
		return NULL;
	if (wsrv_stream_open(m, d, p, &so, &s) < 0)
		s = NULL;
	wsrv_plan_free(p);
	return s;
}

/* Two experts of layer 1 read from disk: exactly their pages, not the
 * layer's other 14 experts; held while acquired, their bytes right on
 * the device; and once the stream is closed, nothing held. */
static void an_expert_is_read_alone(void **st)
{
	struct test_server ts = { 0 };
	uint32_t ids[2] = { 3, 9 };
	struct wsrv_client *c;
	struct wsrv_model *m;
	struct wsrv_device *d = NULL;
	struct wsrv_stream *s;
	uint64_t before, want;

	(void)st;
	assert_int_equal(server_start(&ts, "m", F.dir[0], "--memory-budget", BUDGET, NULL), 0);
	assert_int_equal(wsrv_connect(ts.sock, NULL, &c), 0);
	assert_int_equal(wsrv_attach(c, "m", &m), 0);
	assert_int_equal(wsrv_model_wait(m, WSRV_LAYER_ALL, 30000), 0);
	assert_true(server_log_has(&ts, "48 routed experts"));
	want = expert_pages(m, 1, 3) + expert_pages(m, 1, 9);
	assert_int_equal(dev_test_open(m, &d), 0);
	assert_non_null(s = open_stream(m, d));
	assert_int_equal(wsrv_stream_acquire(s, 1), 0);
	before = tier_now(c).read_bytes;
	assert_int_equal(wsrv_stream_acquire_experts(s, 1, ids, 2, NULL), 0);
	assert_int_equal(tier_now(c).read_bytes - before, want);
	/* Held while acquired (beside what the stream prefetches). */
	assert_true(tier_now(c).held_bytes >= want);
	assert_int_equal(check_experts(m, s, 1, ids, 2), expert_tensors(m, 1, 3) + expert_tensors(m, 1, 9));
	assert_int_equal(wsrv_stream_release_experts(s, 1), 0);
	assert_int_equal(wsrv_stream_release(s, 1), 0);
	wsrv_stream_close(s);
	assert_int_equal(tier_now(c).held_bytes, 0);
	assert_int_equal(dev_test_close(d), 0);
	wsrv_detach(m);
	wsrv_disconnect(c);
	server_done(&ts);
}

/* Reads the first byte at p in a child: whether it faulted. */
static bool faults(const volatile uint8_t *p)
{
	pid_t pid = fork();
	int stat;

	assert_true(pid >= 0);
	if (pid == 0) {
		signal(SIGSEGV, SIG_DFL);
		(void)*p;
		_exit(0);
	}
	assert_int_equal(waitpid(pid, &stat, 0), pid);
	return WIFSIGNALED(stat) && WTERMSIG(stat) == SIGSEGV;
}

/* A lookup of an expert not taken gives no bytes, and its range faults
 * (never reads the zeros of a hole); wsrv_model_wait on its layer maps
 * every expert of it, kept until detach, each byte the loaded one. */
static void lookups_and_wait(void **st)
{
	struct test_server ts = { 0 };
	struct wsrv_client *c;
	struct wsrv_model *m;
	struct wsrv_layer l;
	size_t checked = 0;

	(void)st;
	assert_int_equal(server_start(&ts, "m", F.dir[0], "--memory-budget", BUDGET, NULL), 0);
	assert_int_equal(wsrv_connect(ts.sock, NULL, &c), 0);
	assert_int_equal(wsrv_attach(c, "m", &m), 0);
	assert_int_equal(wsrv_model_wait(m, WSRV_LAYER_ALL, 30000), 0);
	assert_int_equal(wsrv_model_layer(m, 2, &l), 0);
	assert_null(l.data);
	for (size_t i = l.first; i < l.first + l.count; i++) {
		struct wsrv_tensor t;
		assert_int_equal(wsrv_model_tensor(m, i, &t), 0);
		if (strstr(t.name, ".mlp.experts.")) {
			assert_null(t.data);
			/* Where its bytes would be: the layer's range is reserved. */
			struct wsrv_tensor any;
			assert_int_equal(wsrv_model_tensor(m, l.first, &any), 0);
			if (!checked++ && any.data)
				assert_true(faults((const uint8_t *)any.data - any.offset + t.offset));
		} else {
			assert_non_null(t.data);
			assert_true(XXH3_64bits(t.data, t.size) == t.xxh3);
		}
	}
	assert_int_equal(wsrv_model_wait(m, 2, 30000), 0);
	assert_int_equal(wsrv_model_layer(m, 2, &l), 0);
	assert_non_null(l.data);
	for (size_t i = l.first; i < l.first + l.count; i++) {
		struct wsrv_tensor t;
		assert_int_equal(wsrv_model_tensor(m, i, &t), 0);
		assert_non_null(t.data);
		assert_true(XXH3_64bits(t.data, t.size) == t.xxh3);
	}
	assert_true(tier_now(c).held_bytes >= EXPERTS * expert_pages(m, 2, 0) / 2);
	wsrv_detach(m);
	assert_int_equal(tier_now(c).held_bytes, 0);
	wsrv_disconnect(c);
	server_done(&ts);
}

/* A worker: 12 tokens of 4 random experts in each MoE layer, every byte
 * checked. Exits 0 when each was right. */
static int worker(const char *sock, unsigned seed)
{
	struct wsrv_client *c;
	struct wsrv_model *m;
	struct wsrv_device *d;
	struct wsrv_stream *s;
	int per;

	srand(seed);
	if (wsrv_connect(sock, NULL, &c) < 0 || wsrv_attach(c, "m", &m) < 0 || dev_test_open(m, &d) < 0 ||
	    !(s = open_stream(m, d)))
		return 2;
	per = expert_tensors(m, 1, 0);
	for (int token = 0; token < 12; token++)
		for (int32_t layer = 0; layer < 4; layer++) {
			uint32_t ids[4];
			for (int k = 0; k < 4; k++)
				ids[k] = (uint32_t)(k * EXPERTS / 4) + (uint32_t)rand() % (EXPERTS / 4);
			if (wsrv_stream_acquire(s, layer) < 0)
				return 3;
			if (layer > 0 && (wsrv_stream_acquire_experts(s, layer, ids, 4, NULL) < 0 ||
					  check_experts(m, s, layer, ids, 4) != 4 * per ||
					  wsrv_stream_release_experts(s, layer) < 0)) {
				fprintf(stderr, "worker %u, layer %d: %s\n", seed, layer, wsrv_last_error());
				return 4;
			}
			if (wsrv_stream_release(s, layer) < 0)
				return 5;
		}
	wsrv_stream_close(s);
	dev_test_close(d);
	wsrv_detach(m);
	wsrv_disconnect(c);
	return 0;
}

/* Four worker processes at once under a budget that holds about a
 * third of the experts: every byte right, experts evicted and read
 * again, none failed, the budget's count right. */
static void four_workers_random_experts(void **st)
{
	struct test_server ts = { 0 };
	struct wsrv_client *c;
	struct wsrv_tier_info t;
	pid_t pids[WORKERS];

	(void)st;
	assert_int_equal(server_start(&ts, "m", F.dir[0], "--memory-budget", BUDGET, NULL), 0);
	for (int i = 0; i < WORKERS; i++) {
		assert_true((pids[i] = fork()) >= 0);
		if (pids[i] == 0)
			_exit(worker(ts.sock, 11 + (unsigned)i));
	}
	for (int i = 0; i < WORKERS; i++) {
		int stat;
		assert_int_equal(waitpid(pids[i], &stat, 0), pids[i]);
		assert_true(WIFEXITED(stat));
		assert_int_equal(WEXITSTATUS(stat), 0);
	}
	assert_int_equal(wsrv_connect(ts.sock, NULL, &c), 0);
	t = tier_now(c);
	assert_true(t.misses > 0 && t.hits > 0 && t.evictions > 0);
	assert_int_equal(t.failures, 0);
	assert_int_equal(t.held_bytes, 0);
	assert_true(t.resident_bytes + t.cached_bytes <= t.budget);
	assert_false(server_log_has(&ts, "disk tier accounting"));
	wsrv_disconnect(c);
	server_done(&ts);
}

/* A budget below what always stays is refused, naming the experts. */
static void budget_below_the_layers_refused(void **st)
{
	struct test_server ts = { 0 };

	(void)st;
	assert_true(server_start(&ts, "m", F.dir[0], "--memory-budget", "16M", NULL) < 0);
	assert_true(server_log_has(&ts, "each layer but its routed experts"));
	server_stop(&ts, SIGTERM);
	rm_rf(ts.dir);
}

FIXTURE_MAIN(F,
	cmocka_unit_test(an_expert_is_read_alone),
	cmocka_unit_test(lookups_and_wait),
	cmocka_unit_test(four_workers_random_experts),
	cmocka_unit_test(budget_below_the_layers_refused),
)
