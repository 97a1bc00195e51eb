// SPDX-License-Identifier: MIT
/* test_restart.c - restarting wsrvd without reloading, through systemd's
 * file descriptor store. The test plays systemd's part over a real notify
 * socket (tools/harness/fdstore_peer.c): it keeps what wsrvd pushes (FDSTORE=1,
 * FDSTOREREMOVE=1, named), and starts the next wsrvd with those fds as
 * LISTEN_FDS / LISTEN_FDNAMES, as systemd does on `systemctl restart`. wsrvd's side is the real one.
 * The successor adopts the models (no byte read from the files), clients
 * keep reading their mappings and reconnect on their next call, and files
 * that changed in between are loaded again instead. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "fdstore_peer.h"
#include "fixture.h"
#include "wsrv.h"

static struct fixture F = { .tag = "restart", .models = {
	{ "llama-mini", 16 << 20, .layers = 2, .shards = 2, .seed = 3 } } };


static size_t log_size(const struct test_server *ts)
{
	size_t len = 0;
	free(read_file(ts->log, &len));
	return len;
}

static void model_stats(const char *sock, struct wsrv_model_stats *ms, struct wsrv_server_stats *ss)
{
	struct wsrv_client *c;
	struct wsrv_stats *st;

	assert_int_equal(wsrv_connect(sock, NULL, &c), 0);
	assert_int_equal(wsrv_stats(c, &st), 0);
	assert_int_equal(wsrv_stats_model(st, 0, ms), 0);
	assert_int_equal(wsrv_stats_server(st, ss), 0);
	wsrv_stats_free(st);
	wsrv_disconnect(c);
}

/* Starts a server (again, in the same directory, when ts has one) that
 * pushes into s and receives what s holds; waits for READY=1. */
static void start_with_store(struct test_server *ts, struct fdstore *s, const char *extra)
{
	ts->store = s;
	s->ready = false;
	assert_int_equal(ts->dir[0] ? server_restart_with(ts, "m", F.dir[0], extra)
				    : server_start(ts, "m", F.dir[0], extra, NULL), 0);
	fdstore_drain(s, 10000, true);
	assert_true(s->ready);
	/* Serving while loading, READY=1 comes before the load ends and the
	 * store is filled after it; server_start waited for the load. */
	fdstore_drain_queued(s);
}

/* 1: a restart through the store adopts the model: nothing is loaded, the
 * generation and the first start carry over, old clients keep reading and
 * reconnect, and the successor fills the store again. */
static void restart_adopts(void **st)
{
	struct test_server ts = { 0 };
	struct wsrv_model_stats ms;
	struct wsrv_server_stats ss;
	struct wsrv_client *c, *c2;
	struct wsrv_model *m, *m2;
	struct wsrv_tensor t, t2;
	struct wsrv_lease l;
	struct fdstore s;
	char *dir = test_tmpdir("restart");
	int stored;

	assert_int_equal(fdstore_open(&s, dir), 0);
	start_with_store(&ts, &s, "--verbose");
	stored = s.n;
	assert_true(stored >= 3); /* state, manifest, a segment at least */
	assert_int_equal(wsrv_connect(ts.sock, NULL, &c), 0);
	assert_int_equal(wsrv_attach(c, "m", &m), 0);
	assert_int_equal(wsrv_model_tensor(m, 0, &t), 0);
	struct wsrv_lease before;
	assert_int_equal(wsrv_fetch_layer(m, 0, &before), 0);
	model_stats(ts.sock, &ms, &ss);
	assert_false(ms.adopted);
	double first = ss.first_started_unix;

	/* systemctl restart: stop (the store keeps its fds), start again. */
	assert_int_equal(server_stop(&ts, SIGTERM), 0);
	fdstore_drain(&s, 200, false);
	assert_int_equal(s.n, stored);
	size_t mark = log_size(&ts);
	double t0 = mono_now();
	start_with_store(&ts, &s, "--verbose");
	assert_int_equal(wsrv_connect(ts.sock, NULL, &c2), 0);
	assert_int_equal(wsrv_attach(c2, "m", &m2), 0);
	fprintf(stderr, "restart: %.1f ms from the old server's exit to an attach answered\n",
		(mono_now() - t0) * 1e3);
	assert_true(file_has(ts.log, mark, "model m adopted"));
	assert_false(file_has(ts.log, mark, "model m loaded"));
	model_stats(ts.sock, &ms, &ss);
	assert_true(ms.adopted);
	assert_int_equal(ms.generation, 1);
	assert_true(ss.first_started_unix == first && ss.started_unix >= first);
	/* The same bytes, and the old mapping is still readable. */
	assert_int_equal(wsrv_model_tensor(m2, 0, &t2), 0);
	assert_int_equal(t.size, t2.size);
	assert_memory_equal(t.data, t2.data, t.size);
	assert_int_equal(t.xxh3, t2.xxh3);
	/* The old client reconnects on its next call; its attachment holds,
	 * and a lease from before ended with the old server. */
	assert_int_equal(wsrv_release(m, before.id), 0);
	assert_int_equal(wsrv_fetch_layer(m, 0, &l), 0);
	assert_int_not_equal(l.id, before.id);
	assert_int_equal(wsrv_release(m, l.id), 0);
	assert_int_equal(s.n, stored); /* the store was refilled, not added to */
	wsrv_detach(m);
	wsrv_detach(m2);
	wsrv_disconnect(c);
	wsrv_disconnect(c2);
	assert_int_equal(server_stop(&ts, SIGTERM), 0);
	fdstore_close(&s);
	rm_rf(ts.dir);
	rm_rf(dir);
	free(dir);
}

/* 2: files that changed between the two servers are loaded again. */
static void changed_files_reload(void **st)
{
	struct test_server ts = { 0 };
	struct wsrv_model_stats ms;
	struct wsrv_server_stats ss;
	struct fdstore s;
	char *dir = test_tmpdir("restart2"), *mdir = test_tmpdir("restart2-model");

	assert_int_equal(make_model(mdir, "llama-mini", 8 << 20, 2, 1, 1), 0);
	char *keep = F.dir[0];
	F.dir[0] = mdir;
	struct wsrv_client *c;
	struct wsrv_model *m;
	struct wsrv_lease l;

	assert_int_equal(fdstore_open(&s, dir), 0);
	start_with_store(&ts, &s, NULL);
	assert_int_equal(wsrv_connect(ts.sock, NULL, &c), 0);
	assert_int_equal(wsrv_attach(c, "m", &m), 0);
	assert_int_equal(server_stop(&ts, SIGTERM), 0);
	fdstore_drain(&s, 200, false);
	/* The same shapes, other bytes. */
	assert_int_equal(make_model(mdir, "llama-mini", 8 << 20, 2, 1, 2), 0);
	start_with_store(&ts, &s, NULL);
	assert_true(file_has(ts.log, 0, "not adopted (its files changed"));
	model_stats(ts.sock, &ms, &ss);
	assert_false(ms.adopted);
	assert_int_equal(ms.generation, 2);
	/* The old client's mapping is the old generation: stale, and says so. */
	assert_int_equal(wsrv_fetch_layer(m, 0, &l), -ESTALE);
	assert_non_null(strstr(wsrv_last_error(), "attach it again"));
	wsrv_detach(m);
	assert_int_equal(wsrv_attach(c, "m", &m), 0);
	assert_int_equal(wsrv_fetch_layer(m, 0, &l), 0);
	wsrv_detach(m);
	wsrv_disconnect(c);
	assert_int_equal(server_stop(&ts, SIGTERM), 0);
	F.dir[0] = keep;
	fdstore_close(&s);
	rm_rf(ts.dir);
	rm_rf(dir);
	rm_rf(mdir);
	free(dir);
	free(mdir);
}

/* 3: --verify-adopted checks every checksum, and a store without the state
 * record adopts nothing (and leaks nothing). */
static void verify_and_partial_store(void **st)
{
	struct test_server ts = { 0 };
	struct wsrv_model_stats ms;
	struct wsrv_server_stats ss;
	struct fdstore s;
	char *dir = test_tmpdir("restart3");

	assert_int_equal(fdstore_open(&s, dir), 0);
	start_with_store(&ts, &s, NULL);
	assert_int_equal(server_stop(&ts, SIGTERM), 0);
	fdstore_drain(&s, 200, false);
	start_with_store(&ts, &s, "--verify-adopted");
	assert_true(file_has(ts.log, 0, "every checksum verified"));
	assert_int_equal(server_stop(&ts, SIGTERM), 0);
	fdstore_drain(&s, 200, false);
	fdstore_remove(&s, "wsrv-state");
	int fds0 = s.n;
	start_with_store(&ts, &s, NULL);
	model_stats(ts.sock, &ms, &ss);
	assert_false(ms.adopted);
	/* The unused fds it received were closed: the store was refilled. */
	assert_true(pid_fd_count(ts.pid) < 40);
	assert_true(s.n >= fds0);
	assert_int_equal(server_stop(&ts, SIGTERM), 0);
	fdstore_close(&s);
	rm_rf(ts.dir);
	rm_rf(dir);
	free(dir);
}

/* 4: with --lock on an adopted model is locked, as a loaded one is (it
 * was never locked: wsrvd mapped adopted segments without locking them,
 * whatever --lock said). */
static void adopted_locked(void **st)
{
	struct test_server ts = { 0 };
	struct wsrv_model_stats ms;
	struct wsrv_server_stats ss;
	struct fdstore s;
	char *dir = test_tmpdir("restart4");
	long long loaded;

	if (geteuid() != 0) {
		fprintf(stderr, "needs root: RLIMIT_MEMLOCK would refuse the lock\n");
		skip();
	}
	assert_int_equal(fdstore_open(&s, dir), 0);
	start_with_store(&ts, &s, "--lock=on");
	loaded = pid_locked_bytes(ts.pid);
	model_stats(ts.sock, &ms, &ss);
	assert_true(ms.disk_bytes > 0 && loaded >= (long long)ms.disk_bytes);
	assert_int_equal(server_stop(&ts, SIGTERM), 0);
	fdstore_drain(&s, 200, false);
	size_t mark = log_size(&ts);
	start_with_store(&ts, &s, "--lock=on");
	assert_true(file_has(ts.log, mark, "model m adopted"));
	assert_true(pid_locked_bytes(ts.pid) >= loaded);
	assert_int_equal(server_stop(&ts, SIGTERM), 0);
	fdstore_drain(&s, 200, false);
	/* --lock off: adopted, and nothing locked. */
	start_with_store(&ts, &s, "--lock=off");
	assert_true(file_has(ts.log, mark, "model m adopted"));
	assert_true(pid_locked_bytes(ts.pid) < 1 << 20);
	assert_int_equal(server_stop(&ts, SIGTERM), 0);
	fdstore_close(&s);
	rm_rf(ts.dir);
	rm_rf(dir);
	free(dir);
}

/* The current generation's number in the model list. */
static uint64_t current_generation(const char *sock)
{
	struct wsrv_client *c;
	struct wsrv_model_list *l;
	struct wsrv_generation g;
	uint64_t cur = 0;

	assert_int_equal(wsrv_connect(sock, NULL, &c), 0);
	assert_int_equal(wsrv_list_models(c, &l), 0);
	for (size_t i = 0; wsrv_model_list_generation(l, i, &g) == 0; i++)
		if (!g.retired)
			cur = g.generation;
	wsrv_model_list_free(l);
	wsrv_disconnect(c);
	return cur;
}

/* 5: a reload of an adopted model under systemd. Regressions: the store
 * update after a reload dereferenced a NULL take-over (wsrvd crashed), and
 * freeing the adopted generation closed fd 0 (its layout fd was a zeroed
 * 0, not -1), so a later free closed whatever reused it. The store then
 * holds the new generation: the next restart adopts generation 2. */
static void reload_after_adopt(void **st)
{
	struct test_server ts = { 0 };
	struct wsrv_model_stats ms;
	struct wsrv_server_stats ss;
	struct wsrv_client *c;
	struct fdstore s;
	char *dir = test_tmpdir("restart5");
	char fd0[256], now[256];
	int stored;

	assert_int_equal(fdstore_open(&s, dir), 0);
	start_with_store(&ts, &s, NULL);
	stored = s.n;
	assert_int_equal(server_stop(&ts, SIGTERM), 0);
	fdstore_drain(&s, 200, false);
	start_with_store(&ts, &s, NULL);
	model_stats(ts.sock, &ms, &ss);
	assert_true(ms.adopted);
	assert_int_equal(pid_fd_target(ts.pid, 0, fd0, sizeof(fd0)), 0);
	assert_int_equal(wsrv_connect(ts.sock, NULL, &c), 0);
	assert_int_equal(wsrv_reload(c, "m", NULL), 0);
	wsrv_disconnect(c);
	for (int i = 0; i < 500 && current_generation(ts.sock) != 2; i++)
		sleep_ms(20);
	assert_int_equal(current_generation(ts.sock), 2);
	fdstore_drain(&s, 300, false);
	assert_int_equal(kill(ts.pid, 0), 0); /* alive */
	assert_int_equal(pid_fd_target(ts.pid, 0, now, sizeof(now)), 0);
	assert_string_equal(now, fd0);
	assert_int_equal(s.n, stored);
	assert_int_equal(server_stop(&ts, SIGTERM), 0);
	fdstore_drain(&s, 200, false);
	start_with_store(&ts, &s, NULL);
	model_stats(ts.sock, &ms, &ss);
	assert_true(ms.adopted);
	assert_int_equal(ms.generation, 2);
	assert_int_equal(server_stop(&ts, SIGTERM), 0);
	fdstore_close(&s);
	rm_rf(ts.dir);
	rm_rf(dir);
	free(dir);
}

/* Issue 37 item 15: when the server had gone and connecting again failed,
 * the message was formatted into itself ("...connecting again failed:
 * ... failed: n: in failed: cannot connect..."). Each part now shows once. */
static void gone_server_message_whole(void **st)
{
	struct test_server ts = { 0 };
	struct wsrv_client *c;
	struct wsrv_model *m;
	struct wsrv_lease lease = { .struct_size = sizeof(lease) };
	const char *msg, *p;

	assert_int_equal(server_start(&ts, "m", F.dir[0], NULL), 0);
	assert_int_equal(wsrv_connect(ts.sock, NULL, &c), 0);
	assert_int_equal(wsrv_attach(c, "m", &m), 0);
	assert_int_equal(server_stop(&ts, SIGKILL), 128 + SIGKILL);
	assert_true(wsrv_fetch_layer(m, 0, &lease) < 0);
	msg = wsrv_last_error();
	if (!(p = strstr(msg, "connecting again")) || strstr(p + 1, "connecting again") ||
	    strstr(msg, "failed: n:"))
		fail_msg("a garbled message: %s", msg);
	wsrv_detach(m);
	wsrv_disconnect(c);
	rm_rf(ts.dir);
}

FIXTURE_MAIN(F,
	cmocka_unit_test(gone_server_message_whole),
	cmocka_unit_test(restart_adopts),
	cmocka_unit_test(changed_files_reload),
	cmocka_unit_test(verify_and_partial_store),
	cmocka_unit_test(adopted_locked),
	cmocka_unit_test(reload_after_adopt),
)
