// SPDX-License-Identifier: MIT
/* test_layer_shard.c - layer shards with a peer source (issue 80): a
 * group of K workers, each its own process on its own device, keeps each
 * layer of a series (DeepSeek-V3's o_proj and q_b_proj) only on its
 * owner, rank layer mod K, in a region the others map; the others copy a
 * layer they stream from the owner's device, never from host memory.
 * Every byte each worker computes with equals the files; the series goes
 * from host to device once in all (each layer by its owner); each device
 * holds its quarter of the series and its slots; an owner killed
 * mid-pass leaves the others exact; a device without peer access copies
 * from host memory, saying so.
 *
 * WSRV_TEST_DEVICE=cuda runs the same on the cuda backend over the test
 * driver with 4 devices (FAKECUDA_DEVICES, its peer access and its link
 * between devices), or on GPUs; else each worker's device is the host
 * backend, whose peer copy is a copy from the owner's mapped region. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dev_bytes.h"
#include "fixture.h"
#include "wsrv.h"

#define K 4
#define LAYERS 8

static int knobs(void);
static struct fixture F = { .tag = "layer-shard", .setup = knobs, .serve = "m", .models = {
	{ "deepseek-v3-mini", 40 << 20, .layers = LAYERS, .shards = 2, .seed = 80 } } };

static const char plan_json[] =
	"{\"residency\": {\"layers.*.self_attn.o_proj\": \"layer_shard:4:peer\","
	" \"layers.*.self_attn.q_b_proj\": {\"layer_shard\": 4, \"source\": \"peer\"}}}";

static bool on_cuda;
static long long (*fk_get)(const char *);

/* What a worker reports. */
struct wres {
	int rc;
	char err[300];
	struct wsrv_stream_stats st;
	long long drv_peer_bytes;   /* the test driver's count (-1: not it) */
	bool traced_peer;           /* its trace has peer copies */
};

static bool in_series(const char *name)
{
	return strstr(name, ".self_attn.o_proj.") || strstr(name, ".self_attn.q_b_proj.");
}

static struct wsrv_device *open_device(int rank)
{
	struct wsrv_device *d = NULL;

	if (on_cuda) {
		struct wsrv_cuda_opts o = { .struct_size = sizeof(o), .device = rank };
		wsrv_device_cuda(&o, &d);
	} else {
		char name[32];
		snprintf(name, sizeof(name), "host:shard%d", rank);
		struct wsrv_host_opts o = { .struct_size = sizeof(o), .numa_node = -1, .device_name = name };
		wsrv_device_host(&o, &d);
	}
	return d;
}

/* A pass: every layer acquired, each tensor of the series on the device
 * checked against the mapping's bytes (the files'). */
static int pass(struct wsrv_model *m, struct wsrv_stream *s, struct wres *r)
{
	for (size_t li = 0; li < wsrv_model_layer_count(m); li++) {
		struct wsrv_layer l;
		wsrv_model_layer_at(m, li, &l);
		if (l.index < 0)
			continue;
		if (wsrv_stream_acquire(s, l.index) < 0) {
			snprintf(r->err, sizeof(r->err), "acquire %d: %s", l.index, wsrv_last_error());
			return -1;
		}
		for (uint32_t i = l.first; i < l.first + l.count; i++) {
			struct wsrv_tensor t;
			void *dev;
			wsrv_model_tensor(m, i, &t);
			if (!in_series(t.name))
				continue;
			if (wsrv_stream_tensor_at(s, i, &dev) < 0 || dev_cmp_host(dev, t.data, t.size) != 0) {
				snprintf(r->err, sizeof(r->err), "%s: the device's bytes differ from the files'", t.name);
				return -1;
			}
		}
		wsrv_stream_release(s, l.index);
	}
	return 0;
}

static bool trace_has(const char *path, const char *what)
{
	size_t n;
	char *t = (char *)read_file(path, &n);
	bool yes = t && strstr(t, what);

	free(t);
	return yes;
}

/* Worker rank: opens its stream, says so (a byte on out), waits for the
 * go (a byte on go), makes a pass, says so and waits for the go again,
 * makes the rest of its `passes` passes, reports. */
static int shard_worker(const char *sock, int rank, int passes, const char *trace, int out, int go)
{
	struct wsrv_stream_opts so = { .struct_size = sizeof(so), .slots = 2, .rank = rank, .world = K,
				       .trace_path = trace };
	struct wres r = { .rc = -1, .drv_peer_bytes = -1 };
	struct wsrv_client *c = NULL;
	struct wsrv_model *m = NULL;
	struct wsrv_device *d = NULL;
	struct wsrv_plan *p = NULL;
	struct wsrv_stream *s = NULL;
	char b = 'o';

	if (wsrv_connect(sock, NULL, &c) < 0 || wsrv_attach(c, "m", &m) < 0 || !(d = open_device(rank)) ||
	    wsrv_plan_parse(plan_json, sizeof(plan_json) - 1, &p) < 0 || wsrv_stream_open(m, d, p, &so, &s) < 0) {
		snprintf(r.err, sizeof(r.err), "open: %s", wsrv_last_error());
		b = 'x';
	}
	if (write(out, &b, 1) != 1 || read(go, &b, 1) != 1 || b != 'g')
		return 2;
	if (!s) {
		b = 'p'; /* no pass to make: as if made */
		if (write(out, &b, 1) != 1 || read(go, &b, 1) != 1)
			return 2;
	}
	if (s) {
		r.rc = 0;
		for (int k = 0; k < passes && r.rc == 0; k++) {
			r.rc = pass(m, s, &r);
			b = 'p';
			if (k == 0 && (write(out, &b, 1) != 1 || read(go, &b, 1) != 1 || b != 'g'))
				return 2;
		}
		r.st.struct_size = sizeof(r.st);
		wsrv_stream_stats(s, &r.st);
		if (fk_get)
			r.drv_peer_bytes = fk_get("peer_bytes");
		wsrv_stream_close(s);
		s = NULL;
		r.traced_peer = trace && trace_has(trace, "peer copy");
	}
	wsrv_plan_free(p);
	wsrv_device_destroy(d);
	wsrv_detach(m);
	wsrv_disconnect(c);
	return write(out, &r, sizeof(r)) == (ssize_t)sizeof(r) ? 0 : 2;
}


struct job {
	const char *sock, *trace;
	int rank, passes;
};

static int shard_child(void *arg, int out, int go)
{
	const struct job *j = arg;

	return shard_worker(j->sock, j->rank, j->passes, j->trace, out, go);
}

static struct test_child spawn(const char *sock, int rank, int passes, const char *trace)
{
	struct job j = { sock, trace, rank, passes };

	return test_child_spawn(shard_child, &j);
}

static void go(struct test_child *ch);

/* Waits for child's next word: 'o' (opened), 'x' (it could not), 'p'
 * (a first pass made). */
static char opened(struct test_child *ch)
{
	char b = 0;

	assert_int_equal(read(ch->out, &b, 1), 1);
	return b;
}

/* Every child's first pass made, then the go for the rest. */
static void after_first_pass(struct test_child *ch, int from, int n)
{
	for (int i = from; i < n; i++)
		assert_int_equal(opened(&ch[i]), 'p');
	for (int i = from; i < n; i++)
		go(&ch[i]);
}

static void go(struct test_child *ch)
{
	assert_int_equal(write(ch->go, "g", 1), 1);
}

static void report(struct test_child *ch, struct wres *r)
{
	ssize_t n = read(ch->out, r, sizeof(*r));
	int st;

	assert_int_equal(waitpid(ch->pid, &st, 0), ch->pid);
	if (n != (ssize_t)sizeof(*r))
		fail_msg("worker %d ended without a report (%s %d)", (int)ch->pid,
			 WIFSIGNALED(st) ? "signal" : "exit status", WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
	close(ch->out);
	close(ch->go);
	if (r->rc != 0)
		fail_msg("worker %d: %s", (int)ch->pid, r->err);
}

/* The series' bytes, all of them, and those of layers rank does not own. */
static void series_bytes(uint64_t *all, uint64_t *not_owned, int rank)
{
	struct wsrv_client *c;
	struct wsrv_model *m;

	*all = *not_owned = 0;
	assert_int_equal(wsrv_connect(F.srv.ts.sock, NULL, &c), 0);
	assert_int_equal(wsrv_attach(c, "m", &m), 0);
	for (size_t i = 0; i < wsrv_model_tensor_count(m); i++) {
		struct wsrv_tensor t;
		wsrv_model_tensor(m, i, &t);
		if (!in_series(t.name) || t.layer < 0)
			continue;
		*all += t.size;
		if (t.layer % K != rank)
			*not_owned += t.size;
	}
	wsrv_detach(m);
	wsrv_disconnect(c);
}

/* K workers, together: each exact; each stream layer it does not own
 * came from its owner's device every pass, none from host memory; each
 * device holds a quarter of the series (plus alignment) beside its
 * slots; the trace shows the peer copies. */
static void peer_source_exact_one_upload(void **st)
{
	struct test_child ch[K];
	struct wres r[K];
	char trace[K][300];
	const int passes = 3;
	uint64_t all, not_owned;

	for (int i = 0; i < K; i++) {
		snprintf(trace[i], sizeof(trace[i]), "%s/trace-%d.json", F.srv.ts.dir, i);
		ch[i] = spawn(F.srv.ts.sock, i, passes, trace[i]);
	}
	for (int i = 0; i < K; i++)
		assert_int_equal(opened(&ch[i]), 'o');
	for (int i = 0; i < K; i++)
		go(&ch[i]);
	after_first_pass(ch, 0, K);
	for (int i = 0; i < K; i++)
		report(&ch[i], &r[i]);
	for (int i = 0; i < K; i++) {
		series_bytes(&all, &not_owned, i);
		uint64_t region = r[i].st.device_bytes - r[i].st.resident_bytes - r[i].st.slots * r[i].st.slot_bytes;
		if (r[i].st.peer_host_bytes != 0)
			fail_msg("worker %d copied %llu bytes of the series from host memory", i,
				 (unsigned long long)r[i].st.peer_host_bytes);
		/* Every pass's, and the next pass's first layers, which the
		 * stream copies ahead into its free slots. */
		if (r[i].st.peer_bytes < passes * not_owned || r[i].st.peer_bytes >= (passes + 1) * not_owned)
			fail_msg("worker %d copied %llu bytes from peers over %d passes of %llu", i,
				 (unsigned long long)r[i].st.peer_bytes, passes, (unsigned long long)not_owned);
		if (r[i].drv_peer_bytes >= 0)
			assert_int_equal((uint64_t)r[i].drv_peer_bytes, r[i].st.peer_bytes);
		/* A quarter of the series, each tensor 256-aligned, in 2 MiB
		 * granules at most. */
		if (region > all / K + 256 * 64 + (2 << 20))
			fail_msg("worker %d holds %llu bytes of the series, over a quarter of %llu", i,
				 (unsigned long long)region, (unsigned long long)all);
		assert_true(r[i].traced_peer);
	}
	fprintf(stderr, "series %llu bytes; each worker copied %llu of it from peers over %d passes\n",
		(unsigned long long)all, (unsigned long long)r[1].st.peer_bytes, passes);
}

/* The owner of layers 0 and 4 killed once every worker has made a pass:
 * the others' next passes stay exact (its region lives while they map
 * it). */
static void owner_killed_mid_pass(void **st)
{
	struct test_child ch[K];
	struct wres r[K];
	int status;

	for (int i = 0; i < K; i++)
		ch[i] = spawn(F.srv.ts.sock, i, 3, NULL);
	for (int i = 0; i < K; i++)
		assert_int_equal(opened(&ch[i]), 'o');
	for (int i = 0; i < K; i++)
		go(&ch[i]);
	for (int i = 0; i < K; i++)
		assert_int_equal(opened(&ch[i]), 'p');
	assert_int_equal(kill(ch[0].pid, SIGKILL), 0);
	assert_int_equal(waitpid(ch[0].pid, &status, 0), ch[0].pid);
	close(ch[0].out);
	close(ch[0].go);
	for (int i = 1; i < K; i++)
		go(&ch[i]);
	for (int i = 1; i < K; i++) {
		report(&ch[i], &r[i]);
		assert_true(r[i].st.peer_bytes > 0);
		assert_int_equal(r[i].st.peer_host_bytes, 0);
	}
}

/* Devices without peer access (the test driver's FAKECUDA_NO_PEER): each
 * worker copies the others' layers from host memory, exact, and says so
 * once on stderr. */
static void no_peer_access_copies_from_host(void **st)
{
	struct test_child ch[K];
	struct wres r[K];

	if (!on_cuda || !fk_get)
		skip(); /* the host backend reads any mapping: no such device */
	setenv("FAKECUDA_NO_PEER", "1", 1);
	for (int i = 0; i < K; i++)
		ch[i] = spawn(F.srv.ts.sock, i, 2, NULL);
	unsetenv("FAKECUDA_NO_PEER");
	for (int i = 0; i < K; i++)
		assert_int_equal(opened(&ch[i]), 'o');
	for (int i = 0; i < K; i++)
		go(&ch[i]);
	after_first_pass(ch, 0, K);
	for (int i = 0; i < K; i++) {
		report(&ch[i], &r[i]);
		assert_int_equal(r[i].st.peer_bytes, 0);
		assert_true(r[i].st.peer_host_bytes > 0);
	}
}

/* A plan's peer source: its forms, and a series tp_plan splits refused
 * at the open (the owner's copy would be its own slice). */
static void plans_said_right(void **st)
{
	static const char *const bad[] = {
		"{\"residency\": {\"layers.*.self_attn.o_proj\": \"layer_shard:4:pear\"}}",
		"{\"residency\": {\"layers.*.self_attn.o_proj\": {\"layer_shard\": 4, \"source\": \"disk\"}}}",
		"{\"residency\": {\"layers.*.self_attn.o_proj\": \"layer_shard:0:peer\"}}",
	};
	static const char split[] =
		"{\"residency\": {\"layers.*.self_attn.o_proj\": \"layer_shard:2:peer\"},"
		" \"tp_plan\": {\"layers.*.self_attn.o_proj\": \"rowwise\"}}";
	struct wsrv_stream_opts so = { .struct_size = sizeof(so), .rank = 0, .world = 2 };
	struct wsrv_client *c;
	struct wsrv_model *m;
	struct wsrv_plan *p;
	struct wsrv_stream *s;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_int_equal(wsrv_plan_parse(bad[i], strlen(bad[i]), &p), -EINVAL);
	assert_int_equal(wsrv_plan_parse(plan_json, sizeof(plan_json) - 1, &p), 0);
	wsrv_plan_free(p);
	/* The C API's form of it. */
	assert_int_equal(wsrv_plan_new(&p), 0);
	assert_int_equal(wsrv_plan_add(p, "layers.*.self_attn.o_proj", WSRV_LAYER_SHARD_PEER, 4), 0);
	assert_int_equal(wsrv_plan_add(p, "layers.*.self_attn.q_b_proj", WSRV_LAYER_SHARD_PEER, 0), -EINVAL);
	assert_int_equal(wsrv_plan_add(p, "layers.*.self_attn.q_b_proj", WSRV_LAYER_SHARD_PEER + 1, 4), -EINVAL);
	wsrv_plan_free(p);
	assert_int_equal(wsrv_connect(F.srv.ts.sock, NULL, &c), 0);
	assert_int_equal(wsrv_attach(c, "m", &m), 0);
	assert_int_equal(wsrv_plan_parse(split, sizeof(split) - 1, &p), 0);
	assert_int_equal(wsrv_stream_open(m, NULL, p, &so, &s), -EINVAL);
	if (!strstr(wsrv_last_error(), "needs whole tensors"))
		fail_msg("the refusal: %s", wsrv_last_error());
	wsrv_plan_free(p);
	wsrv_detach(m);
	wsrv_disconnect(c);
}

static int knobs(void)
{
	setenv("WSRV_COPYD", "off", 1); /* no copy service here: the workers copy by themselves */
	on_cuda = dev_on_cuda();
	if (on_cuda) {
		void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD) ?: dlopen("libcuda.so.1", RTLD_NOW);
		fk_get = h ? (long long (*)(const char *))dlsym(h, "fakecuda_get") : NULL;
		if (fk_get && getenv("FAKECUDA_DEVICES") && atoi(getenv("FAKECUDA_DEVICES")) < K)
			return -1;
	}
	return 0;
}

FIXTURE_MAIN(F,
	cmocka_unit_test(plans_said_right),
	cmocka_unit_test(peer_source_exact_one_upload),
	cmocka_unit_test(owner_killed_mid_pass),
	cmocka_unit_test(no_peer_access_copies_from_host),
)
