// SPDX-License-Identifier: MIT
/* test_early.c - serving while loading (wsrvd --serve-while-loading), with
 * a real wsrvd whose reads are slowed (--read-rate) and real clients: a
 * client attaches before the load ends and reads layer 0 while later
 * layers still load, every byte it reads is the loaded one, a client that
 * cannot wait is refused with EAGAIN, and a load that fails midway gives
 * every waiter -EIO naming a tensor, and stops the server with status 1.
 * A stream opened while loading holds layer 0 before the load ends. */
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
#include "packet.h"
#include "wsrv.h"
#include "wsrv.pb-c.h"

static struct fixture F = { .tag = "early", .models = { { "" } } };

/* About 3 s for the 24 MB model: a block of 256 KiB at a time. */
static const char *const slow[] = { "--serve-while-loading", "--read-rate", "8M",
				    "--queue-depth", "1", "--block-size", "256K", NULL };

static int start_slow(struct test_server *ts)
{
	return server_start_argv(ts, "m", F.dir[0], slow);
}

/* Tensors of layer `layer` (WSRV_LAYER_ALL: every one) hash to the
 * checksums the server computed as it placed them. */
static void early_check_layer(const struct wsrv_model *m, int32_t layer)
{
	for (size_t i = 0; i < wsrv_model_tensor_count(m); i++) {
		struct wsrv_tensor t;
		assert_int_equal(wsrv_model_tensor(m, i, &t), 0);
		if (layer != WSRV_LAYER_ALL && t.layer != layer)
			continue;
		assert_true(t.xxh3 != 0);
		assert_true(XXH3_64bits(t.data, t.size) == t.xxh3);
	}
}

/* 1: attached before the load ends; layer 0 first, then everything. */
static void attach_while_loading(void **st)
{
	struct test_server ts = { 0 };
	struct wsrv_client *a, *b;
	struct wsrv_model *ma, *mb;
	uint64_t placed, total;
	struct wsrv_tensor ta, tb;

	assert_int_equal(make_model(F.dir[0], "llama-mini", 24 << 20, 6, 2, 3), 0);
	assert_int_equal(start_slow(&ts), 0);
	assert_int_equal(wsrv_connect(ts.sock, NULL, &a), 0);
	assert_int_equal(wsrv_attach(a, "m", &ma), 0);
	assert_int_equal(wsrv_model_progress(ma, &placed, &total), 1);
	assert_true(placed < total);
	/* Looking only: not there yet, or there; never wrong. */
	int r = wsrv_model_wait(ma, 5, 0);
	assert_true(r == -ETIMEDOUT || r == 0);
	assert_int_equal(wsrv_model_wait(ma, 0, 20000), 0);
	/* Read in layer order: layer 0 came first, the last is still to come. */
	assert_int_equal(wsrv_model_progress(ma, &placed, &total), 1);
	assert_int_equal(wsrv_model_wait(ma, 5, 0), -ETIMEDOUT);
	early_check_layer(ma, 0);
	/* A lookup into a later layer waits for it. */
	assert_int_equal(wsrv_model_wait(ma, WSRV_LAYER_ALL, 30000), 0);
	assert_int_equal(wsrv_model_progress(ma, &placed, &total), 0);
	assert_true(placed == total);
	early_check_layer(ma, WSRV_LAYER_ALL);
	/* A client that attaches after the load sees the same bytes and
	 * checksums, and the same generation. */
	assert_int_equal(wsrv_connect(ts.sock, NULL, &b), 0);
	assert_int_equal(wsrv_attach(b, "m", &mb), 0);
	assert_int_equal(wsrv_model_progress(mb, NULL, NULL), 0);
	for (size_t i = 0; i < wsrv_model_tensor_count(ma); i++) {
		assert_int_equal(wsrv_model_tensor(ma, i, &ta), 0);
		assert_int_equal(wsrv_model_tensor(mb, i, &tb), 0);
		assert_true(ta.xxh3 == tb.xxh3);
		assert_memory_equal(ta.data, tb.data, ta.size);
	}
	wsrv_detach(ma);
	wsrv_detach(mb);
	wsrv_disconnect(a);
	wsrv_disconnect(b);
	server_done(&ts);
}

/* Every tensor of acquired layer `layer` (and every resident one) has,
 * at its device address, the bytes whose checksum the server computed. */
static void check_stream_layer(const struct wsrv_model *m, struct wsrv_stream *s, int32_t layer)
{
	struct wsrv_layer l = { .struct_size = sizeof(l) };

	assert_int_equal(wsrv_model_layer(m, layer, &l), 0);
	for (size_t i = 0; i < wsrv_model_tensor_count(m); i++) {
		struct wsrv_tensor t;
		void *d;
		uint8_t *buf;
		/* Only these: a lookup of any other would wait for its layer. */
		if ((i < l.first || i >= l.first + l.count) && wsrv_stream_residency(s, i) != WSRV_RESIDENT)
			continue;
		assert_int_equal(wsrv_model_tensor(m, i, &t), 0);
		if (wsrv_stream_tensor_at(s, i, &d) < 0)
			fail_msg("%s: %s", t.name, wsrv_last_error());
		assert_non_null(buf = malloc(t.size + 1));
		assert_int_equal(dev_read(buf, d, t.size), 0);
		assert_true(XXH3_64bits(buf, t.size) == t.xxh3);
		free(buf);
	}
}

static struct wsrv_stream *early_open_stream(struct wsrv_model *m, struct wsrv_device *d, const char *json)
{
	struct wsrv_stream_opts o = { .struct_size = sizeof(o), .slots = 2 };
	struct wsrv_plan *p = NULL;
	struct wsrv_stream *s = NULL;

	if (json && wsrv_plan_parse(json, strlen(json), &p) < 0)
		fail_msg("plan: %s", wsrv_last_error());
	if (wsrv_stream_open(m, d, p, &o, &s) < 0)
		fail_msg("open: %s", wsrv_last_error());
	wsrv_plan_free(p);
	return s;
}

/* 5: a stream opened while the model loads holds layer 0 before the load
 * ends, without waiting for the rest; each later acquire waits for its
 * layer; every byte copied is the loaded one. The resident tensors (the
 * global group here, loaded right after layer 0) are uploaded at open. */
static void stream_while_loading(void **st)
{
	struct test_server ts = { 0 };
	struct wsrv_client *a;
	struct wsrv_model *m;
	struct wsrv_device *d;
	struct wsrv_stream *s;
	uint64_t placed, total;

	assert_int_equal(make_model(F.dir[0], "llama-mini", 24 << 20, 6, 2, 7), 0);
	assert_int_equal(start_slow(&ts), 0);
	assert_int_equal(wsrv_connect(ts.sock, NULL, &a), 0);
	assert_int_equal(wsrv_attach(a, "m", &m), 0);
	assert_int_equal(dev_on_cuda() ? wsrv_device_cuda(NULL, &d) : wsrv_device_host(NULL, &d), 0);
	s = early_open_stream(m, d, "{\"residency\": {\"*\": \"resident\", \"layers.*\": \"streamed\"}}");
	assert_int_equal(wsrv_stream_acquire(s, 0), 0);
	check_stream_layer(m, s, 0);
	/* Layer 0 is held, and the last layers are still to come. */
	assert_int_equal(wsrv_model_progress(m, &placed, &total), 1);
	assert_true(placed < total);
	assert_int_equal(wsrv_model_wait(m, 5, 0), -ETIMEDOUT);
	assert_int_equal(wsrv_stream_release(s, 0), 0);
	for (int32_t l = 1; l < 6; l++) {
		if (wsrv_stream_acquire(s, l) < 0)
			fail_msg("acquire %d: %s", l, wsrv_last_error());
		check_stream_layer(m, s, l);
		assert_int_equal(wsrv_stream_release(s, l), 0);
	}
	assert_int_equal(wsrv_model_wait(m, WSRV_LAYER_ALL, 30000), 0);
	assert_int_equal(wsrv_model_progress(m, NULL, NULL), 0);
	wsrv_stream_close(s);
	wsrv_device_destroy(d);
	wsrv_detach(m);
	wsrv_disconnect(a);
	server_done(&ts);
}

/* 6: a load that fails under an open stream: the acquire of a layer not
 * loaded gets -EIO naming a tensor, never wrong bytes. */
static void stream_load_fails(void **st)
{
	struct test_server ts = { 0 };
	struct wsrv_client *a;
	struct wsrv_model *m;
	struct wsrv_device *d;
	struct wsrv_stream *s;
	char shard[512];
	int r = 0;

	assert_int_equal(make_model(F.dir[0], "llama-mini", 24 << 20, 6, 2, 8), 0);
	assert_int_equal(start_slow(&ts), 0);
	assert_int_equal(wsrv_connect(ts.sock, NULL, &a), 0);
	assert_int_equal(wsrv_attach(a, "m", &m), 0);
	assert_int_equal(wsrv_device_host(NULL, &d), 0);
	s = early_open_stream(m, d, "{\"residency\": {\"*\": \"streamed\"}}");
	snprintf(shard, sizeof(shard), "%s/model-00002-of-00002.safetensors", F.dir[0]);
	assert_int_equal(truncate(shard, 1 << 20), 0);
	for (int32_t l = 0; l < 6 && r == 0; l++)
		if ((r = wsrv_stream_acquire(s, l)) == 0)
			assert_int_equal(wsrv_stream_release(s, l), 0);
	assert_int_equal(r, -EIO);
	if (!strstr(wsrv_last_error(), "failed to load at tensor model."))
		fail_msg("the error names no tensor: %s", wsrv_last_error());
	wsrv_stream_close(s);
	wsrv_device_destroy(d);
	wsrv_detach(m);
	wsrv_disconnect(a);
	assert_int_equal(server_stop(&ts, SIGTERM), 1);
	rm_rf(ts.dir);
}

/* 2: a lookup waits by itself. */
static void lookups_wait(void **st)
{
	struct test_server ts = { 0 };
	struct wsrv_client *a;
	struct wsrv_model *m;
	struct wsrv_layer l;
	struct wsrv_tensor t;
	size_t last;

	assert_int_equal(make_model(F.dir[0], "llama-mini", 24 << 20, 6, 2, 4), 0);
	assert_int_equal(start_slow(&ts), 0);
	assert_int_equal(wsrv_connect(ts.sock, NULL, &a), 0);
	assert_int_equal(wsrv_attach(a, "m", &m), 0);
	assert_int_equal(wsrv_model_layer(m, 5, &l), 0);
	last = l.first + l.count - 1;
	assert_int_equal(wsrv_model_tensor(m, last, &t), 0);
	assert_true(XXH3_64bits(t.data, t.size) == t.xxh3);
	wsrv_detach(m);
	wsrv_disconnect(a);
	server_done(&ts);
}

/* 3: a client that does not say it can wait is refused, clearly. */
static void old_client_refused(void **st)
{
	struct test_server ts = { 0 };
	Wsrv__Request q = WSRV__REQUEST__INIT;
	Wsrv__Attach at = WSRV__ATTACH__INIT;
	int fd;

	assert_int_equal(make_model(F.dir[0], "llama-mini", 24 << 20, 6, 2, 5), 0);
	assert_int_equal(start_slow(&ts), 0);
	assert_true((fd = raw_connect(ts.sock)) >= 0);
	assert_int_equal(raw_hello(fd, "old"), 0);
	assert_int_equal(raw_recv_code(fd, NULL, NULL), 0);
	at.model = "m";
	q.seq = 2;
	q.body_case = WSRV__REQUEST__BODY_ATTACH;
	q.attach = &at;
	assert_int_equal(raw_send(fd, &q, NULL, 0), 0);
	assert_int_equal(raw_recv_code(fd, NULL, NULL), EAGAIN);
	close(fd);
	server_done(&ts);
}

/* 3b: a release of segments not loaded yet (what a client of the server
 * before this one held) is answered, and carries no fd: nobody gets a
 * segment before it is loaded and sealed. */
static void release_gets_no_fd(void **st)
{
	struct test_server ts = { 0 };
	Wsrv__Request q = WSRV__REQUEST__INIT;
	Wsrv__Attach at = WSRV__ATTACH__INIT;
	Wsrv__AttachSegments as = WSRV__ATTACH_SEGMENTS__INIT;
	uint32_t segs[2] = { 4, 5 };
	int fd, fds[WSRV_MAX_FDS], nfds = -1;

	(void)st;
	assert_int_equal(make_model(F.dir[0], "llama-mini", 24 << 20, 6, 2, 5), 0);
	assert_int_equal(start_slow(&ts), 0);
	assert_true((fd = raw_connect(ts.sock)) >= 0);
	assert_int_equal(raw_hello(fd, NULL), 0);
	assert_int_equal(raw_recv_code(fd, NULL, NULL), 0);
	at.model = "m";
	at.while_loading = true;
	q.seq = 2;
	q.body_case = WSRV__REQUEST__BODY_ATTACH;
	q.attach = &at;
	assert_int_equal(raw_send(fd, &q, NULL, 0), 0);
	assert_int_equal(raw_recv_code(fd, NULL, NULL), 0);
	as.attach_id = 1; /* a session's first */
	as.segments = segs;
	as.n_segments = 2;
	as.release = true;
	q.seq = 3;
	q.body_case = WSRV__REQUEST__BODY_ATTACH_SEGMENTS;
	q.attach_segments = &as;
	assert_int_equal(raw_send(fd, &q, NULL, 0), 0);
	assert_int_equal(raw_recv_code(fd, fds, &nfds), 0);
	assert_int_equal(nfds, 0);
	close(fd);
	server_done(&ts);
}

/* 4: the second shard is cut short while it loads: every waiter gets
 * -EIO naming a tensor, never wrong bytes; the server stops, status 1. */
static void failed_load_names_tensor(void **st)
{
	struct test_server ts = { 0 };
	struct wsrv_client *a;
	struct wsrv_model *m;
	char shard[512];

	assert_int_equal(make_model(F.dir[0], "llama-mini", 24 << 20, 6, 2, 6), 0);
	assert_int_equal(start_slow(&ts), 0);
	assert_int_equal(wsrv_connect(ts.sock, NULL, &a), 0);
	assert_int_equal(wsrv_attach(a, "m", &m), 0);
	snprintf(shard, sizeof(shard), "%s/model-00002-of-00002.safetensors", F.dir[0]);
	assert_int_equal(truncate(shard, 1 << 20), 0);
	int r = wsrv_model_wait(m, WSRV_LAYER_ALL, 30000);
	assert_int_equal(r, -EIO);
	if (!strstr(wsrv_last_error(), "failed to load at tensor model."))
		fail_msg("the error names no tensor: %s", wsrv_last_error());
	wsrv_detach(m);
	wsrv_disconnect(a);
	int status = server_stop(&ts, SIGTERM);
	assert_int_equal(status, 1);
	rm_rf(ts.dir);
}

/* Two models in F.dir[0] (g and b), the second shard of b cut short when
 * cut_before; their paths in good and bad. */
static void two_models(char *good, char *bad, size_t len, bool cut_before)
{
	snprintf(good, len, "%s/g", F.dir[0]);
	snprintf(bad, len, "%s/b", F.dir[0]);
	assert_int_equal(make_model(good, "llama-mini", 24 << 20, 6, 2, 6), 0);
	assert_int_equal(make_model(bad, "llama-mini", 24 << 20, 6, 2, 7), 0);
	if (cut_before)
		assert_int_equal(truncate(pjoin(bad, "model-00002-of-00002.safetensors"), 1 << 20), 0);
}

/* Whether the model list has name, failed, saying why. */
static bool listed_failed(struct wsrv_client *c, const char *name)
{
	struct wsrv_model_list *l;
	struct wsrv_model_info mi;
	bool found = false;

	assert_int_equal(wsrv_list_models(c, &l), 0);
	for (size_t i = 0; wsrv_model_list_at(l, i, &mi) == 0; i++) {
		struct wsrv_generation g = { .struct_size = sizeof(g) };
		assert_int_equal(wsrv_model_list_generation(l, i, &g), 0);
		if (strcmp(mi.name, name) == 0)
			found = g.failed && *g.reload;
	}
	wsrv_model_list_free(l);
	return found;
}

/* 4c: issue 48 item 17: --model good=G --model bad=<cut short>: wsrvd
 * exited 1 and good was never served. The others are served now, the bad
 * one is listed as failed and an attach to it is EIO saying why; with
 * --require-all-models the server does not start. Once at the start
 * (the files cannot be laid out) and once while loading. */
static void one_bad_model_of_two(void **st)
{
	char good[512], bad[512], spec[600];
	struct test_server ts = { 0 }, all = { 0 };
	struct wsrv_client *c;
	struct wsrv_model *m;

	for (int cut_before = 1; cut_before >= 0; cut_before--) {
		two_models(good, bad, sizeof(good), cut_before);
		snprintf(spec, sizeof(spec), "bad=%s", bad);
		memset(&ts, 0, sizeof(ts));
		assert_int_equal(server_start(&ts, "good", good, "--model", spec, "--serve-while-loading",
					      "--read-rate", "16M", "--queue-depth", "1", "--block-size", "256K", NULL), 0);
		if (!cut_before)
			assert_int_equal(truncate(pjoin(bad, "model-00002-of-00002.safetensors"), 1 << 20), 0);
		assert_int_equal(wsrv_connect(ts.sock, NULL, &c), 0);
		assert_int_equal(wsrv_attach(c, "good", &m), 0);
		assert_int_equal(wsrv_model_wait(m, WSRV_LAYER_ALL, 30000), 0);
		early_check_layer(m, WSRV_LAYER_ALL);
		wsrv_detach(m);
		for (int i = 0; i < 300 && !listed_failed(c, "bad"); i++)
			sleep_ms(20);
		assert_true(listed_failed(c, "bad"));
		assert_int_equal(wsrv_attach(c, "bad", &m), -EIO);
		assert_non_null(strstr(wsrv_last_error(), "failed to load"));
		wsrv_disconnect(c);
		assert_int_equal(server_stop(&ts, SIGTERM), 0);
		rm_rf(ts.dir);
	}
	/* All or nothing, when asked. */
	two_models(good, bad, sizeof(good), true);
	snprintf(spec, sizeof(spec), "bad=%s", bad);
	assert_true(server_start(&all, "good", good, "--model", spec, "--require-all-models", NULL) < 0);
	rm_rf(all.dir);
	rm_rf(good);
	rm_rf(bad);
}

/* 4b: the stop comes before the loop heard of the failure (a client saw
 * -EIO at once from the ready page): still status 1, with the reason logged. */
static void failed_load_then_stopped(void **st)
{
	struct test_server ts = { 0 };
	struct wsrv_client *a;
	struct wsrv_model *m;
	char shard[512];

	need_test_seams("WSRV_TEST_EARLY_SIGNAL_DELAY_MS delays the signal");
	assert_int_equal(make_model(F.dir[0], "llama-mini", 24 << 20, 6, 2, 6), 0);
	setenv("WSRV_TEST_EARLY_SIGNAL_DELAY_MS", "1500", 1);
	int r = start_slow(&ts);
	unsetenv("WSRV_TEST_EARLY_SIGNAL_DELAY_MS");
	assert_int_equal(r, 0);
	assert_int_equal(wsrv_connect(ts.sock, NULL, &a), 0);
	assert_int_equal(wsrv_attach(a, "m", &m), 0);
	snprintf(shard, sizeof(shard), "%s/model-00002-of-00002.safetensors", F.dir[0]);
	assert_int_equal(truncate(shard, 1 << 20), 0);
	assert_int_equal(wsrv_model_wait(m, WSRV_LAYER_ALL, 30000), -EIO);
	wsrv_detach(m);
	wsrv_disconnect(a);
	assert_int_equal(server_stop(&ts, SIGTERM), 1);
	if (!server_log_has(&ts, "error: model m: "))
		fail_msg("the log does not say why (%s)", ts.log);
	rm_rf(ts.dir);
}

/* 5: the server dies mid-load (SIGKILL) and another starts on the same
 * socket. A client waiting for the rest of the model goes on waiting on
 * the new server's load, or takes the new server's loaded model, keeps
 * the segments it had mapped (layer 0 stays where it was), and ends with
 * every byte and checksum right; its calls after that reach the new
 * server (the attach id is the new one). A new server with other weights
 * makes the model stale: -ESTALE. */
static void restart_mid_load_case_sig(bool slow_again, unsigned other_layers, int sig)
{
	struct test_server ts = { 0 };
	struct wsrv_client *a;
	struct wsrv_model *m;
	struct wsrv_layer l0 = { .struct_size = sizeof(l0) }, l0b = { .struct_size = sizeof(l0b) };
	uint64_t h0;
	int r;

	assert_int_equal(make_model(F.dir[0], "llama-mini", 24 << 20, 6, 2, 9), 0);
	assert_int_equal(start_slow(&ts), 0);
	assert_int_equal(wsrv_connect(ts.sock, NULL, &a), 0);
	assert_int_equal(wsrv_attach(a, "m", &m), 0);
	assert_int_equal(wsrv_model_wait(m, 0, 20000), 0);
	assert_int_equal(wsrv_model_wait(m, 5, 0), -ETIMEDOUT);
	assert_int_equal(wsrv_model_layer(m, 0, &l0), 0);
	h0 = XXH3_64bits(l0.data, l0.length);
	if (sig == SIGKILL)
		assert_int_equal(server_stop(&ts, SIGKILL), 128 + SIGKILL);
	else
		assert_int_equal(server_stop(&ts, sig), 0);
	if (other_layers)
		assert_int_equal(make_model(F.dir[0], "llama-mini", 24 << 20, other_layers, 2, 10), 0);
	if (slow_again)
		r = server_restart_args(&ts, "m", F.dir[0], "--serve-while-loading", "--read-rate", "8M",
					"--queue-depth", "1", "--block-size", "256K", NULL);
	else
		r = server_restart(&ts, "m", F.dir[0]); /* returns once loaded */
	assert_int_equal(r, 0);
	r = wsrv_model_wait(m, WSRV_LAYER_ALL, 30000);
	if (other_layers) {
		assert_int_equal(r, -ESTALE);
	} else {
		if (r != 0)
			fail_msg("the wait across the restart: %d, %s", r, wsrv_last_error());
		assert_int_equal(wsrv_model_progress(m, NULL, NULL), 0);
		early_check_layer(m, WSRV_LAYER_ALL);
		assert_int_equal(wsrv_model_layer(m, 0, &l0b), 0);
		assert_ptr_equal(l0b.data, l0.data);
		assert_true(XXH3_64bits(l0b.data, l0b.length) == h0);
		/* A request naming the attach id: the new server knows it. */
		struct wsrv_lease lease = { .struct_size = sizeof(lease) };
		assert_int_equal(wsrv_fetch_layer(m, 3, &lease), 0);
		assert_int_equal(wsrv_release(m, lease.id), 0);
	}
	wsrv_detach(m);
	wsrv_disconnect(a);
	server_done(&ts);
}

static void restart_mid_load_case(bool slow_again, unsigned other_layers)
{
	restart_mid_load_case_sig(slow_again, other_layers, SIGKILL);
}

/* Issue 37 item 17: after SIGTERM (not SIGKILL) and a new wsrvd at once,
 * the waiting worker got ENOTCONN, then EIO ("the load was stopped"): the
 * stopped load marked the model failed. A stop is not a failure: the
 * worker goes on waiting on the new server, as the README says. */
static void restart_mid_load_sigterm(void **st)
{
	restart_mid_load_case_sig(true, 0, SIGTERM);
}

static void restart_mid_load_sigterm_loaded(void **st)
{
	restart_mid_load_case_sig(false, 0, SIGTERM);
}

static void restart_mid_load(void **st)
{
	restart_mid_load_case(true, 0);
}

static void restart_mid_load_loaded(void **st)
{
	restart_mid_load_case(false, 0);
}

static void restart_mid_load_other_weights(void **st)
{
	restart_mid_load_case(false, 4);
}

/* Issue 37 item 3: new files with the same layout and other bytes. The
 * resumed wait succeeded and the worker read some tensors of the old
 * model and some of the new, with no error (the layout check ignored
 * what the bytes were). Now the manifest's source_id differs: -ESTALE,
 * whether the new server is still loading or has loaded. */
static void restart_mid_load_same_layout_loading(void **st)
{
	restart_mid_load_case(true, 6);
}

static void restart_mid_load_same_layout_loaded(void **st)
{
	restart_mid_load_case(false, 6);
}

FIXTURE_MAIN(F,
	cmocka_unit_test(attach_while_loading),
	cmocka_unit_test(lookups_wait),
	cmocka_unit_test(old_client_refused),
	cmocka_unit_test(release_gets_no_fd),
	cmocka_unit_test(failed_load_names_tensor),
	cmocka_unit_test(failed_load_then_stopped),
	cmocka_unit_test(one_bad_model_of_two),
	cmocka_unit_test(stream_while_loading),
	cmocka_unit_test(stream_load_fails),
	cmocka_unit_test(restart_mid_load),
	cmocka_unit_test(restart_mid_load_loaded),
	cmocka_unit_test(restart_mid_load_other_weights),
	cmocka_unit_test(restart_mid_load_same_layout_loading),
	cmocka_unit_test(restart_mid_load_sigterm),
	cmocka_unit_test(restart_mid_load_sigterm_loaded),
	cmocka_unit_test(restart_mid_load_same_layout_loaded),
)
