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

#include "fixture.h"
#include "srv_fdlimit.h"
#include "wsrv.h"

static struct fixture F = { .tag = "fdlimit", .world_readable = true,
			    .models = { { "tiny", 2 << 20, .layers = 2, .shards = 1, .seed = 5 },
					{ "tiny", 96 << 20, .layers = 96, .shards = 1, .seed = 6 } } };

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
	/* Issue 48 item 1: a disk tier's 1,200 routed experts (a memfd each
	 * when cached) keep a share of the room; the clients do not take it
	 * all, and everything fits together. */
	in.limit = 1024;
	in.privileged = true;
	in.units = 1200;
	assert_int_equal(fd_fit(&in, &f, why, sizeof(why)), 0);
	assert_true(f.unit_fds >= FD_FIT_MIN_UNITS && f.clients >= FD_FIT_MIN_CLIENTS);
	assert_true(in.own + f.clients + f.regions + FD_FIT_RESERVE + f.unit_fds <= in.limit);
	/* Asked for so many clients that too few experts fit: refused. */
	in.clients_asked = true;
	in.clients = 900;
	assert_int_equal(fd_fit(&in, &f, why, sizeof(why)), -EMFILE);
	assert_non_null(strstr(why, "routed experts"));
}

/* The server's idea of its limit, through Stats. */
static void server_max_clients(const char *sock, uint32_t *max, uint32_t *fitted)
{
	struct wsrv_server_stats v;
	struct wsrv_client *c;
	struct wsrv_stats *st = NULL;

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
	struct served sv = { .ts = { .nofile = 1024 } };
	uint32_t max, fitted;

	if (geteuid() == 0) {
		sv.ts.uid = 65527;
		sv.ts.gid = 65527;
	}
	served_start(&sv, "m", F.dir[0], NULL);
	server_max_clients(sv.ts.sock, &max, &fitted);
	assert_true(max >= FD_FIT_MIN_CLIENTS && max < 1024);
	assert_int_equal(fitted, 1);
	assert_non_null(strstr(log_text(&sv.ts), "serving at most"));
	assert_non_null(strstr(log_text(&sv.ts), "RLIMIT_NOFILE 1024"));
	served_stop(&sv);
}

/* Issue 37 item 10: not root, hard limit 1024, a 96-layer 96 MB model:
 * its 33 segments left room for 7 clients, and wsrvd refused to start.
 * Served while loading, it now gets fewer, larger segments, and the
 * default start serves at least 64 clients. */
static void many_layers_fit(void **s)
{
	struct served sv = { .ts = { .nofile = 1024 } };
	uint32_t max, fitted;

	if (geteuid() == 0) {
		sv.ts.uid = 65527;
		sv.ts.gid = 65527;
	}
	served_start(&sv, "m", F.dir[1], NULL);
	server_max_clients(sv.ts.sock, &max, &fitted);
	if (max < FD_FIT_WANT_CLIENTS)
		fail_msg("room for %u clients only:\n%s", max, log_text(&sv.ts));
	assert_non_null(strstr(log_text(&sv.ts), "get at most 3 segments"));
	served_attach(&sv, "m");
	served_stop(&sv);
}

/* Asked for, a number that fits is kept as asked. */
static void asked_number_kept(void **s)
{
	struct served sv = { .ts = { .nofile = 1024 } };
	uint32_t max, fitted;

	served_start(&sv, "m", F.dir[0], "--max-clients", "50", NULL);
	server_max_clients(sv.ts.sock, &max, &fitted);
	assert_int_equal(max, 50);
	assert_int_equal(fitted, 0);
	served_stop(&sv);
}

/* At the fitted number, every other client a hog that never reads its
 * replies: the one client that reads still attaches. */
static void budget_holds_when_fitted(void **s)
{
	/* A uid of its own: the kernel charges fds in flight to the user, so
	 * test_harden's server as nobody, run at the same time, shared it. */
	struct test_server ts = { .nofile = 64, .uid = 65527, .gid = 65527 };
	uint32_t max, fitted;
	int bad[64];

	if (geteuid() != 0)
		skip(); /* needs a non-root server, started from root */
	/* Served once loaded: one segment, so that 64 fds fit a client
	 * count (a model served while it loads has a segment per layer). */
	assert_int_equal(server_start(&ts, "m", F.dir[0], "--serve-when-loaded", NULL), 0);
	server_max_clients(ts.sock, &max, &fitted);
	assert_int_equal(fitted, 1);
	assert_true(max >= FD_FIT_MIN_CLIENTS && max <= 64);
	hogs_open(ts.sock, bad, (int)max - 1, 40);
	reader_not_cut_off(ts.sock);
	hogs_close(bad, (int)max - 1);
	server_done(&ts);
}

/* Issue 41: from a clone inside a folder only root enters (mktemp -d, a
 * packager's build root), a server started as another uid could not
 * reach wsrvd ("Permission denied"). It runs a copy in its own folder. */
static void runs_from_a_private_tree(void **s)
{
	struct test_server ts = { .uid = 65527, .gid = 65527 };
	char priv[] = "/tmp/wsrv-test-private-XXXXXX", exe[64], *was = getenv("WSRVD");

	if (geteuid() != 0)
		skip(); /* needs a non-root server, started from root */
	assert_non_null(was);
	was = strdup(was);
	assert_non_null(mkdtemp(priv)); /* 0700 */
	snprintf(exe, sizeof(exe), "%s/wsrvd", priv);
	assert_int_equal(copy_file(was, exe, 0755), 0);
	setenv("WSRVD", exe, 1);
	assert_int_equal(server_start(&ts, "m", F.dir[0], "--serve-when-loaded", NULL), 0);
	server_done(&ts);
	setenv("WSRVD", was, 1);
	free(was);
	unlink(exe);
	rmdir(priv);
}

FIXTURE_MAIN(F,
	cmocka_unit_test(runs_from_a_private_tree),
	cmocka_unit_test(fit_arithmetic),
	cmocka_unit_test(default_start_fits),
	cmocka_unit_test(many_layers_fit),
	cmocka_unit_test(asked_number_kept),
	cmocka_unit_test(budget_holds_when_fitted),
)
