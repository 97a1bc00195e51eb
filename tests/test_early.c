// SPDX-License-Identifier: MIT
/* test_early.c - serving while loading (wsrvd --serve-while-loading), with
 * a real wsrvd whose reads are slowed (--read-rate) and real clients: a
 * client attaches before the load ends and reads layer 0 while later
 * layers still load, every byte it reads is the loaded one, a client that
 * cannot wait is refused with EAGAIN, and a load that fails midway gives
 * every waiter -EIO naming a tensor, and stops the server with status 1. */
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

#include "fixture.h"
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
static void check_layer(const struct wsrv_model *m, int32_t layer)
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
	check_layer(ma, 0);
	/* A lookup into a later layer waits for it. */
	assert_int_equal(wsrv_model_wait(ma, WSRV_LAYER_ALL, 30000), 0);
	assert_int_equal(wsrv_model_progress(ma, &placed, &total), 0);
	assert_true(placed == total);
	check_layer(ma, WSRV_LAYER_ALL);
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
	assert_int_equal(server_stop(&ts, SIGTERM), 0);
	rm_rf(ts.dir);
}

/* 2: a lookup waits by itself; a stream waits for the whole model. */
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
	assert_int_equal(server_stop(&ts, SIGTERM), 0);
	rm_rf(ts.dir);
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
	assert_int_equal(server_stop(&ts, SIGTERM), 0);
	rm_rf(ts.dir);
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

FIXTURE_MAIN(F,
	cmocka_unit_test(attach_while_loading),
	cmocka_unit_test(lookups_wait),
	cmocka_unit_test(old_client_refused),
	cmocka_unit_test(failed_load_names_tensor),
)
