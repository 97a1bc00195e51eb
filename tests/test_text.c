// SPDX-License-Identifier: MIT
/* test_text.c - what a client names reaches every other client as text
 * (issue 48, items 7 and 13):
 * - names_cut_on_characters: a Hello name and a StreamReport model longer
 *   than the server keeps, cut inside a two-byte character, made every
 *   Stats reply invalid UTF-8 ("the server sent a malformed reply") while
 *   that client stayed; so did a reload path over 100 bytes for the whole
 *   reload. Every cut now falls on a character boundary.
 * - hidden_names_refused: "m\0\xff\xfe" passed the check (it stopped at
 *   the NUL) and attached model "m"; C1 controls and the bidirectional
 *   overrides and isolates were accepted and written raw to the log.
 *   Each is now EBADMSG naming the field. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fixture.h"
#include "packet.h"
#include "wsrv.h"
#include "wsrv.pb-c.h"

static struct fixture F = { .tag = "text", .serve = "m", .models = {
	{ "tiny", 2 << 20, .layers = 2, .shards = 1, .seed = 5 } } };

/* lead bytes of 'a', then "é" (C3 A9) n times: a cut at lead + an odd
 * number of bytes falls inside a character. */
static char *accents(size_t lead, size_t n)
{
	char *s = malloc(lead + 2 * n + 1);

	assert_non_null(s);
	memset(s, 'a', lead);
	for (size_t i = 0; i < n; i++)
		memcpy(s + lead + 2 * i, "\xc3\xa9", 2);
	s[lead + 2 * n] = '\0';
	return s;
}

/* Whether Stats and the model list still come back whole. */
static void replies_are_text(void)
{
	struct wsrv_stats *st;
	struct wsrv_model_list *ml;

	if (wsrv_stats(F.srv.cl, &st) < 0)
		fail_msg("stats: %s", wsrv_last_error());
	wsrv_stats_free(st);
	if (wsrv_list_models(F.srv.cl, &ml) < 0)
		fail_msg("models: %s", wsrv_last_error());
	wsrv_model_list_free(ml);
}

/* A raw client, greeted as name. */
static int hello_as(const char *name)
{
	int fd = raw_connect(F.srv.ts.sock);

	assert_true(fd >= 0);
	assert_int_equal(raw_hello(fd, name), 0);
	assert_int_equal(raw_recv_code(fd, NULL, NULL), 0);
	return fd;
}

static void names_cut_on_characters(void **st)
{
	/* The server keeps 64 bytes of a name, 63 of a model: each cut
	 * there falls inside an "é". */
	char *name = accents(1, 40), *model = accents(2, 40);
	Wsrv__Request q = WSRV__REQUEST__INIT;
	Wsrv__StreamReport rp = WSRV__STREAM_REPORT__INIT;
	int fd = hello_as(name);

	(void)st;
	rp.model = model;
	rp.stream_id = 1;
	q.body_case = WSRV__REQUEST__BODY_REPORT_STREAM;
	q.report_stream = &rp;
	assert_int_equal(raw_send(fd, &q, NULL, 0), 0);
	assert_int_equal(raw_recv_code(fd, NULL, NULL), 0);
	replies_are_text();
	close(fd);
	free(name);
	free(model);
}

/* A reload from a path of 100 bytes and more, cut inside a character:
 * the status line that names it, while it loads and after. */
static void reload_path_cut_on_characters(void **st)
{
	size_t plen = strlen(F.srv.ts.dir) + 1;
	/* The status line keeps 100 bytes of the path: a cut inside an "é". */
	char *leaf = accents((100 - plen) % 2 ? 2 : 1, 60), link[512];

	(void)st;
	assert_true(plen < 90);
	if (geteuid() != 0)
		skip(); /* a reload is root's or the server's own user's */
	snprintf(link, sizeof(link), "%s/%s", F.srv.ts.dir, leaf);
	assert_int_equal(symlink(F.dir[0], link), 0);
	if (wsrv_reload(F.srv.cl, "m", link) < 0)
		fail_msg("reload: %s", wsrv_last_error());
	replies_are_text();
	for (int i = 0; i < 200; i++) {
		replies_are_text();
		sleep_ms(10);
	}
	unlink(link);
	free(leaf);
}

/* Hello with name (len bytes, NULs and all): the code of the reply. */
static int hello_code(const char *name, size_t len)
{
	static uint8_t buf[256];
	int fd = raw_connect(F.srv.ts.sock), code;
	/* Field 2 (Hello) of Request, holding field 1 (protocol) and field
	 * 2 (client_name, len bytes): written by hand, as protobuf-c would
	 * stop the name at a NUL. */
	size_t n = 0, inner = 2 + 2 + len;

	assert_true(fd >= 0 && len < 100);
	buf[n++] = 0x12; /* field 2, length-delimited */
	buf[n++] = (uint8_t)inner;
	buf[n++] = 0x08; /* protocol */
	buf[n++] = 1;
	buf[n++] = 0x12; /* client_name */
	buf[n++] = (uint8_t)len;
	memcpy(buf + n, name, len);
	n += len;
	assert_int_equal(pkt_send(fd, buf, n, NULL, 0), 0);
	code = raw_recv_code(fd, NULL, NULL);
	close(fd);
	return code;
}

static void hidden_names_refused(void **st)
{
	static const struct { const char *s; size_t len; } bad[] = {
		{ "m\0\xff\xfe", 4 },          /* a NUL, then bytes that are not UTF-8 */
		{ "w\0", 2 },                  /* a NUL at the end */
		{ "w\xc2\x85", 3 },            /* U+0085, a C1 control (NEL) */
		{ "w\xe2\x80\xae" "gpj", 6 },  /* U+202E, RIGHT-TO-LEFT OVERRIDE */
		{ "w\xe2\x81\xa6", 4 },        /* U+2066, LEFT-TO-RIGHT ISOLATE */
	};

	(void)st;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		if (hello_code(bad[i].s, bad[i].len) != EBADMSG)
			fail_msg("name %zu was not refused", i);
	/* Text stays text: accents, other scripts, a left-to-right mark. */
	assert_int_equal(hello_code("w\xc3\xa9\xe6\x97\xa5", 6), 0);
	assert_false(server_log_has(&F.srv.ts, "\xe2\x80\xae"));
	replies_are_text();
}

/* Issue 60 item 8: a model directory whose path is not UTF-8 ("caf\xe9",
 * legal on Linux) or holds a control character made every ListModels
 * fail, for the healthy models too. Each path now comes back escaped,
 * beside the healthy model; the server's log says so. */
static void odd_paths_listed_escaped(void **st)
{
	struct test_server ts = { 0 };
	struct wsrv_client *c;
	struct wsrv_model_list *l;
	struct wsrv_model_info mi;
	char cafe[512], ctl[512], a1[600], a2[600];
	bool seen[3] = { false };

	(void)st;
	snprintf(cafe, sizeof(cafe), "%s/caf\xe9", F.srv.ts.dir);
	snprintf(ctl, sizeof(ctl), "%s/a\x1b[2Jb", F.srv.ts.dir);
	assert_int_equal(symlink(F.dir[0], cafe), 0);
	assert_int_equal(symlink(F.dir[0], ctl), 0);
	snprintf(a1, sizeof(a1), "cafe=%s", cafe);
	snprintf(a2, sizeof(a2), "esc=%s", ctl);
	assert_int_equal(server_start(&ts, "good", F.dir[0], "--model", a1, "--model", a2, NULL), 0);
	assert_int_equal(wsrv_connect(ts.sock, NULL, &c), 0);
	if (wsrv_list_models(c, &l) < 0)
		fail_msg("models: %s", wsrv_last_error());
	for (size_t i = 0; wsrv_model_list_at(l, i, &mi) == 0; i++) {
		if (strcmp(mi.name, "good") == 0)
			seen[0] = strcmp(mi.path, F.dir[0]) == 0;
		if (strcmp(mi.name, "cafe") == 0)
			seen[1] = strstr(mi.path, "/caf\\xe9") != NULL;
		if (strcmp(mi.name, "esc") == 0)
			seen[2] = strstr(mi.path, "/a\\x1b[2Jb") != NULL;
	}
	wsrv_model_list_free(l);
	assert_true(seen[0] && seen[1] && seen[2]);
	assert_true(server_log_has(&ts, "was not text: sent escaped"));
	wsrv_disconnect(c);
	server_done(&ts);
	unlink(cafe);
	unlink(ctl);
}

/* And a model name that is not text is refused at start, exit 2 with the
 * rule: U+202E and U+0085 were accepted and did the same. */
static void odd_names_refused_at_start(void **st)
{
	static const char *const bad[] = { "w\xe2\x80\xaegpj", "w\xc2\x85", "caf\xe9", "a\tb" };
	static const char *const no_lock[] = { "--no-lock", NULL };
	char spec[600], log[300];

	(void)st;
	snprintf(log, sizeof(log), "%s/names.log", F.srv.ts.dir);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		snprintf(spec, sizeof(spec), "%s=%s", bad[i], F.dir[0]);
		size_t n;
		char *t;
		if (wsrvd_options_run(spec, no_lock, log) != 2)
			fail_msg("name %zu was not refused with exit 2", i);
		assert_non_null(t = (char *)read_file(log, &n));
		assert_non_null(strstr(t, "is not text: a name is UTF-8"));
		free(t);
	}
	snprintf(spec, sizeof(spec), "w\xc3\xa9\xe6\x97\xa5=%s", F.dir[0]);
	assert_int_equal(wsrvd_options_run(spec, no_lock, log), 0);
}

FIXTURE_MAIN(F,
	cmocka_unit_test(names_cut_on_characters),
	cmocka_unit_test(reload_path_cut_on_characters),
	cmocka_unit_test(hidden_names_refused),
	cmocka_unit_test(odd_paths_listed_escaped),
	cmocka_unit_test(odd_names_refused_at_start),
)
