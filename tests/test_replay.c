// SPDX-License-Identifier: MIT
/* test_replay.c - a lost reply is never a request done twice (issue 69
 * item 6). libwsrv connects again when the server goes, and asked the
 * request again there; a request that changes the server's own state
 * whose reply was lost ran twice. The server's test seam
 * $WSRV_TEST_DROP_REPLY=K does the first request of kind K and closes
 * the connection instead of answering.
 * - a_reload_is_never_asked_twice: the reload is done once, and the
 *   caller is told -ECONNRESET (the outcome unknown); before, it was sent
 *   again and a second reload began (or EBUSY came back for a reload that
 *   had started).
 * - a_lost_stats_reply_is_asked_again: a request that cannot do anything
 *   twice is still asked again, and the call succeeds. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fixture.h"
#include "wsrv.h"
#include "wsrv.pb-c.h"

static struct fixture F = { .tag = "replay", .models = { { "llama-mini", 8 << 20, 2, 1, 3 } } };

/* The newest generation of model m. */
static uint64_t newest(struct wsrv_client *c)
{
	struct wsrv_model_list *l;
	struct wsrv_generation g;
	uint64_t top = 0;

	assert_int_equal(wsrv_list_models(c, &l), 0);
	for (size_t i = 0; wsrv_model_list_generation(l, i, &g) == 0; i++)
		top = g.generation > top ? g.generation : top;
	wsrv_model_list_free(l);
	return top;
}

/* How many times needle is in the server's log. */
static int log_count(const struct test_server *ts, const char *needle)
{
	FILE *f = fopen(ts->log, "r");
	char line[4096];
	int n = 0;

	assert_non_null(f);
	while (fgets(line, sizeof(line), f))
		n += strstr(line, needle) != NULL;
	fclose(f);
	return n;
}

static void a_reload_is_never_asked_twice(void **st)
{
	static const char *const env[] = { "WSRV_TEST_DROP_REPLY=15", NULL }; /* Reload */
	struct test_server ts = { .env = env };
	struct wsrv_client *c;
	int r;

	(void)st;
	need_test_seams("WSRV_TEST_DROP_REPLY loses a reply");
	assert_int_equal(server_start(&ts, "m", F.dir[0], NULL), 0);
	assert_int_equal(wsrv_connect(ts.sock, NULL, &c), 0);
	r = wsrv_reload(c, "m", NULL);
	if (r != -ECONNRESET)
		fail_msg("a reload whose reply was lost gave %d (%s), not -ECONNRESET", r, wsrv_last_error());
	assert_non_null(strstr(wsrv_last_error(), "unknown"));
	/* Done once: the new generation serves, and no other began. */
	assert_int_equal(server_log_wait(&ts, "generation 2 serves new attaches", 60), 0);
	assert_int_equal(newest(c), 2);
	if ((r = log_count(&ts, "reloading model m")) != 1)
		fail_msg("the server was asked to reload %d times", r);
	wsrv_disconnect(c);
	server_done(&ts);
}

static void a_lost_stats_reply_is_asked_again(void **st)
{
	static const char *const env[] = { "WSRV_TEST_DROP_REPLY=8", NULL }; /* Stats */
	struct test_server ts = { .env = env };
	struct wsrv_client *c;
	struct wsrv_stats *s;

	(void)st;
	need_test_seams("WSRV_TEST_DROP_REPLY loses a reply");
	assert_int_equal(server_start(&ts, "m", F.dir[0], NULL), 0);
	assert_int_equal(wsrv_connect(ts.sock, NULL, &c), 0);
	assert_int_equal(wsrv_stats(c, &s), 0);
	wsrv_stats_free(s);
	wsrv_disconnect(c);
	server_done(&ts);
}

FIXTURE_MAIN(F,
	cmocka_unit_test(a_reload_is_never_asked_twice),
	cmocka_unit_test(a_lost_stats_reply_is_asked_again),
)
