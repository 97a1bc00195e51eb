// SPDX-License-Identifier: MIT
/* test_tier_abuse.c - one client of a disk tier costs only itself (issue
 * 48): what a hostile or greedy worker did to everyone else on the tree
 * before, each case a regression test of one item.
 * - unit_fds_bounded (item 1): one client that took every routed expert,
 *   a layer at a time, left wsrvd holding an fd per cached expert until
 *   RLIMIT_NOFILE ran out; reads of other experts then failed ("cannot
 *   make a memfd") and new clients were refused. Cached experts now count
 *   against the fds RLIMIT_NOFILE leaves, and are evicted by that count.
 * - fds_read_only (item 2): every fd a client received was an O_RDWR file
 *   description, and fallocate on it filled the memfd's holes (a tier's
 *   punched-out experts) past the budget, for good. Now every one is
 *   O_RDONLY, and the file mode stops a reopen as writable.
 * - item 12: a take of more pieces than a client may ever have unread was
 *   EAGAIN, so retrying never helped; now E2BIG with the number.
 * - one_worker_cannot_hold_it_all (item 5): one worker's share of the
 *   cache is bounded, so an idle one cannot starve the others.
 * - kept_pieces_are_cut (item 18): a piece a client kept after letting it
 *   go held its memory past the budget once evicted; now it is cut. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "clock.h"
#include "fixture.h"
#include "packet.h"
#include "wsrv.h"
#include "wsrv.pb-c.h"

/* About 88 MiB: layer 0 dense, 1-3 with 64 routed experts each (192
 * units, 0.39 MiB each); 12.6 MiB stays. Under an 80M budget every expert
 * but a few fits in bytes: what runs short is fds. */
static struct fixture F = { .tag = "tierabuse", .models = {
	{ "deepseek-v3-mini", 32 << 20, 4, 2, 5, .experts = 64 } } };

#define BUDGET "80M"
#define UNIT0 5u   /* the segments: the global group's, then one per layer */
#define NOFILE 200 /* 38 of the server's own, 16 clients, 4 regions, 64 kept: 78 experts */

/* wsrvd under NOFILE with room for 16 clients and 4 regions. */
static void tier_abuse_serve(struct test_server *ts)
{
	ts->nofile = NOFILE;
	assert_int_equal(server_start(ts, "m", F.dir[0], "--memory-budget", BUDGET, "--max-clients", "16",
				      "--max-regions", "4", NULL), 0);
}

/* A client maps layer L whole (its 64 experts held), then leaves. */
static int take_layer_and_leave(const char *sock, int32_t L)
{
	struct wsrv_client *c;
	struct wsrv_model *m;
	int r;

	if ((r = wsrv_connect(sock, NULL, &c)) < 0)
		return r;
	if ((r = wsrv_attach(c, "m", &m)) == 0) {
		if ((r = wsrv_model_wait(m, L, 30000)) < 0)
			print_message("layer %d: %s\n", L, wsrv_last_error());
		wsrv_detach(m);
	}
	wsrv_disconnect(c);
	return r;
}

/* Item 1: every expert of every layer taken, a layer at a time, by clients
 * that leave; wsrvd stays inside its fds, twelve new clients attach, and
 * a layer evicted meanwhile is read again. Before: the third layer's take
 * failed (-ENOMEM, "cannot make a memfd"), 38 + 128 fds open of 200. */
static void unit_fds_bounded(void **st)
{
	struct test_server ts = { 0 };
	struct wsrv_client *c[12];
	struct wsrv_model *m[12];

	(void)st;
	tier_abuse_serve(&ts);
	assert_true(server_log_has(&ts, "192 routed experts"));
	assert_true(server_log_has(&ts, "room for 78 of the disk tier's 192 routed experts"));
	for (int pass = 0; pass < 2; pass++)
		for (int32_t L = 1; L <= 3; L++)
			assert_int_equal(take_layer_and_leave(ts.sock, L), 0);
	assert_true(pid_fd_count(ts.pid) <= NOFILE - 64);
	for (int i = 0; i < 12; i++) {
		assert_int_equal(wsrv_connect(ts.sock, NULL, &c[i]), 0);
		assert_int_equal(wsrv_attach(c[i], "m", &m[i]), 0);
	}
	assert_int_equal(wsrv_model_wait(m[0], 1, 30000), 0);
	for (int i = 0; i < 12; i++) {
		wsrv_detach(m[i]);
		wsrv_disconnect(c[i]);
	}
	server_done(&ts);
}

/* One reply: its error code (0: none), its fds (kept), and with an Attach
 * reply the attachment's id and segment count. */
static int recv_reply(int fd, int *fds, int *nfds, uint32_t *attach_id, uint32_t *nseg)
{
	static uint8_t buf[WSRV_MAX_PACKET];
	long len = pkt_recv(fd, buf, sizeof(buf), fds, WSRV_MAX_FDS, nfds);
	Wsrv__Response *r;
	int code;

	if (len <= 0 || !(r = wsrv__response__unpack(NULL, (size_t)len, buf)))
		return -1;
	code = r->body_case == WSRV__RESPONSE__BODY_ERROR ? (int)r->error->code : 0;
	if (r->body_case == WSRV__RESPONSE__BODY_ATTACH) {
		*attach_id = r->attach->attach_id;
		*nseg = (uint32_t)r->attach->n_segment_sizes;
	}
	wsrv__response__free_unpacked(r, NULL);
	return code;
}

/* Every fd is a read-only description whose holes cannot be filled, and
 * (not as root, who may) cannot be reopened writable; closes them. */
static void check_read_only(int *fds, int n)
{
	for (int i = 0; i < n; i++) {
		struct stat sb;
		char path[64];
		assert_int_equal(fcntl(fds[i], F_GETFL) & O_ACCMODE, O_RDONLY);
		assert_int_equal(posix_fallocate(fds[i], 0, 4096), EBADF);
		assert_int_equal(fstat(fds[i], &sb), 0);
		assert_int_equal(sb.st_mode & 0777, 0400);
		snprintf(path, sizeof(path), "/proc/self/fd/%d", fds[i]);
		if (geteuid() != 0)
			assert_int_equal(open(path, O_RDWR | O_CLOEXEC), -1);
	}
	pkt_close_fds(fds, n);
}

/* Asks for units [first, first + n) with partial until one comes; its
 * fds in fds. */
static int take_units(int fd, uint32_t attach_id, uint32_t first, uint32_t n, int *fds)
{
	uint32_t ids[16], nseg;
	int got = 0;

	for (uint32_t i = 0; i < n; i++)
		ids[i] = first + i;
	for (int tries = 0; tries < 200 && got == 0; tries++) {
		Wsrv__Request q = WSRV__REQUEST__INIT;
		Wsrv__AttachSegments a = WSRV__ATTACH_SEGMENTS__INIT;
		a.attach_id = attach_id;
		a.segments = ids;
		a.n_segments = n;
		a.partial = true;
		q.body_case = WSRV__REQUEST__BODY_ATTACH_SEGMENTS;
		q.attach_segments = &a;
		assert_int_equal(raw_send(fd, &q, NULL, 0), 0);
		assert_int_equal(recv_reply(fd, fds, &got, &attach_id, &nseg), 0);
		if (got == 0)
			sleep_ms(20);
	}
	return got;
}

/* Item 12: a take of 40 units without partial, more than the 24 fds this
 * client may ever have unread (4 Attach replies of 6). Before: EAGAIN
 * "0 file descriptors still unread", which no retry helps. */
static int ask_too_many(int fd, uint32_t attach_id)
{
	Wsrv__Request q = WSRV__REQUEST__INIT;
	Wsrv__AttachSegments a = WSRV__ATTACH_SEGMENTS__INIT;
	uint32_t ids[40], nseg;
	int fds[WSRV_MAX_FDS], n = 0, code;

	for (uint32_t i = 0; i < 40; i++)
		ids[i] = UNIT0 + 20 + i;
	a.attach_id = attach_id;
	a.segments = ids;
	a.n_segments = 40;
	q.body_case = WSRV__REQUEST__BODY_ATTACH_SEGMENTS;
	q.attach_segments = &a;
	assert_int_equal(raw_send(fd, &q, NULL, 0), 0);
	code = recv_reply(fd, fds, &n, &attach_id, &nseg);
	pkt_close_fds(fds, n);
	return code;
}

/* A raw client attached to m (today's Hello, or with old an older
 * client's, without disk_tier): its socket, *attach_id set, and the
 * Attach's fds into fds (*n of them; NULL: closed). An older client's
 * Attach is refused (EPROTONOSUPPORT): -1. */
static int attach_raw(const struct test_server *ts, bool old, uint32_t *attach_id, int *fds, int *n)
{
	Wsrv__Request q = WSRV__REQUEST__INIT, hq = WSRV__REQUEST__INIT;
	Wsrv__Attach a = WSRV__ATTACH__INIT;
	Wsrv__Hello h = WSRV__HELLO__INIT;
	int fd = raw_connect(ts->sock), got[WSRV_MAX_FDS], ngot = 0, code;
	uint32_t nseg = 0;

	assert_true(fd >= 0);
	h.protocol = WSRV_PROTOCOL_VERSION;
	h.disk_tier = old ? 0 : WSRV_DISK_TIER;
	hq.body_case = WSRV__REQUEST__BODY_HELLO;
	hq.hello = &h;
	assert_int_equal(raw_send(fd, &hq, NULL, 0), 0);
	assert_int_equal(raw_recv_code(fd, NULL, NULL), 0);
	a.model = "m";
	a.while_loading = true; /* a tiered model's attach comes with its page */
	q.body_case = WSRV__REQUEST__BODY_ATTACH;
	q.attach = &a;
	assert_int_equal(raw_send(fd, &q, NULL, 0), 0);
	code = recv_reply(fd, got, &ngot, attach_id, &nseg);
	if (fds && code == 0) {
		memcpy(fds, got, (size_t)ngot * sizeof(*got));
		*n = ngot;
		assert_int_equal(nseg, UNIT0);
	} else {
		pkt_close_fds(got, ngot);
	}
	if (old) {
		assert_int_equal(code, EPROTONOSUPPORT);
		close(fd);
		return -1;
	}
	assert_int_equal(code, 0);
	return fd;
}

/* Item 2: the fds of an Attach (layout, readiness page, resident
 * segments) and of a take of experts, each read-only. Before: O_RDWR,
 * and posix_fallocate on each grew the server's memfds for good. */
static void fds_read_only(void **st)
{
	struct test_server ts = { 0 };
	int fd, fds[WSRV_MAX_FDS], n = 0;
	uint32_t attach_id = 0;

	(void)st;
	tier_abuse_serve(&ts);
	fd = attach_raw(&ts, false, &attach_id, fds, &n);
	assert_true(n >= 2);
	check_read_only(fds, n);
	n = take_units(fd, attach_id, UNIT0, 16, fds);
	assert_true(n > 0);
	check_read_only(fds, n);
	assert_int_equal(ask_too_many(fd, attach_id), E2BIG);
	close(fd);
	server_done(&ts);
}

/* Lets units [first, first + n) go. */
static void release_units(int fd, uint32_t attach_id, uint32_t first, uint32_t n)
{
	Wsrv__Request q = WSRV__REQUEST__INIT;
	Wsrv__AttachSegments a = WSRV__ATTACH_SEGMENTS__INIT;
	uint32_t ids[16], nseg, got_id = attach_id;
	int fds[WSRV_MAX_FDS], got = 0;

	for (uint32_t i = 0; i < n; i++)
		ids[i] = first + i;
	a.attach_id = attach_id;
	a.segments = ids;
	a.n_segments = n;
	a.release = true;
	q.body_case = WSRV__REQUEST__BODY_ATTACH_SEGMENTS;
	q.attach_segments = &a;
	assert_int_equal(raw_send(fd, &q, NULL, 0), 0);
	/* A partial take may have given only some of them (the others were
	 * still being read): a release lets go of every one held all the
	 * same, and says ENOENT of the others (seen under load). */
	int code = recv_reply(fd, fds, &got, &got_id, &nseg);
	assert_true(code == 0 || code == ENOENT);
	assert_int_equal(got, 0);
}

/* Item 18: a worker that keeps a piece's fd (or mapping) after letting
 * it go, or a process forked from one, kept its memory after the server
 * evicted it and read it again into a fresh memfd: one client could pile
 * up memory past the budget, a piece per round. Now an evicted piece is
 * cut to nothing: the fd kept sees a file of size 0 and no pages. */
static void kept_pieces_are_cut(void **st)
{
	struct test_server ts = { 0 };
	uint32_t attach_id = 0;
	int fd, fds[WSRV_MAX_FDS], kept, n;
	struct stat sb;

	(void)st;
	assert_int_equal(server_start(&ts, "m", F.dir[0], "--memory-budget", "40M", "--memory-budget-share", "100",
				      NULL), 0);
	fd = attach_raw(&ts, false, &attach_id, NULL, NULL);
	n = take_units(fd, attach_id, UNIT0, 1, fds);
	assert_int_equal(n, 1);
	kept = fds[0];
	assert_int_equal(fstat(kept, &sb), 0);
	assert_true(sb.st_size > 0 && sb.st_blocks > 0);
	release_units(fd, attach_id, UNIT0, 1);
	/* Every other unit, 16 at a time, taken and let go: the cache (about
	 * 27 MiB, 70 units) evicts the first one on the way. */
	for (uint32_t u = UNIT0 + 1; u + 16 <= UNIT0 + 192 && (fstat(kept, &sb), sb.st_size > 0); u += 16) {
		int got = take_units(fd, attach_id, u, 16, fds);
		assert_true(got > 0);
		pkt_close_fds(fds, got);
		release_units(fd, attach_id, u, 16);
	}
	assert_int_equal(fstat(kept, &sb), 0);
	if (sb.st_size != 0 || sb.st_blocks != 0)
		fail_msg("an evicted unit kept by a client still holds %lld bytes of pages", (long long)sb.st_blocks * 512);
	close(kept);
	close(fd);
	/* An older libwsrv, which would refuse such a piece's seals (and a
	 * segment's size without its units), is told why instead. */
	assert_int_equal(attach_raw(&ts, true, &attach_id, NULL, NULL), -1);
	server_done(&ts);
}

/* Reads one byte of every page of fd's file through a mapping of its
 * own; its pages afterwards, in bytes. */
static uint64_t read_every_page(int fd)
{
	struct stat sb;
	volatile uint8_t sum = 0;
	uint8_t *p;

	assert_int_equal(fstat(fd, &sb), 0);
	p = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_SHARED, fd, 0);
	assert_true(p != MAP_FAILED);
	for (off_t o = 0; o < sb.st_size; o += 4096)
		sum += p[o];
	munmap(p, (size_t)sb.st_size);
	(void)sum;
	assert_int_equal(fstat(fd, &sb), 0);
	return (uint64_t)sb.st_blocks * 512;
}

/* Every page of each of fds[0..n) read through a mapping of its own
 * allocates nothing; closes them. */
static void no_pages_grow(int *fds, int n, const char *what)
{
	for (int i = 0; i < n; i++) {
		struct stat sb;
		assert_int_equal(fstat(fds[i], &sb), 0);
		uint64_t before = (uint64_t)sb.st_blocks * 512, after = read_every_page(fds[i]);
		if (after > before)
			fail_msg("%s %d: %llu bytes of pages before the reads, %llu after", what, i,
				 (unsigned long long)before, (unsigned long long)after);
	}
	pkt_close_fds(fds, n);
}

/* Item 2, the rest: a client that maps what it is given and reads the
 * holes (a segment's routed experts, punched out; a unit's memfd beyond
 * its own pages) made the server's memfds allocate pages there, past the
 * budget. Now a file holds only what stays: none has holes to read. */
static void holes_cannot_be_read_in(void **st)
{
	struct test_server ts = { 0 };
	int fd, fds[WSRV_MAX_FDS], n = 0;
	uint32_t attach_id = 0;

	(void)st;
	tier_abuse_serve(&ts);
	fd = attach_raw(&ts, false, &attach_id, fds, &n);
	no_pages_grow(fds, n, "fd of the Attach");
	n = take_units(fd, attach_id, UNIT0, 4, fds);
	assert_true(n > 0);
	no_pages_grow(fds, n, "unit");
	close(fd);
	server_done(&ts);
}

/* Found beside item 18: a read-ahead of units took their fds twice (for
 * its room, then for the read) and gave them back once, so the count of
 * units' memfds grew with every read-ahead until every unit's read
 * failed ("the disk tier's memfds ... are all held by workers") with
 * room to spare: a stream of two passes over this model under 80M failed
 * in its second. And --check took its direct pass on the stream's own
 * connection, past the worker's share. Now two passes and the check,
 * twice. */
static void read_ahead_keeps_the_fd_count(void **st)
{
	struct test_server ts = { 0 };
	char out[400], err[400];
	size_t len;
	char *text;

	(void)st;
	assert_int_equal(server_start(&ts, "m", F.dir[0], "--memory-budget", BUDGET, NULL), 0);
	snprintf(out, sizeof(out), "%s/worker.out", ts.dir);
	snprintf(err, sizeof(err), "%s/worker.err", ts.dir);
	const char *argv[] = { getenv("WSRV_WORKER"), "--socket", ts.sock, "--model", "m", "--passes", "2",
			       "--no-share", "--check", NULL };
	for (int run = 0; run < 2; run++) {
		int rc = run_prog(argv, NULL, out, err, 0, 90);
		if (rc != 0 && (text = (char *)read_file(err, &len)))
			fail_msg("run %d: wsrv-worker exited %d: %s", run, rc, text);
		assert_int_equal(rc, 0);
		assert_non_null(text = (char *)read_file(out, &len));
		assert_non_null(strstr(text, "(bit-identical)"));
		free(text);
	}
	server_done(&ts);
}

/* In a process of its own: a client that maps layer L whole; its exit
 * status 0 when it did, 2 when it failed. The hog holds its share all the
 * while: a take that found no room would fail (ENOMEM, after the fill
 * deadline), so success is the condition, not a time (issue 70 item 1). */
static pid_t other_process_takes(const char *sock, int32_t L)
{
	pid_t pid = fork();

	assert_true(pid >= 0);
	if (pid == 0)
		_exit(take_layer_and_leave(sock, L) < 0 ? 2 : 0);
	return pid;
}


/* Item 5 of issue 48: one worker that took two layers' experts (50 of
 * the cache's 67 MiB) and sat idle made every other worker's take of a
 * third layer end in ENOMEM after 10 s, for as long as it lived. One
 * worker's process holds at most half the cache: the greedy take is
 * refused (EDQUOT, saying so), and another process is served at once.
 * Issue 60 item 2: the share was per connection, and a second
 * connection of the same process took the second layer; it is now the
 * process's, over all its connections. */
static void one_worker_cannot_hold_it_all(void **st)
{
	struct test_server ts = { 0 };
	struct wsrv_client *a, *a2;
	struct wsrv_model *ma, *ma2;

	(void)st;
	assert_int_equal(server_start(&ts, "m", F.dir[0], "--memory-budget", BUDGET, NULL), 0);
	assert_int_equal(wsrv_connect(ts.sock, NULL, &a), 0);
	assert_int_equal(wsrv_attach(a, "m", &ma), 0);
	assert_int_equal(wsrv_model_wait(ma, 1, 30000), 0);
	assert_int_equal(wsrv_model_wait(ma, 2, 30000), -EDQUOT);
	assert_non_null(strstr(wsrv_last_error(), "--memory-budget-share"));
	assert_int_equal(wsrv_connect(ts.sock, NULL, &a2), 0);
	assert_int_equal(wsrv_attach(a2, "m", &ma2), 0);
	assert_int_equal(wsrv_model_wait(ma2, 2, 30000), -EDQUOT);
	assert_non_null(strstr(wsrv_last_error(), "process"));
	assert_int_equal(child_status(other_process_takes(ts.sock, 3)), 0);
	wsrv_detach(ma2);
	wsrv_disconnect(a2);
	wsrv_detach(ma);
	wsrv_disconnect(a);
	server_done(&ts);
}

/* Issue 70 item 8 (issue 79 item 6): a take told EDQUOT, asked again and
 * served, was counted an error ("130 requests (34 errors)" after one
 * clean wsrv-worker --check), and 64 of them closed the client as a
 * protocol offender. Such a request is turned away for now: counted
 * apart (declined), never against the client. */
static void quota_refusals_are_not_errors(void **st)
{
	struct test_server ts = { 0 };
	struct wsrv_server_stats s = { .struct_size = sizeof(s) };
	struct wsrv_stats *stats;
	struct wsrv_client *a;
	struct wsrv_model *ma;

	(void)st;
	assert_int_equal(server_start(&ts, "m", F.dir[0], "--memory-budget", BUDGET, NULL), 0);
	assert_int_equal(wsrv_connect(ts.sock, NULL, &a), 0);
	assert_int_equal(wsrv_attach(a, "m", &ma), 0);
	assert_int_equal(wsrv_model_wait(ma, 1, 30000), 0);
	for (int i = 0; i < 70; i++) /* more than the 64 errors that close a client */
		assert_int_equal(wsrv_model_wait(ma, 2, 30000), -EDQUOT);
	if (!strstr(wsrv_last_error(), "asks for"))
		fail_msg("the refusal does not name what was asked: %s", wsrv_last_error());
	assert_int_equal(wsrv_stats(a, &stats), 0); /* still connected */
	assert_int_equal(wsrv_stats_server(stats, &s), 0);
	assert_int_equal(s.errors, 0);
	assert_true(s.declined >= 70);
	wsrv_stats_free(stats);
	assert_true(server_log_has(&ts, "turned away for now"));
	wsrv_detach(ma);
	wsrv_disconnect(a);
	server_done(&ts);
}

/* Unit u, asked for with partial until it comes (up to 10 s): 0 with its
 * fd in *out (*n raised), or the reply's error code. */
static int take_one(int fd, uint32_t attach_id, uint32_t u, int *out, int *n)
{
	Wsrv__Request q = WSRV__REQUEST__INIT;
	Wsrv__AttachSegments a = WSRV__ATTACH_SEGMENTS__INIT;
	int fds[WSRV_MAX_FDS], got = 0, code = 0;
	uint32_t nseg;

	a.attach_id = attach_id;
	a.segments = &u;
	a.n_segments = 1;
	a.partial = true;
	q.body_case = WSRV__REQUEST__BODY_ATTACH_SEGMENTS;
	q.attach_segments = &a;
	for (int tries = 0; tries < 500 && code == 0 && got == 0; tries++) {
		assert_int_equal(raw_send(fd, &q, NULL, 0), 0);
		code = recv_reply(fd, fds, &got, &attach_id, &nseg);
		if (code == 0 && got == 0)
			sleep_ms(20);
	}
	if (code == 0 && got == 1) {
		*out = fds[0];
		(*n)++;
	}
	return code == 0 && got != 1 ? -1 : code;
}

/* Issue 60 item 1: the share was floored at a layer's pieces on the
 * tier, and a layer's 64 routed experts are more than the whole cache of
 * a 24M budget: one client took experts with partial takes, never got
 * EDQUOT, held the whole cache and sat idle, and another process's take
 * of an expert not cached got ENOMEM after 10 s. The floor is now one
 * piece: the greedy client is stopped at half the cache, and the other
 * process is served at once. */
static void moe_share_is_a_fraction(void **st)
{
	struct test_server ts = { 0 };
	struct wsrv_tier_info ti = { .struct_size = sizeof(ti) };
	struct wsrv_client *c;
	uint32_t attach_id = 0;
	int fd, kept[64], nkept = 0, code = 0;

	(void)st;
	ts.nofile = NOFILE;
	assert_int_equal(server_start(&ts, "m", F.dir[0], "--memory-budget", "24M", "--max-clients", "16",
				      "--max-regions", "4", NULL), 0);
	fd = attach_raw(&ts, false, &attach_id, NULL, NULL);
	/* Layer 1's experts one by one, each asked for until it comes, until
	 * the server says no. */
	for (uint32_t u = UNIT0; u < UNIT0 + 64 && code == 0; u++)
		code = take_one(fd, attach_id, u, &kept[nkept], &nkept);
	assert_int_equal(code, EDQUOT);
	assert_int_equal(wsrv_connect(ts.sock, NULL, &c), 0);
	assert_int_equal(tier_counters(c, &ti), 0);
	wsrv_disconnect(c);
	if (ti.held_bytes > (ti.budget - ti.resident_bytes) / 2)
		fail_msg("one client holds %llu bytes of a cache of %llu", (unsigned long long)ti.held_bytes,
			 (unsigned long long)(ti.budget - ti.resident_bytes));
	/* Another process, an expert nobody holds: served at once. */
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		uint32_t id2 = 0;
		int fd2 = attach_raw(&ts, false, &id2, NULL, NULL), got[WSRV_MAX_FDS];
		/* Room for it while the first holds its share: taken (no
		 * room would be ENOMEM), whatever the time. */
		int n = take_units(fd2, id2, UNIT0 + 63, 1, got);
		_exit(n == 1 ? 0 : 1);
	}
	assert_int_equal(child_status(pid), 0);
	pkt_close_fds(kept, nkept);
	close(fd);
	server_done(&ts);
}

/* Issue 60 item 4: on a model without a disk tier, a partial take sent
 * every segment asked for as long as one fd of room was left: 3 Attaches
 * and 2 partial takes, none read, left more fds in flight than the bound
 * (4 Attach replies of 6: 24) that --max-clients is sized from. A partial
 * take now sends at most the room. */
static void partial_take_within_the_room(void **st)
{
	struct test_server ts = { 0 };
	Wsrv__Request q = WSRV__REQUEST__INIT;
	Wsrv__Attach a = WSRV__ATTACH__INIT;
	Wsrv__AttachSegments as = WSRV__ATTACH_SEGMENTS__INIT;
	uint32_t attach_id = 0, nseg = 0, ids[UNIT0] = { 0, 1, 2, 3, 4 };
	int fd, fds[WSRV_MAX_FDS], n = 0, inflight = 0;

	(void)st;
	ts.nofile = NOFILE;
	assert_int_equal(server_start(&ts, "m", F.dir[0], "--max-clients", "16", NULL), 0);
	fd = attach_raw(&ts, false, &attach_id, NULL, NULL);
	a.model = "m";
	q.body_case = WSRV__REQUEST__BODY_ATTACH;
	q.attach = &a;
	for (int i = 0; i < 3; i++)
		assert_int_equal(raw_send(fd, &q, NULL, 0), 0);
	as.attach_id = attach_id;
	as.segments = ids;
	as.n_segments = UNIT0;
	as.partial = true;
	q.body_case = WSRV__REQUEST__BODY_ATTACH_SEGMENTS;
	q.attach_segments = &as;
	for (int i = 0; i < 2; i++)
		assert_int_equal(raw_send(fd, &q, NULL, 0), 0);
	sleep_ms(300); /* all five answered before any is read */
	for (int i = 0; i < 5; i++) {
		assert_int_equal(recv_reply(fd, fds, &n, &attach_id, &nseg), 0);
		inflight += n;
		pkt_close_fds(fds, n);
	}
	if (inflight > 4 * ((int)UNIT0 + 1))
		fail_msg("%d fds in flight at once, the bound is %u", inflight, 4 * (UNIT0 + 1));
	close(fd);
	server_done(&ts);
}

FIXTURE_MAIN(F,
	cmocka_unit_test(unit_fds_bounded),
	cmocka_unit_test(partial_take_within_the_room),
	cmocka_unit_test(fds_read_only),
	cmocka_unit_test(one_worker_cannot_hold_it_all),
	cmocka_unit_test(quota_refusals_are_not_errors),
	cmocka_unit_test(moe_share_is_a_fraction),
	cmocka_unit_test(kept_pieces_are_cut),
	cmocka_unit_test(holes_cannot_be_read_in),
	cmocka_unit_test(read_ahead_keeps_the_fd_count),
)
