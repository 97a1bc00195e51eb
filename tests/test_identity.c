// SPDX-License-Identifier: MIT
/* test_identity.c - a process is not an identity a client must keep
 * (issue 69 items 1-3): the shares a worker holds (a disk tier's cache,
 * device regions) count against the process that made its connection,
 * known by its pidfs inode, and once that process is gone, against its
 * user; a user's processes together are bounded beside other users.
 * - child_connections_are_one_account (item 1): connections a child
 *   made and left were each a fresh account with a full share.
 * - a_reused_pid_is_not_charged (item 1): a pid reused by a new worker
 *   carried the holds of the connection that once had it.
 * - a_user_cannot_crowd_another_out (item 1): live processes of one user
 *   held the whole cache while another user waited.
 * - server_in_its_own_pid_namespace (item 3): every client was pid 0,
 *   and each connection its own account.
 * - orphan_regions_give_their_slots (item 2): child-made connections
 *   held every device-region slot, committed, for good.
 * - a_user_cannot_hold_every_region (item 2): one user's processes held
 *   every slot, each region read by another of them. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "clock.h"
#include "fixture.h"
#include "packet.h"
#include "wsrv.h"
#include "wsrv.pb-c.h"

/* llama-mini, 8 layers of about 7.5 MiB: a segment per layer past the
 * global group's. Under a 40M budget the cache holds about four layers,
 * and one process's share (50%) two. */
static struct fixture F = { .tag = "identity", .models = { { "llama-mini", 64 << 20, 8, 2, 5 } } };

#define BUDGET "40M"
#define NOBODY 65534

/* fork(), with the child given pid want when nonzero (root: the next
 * pid is set through ns_last_pid, and tried again when another process
 * took it first). The child's 0, or the child's pid. */
static pid_t identity_spawn(pid_t want)
{
	for (int i = 0; i < 100; i++) {
		FILE *f = want ? fopen("/proc/sys/kernel/ns_last_pid", "w") : NULL;
		pid_t pid;
		int st;
		if (want) {
			assert_non_null(f);
			fprintf(f, "%d", (int)want - 1);
			fclose(f);
		}
		assert_true((pid = fork()) >= 0);
		if (pid == 0 && want && getpid() != want)
			_exit(99);
		if (pid == 0 || !want || pid == want)
			return pid;
		waitpid(pid, &st, 0);
	}
	fail_msg("pid %d could not be had", (int)want);
	return -1;
}

/* A socket connected to sock by a child (of pid `want`, or any: 0) that
 * exits at once: the connection's SO_PEERCRED is the child's, the socket
 * this process's. */
static int child_connect_as(const char *sock, pid_t want)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0), st;
	pid_t pid;

	assert_true(fd >= 0);
	assert_true(strlen(sock) < sizeof(a.sun_path));
	memcpy(a.sun_path, sock, strlen(sock) + 1);
	pid = identity_spawn(want);
	if (pid == 0)
		_exit(connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0 ? 0 : 1);
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	return fd;
}

static int child_connect(const char *sock)
{
	return child_connect_as(sock, 0);
}

/* One reply: its error code (0: none), the region reply's role and id,
 * or an Attach reply's id; its fds closed. */
static int identity_reply(int fd, uint32_t *id, int *role)
{
	static uint8_t buf[WSRV_MAX_PACKET];
	int fds[WSRV_MAX_FDS], n = 0, code;
	long len = pkt_recv(fd, buf, sizeof(buf), fds, WSRV_MAX_FDS, &n);
	Wsrv__Response *r;

	pkt_close_fds(fds, n);
	if (len <= 0 || !(r = wsrv__response__unpack(NULL, (size_t)len, buf)))
		return -1;
	code = r->body_case == WSRV__RESPONSE__BODY_ERROR ? (int)r->error->code : 0;
	if (r->body_case == WSRV__RESPONSE__BODY_ATTACH && id)
		*id = r->attach->attach_id;
	if (r->body_case == WSRV__RESPONSE__BODY_REGION) {
		if (id)
			*id = r->region->region_id;
		if (role)
			*role = r->region->role;
	}
	wsrv__response__free_unpacked(r, NULL);
	return code;
}

/* Hello and Attach of model m on fd: the attachment's id. */
static uint32_t greet(int fd)
{
	Wsrv__Request q = WSRV__REQUEST__INIT;
	Wsrv__Attach a = WSRV__ATTACH__INIT;
	uint32_t id = 0;

	assert_int_equal(raw_hello(fd, "identity"), 0);
	assert_int_equal(identity_reply(fd, NULL, NULL), 0);
	a.model = "m";
	a.while_loading = true;
	q.body_case = WSRV__REQUEST__BODY_ATTACH;
	q.attach = &a;
	assert_int_equal(raw_send(fd, &q, NULL, 0), 0);
	assert_int_equal(identity_reply(fd, &id, NULL), 0);
	return id;
}

/* Takes segment seg through attachment id, asking again while it is read
 * (EAGAIN, up to 30 s): 0, or the refusal's code. */
static int identity_take(int fd, uint32_t id, uint32_t seg)
{
	for (int tries = 0; tries < 1500; tries++) {
		Wsrv__Request q = WSRV__REQUEST__INIT;
		Wsrv__AttachSegments a = WSRV__ATTACH_SEGMENTS__INIT;
		int code;
		a.attach_id = id;
		a.segments = &seg;
		a.n_segments = 1;
		q.body_case = WSRV__REQUEST__BODY_ATTACH_SEGMENTS;
		q.attach_segments = &a;
		assert_int_equal(raw_send(fd, &q, NULL, 0), 0);
		if ((code = identity_reply(fd, NULL, NULL)) != EAGAIN)
			return code;
		sleep_ms(20);
	}
	return EAGAIN;
}

/* Takes segments from first on until one is refused: how many were
 * taken (the refusal's code in *code). */
static int take_until_refused(int fd, uint32_t id, uint32_t first, int *code)
{
	int n = 0;

	while (first + (uint32_t)n <= 8 && (*code = identity_take(fd, id, first + (uint32_t)n)) == 0)
		n++;
	return n;
}

/* wsrvd with the test model under BUDGET, reachable by uid NOBODY too. */
static void identity_serve(struct test_server *ts, const char *a, const char *b)
{
	assert_int_equal(server_start(ts, "m", F.dir[0], "--memory-budget", BUDGET, "--allow-uid", "65534",
				      "--socket-mode", "0666", a, b, NULL), 0);
	assert_int_equal(chmod(ts->dir, 0711), 0);
}

/* Item 1, as the issue made it: one process on two connections, each
 * made by a child that exited, took the whole cache (each connection a
 * full share), and another worker's take waited 16 s and failed. Now
 * both count against the user's account of orphans, one share: the
 * second connection's first take past it is refused. */
static void child_connections_are_one_account(void **st)
{
	struct test_server ts = { 0 };
	int a, b, code = 0, na, nb;
	uint32_t ia, ib;

	(void)st;
	identity_serve(&ts, NULL, NULL);
	a = child_connect(ts.sock);
	b = child_connect(ts.sock);
	ia = greet(a);
	ib = greet(b);
	na = take_until_refused(a, ia, 1, &code);
	assert_true(na >= 1);
	assert_int_equal(code, EDQUOT);
	nb = take_until_refused(b, ib, 1 + (uint32_t)na, &code);
	if (nb)
		fail_msg("a second child-made connection of the same process took %d more segments past its share", nb);
	assert_int_equal(code, EDQUOT);
	close(a);
	close(b);
	server_done(&ts);
}

/* The holders' go-ahead: its write end is the case's; each holder
 * waits until it is closed. */
static int go[2] = { -1, -1 };

/* In a child of its own as uid (0: ours): attaches m with libwsrv and
 * maps segments [first, first + n) (their layers), then waits for `go`
 * to close; of pid want, or any (0). *ready: what it says when it has:
 * 1, all mapped; 2, one was
 * refused; nothing (0 at read) when it failed otherwise. */
static pid_t holder_as(const char *sock, uid_t uid, pid_t want, uint32_t first, uint32_t n, int *ready)
{
	int rp[2];
	pid_t pid;

	assert_int_equal(pipe2(rp, O_CLOEXEC), 0);
	pid = identity_spawn(want);
	if (pid == 0) {
		struct wsrv_client *c;
		struct wsrv_model *m;
		char ok = 1, x;
		close(go[1]);
		close(rp[0]);
		if (uid && (setgid(uid) < 0 || setuid(uid) < 0))
			_exit(3);
		if (wsrv_connect(sock, NULL, &c) < 0 || wsrv_attach(c, "m", &m) < 0) {
			fprintf(stderr, "holder as uid %u: %s\n", (unsigned)uid, wsrv_last_error());
			_exit(4);
		}
		for (uint32_t i = 0; i < n && ok == 1; i++)
			if (wsrv_model_wait(m, (int32_t)(first + i - 1), 30000) < 0)
				ok = 2;
		if (write(rp[1], &ok, 1) != 1 || read(go[0], &x, 1) < 0)
			_exit(5);
		_exit(0);
	}
	close(rp[1]);
	*ready = rp[0];
	return pid;
}

static pid_t holder(const char *sock, uid_t uid, uint32_t first, uint32_t n, int *ready)
{
	return holder_as(sock, uid, 0, first, n, ready);
}

/* What a holder said (0: nothing), its pipe closed. */
static char said(int ready)
{
	char c = 0;

	if (read(ready, &c, 1) != 1)
		c = 0;
	close(ready);
	return c;
}


/* Item 1, a reused pid: the account was a bare pid number that outlived
 * its process, so a worker given a pid once used by a connection that
 * still held its share was charged with that share, and refused. The
 * pidfs inode is never reused: the newcomer takes its own share. */
static void a_reused_pid_is_not_charged(void **st)
{
	struct test_server ts = { 0 };
	int fd, code = 0, r;
	FILE *f;
	int last = 0;
	pid_t p, h;

	(void)st;
	if (geteuid() != 0)
		skip(); /* ns_last_pid is root's */
	identity_serve(&ts, NULL, NULL);
	assert_non_null(f = fopen("/proc/sys/kernel/ns_last_pid", "r"));
	assert_int_equal(fscanf(f, "%d", &last), 1);
	fclose(f);
	p = (pid_t)(last + 500 < 30000 ? last + 500 : 1000);
	fd = child_connect_as(ts.sock, p);
	assert_true(take_until_refused(fd, greet(fd), 1, &code) >= 1);
	assert_int_equal(code, EDQUOT);
	assert_int_equal(pipe2(go, O_CLOEXEC), 0);
	h = holder_as(ts.sock, 0, p, 5, 2, &r);
	if (said(r) != 1)
		fail_msg("a worker given pid %d, once a connection's that holds its share, was charged with that share",
			 (int)p);
	close(go[1]);
	close(go[0]);
	assert_int_equal(child_status(h), 0);
	close(fd);
	server_done(&ts);
}

/* Item 1, the user's bound: two live processes of one user, each within
 * its own share, held the whole cache, and a worker of another user
 * attached beside them waited for room that never came. Now a user's
 * processes hold at most the cache over the users attached (here half):
 * the second holder is refused past it, and the other user is served. */
static void a_user_cannot_crowd_another_out(void **st)
{
	struct test_server ts = { 0 };
	int r[3];
	pid_t h[2], v;
	char got;

	(void)st;
	if (geteuid() != 0)
		skip(); /* needs another uid */
	assert_int_equal(chmod(F.dir[0], 0755), 0);
	identity_serve(&ts, NULL, NULL);
	assert_int_equal(pipe2(go, O_CLOEXEC), 0);
	/* The other user is attached first, holding nothing but layer 0. */
	v = holder(ts.sock, NOBODY, 8, 0, &r[2]);
	assert_int_equal(said(r[2]), 1);
	h[0] = holder(ts.sock, 0, 1, 2, &r[0]);
	assert_int_equal(said(r[0]), 1);
	h[1] = holder(ts.sock, 0, 3, 2, &r[1]);
	if ((got = said(r[1])) != 2)
		fail_msg("a second process of the same user %s", got == 1 ? "took past the user's part of the cache" : "failed");
	assert_true(server_log_has(&ts, "users attached"));
	/* Another of the other user takes two layers while both hold. */
	pid_t v2 = holder(ts.sock, NOBODY, 6, 2, &r[2]);
	if ((got = said(r[2])) != 1)
		fail_msg("a worker of another user was %s while one user held its part", got == 2 ? "refused" : "failed");
	assert_int_equal(close(go[1]), 0);
	close(go[0]);
	for (int i = 0; i < 2; i++)
		assert_int_equal(child_status(h[i]), 0);
	assert_int_equal(child_status(v), 0);
	assert_int_equal(child_status(v2), 0);
	server_done(&ts);
}

/* Item 3: wsrvd in a pid namespace of its own (a container, systemd's
 * PrivatePIDs=) saw pid 0 for every client outside it, and made each
 * connection its own account: two connections of this process held two
 * shares. The pidfs inode names the process in any namespace: one
 * share. */
static void server_in_its_own_pid_namespace(void **st)
{
	struct test_server ts = { .pidns = true };
	struct wsrv_client *c[2];
	struct wsrv_model *m[2];
	int32_t L = 0;

	(void)st;
	if (geteuid() != 0)
		skip(); /* a pid namespace needs CAP_SYS_ADMIN */
	identity_serve(&ts, NULL, NULL);
	for (int i = 0; i < 2; i++) {
		assert_int_equal(wsrv_connect(ts.sock, NULL, &c[i]), 0);
		assert_int_equal(wsrv_attach(c[i], "m", &m[i]), 0);
	}
	while (L < 8 && wsrv_model_wait(m[0], L, 30000) == 0)
		L++;
	assert_true(L >= 1 && L < 8);
	assert_non_null(strstr(wsrv_last_error(), "--memory-budget-share"));
	if (wsrv_model_wait(m[1], L, 30000) == 0)
		fail_msg("a second connection of one process, to a server in another pid namespace, took past the process's share");
	assert_non_null(strstr(wsrv_last_error(), "--memory-budget-share"));
	for (int i = 0; i < 2; i++) {
		wsrv_detach(m[i]);
		wsrv_disconnect(c[i]);
	}
	server_done(&ts);
}

/* Opens a host region of 1 MiB with fingerprint fp through attachment
 * id: 0 with its role and id, or the refusal's code. */
static int region_open(int fd, uint32_t id, uint64_t fp, int *role, uint32_t *rid)
{
	Wsrv__Request q = WSRV__REQUEST__INIT;
	Wsrv__RegionOpen o = WSRV__REGION_OPEN__INIT;

	o.attach_id = id;
	o.device = "host:identity";
	o.kind = WSRV__REGION_KIND__REGION_HOST;
	o.fingerprint = fp;
	o.bytes = 1 << 20;
	q.body_case = WSRV__REQUEST__BODY_REGION_OPEN;
	q.region_open = &o;
	assert_int_equal(raw_send(fd, &q, NULL, 0), 0);
	return identity_reply(fd, rid, role);
}

/* Commits region rid with a sealed memfd of 1 MiB. */
static void region_commit(int fd, uint32_t rid)
{
	Wsrv__Request q = WSRV__REQUEST__INIT;
	Wsrv__RegionCommit c = WSRV__REGION_COMMIT__INIT;
	int m = memfd_create("identity-region", MFD_CLOEXEC | MFD_ALLOW_SEALING);

	assert_true(m >= 0);
	assert_int_equal(ftruncate(m, 1 << 20), 0);
	assert_int_equal(fcntl(m, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL), 0);
	c.region_id = rid;
	q.body_case = WSRV__REQUEST__BODY_REGION_COMMIT;
	q.region_commit = &c;
	assert_int_equal(raw_send(fd, &q, &m, 1), 0);
	assert_int_equal(identity_reply(fd, NULL, NULL), 0);
	close(m);
}

/* Fills and commits n regions from fingerprint fp on fd: how many it
 * could open (the refusal's code in *code). */
static int fill_regions(int fd, uint32_t id, uint64_t fp, int n, int *code)
{
	int k = 0, role = 0;
	uint32_t rid = 0;

	*code = 0;
	while (k < n && (*code = region_open(fd, id, fp + (uint64_t)k, &role, &rid)) == 0) {
		assert_int_equal(role, WSRV__REGION_ROLE__REGION_WRITER);
		region_commit(fd, rid);
		k++;
	}
	return k;
}

/* A newcomer of uid in a child: 0 when it is given a region of its own
 * to fill, else the refusal's code. */
static int newcomer_opens(const char *sock, uid_t uid, uint64_t fp)
{
	pid_t pid = fork();

	assert_true(pid >= 0);
	if (pid == 0) {
		int fd, role = 0;
		uint32_t rid;
		if (setgid(uid) < 0 || setuid(uid) < 0)
			_exit(3);
		if ((fd = raw_connect(sock)) < 0)
			_exit(4);
		int code = region_open(fd, greet(fd), fp, &role, &rid);
		_exit(code ? (code & 0x7f) : role == WSRV__REGION_ROLE__REGION_WRITER ? 0 : 5);
	}
	return child_status(pid);
}

/* Item 2: four connections made by children that exited, each with
 * its process's regions, every one committed with a sealed memfd, held
 * every --max-regions slot for good; every other worker's RegionOpen was
 * ENOSPC. Now the four are one account (the user's orphans), held to one
 * process's regions; and a committed region no worker but its writer's
 * process holds gives its slot to a newcomer. */
static void orphan_regions_give_their_slots(void **st)
{
	struct test_server ts = { 0 };
	int fd[4], me, code, total = 0;

	(void)st;
	assert_int_equal(server_start(&ts, "m", F.dir[0], "--max-regions", "6", "--max-client-regions", "4", NULL), 0);
	for (int i = 0; i < 4; i++) {
		uint32_t id;
		fd[i] = child_connect(ts.sock);
		id = greet(fd[i]);
		total += fill_regions(fd[i], id, 100 + 10 * (uint64_t)i, 4, &code);
	}
	assert_int_equal(code, ENOSPC);
	if (total > 4)
		fail_msg("four child-made connections of one process hold %d regions, past the 4 one process may", total);
	/* A newcomer (this process) fills every slot, 2 free and then 4 of
	 * the orphans'. */
	me = raw_connect(ts.sock);
	assert_true(me >= 0);
	assert_int_equal(fill_regions(me, greet(me), 1000, 4, &code), 4);
	assert_true(server_log_has(&ts, "only its writer held it"));
	for (int i = 0; i < 4; i++)
		close(fd[i]);
	close(me);
	server_done(&ts);
}

/* A wsrvd with 8 region slots (--max-regions), and two accounts of one
 * user on it, greeted: this process's connection and a child's (fd, id).
 * Root only: the newcomer the cases let in is another uid. */
static void two_accounts(struct test_server *ts, int fd[2], uint32_t id[2])
{
	if (geteuid() != 0)
		skip(); /* needs another uid */
	assert_int_equal(chmod(F.dir[0], 0755), 0);
	identity_serve(ts, "--max-regions", "8");
	fd[0] = raw_connect(ts->sock);
	fd[1] = child_connect(ts->sock);
	for (int i = 0; i < 2; i++) {
		assert_true(fd[i] >= 0);
		id[i] = greet(fd[i]);
	}
}

/* Item 2, a user's part: two processes of one user fill every slot and
 * each reads the other's regions, so that every region is shared. A
 * newcomer of another user was refused (ENOSPC); the user past its part
 * of the slots (--max-regions over the users) now gives up its oldest. */
static void a_user_cannot_hold_every_region(void **st)
{
	struct test_server ts = { 0 };
	int fd[2], code, role = 0;
	uint32_t id[2], rid;

	(void)st;
	two_accounts(&ts, fd, id);
	for (int i = 0; i < 2; i++)
		assert_int_equal(fill_regions(fd[i], id[i], 200 + 10 * (uint64_t)i, 4, &code), 4);
	/* Each account reads the other's. */
	for (int i = 0; i < 2; i++)
		for (uint64_t k = 0; k < 4; k++) {
			assert_int_equal(region_open(fd[i], id[i], 200 + 10 * (uint64_t)(1 - i) + k, &role, &rid), 0);
			assert_int_equal(role, WSRV__REGION_ROLE__REGION_READER);
		}
	assert_int_equal(newcomer_opens(ts.sock, NOBODY, 300), 0);
	assert_true(server_log_has(&ts, "held more than its part"));
	for (int i = 0; i < 2; i++)
		close(fd[i]);
	server_done(&ts);
}

/* Issue 75 item 10: a user took every slot with regions it opened as
 * their writer and never committed (they last --region-fill-timeout, and
 * can be opened again at once): the rules that free a slot took only
 * committed ones, and another user's worker got ENOSPC. A region being
 * filled by a user past its part of the slots gives its slot now too. */
static void uncommitted_regions_give_their_slots(void **st)
{
	struct test_server ts = { 0 };
	int fd[2], role = 0;
	uint32_t id[2], rid;

	(void)st;
	two_accounts(&ts, fd, id);
	for (int i = 0; i < 2; i++) {
		for (uint64_t k = 0; k < 4; k++) { /* opened as writer, never committed */
			assert_int_equal(region_open(fd[i], id[i], 400 + 10 * (uint64_t)i + k, &role, &rid), 0);
			assert_int_equal(role, WSRV__REGION_ROLE__REGION_WRITER);
		}
	}
	assert_int_equal(newcomer_opens(ts.sock, NOBODY, 500), 0);
	assert_true(server_log_has(&ts, "held more than its part"));
	for (int i = 0; i < 2; i++)
		close(fd[i]);
	server_done(&ts);
}

FIXTURE_MAIN(F,
	cmocka_unit_test(child_connections_are_one_account),
	cmocka_unit_test(a_reused_pid_is_not_charged),
	cmocka_unit_test(a_user_cannot_crowd_another_out),
	cmocka_unit_test(server_in_its_own_pid_namespace),
	cmocka_unit_test(orphan_regions_give_their_slots),
	cmocka_unit_test(a_user_cannot_hold_every_region),
	cmocka_unit_test(uncommitted_regions_give_their_slots),
)
