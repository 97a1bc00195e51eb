// SPDX-License-Identifier: MIT
/* test_reload.c - new generations while workers run (wsrvctl reload), with
 * a real wsrvd and real clients: the new generation serves new attaches,
 * attached clients are told (a readable fd, wsrv_client_poll_events) and
 * keep reading the old one until they detach, which frees it; workers that
 * attach and check every checksum while generations come and go never see
 * a mix of two. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <xxhash.h>

#include "clock.h"
#include "fixture.h"
#include "wsrv.h"

/* dir[0]: the model each case writes, and writes again to reload. */
static struct fixture F = { .tag = "reload", .models = { { "" } } };

/* wsrvctl reload m; its exit status. */
static int reload_ctl_reload(const struct test_server *ts, const char *path)
{
	const char *argv[] = { getenv("WSRV_CTL"), "--socket", ts->sock, "reload", "m",
			       path ? "--path" : NULL, path, NULL };

	return run_prog(argv, NULL, pjoin(ts->dir, "ctl.out"), pjoin(ts->dir, "ctl.err"), 0, 60);
}

/* Every tensor of m has the checksum its manifest states. */
static int consistent(const struct wsrv_model *m)
{
	for (size_t i = 0; i < wsrv_model_tensor_count(m); i++) {
		struct wsrv_tensor t;
		wsrv_model_tensor(m, i, &t);
		if (XXH3_64bits(t.data, t.size) != t.xxh3)
			return -1;
	}
	return 0;
}

static size_t generations(const char *sock, uint64_t *gens, int *retired)
{
	struct wsrv_client *c;
	struct wsrv_model_list *l;
	struct wsrv_generation g;
	size_t n = 0;

	assert_int_equal(wsrv_connect(sock, NULL, &c), 0);
	assert_int_equal(wsrv_list_models(c, &l), 0);
	for (; wsrv_model_list_generation(l, n, &g) == 0; n++) {
		gens[n] = g.generation;
		retired[n] = g.retired;
	}
	wsrv_model_list_free(l);
	wsrv_disconnect(c);
	return n;
}

/* 1: a reload with a worker attached. */
static void reload_with_worker(void **st)
{
	struct test_server ts = { 0 };
	struct wsrv_client *a, *b;
	struct wsrv_model *ma, *mb;
	struct wsrv_tensor t, tb;
	uint64_t mapped, latest, gens[4];
	int retired[4];

	assert_int_equal(make_model(F.dir[0], "llama-mini", 8 << 20, 2, 1, 1), 0);
	assert_int_equal(server_start(&ts, "m", F.dir[0], NULL), 0);
	assert_int_equal(wsrv_connect(ts.sock, NULL, &a), 0);
	assert_int_equal(wsrv_attach(a, "m", &ma), 0);
	assert_int_equal(wsrv_model_tensor(ma, 1, &t), 0);
	uint8_t *before = malloc(t.size);
	memcpy(before, t.data, t.size);
	/* The same shapes, other bytes: a trainer's new weights. */
	assert_int_equal(make_model(F.dir[0], "llama-mini", 8 << 20, 2, 1, 2), 0);
	assert_int_equal(reload_ctl_reload(&ts, NULL), 0);
	/* Told: the connection is readable, the model has a newer generation. */
	struct pollfd p = { wsrv_client_fd(a), POLLIN, 0 };
	assert_int_equal(poll(&p, 1, 5000), 1);
	assert_int_equal(wsrv_client_poll_events(a), 1);
	assert_int_equal(wsrv_model_generation(ma, &mapped, &latest), 0);
	assert_int_equal(mapped, 1);
	assert_int_equal(latest, 2);
	assert_memory_equal(t.data, before, t.size); /* the old one, unchanged */
	assert_int_equal(generations(ts.sock, gens, retired), 2);
	assert_true(retired[0] && gens[0] == 1 && !retired[1] && gens[1] == 2);
	/* New attaches get the new generation. */
	assert_int_equal(wsrv_connect(ts.sock, NULL, &b), 0);
	assert_int_equal(wsrv_attach(b, "m", &mb), 0);
	assert_int_equal(wsrv_model_generation(mb, &mapped, NULL), 0);
	assert_int_equal(mapped, 2);
	assert_int_equal(wsrv_model_tensor(mb, 1, &tb), 0);
	assert_int_equal(consistent(mb), 0);
	assert_memory_not_equal(tb.data, before, t.size);
	/* The worker switches: the old generation goes with its last client. */
	wsrv_detach(ma);
	assert_int_equal(generations(ts.sock, gens, retired), 1);
	assert_int_equal(wsrv_attach(a, "m", &ma), 0);
	assert_int_equal(wsrv_model_generation(ma, &mapped, &latest), 0);
	assert_true(mapped == 2 && latest == 2);
	assert_int_equal(wsrv_client_poll_events(a), 0);
	free(before);
	wsrv_detach(ma);
	wsrv_detach(mb);
	wsrv_disconnect(a);
	wsrv_disconnect(b);
	server_done(&ts);
}

/* 2: refusals: no such model, no such path; another user is refused in
 * test_reload's third case only when running as root. */
static void reload_refused(void **st)
{
	struct test_server ts = { 0 };
	struct wsrv_client *c;
	size_t len;

	assert_int_equal(make_model(F.dir[0], "llama-mini", 8 << 20, 2, 1, 1), 0);
	assert_int_equal(server_start(&ts, "m", F.dir[0], NULL), 0);
	assert_int_equal(reload_ctl_reload(&ts, "/nonexistent/model"), 1);
	char *err = (char *)read_file(pjoin(ts.dir, "ctl.err"), &len);
	assert_non_null(err);
	assert_non_null(strstr(err, "cannot reload m from /nonexistent/model"));
	free(err);
	assert_int_equal(wsrv_connect(ts.sock, NULL, &c), 0);
	assert_int_equal(wsrv_reload(c, "nope", NULL), -ENOENT);
	char *longp = malloc(5000);
	memset(longp, 'a', 4999);
	longp[0] = '/';
	longp[4999] = 0;
	assert_int_equal(wsrv_reload(c, "m", longp), -ENAMETOOLONG);
	free(longp);
	wsrv_disconnect(c);
	server_done(&ts);
}

/* Issue 79 item 5: a reload with --path took a model with other tensors
 * (93 in place of 84) without a word. The server's log names the
 * difference, with a tensor of each side; the reload goes on. */
static void reload_other_tensors_said(void **st)
{
	struct test_server ts = { 0 };
	char other[4200];

	snprintf(other, sizeof(other), "%s-three-layers", F.dir[0]);
	assert_int_equal(make_model(F.dir[0], "llama-mini", 8 << 20, 2, 1, 1), 0);
	assert_int_equal(make_model(other, "llama-mini", 8 << 20, 3, 1, 2), 0);
	assert_int_equal(server_start(&ts, "m", F.dir[0], NULL), 0);
	assert_int_equal(reload_ctl_reload(&ts, other), 0);
	if (!file_has(ts.log, 0, "the reload's files at") || !file_has(ts.log, 0, "of theirs it lacks (model.layers.2."))
		fail_msg("the log does not say the reload's files hold other tensors (%s)", ts.log);
	server_done(&ts);
	rm_rf(other);
}

/* Issue 61 item 9: wsrvctl reload m --timeout 1 over a reload that took
 * longer printed the server's "loading generation 2 from DIR" and exited
 * 1, never saying that it had stopped waiting, and --timeout 0 failed at
 * once. The wait running out is said, with its own exit status (3), and
 * the reload goes on; --timeout 0 starts it and does not wait. The
 * reload is held by $WSRV_TEST_LOAD_HOLD for as long as the test needs. */
static void reload_wait_runs_out(void **st)
{
	struct test_server ts = { 0 };
	const char *args[] = { getenv("WSRV_CTL"), "--socket", NULL, "reload", "m", "--timeout", "1", NULL };
	char flag[200], env[250];
	const char *envv[] = { env, NULL };
	uint64_t gens[8];
	int retired[8], fd;
	size_t len, n;
	char *err;

	(void)st;
	need_test_seams("WSRV_TEST_LOAD_HOLD holds the reload");
	assert_int_equal(make_model(F.dir[0], "llama-mini", 8 << 20, 2, 1, 1), 0);
	snprintf(flag, sizeof(flag), "/tmp/wsrv-test-reload-hold-%d", (int)getpid());
	snprintf(env, sizeof(env), "WSRV_TEST_LOAD_HOLD=%s", flag);
	ts.env = envv;
	assert_int_equal(server_start(&ts, "m", F.dir[0], NULL), 0);
	assert_true((fd = open(flag, O_CREAT | O_WRONLY | O_CLOEXEC, 0600)) >= 0);
	close(fd);
	args[2] = ts.sock;
	assert_int_equal(run_prog(args, NULL, pjoin(ts.dir, "ctl.out"), pjoin(ts.dir, "ctl.err"), 0, 60), 3);
	assert_non_null(err = (char *)read_file(pjoin(ts.dir, "ctl.err"), &len));
	assert_non_null(strstr(err, "the wait ran out after 1 s; the reload goes on"));
	free(err);
	assert_int_equal(unlink(flag), 0);
	for (int i = 0; i < 300; i++) {
		n = generations(ts.sock, gens, retired);
		bool second = false;
		for (size_t k = 0; k < n; k++)
			second = second || (!retired[k] && gens[k] == 2);
		if (second)
			break;
		sleep_ms(50);
	}
	args[6] = "0";
	assert_int_equal(run_prog(args, NULL, pjoin(ts.dir, "ctl.out"), pjoin(ts.dir, "ctl.err"), 0, 60), 0);
	args[6] = "soon";
	assert_int_equal(run_prog(args, NULL, pjoin(ts.dir, "ctl.out"), pjoin(ts.dir, "ctl.err"), 0, 60), 2);
	server_done(&ts);
}

/* Issue 49 item 2: systemctl reload (the unit's ExecReload) runs
 * wsrvctl reload --all: every model, one after another, a new generation
 * each. */
static void reload_all_models(void **st)
{
	struct test_server ts = { 0 };
	char spec[600];
	uint64_t gens[8];
	int retired[8];
	size_t n;

	(void)st;
	assert_int_equal(make_model(F.dir[0], "llama-mini", 8 << 20, 2, 1, 1), 0);
	snprintf(spec, sizeof(spec), "b=%s", F.dir[0]);
	assert_int_equal(server_start(&ts, "a", F.dir[0], "--model", spec, NULL), 0);
	const char *argv[] = { getenv("WSRV_CTL"), "--socket", ts.sock, "reload", "--all", NULL };
	assert_int_equal(run_prog(argv, NULL, pjoin(ts.dir, "ctl.out"), pjoin(ts.dir, "ctl.err"), 0, 60), 0);
	n = generations(ts.sock, gens, retired);
	size_t second = 0;
	for (size_t i = 0; i < n; i++)
		second += !retired[i] && gens[i] == 2;
	assert_int_equal(second, 2);
	const char *bad[] = { getenv("WSRV_CTL"), "--socket", ts.sock, "reload", "--all", "a", NULL };
	assert_int_equal(run_prog(bad, NULL, pjoin(ts.dir, "ctl.out"), pjoin(ts.dir, "ctl.err"), 0, 60), 2);
	server_done(&ts);
}

/* 3: workers attach, check every checksum and detach in a loop while the
 * model is reloaded again and again: no attachment ever mixes two. */
static void never_torn(void **st)
{
	struct test_server ts = { 0 };
	int status;

	assert_int_equal(make_model(F.dir[0], "llama-mini", 8 << 20, 2, 1, 1), 0);
	assert_int_equal(server_start(&ts, "m", F.dir[0], NULL), 0);
	pid_t w = fork();
	if (w == 0) {
		int bad = 0, seen = 0;
		uint64_t last = 0;
		double end = mono_now() + 4;
		while (mono_now() < end) {
			struct wsrv_client *c;
			struct wsrv_model *m;
			uint64_t g;
			if (wsrv_connect(ts.sock, NULL, &c) < 0)
				continue;
			if (wsrv_attach(c, "m", &m) == 0) {
				bad += consistent(m) < 0;
				wsrv_model_generation(m, &g, NULL);
				seen += g != last;
				last = g;
				wsrv_detach(m);
			}
			wsrv_disconnect(c);
		}
		fprintf(stderr, "worker: %d generations seen, %d torn\n", seen, bad);
		_exit(bad ? 1 : seen >= 3 ? 0 : 2);
	}
	for (int i = 0; i < 4; i++) {
		usleep(300000);
		assert_int_equal(make_model(F.dir[0], "llama-mini", 8 << 20, 2, 1, (uint64_t)(10 + i)), 0);
		assert_int_equal(reload_ctl_reload(&ts, NULL), 0);
	}
	assert_int_equal(waitpid(w, &status, 0), w);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
	server_done(&ts);
}

/* 4: the example worker, --follow, switches generations between passes
 * and its last pass is still bit-identical to the direct mapping's. */
static void worker_follows(void **st)
{
	struct test_server ts = { 0 };
	size_t len;

	assert_int_equal(make_model(F.dir[0], "llama-mini", 8 << 20, 2, 1, 1), 0);
	assert_int_equal(server_start(&ts, "m", F.dir[0], NULL), 0);
	pid_t w = fork();
	if (w == 0) {
		const char *argv[] = { getenv("WSRV_WORKER"), "--socket", ts.sock, "--model", "m",
				       "--passes", "400", "--bandwidth", "0.5", "--follow", "--check", NULL };
		_exit(run_prog(argv, NULL, pjoin(ts.dir, "w.out"), pjoin(ts.dir, "w.err"), 0, 120));
	}
	usleep(500000);
	assert_int_equal(make_model(F.dir[0], "llama-mini", 8 << 20, 2, 1, 7), 0);
	assert_int_equal(reload_ctl_reload(&ts, NULL), 0);
	int status;
	assert_int_equal(waitpid(w, &status, 0), w);
	char *out = (char *)read_file(pjoin(ts.dir, "w.out"), &len);
	assert_non_null(out);
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || !strstr(out, "switched from generation 1 to 2") ||
	    !strstr(out, "bit-identical"))
		fail_msg("the worker did not follow:\n%s", out);
	free(out);
	server_done(&ts);
}

FIXTURE_MAIN(F,
	cmocka_unit_test(reload_with_worker),
	cmocka_unit_test(reload_refused),
	cmocka_unit_test(reload_other_tensors_said),
	cmocka_unit_test(reload_all_models),
	cmocka_unit_test(reload_wait_runs_out),
	cmocka_unit_test(never_torn),
	cmocka_unit_test(worker_follows),
)
