// SPDX-License-Identifier: MIT
/* test_tier_experts.c - a MoE model's routed experts on the disk tier one
 * by one (issue 39), with a real wsrvd and real worker processes: taking
 * two experts reads exactly their pages and nothing else of the layer; a
 * lookup gives no bytes for an expert not taken, and the range faults
 * rather than read zeros; wsrv_model_wait on a layer maps its experts;
 * four workers taking random experts under eviction pressure read
 * exactly the loaded bytes; an expert whose bytes changed on disk gets
 * -EIO naming its own tensor, alone or read with its layer, and what came
 * with it is let go with its stream; a worker goes on across a restart
 * of wsrvd; a budget
 * below what must stay says so. */
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
#define UNIT0 5u /* the segments: the global group's, then one per layer */

static struct wsrv_tier_info tier_now(struct wsrv_client *c)
{
	struct wsrv_tier_info t = { .struct_size = sizeof(t) };

	assert_int_equal(tier_counters(c, &t), 0);
	return t;
}

/* The bytes read from disk once the reads a stream's prefetch queued
 * have landed: none in flight, the count still for 60 ms. */
static uint64_t reads_settled(struct wsrv_client *c)
{
	struct wsrv_tier_info t = tier_now(c);

	for (int still = 0, tries = 0; still < 3 && tries < 500; tries++) {
		usleep(20 * 1000);
		struct wsrv_tier_info u = tier_now(c);
		still = u.read_bytes == t.read_bytes && !u.reads_in_flight ? still + 1 : 0;
		t = u;
	}
	return t.read_bytes;
}

/* Whether tensor t is routed expert x of layer. */
static bool tier_experts_of_expert(const struct wsrv_tensor *t, int32_t layer, uint32_t x)
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
		if (wsrv_model_tensor(m, i, &t) == 0 && tier_experts_of_expert(&t, layer, x))
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
		if (!tier_experts_of_expert(&t, layer, x))
			continue;
		lo = t.offset < lo ? t.offset : lo;
		hi = t.offset + t.size > hi ? t.offset + t.size : hi;
	}
	assert_true(hi > 0 && lo % PAGE == 0);
	return (hi + PAGE - 1) / PAGE * PAGE - lo;
}

/* Every tensor of experts ids of layer, at its device address, hashes to
 * the first load's checksum: how many, or -EIO. */
static int tier_experts_check_experts(struct wsrv_model *m, struct wsrv_stream *s, int32_t layer, const uint32_t *ids, size_t n)
{
	int seen = 0;

	for (size_t i = 0; i < wsrv_model_tensor_count(m); i++) {
		struct wsrv_tensor t;
		void *d;
		if (wsrv_model_tensor(m, i, &t) < 0)
			return -EIO;
		for (size_t k = 0; k < n; k++) {
			if (!tier_experts_of_expert(&t, layer, ids[k]))
				continue;
			if (wsrv_stream_tensor_at(s, i, &d) < 0 || dev_xxh3(d, t.size) != t.xxh3)
				return -EIO;
			seen++;
		}
	}
	return seen;
}

/* wsrvd serving the model under BUDGET, a client attached, the first
 * load done. */
static void tier_experts_serve(struct test_server *ts, struct wsrv_client **c, struct wsrv_model **m)
{
	/* A layer's 16 experts (6 MiB) are more than half the cache (8.2
	 * MiB): cases that map a layer whole give one worker all of it. */
	assert_int_equal(server_start(ts, "m", F.dir[0], "--memory-budget", BUDGET, "--memory-budget-share", "100",
				      NULL), 0);
	assert_int_equal(wsrv_connect(ts->sock, NULL, c), 0);
	assert_int_equal(wsrv_attach(*c, "m", m), 0);
	assert_int_equal(wsrv_model_wait(*m, WSRV_LAYER_ALL, 30000), 0);
}

/* serve undone, with the case's test device d. */
static void unserve(struct test_server *ts, struct wsrv_client *c, struct wsrv_model *m, struct wsrv_device *d)
{
	assert_int_equal(dev_test_close(d), 0);
	wsrv_detach(m);
	wsrv_disconnect(c);
	server_done(ts);
}

static struct wsrv_stream *tier_experts_open_stream(struct wsrv_model *m, struct wsrv_device *d)
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

/* Two experts of layer 3 read from disk: exactly their pages, not the
 * layer's other 14 experts; held while acquired, their bytes right on
 * the device; and once the stream is closed, nothing held. */
static void an_expert_is_read_alone(void **st)
{
	struct test_server ts = { 0 };
	uint32_t ids[2] = { 3, 9 };
	const int32_t L = 3; /* past what the cuda test device's first stream prefetches */
	struct wsrv_client *c;
	struct wsrv_model *m;
	struct wsrv_device *d = NULL;
	struct wsrv_stream *s;
	uint64_t before, want;

	(void)st;
	tier_experts_serve(&ts, &c, &m);
	assert_true(server_log_has(&ts, "48 routed experts"));
	want = expert_pages(m, L, 3) + expert_pages(m, L, 9);
	assert_int_equal(dev_test_open(m, &d), 0);
	assert_non_null(s = tier_experts_open_stream(m, d));
	assert_int_equal(wsrv_stream_acquire(s, L), 0);
	before = reads_settled(c);
	assert_int_equal(wsrv_stream_acquire_experts(s, L, ids, 2, NULL), 0);
	assert_int_equal(tier_now(c).read_bytes - before, want);
	/* Held while acquired (beside what the stream prefetches). */
	assert_true(tier_now(c).held_bytes >= want);
	assert_int_equal(tier_experts_check_experts(m, s, L, ids, 2), expert_tensors(m, L, 3) + expert_tensors(m, L, 9));
	assert_int_equal(wsrv_stream_release_experts(s, L), 0);
	assert_int_equal(wsrv_stream_release(s, L), 0);
	wsrv_stream_close(s);
	assert_int_equal(tier_now(c).held_bytes, 0);
	unserve(&ts, c, m, d);
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
	tier_experts_serve(&ts, &c, &m);
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
static int tier_experts_worker(const char *sock, unsigned seed)
{
	struct wsrv_client *c;
	struct wsrv_model *m;
	struct wsrv_device *d;
	struct wsrv_stream *s;
	int per;

	srand(seed);
	if (wsrv_connect(sock, NULL, &c) < 0 || wsrv_attach(c, "m", &m) < 0 || dev_test_open(m, &d) < 0 ||
	    !(s = tier_experts_open_stream(m, d)))
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
					  tier_experts_check_experts(m, s, layer, ids, 4) != 4 * per ||
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
			_exit(tier_experts_worker(ts.sock, 11 + (unsigned)i));
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

/* Whether msg says "reading tensor NAME (layer L, unit U) again from
 * disk: tensor FAILED: ..." with NAME and FAILED tensors of unit U: the
 * read that failed was that unit's own. */
static bool unit_named(struct wsrv_model *m, const char *msg)
{
	const char *p = strstr(msg, "reading tensor ");
	char name[200];
	int layer;
	unsigned unit, x;

	if (!p || sscanf(p, "reading tensor %199s (layer %d, unit %u)", name, &layer, &unit) != 3)
		return false;
	/* Units are numbered on from the segments, in the layout's order:
	 * layer, then name ("experts.1." before "experts.10."). */
	p = strstr(name, ".mlp.experts.");
	if (!p || sscanf(p, ".mlp.experts.%u.", &x) != 1)
		return false;
	unsigned rank = 0;
	char a[16], b[16];
	snprintf(a, sizeof(a), "%u.", x);
	for (unsigned y = 0; y < EXPERTS; y++) {
		snprintf(b, sizeof(b), "%u.", y);
		rank += strcmp(b, a) < 0;
	}
	(void)m;
	if (unit != UNIT0 + (unsigned)(layer - 1) * EXPERTS + rank)
		return false;
	/* The loader's own sentence names the tensor that failed: the same
	 * expert's, not another's read with it. */
	char own[64], failed[200];
	snprintf(own, sizeof(own), "layers.%d.mlp.experts.%u.", layer, x);
	p = strstr(msg, "again from disk: tensor ");
	return p && sscanf(p, "again from disk: tensor %199[^:]", failed) == 1 && strstr(failed, own);
}

/* Both shards of the model changed on disk after the load: an expert
 * asked for alone, or with the rest of its layer (read together, then
 * each alone once that read fails), gets -EIO naming a tensor of its
 * own; with the files back, it is read and right. */
static void changed_files_name_the_expert(void **st)
{
	struct test_server ts = { 0 };
	struct wsrv_stream_opts one = { .struct_size = sizeof(one), .slots = 1 };
	uint32_t ids[1] = { 9 };
	struct wsrv_client *c;
	struct wsrv_model *m;
	struct wsrv_device *d = NULL;
	struct wsrv_stream *s, *s2, *whole;
	char shard[2][600];
	uint64_t held;

	(void)st;
	for (int i = 0; i < 2; i++)
		snprintf(shard[i], sizeof(shard[i]), "%s/model-0000%d-of-00002.safetensors", F.dir[0], i + 1);
	tier_experts_serve(&ts, &c, &m);
	assert_int_equal(dev_test_open(m, &d), 0);
	assert_non_null(s = tier_experts_open_stream(m, d));
	assert_int_equal(wsrv_stream_open(m, d, NULL, &one, &whole), 0); /* layer 0 in its slot */
	assert_non_null(s2 = tier_experts_open_stream(m, d));
	assert_int_equal(wsrv_stream_acquire(s, 3), 0);
	assert_int_equal(wsrv_stream_acquire_experts(s, 3, (uint32_t[]){ 3 }, 1, NULL), 0); /* cached */
	assert_int_equal(wsrv_stream_release_experts(s, 3), 0);
	reads_settled(c);
	for (int i = 0; i < 2; i++)
		assert_int_equal(file_flip_kept(shard[i]), 0);
	assert_true(wsrv_stream_acquire_experts(s, 3, ids, 1, NULL) < 0);
	assert_non_null(strstr(wsrv_last_error(), "layers.3.mlp.experts.9."));
	assert_non_null(strstr(wsrv_last_error(), "checksum"));
	assert_true(unit_named(m, wsrv_last_error()));
	/* Two asked for at once, one in memory and one failing: the one that
	 * came goes with the stream, not at detach. */
	held = tier_now(c).held_bytes;
	assert_int_equal(wsrv_stream_acquire(s2, 3), 0);
	assert_true(wsrv_stream_acquire_experts(s2, 3, (uint32_t[]){ 3, 11 }, 2, NULL) < 0);
	assert_non_null(strstr(wsrv_last_error(), "layers.3.mlp.experts.11."));
	wsrv_stream_close(s2);
	assert_int_equal(tier_now(c).held_bytes, held);
	/* The whole of layer 3 at once, through a stream of whole layers:
	 * its experts read together fail, each is read alone, and the one
	 * told names a tensor of its own. */
	assert_true(wsrv_stream_acquire(whole, 3) < 0);
	assert_non_null(strstr(wsrv_last_error(), "layers.3.mlp.experts."));
	assert_non_null(strstr(wsrv_last_error(), "checksum"));
	assert_true(unit_named(m, wsrv_last_error()));
	/* Another of them asked for after: told its own failure, not the
	 * one of the read it was in (expert 0's, the first in the files). */
	assert_true(wsrv_stream_acquire_experts(s, 3, (uint32_t[]){ 5 }, 1, NULL) < 0);
	assert_non_null(strstr(wsrv_last_error(), "layers.3.mlp.experts.5."));
	assert_true(unit_named(m, wsrv_last_error()));
	for (int i = 0; i < 2; i++)
		assert_int_equal(file_restore_kept(shard[i]), 0);
	/* A failure of the reads before is told once (tier.h), then it is
	 * read again. */
	if (wsrv_stream_acquire_experts(s, 3, ids, 1, NULL) < 0)
		assert_int_equal(wsrv_stream_acquire_experts(s, 3, ids, 1, NULL), 0);
	assert_int_equal(tier_experts_check_experts(m, s, 3, ids, 1), expert_tensors(m, 3, 9));
	assert_int_equal(wsrv_stream_release_experts(s, 3), 0);
	assert_int_equal(wsrv_stream_release(s, 3), 0);
	assert_true(tier_now(c).failures >= 2);
	assert_true(server_log_has(&ts, "warn: model m: reading tensor"));
	wsrv_stream_close(whole);
	wsrv_stream_close(s);
	unserve(&ts, c, m, d);
}

/* wsrvd killed and started again while a worker holds experts: the
 * worker keeps what it maps, lets go of it (the new server holds nothing
 * for it), and takes the experts of every layer again from the new
 * server, which reads them again (its cache starts empty), each byte
 * right. */
static void experts_across_a_restart(void **st)
{
	struct test_server ts = { 0 };
	uint32_t ids[3] = { 2, 7, 13 };
	struct wsrv_client *c;
	struct wsrv_model *m;
	struct wsrv_device *d = NULL;
	struct wsrv_stream *s;
	int per;

	(void)st;
	tier_experts_serve(&ts, &c, &m);
	per = expert_tensors(m, 1, 0);
	assert_int_equal(dev_test_open(m, &d), 0);
	assert_non_null(s = tier_experts_open_stream(m, d));
	assert_int_equal(wsrv_stream_acquire(s, 2), 0);
	assert_int_equal(wsrv_stream_acquire_experts(s, 2, ids, 3, NULL), 0);
	assert_int_equal(tier_experts_check_experts(m, s, 2, ids, 3), 3 * per);
	assert_int_equal(server_stop(&ts, SIGKILL), 128 + SIGKILL);
	assert_int_equal(server_restart_args(&ts, "m", F.dir[0], "--memory-budget", BUDGET, NULL), 0);
	assert_int_equal(wsrv_stream_release_experts(s, 2), 0);
	assert_int_equal(wsrv_stream_release(s, 2), 0);
	for (int32_t layer = 1; layer < 4; layer++) {
		uint32_t more[3] = { 1, 8, 15 };
		assert_int_equal(wsrv_stream_acquire(s, layer), 0);
		assert_int_equal(wsrv_stream_acquire_experts(s, layer, more, 3, NULL), 0);
		assert_int_equal(tier_experts_check_experts(m, s, layer, more, 3), 3 * per);
		assert_int_equal(wsrv_stream_release_experts(s, layer), 0);
		assert_int_equal(wsrv_stream_release(s, layer), 0);
	}
	assert_true(tier_now(c).read_bytes >= 9 * expert_pages(m, 1, 1));
	wsrv_stream_close(s);
	assert_int_equal(tier_now(c).held_bytes, 0);
	unserve(&ts, c, m, d);
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
	cmocka_unit_test(changed_files_name_the_expert),
	cmocka_unit_test(experts_across_a_restart),
	cmocka_unit_test(budget_below_the_layers_refused),
)
