// SPDX-License-Identifier: MIT
/* test_fdlimit.c - wsrvd under a hard RLIMIT_NOFILE (issue 27, item 2): a
 * non-root server under the common limit of 1024 did not start with the
 * default --max-clients 1024. The default is now fitted to the limit, an
 * asked number that does not fit is refused, and the budget of unread fds
 * that protects a reading client from hogs holds at the fitted number. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "helpers.h"
#include "srv_fdlimit.h"
#include "wsrv.h"
#include "wsrv.pb-c.h"

static int fds_before;
static char *model_dir;

/* The arithmetic, for the common limits. */
static void fit_arithmetic(void **s)
{
	struct fd_fit_in in = { .limit = 1024, .own = 34, .fd_budget = 8, .clients = 1024,
				.regions = 64 };
	struct fd_fit f;
	char why[512];

	/* Not root at 1024: in-flight fds bound it, 1024 / 8. */
	assert_int_equal(fd_fit(&in, &f, why, sizeof(why)), 0);
	assert_int_equal(f.clients, 128);
	assert_true(f.clients_fitted);
	assert_int_equal(f.regions, 64);
	/* Root: only its own fds, a quarter of the room kept for regions. */
	in.privileged = true;
	assert_int_equal(fd_fit(&in, &f, why, sizeof(why)), 0);
	assert_int_equal(f.clients, 1024 - 34 - 64);
	assert_int_equal(f.regions, 64);
	/* Room enough: the default stands, not fitted. */
	in.limit = 1 << 20;
	assert_int_equal(fd_fit(&in, &f, why, sizeof(why)), 0);
	assert_int_equal(f.clients, 1024);
	assert_false(f.clients_fitted);
	/* Asked for, it is never lowered: refused when it does not fit. */
	in.limit = 1024;
	in.privileged = false;
	in.clients_asked = true;
	assert_int_equal(fd_fit(&in, &f, why, sizeof(why)), -EMFILE);
	assert_non_null(strstr(why, "RLIMIT_NOFILE is 1024, and --max-clients 1024 needs 8192"));
	in.clients = 100;
	assert_int_equal(fd_fit(&in, &f, why, sizeof(why)), 0);
	assert_int_equal(f.clients, 100);
	assert_false(f.clients_fitted);
	/* Too few to be worth serving. */
	in.clients_asked = false;
	in.clients = 1024;
	in.limit = 40;
	assert_int_equal(fd_fit(&in, &f, why, sizeof(why)), -EMFILE);
	assert_non_null(strstr(why, "fewer than 8"));
	/* No limit at all. */
	in.limit = UINT64_MAX;
	assert_int_equal(fd_fit(&in, &f, why, sizeof(why)), 0);
	assert_int_equal(f.clients, 1024);
	assert_int_equal(f.regions, 64);
}

/* The server's idea of its limit, through Stats. */
static void server_max_clients(const char *sock, uint32_t *max, uint32_t *fitted)
{
	struct wsrv_server_stats v;
	struct wsrv_client *c;
	struct wsrv_stats *st;

	if (wsrv_connect(sock, NULL, &c) < 0 || wsrv_stats(c, &st) < 0)
		fail_msg("stats: %s", wsrv_last_error());
	assert_int_equal(wsrv_stats_server(st, &v), 0);
	*max = v.max_clients;
	*fitted = v.max_clients_fitted;
	wsrv_stats_free(st);
	wsrv_disconnect(c);
}

static const char *log_text(const struct test_server *ts)
{
	static char text[1 << 14];
	size_t len;
	uint8_t *b = read_file(ts->log, &len);

	snprintf(text, sizeof(text), "%s", b ? (char *)b : "");
	free(b);
	return text;
}

/* A server of ours (not root), hard limit 1024, no --max-clients: it starts,
 * says the number it chose and why, and shows it in Stats. */
static void default_start_fits(void **s)
{
	struct test_server ts = { .nofile = 1024 };
	uint32_t max, fitted;

	if (geteuid() == 0) {
		ts.uid = 65527;
		ts.gid = 65527;
	}
	assert_int_equal(server_start(&ts, "m", model_dir, NULL), 0);
	server_max_clients(ts.sock, &max, &fitted);
	assert_true(max >= FD_FIT_MIN_CLIENTS && max < 1024);
	assert_int_equal(fitted, 1);
	assert_non_null(strstr(log_text(&ts), "serving at most"));
	assert_non_null(strstr(log_text(&ts), "RLIMIT_NOFILE 1024"));
	assert_int_equal(server_stop(&ts, SIGTERM), 0);
	rm_rf(ts.dir);
}

/* Asked for, a number that fits is kept as asked. */
static void asked_number_kept(void **s)
{
	struct test_server ts = { .nofile = 1024 };
	uint32_t max, fitted;

	assert_int_equal(server_start(&ts, "m", model_dir, "--max-clients", "50", NULL), 0);
	server_max_clients(ts.sock, &max, &fitted);
	assert_int_equal(max, 50);
	assert_int_equal(fitted, 0);
	assert_int_equal(server_stop(&ts, SIGTERM), 0);
	rm_rf(ts.dir);
}

static void send_attaches(int fd, int n)
{
	Wsrv__Request q = WSRV__REQUEST__INIT;
	Wsrv__Attach a = WSRV__ATTACH__INIT;

	a.model = "m";
	q.body_case = WSRV__REQUEST__BODY_ATTACH;
	q.attach = &a;
	for (int i = 0; i < n; i++)
		raw_send(fd, &q, NULL, 0);
}

/* At the fitted number, every other client a hog that never reads its
 * replies: the one client that reads still attaches. */
static void budget_holds_when_fitted(void **s)
{
	/* A uid of its own: the kernel charges fds in flight to the user, so
	 * test_harden's server as nobody, run at the same time, shared it. */
	struct test_server ts = { .nofile = 64, .uid = 65527, .gid = 65527 };
	struct wsrv_client *good;
	struct wsrv_model *gm;
	uint32_t max, fitted;
	int bad[64], nbad = 0;

	if (geteuid() != 0)
		skip(); /* needs a non-root server, started from root */
	assert_int_equal(server_start(&ts, "m", model_dir, NULL), 0);
	server_max_clients(ts.sock, &max, &fitted);
	assert_int_equal(fitted, 1);
	assert_true(max >= FD_FIT_MIN_CLIENTS && max <= 64);
	for (; nbad < (int)max - 1; nbad++) {
		bad[nbad] = raw_connect(ts.sock);
		assert_true(bad[nbad] >= 0);
		raw_hello(bad[nbad], "never-reads");
		send_attaches(bad[nbad], 40);
	}
	sleep_ms(300);
	assert_int_equal(wsrv_connect(ts.sock, NULL, &good), 0);
	for (int i = 0; i < 3; i++) {
		if (wsrv_attach(good, "m", &gm) < 0)
			fail_msg("the reading client was cut off: %s", wsrv_last_error());
		wsrv_detach(gm);
	}
	wsrv_disconnect(good);
	for (int i = 0; i < nbad; i++)
		close(bad[i]);
	assert_int_equal(server_stop(&ts, SIGTERM), 0);
	rm_rf(ts.dir);
}

static int setup(void **s)
{
	signal(SIGPIPE, SIG_IGN);
	fds_before = count_fds();
	model_dir = test_tmpdir("fdlimit-model");
	if (!model_dir || make_model(model_dir, "tiny", 2 << 20, 2, 1, 5) < 0 ||
	    chmod(model_dir, 0755) < 0)
		return -1;
	return 0;
}

static int teardown(void **s)
{
	rm_rf(model_dir);
	free(model_dir);
	return fd_leak_check(fds_before);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(fit_arithmetic),
		cmocka_unit_test(default_start_fits),
		cmocka_unit_test(asked_number_kept),
		cmocka_unit_test(budget_holds_when_fitted),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
