// SPDX-License-Identifier: MIT
/* test_wait.c - workers that start before the server (issue 49 item 6):
 * libwsrv's connect, wsrvctl and wsrv-worker failed at once with ENOENT
 * when wsrvd was not up yet (a systemd ordering race, a sidecar that
 * starts late). With a wait they try again until the socket answers, or
 * fail once the time is up, naming what they waited for. */
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

#include "clock.h"
#include "fixture.h"
#include "wsrv.h"

static struct fixture F = { .tag = "wait", .models = {
	{ "tiny", 2 << 20, .layers = 2, .shards = 1, .seed = 5 } } };

/* A child that connects to sock with a wait of 20 s and attaches "m";
 * exits 0 when both worked. */
static pid_t waiting_worker(const char *sock)
{
	pid_t pid = fork();

	if (pid == 0) {
		struct wsrv_connect_opts o = { .struct_size = sizeof(o), .wait_ms = 20000 };
		struct wsrv_client *c;
		struct wsrv_model *m;
		if (wsrv_connect(sock, &o, &c) < 0 || wsrv_attach(c, "m", &m) < 0) {
			fprintf(stderr, "waiting worker: %s\n", wsrv_last_error());
			_exit(1);
		}
		wsrv_detach(m);
		wsrv_disconnect(c);
		_exit(0);
	}
	return pid;
}

/* wsrvctl --wait 20 status, in a child: its exit status. */
static pid_t waiting_ctl(const char *sock, const char *out)
{
	pid_t pid = fork();

	if (pid == 0) {
		const char *argv[] = { getenv("WSRV_CTL"), "--socket", sock, "--wait", "20", "status", NULL };
		_exit(run_prog(argv, NULL, out, pjoin(F.dir[0], "ctl-wait.err"), 0, 30));
	}
	return pid;
}


/* Both started 2 s before the server: both served once it is up. */
static void workers_wait_for_the_server(void **s)
{
	struct test_server ts = { 0 };
	pid_t w, c;

	assert_int_equal(server_start(&ts, "m", F.dir[0], NULL), 0);
	assert_int_equal(server_stop(&ts, SIGTERM), 0); /* its socket is gone: nobody there */
	w = waiting_worker(ts.sock);
	c = waiting_ctl(ts.sock, pjoin(F.dir[0], "ctl-wait.out"));
	sleep_ms(2000);
	assert_int_equal(server_restart(&ts, "m", F.dir[0]), 0);
	assert_int_equal(child_status(w), 0);
	assert_int_equal(child_status(c), 0);
	server_done(&ts);
}

/* Nobody comes: the wait ends on time, and the error names the socket
 * and how long it waited. */
static void the_wait_ends_and_says_so(void **s)
{
	struct wsrv_connect_opts o = { .struct_size = sizeof(o), .wait_ms = 600 };
	const char *sock = pjoin(F.dir[0], "nobody.sock");
	struct wsrv_client *c;
	double t0 = mono_now();

	assert_int_equal(wsrv_connect(sock, &o, &c), -ENOENT);
	assert_true(mono_now() - t0 >= 0.55); /* it waited; how long past that is the machine's */
	assert_non_null(strstr(wsrv_last_error(), sock));
	assert_non_null(strstr(wsrv_last_error(), "within 0.6 s"));
	o.wait_ms = -1;
	assert_int_equal(wsrv_connect(sock, &o, &c), -EINVAL);
}

FIXTURE_MAIN(F,
	cmocka_unit_test(workers_wait_for_the_server),
	cmocka_unit_test(the_wait_ends_and_says_so),
)
