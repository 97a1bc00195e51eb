// SPDX-License-Identifier: MIT
/* test_harden.c - regression tests for the defects a hostile review found in
 * wsrvd (issue 13, items 1-11): each test names the item it pins down. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <poll.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fixture.h"
#include "packet.h"
#include "sockpath.h"
#include "wsrv.h"
#include "wsrv.pb-c.h"

/* dir[0]: the model; dir[1]: scratch. */
static struct fixture F = { .tag = "harden", .models = {
	{ "tiny", 2 << 20, .layers = 2, .shards = 1, .seed = 5 }, { "" } } };
static char text[1 << 16];

static const char *harden_slurp(const char *path)
{
	FILE *f = fopen(path, "re");
	size_t n = f ? fread(text, 1, sizeof(text) - 1, f) : 0;

	text[n] = 0;
	if (f)
		fclose(f);
	return text;
}

/* wsrvd with args (NULL-terminated); its stderr is in text afterwards. */
static int wsrvd(unsigned nofile, const char *const *env, ...)
{
	const char *argv[40] = { getenv("WSRVD") };
	va_list ap;
	int n = 1, st;

	va_start(ap, env);
	while (n < 39 && (argv[n] = va_arg(ap, const char *)))
		n++;
	va_end(ap);
	argv[n] = NULL;
	st = run_prog(argv, env, pjoin(F.dir[1], "out"), pjoin(F.dir[1], "err"), nofile, 20);
	harden_slurp(pjoin(F.dir[1], "err"));
	return st;
}

static void attach_and_fetch(const char *sock)
{
	struct wsrv_client *c;
	struct wsrv_model *m;
	struct wsrv_lease l;

	if (wsrv_connect(sock, NULL, &c) < 0)
		fail_msg("connect: %s", wsrv_last_error());
	if (wsrv_attach(c, "m", &m) < 0)
		fail_msg("attach: %s", wsrv_last_error());
	assert_int_equal(wsrv_fetch_layer(m, 0, &l), 0);
	assert_int_equal(wsrv_release(m, l.id), 0);
	wsrv_detach(m);
	wsrv_disconnect(c);
}

/* 1: clients that never read their Attach replies keep fds in flight,
 * charged to a non-root server's user against RLIMIT_NOFILE. They must not
 * cut off a client that reads. */
static void unread_fds_do_not_cut_others_off(void **s)
{
	struct test_server ts = { .nofile = 64, .uid = 65534, .gid = 65534 };
	int bad[2];

	if (geteuid() != 0)
		skip(); /* needs a non-root server, started from root */
	assert_int_equal(chmod(F.dir[0], 0755), 0);
	assert_int_equal(server_start(&ts, "m", F.dir[0], "--max-clients", "4", NULL), 0);
	hogs_open(ts.sock, bad, 2, 40);
	/* Without a budget, 2 x 19 queued replies x 2 fds passed 64. */
	reader_not_cut_off(ts.sock);
	hogs_close(bad, 2);
	server_done(&ts);
}

/* 2: Stats with many reported streams (30 clients x 16, long names) did
 * not fit one packet. */
static void stats_of_many_streams(void **s)
{
	struct test_server ts = { 0 };
	Wsrv__Request q = WSRV__REQUEST__INIT;
	Wsrv__StreamReport rp = WSRV__STREAM_REPORT__INIT;
	char name[64], model[64];
	struct wsrv_stream_record rec;
	struct wsrv_server_stats sv;
	struct wsrv_client *c;
	struct wsrv_stats *st;
	int fds[30];

	assert_int_equal(server_start(&ts, "m", F.dir[0], NULL), 0);
	memset(model, 'x', 63);
	model[63] = 0;
	rp.model = model;
	q.body_case = WSRV__REQUEST__BODY_REPORT_STREAM;
	q.report_stream = &rp;
	for (int i = 0; i < 30; i++) {
		fds[i] = raw_connect(ts.sock);
		snprintf(name, sizeof(name), "client-%02d-%050d", i, 0);
		raw_hello(fds[i], name);
		assert_int_equal(raw_recv_code(fds[i], NULL, NULL), 0);
		for (uint32_t k = 0; k < 16; k++) {
			rp.stream_id = k;
			raw_send(fds[i], &q, NULL, 0);
			assert_int_equal(raw_recv_code(fds[i], NULL, NULL), 0);
		}
	}
	assert_int_equal(wsrv_connect(ts.sock, NULL, &c), 0);
	if (wsrv_stats(c, &st) < 0)
		fail_msg("stats: %s", wsrv_last_error());
	/* Every one of the 480 streams comes back, none truncated. */
	assert_int_equal(wsrv_stats_server(st, &sv), 0);
	assert_int_equal(sv.clients, 31);
	assert_int_equal(wsrv_stats_stream_count(st), 480);
	assert_int_equal(wsrv_stats_stream(st, 479, &rec), 0);
	assert_string_equal(rec.model, model);
	assert_int_equal(strncmp(rec.client, "client-", 7), 0);
	assert_int_equal(wsrv_stats_stream(st, 480, &rec), -ERANGE);
	wsrv_stats_free(st);
	wsrv_disconnect(c);
	for (int i = 0; i < 30; i++)
		close(fds[i]);
	server_done(&ts);
}

/* 3: refused peers held a session (and a --max-clients place) until the
 * hello timeout, and each one logged a warning. */
static void refused_peers_cost_nothing(void **s)
{
	struct test_server ts = { 0 };
	struct wsrv_client *a, *b, *c;
	int lines = 0;

	assert_int_equal(server_start(&ts, "m", F.dir[0], "--max-clients", "2", NULL), 0);
	assert_int_equal(wsrv_connect(ts.sock, NULL, &a), 0);
	assert_int_equal(wsrv_connect(ts.sock, NULL, &b), 0);
	for (int i = 0; i < 50; i++) {
		assert_int_equal(wsrv_connect(ts.sock, NULL, &c), -EUSERS);
		assert_non_null(strstr(wsrv_last_error(), "--max-clients"));
	}
	wsrv_disconnect(a);
	sleep_ms(100);
	if (wsrv_connect(ts.sock, NULL, &c) < 0)
		fail_msg("refused peers still count: %s", wsrv_last_error());
	wsrv_disconnect(b);
	wsrv_disconnect(c);
	sleep_ms(11000); /* the rate limit's window: then the count of the rest */
	assert_int_equal(server_stop(&ts, SIGTERM), 0);
	for (const char *p = harden_slurp(ts.log); (p = strstr(p, "refused a client")); p++)
		lines++;
	assert_true(lines >= 1 && lines <= 5); /* rate-limited, not 50 */
	assert_non_null(strstr(text, "more refusals not logged"));
	rm_rf(ts.dir);
}

/* Connects to sock as uid and gid 65534 with g its one supplementary
 * group, in a child: 0 when it could, 1 when not, 3 when the ids could not
 * be taken. */
static int connect_as_nobody_in(gid_t g, const char *sock)
{
	pid_t kid = fork();
	int st;

	if (kid == 0) {
		struct wsrv_client *c;
		if (setgroups(1, &g) < 0 || setgid(65534) < 0 || setuid(65534) < 0)
			_exit(3);
		_exit(wsrv_connect(sock, NULL, &c) == 0 ? 0 : 1);
	}
	assert_int_equal(waitpid(kid, &st, 0), kid);
	assert_true(WIFEXITED(st));
	return WEXITSTATUS(st);
}

/* 4: --allow-gid matched the primary gid only. */
static void supplementary_group_allowed(void **s)
{
	struct test_server ts = { 0 };
	gid_t g = 4242;

	if (geteuid() != 0)
		skip(); /* needs another uid and setgroups */
	assert_int_equal(server_start(&ts, "m", F.dir[0], "--allow-gid", "4242", NULL), 0);
	assert_int_equal(chmod(ts.sock, 0666), 0);
	assert_int_equal(chmod(ts.dir, 0755), 0);
	assert_int_equal(connect_as_nobody_in(g, ts.sock), 0);
	server_done(&ts);
}

/* Issue 49 item 4: --allow-uid N alone did not let uid N in (the socket
 * was 0660 root:root: EACCES before wsrvd saw it), and nothing said so.
 * Now --socket-group gives the socket a group its members reach it
 * through, users and groups go by name too, and an allowed user the
 * socket's mode keeps out is warned of at the start. */
static void socket_group_lets_the_group_in(void **s)
{
	struct test_server ts = { 0 };
	gid_t g = 4243;

	if (geteuid() != 0)
		skip(); /* needs another uid and setgroups */
	assert_int_equal(server_start(&ts, "m", F.dir[0], "--allow-gid", "4243", "--socket-group", "4243",
				      "--allow-uid", "nobody", NULL), 0);
	assert_int_equal(chmod(ts.dir, 0755), 0);
	assert_int_equal(connect_as_nobody_in(g, ts.sock), 0);
	/* nobody (65534) is not in 4243: warned, by number. */
	assert_true(server_log_has(&ts, "--allow-uid 65534: that user cannot reach"));
	assert_false(server_log_has(&ts, "--allow-gid 4243: members"));
	server_done(&ts);
}

/* The same, told at the start: an allowed group the socket does not
 * carry, and a mode outside 0600/0660/0666 is a usage error. */
static void socket_reach_warned(void **s)
{
	struct test_server ts = { 0 };
	const char *argv[] = { getenv("WSRVD"), "--socket-mode", "0644", "--model", "m=/nonexistent", NULL };
	char out[400], err[400];
	size_t n;
	char *msg;

	(void)s;
	assert_int_equal(server_start(&ts, "m", F.dir[0], "--allow-gid", "4244", NULL), 0);
	assert_true(server_log_has(&ts, "--allow-gid 4244: members of that group reach"));
	snprintf(out, sizeof(out), "%s/mode.out", ts.dir);
	snprintf(err, sizeof(err), "%s/mode.err", ts.dir);
	assert_int_equal(run_prog(argv, NULL, out, err, 0, 30), 2);
	assert_non_null(msg = (char *)read_file(err, &n));
	assert_non_null(strstr(msg, "--socket-mode '0644'"));
	free(msg);
	server_done(&ts);
}

/* 4: a 33rd allow entry was dropped in silence. */
static void allow_list_overflow_refused(void **s)
{
	const char *argv[80] = { getenv("WSRVD"), "--load-only", "--model" };
	char spec[512], uids[33][12];
	int n = 3, st;

	snprintf(spec, sizeof(spec), "m=%s", F.dir[0]);
	argv[n++] = spec;
	for (int i = 0; i < 33; i++) {
		snprintf(uids[i], sizeof(uids[i]), "%d", 1000 + i);
		argv[n++] = "--allow-uid";
		argv[n++] = uids[i];
	}
	argv[n] = NULL;
	st = run_prog(argv, NULL, pjoin(F.dir[1], "out"), pjoin(F.dir[1], "err"), 0, 20);
	assert_int_equal(st, 2);
	assert_non_null(strstr(harden_slurp(pjoin(F.dir[1], "err")), "at most 32"));
}

/* 5: only a refused connection makes a socket stale. */
static void live_socket_of_another_service_kept(void **s)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	char spec[512];
	int l = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0), c;
	struct stat st;

	snprintf(a.sun_path, sizeof(a.sun_path), "%s", pjoin(F.dir[1], "other.sock"));
	assert_int_equal(bind(l, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(listen(l, 4), 0);
	snprintf(spec, sizeof(spec), "m=%s", F.dir[0]);
	assert_int_equal(wsrvd(0, NULL, "--socket", a.sun_path, "--no-lock", "--model", spec, NULL), 1);
	assert_non_null(strstr(text, "not replacing it"));
	assert_int_equal(stat(a.sun_path, &st), 0);
	c = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_int_equal(connect(c, (struct sockaddr *)&a, sizeof(a)), 0);
	close(c);
	close(l);
	unlink(a.sun_path);
	unlink(pjoin(F.dir[1], "other.sock.lock"));
}

/* 5: a symbolic link at PATH.lock made wsrvd create a file elsewhere. */
static void lock_symlink_not_followed(void **s)
{
	char spec[512], sock[256], target[256];
	struct stat st;

	snprintf(sock, sizeof(sock), "%s", pjoin(F.dir[1], "sym.sock"));
	snprintf(target, sizeof(target), "%s", pjoin(F.dir[1], "planted"));
	assert_int_equal(symlink(target, pjoin(F.dir[1], "sym.sock.lock")), 0);
	snprintf(spec, sizeof(spec), "m=%s", F.dir[0]);
	assert_int_equal(wsrvd(0, NULL, "--socket", sock, "--no-lock", "--model", spec, NULL), 1);
	assert_non_null(strstr(text, "symbolic link"));
	assert_int_equal(stat(target, &st), -1);
	unlink(pjoin(F.dir[1], "sym.sock.lock"));
}

/* 5: the lock file stayed after SIGTERM; 0660 without a chmod by path. */
static void lock_removed_on_stop(void **s)
{
	struct test_server ts = { 0 };
	char lock[300];
	struct stat st;

	assert_int_equal(server_start(&ts, "m", F.dir[0], NULL), 0);
	snprintf(lock, sizeof(lock), "%s.lock", ts.sock);
	assert_int_equal(stat(lock, &st), 0);
	assert_int_equal(stat(ts.sock, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0660);
	assert_int_equal(server_stop(&ts, SIGTERM), 0);
	assert_int_equal(stat(lock, &st), -1);
	assert_int_equal(stat(ts.sock, &st), -1);
	rm_rf(ts.dir);
}

/* SIGTERM while the models load killed the server (the signal was blocked
 * only once it served), leaving SOCKET and SOCKET.lock behind. Now the load
 * stops, both go, and the exit status is 0: the stop was asked for. */
static void stop_while_loading_cleans_up(void **s)
{
	char *dir = test_tmpdir("harden-big"), spec[300], lock[300];
	const char *sock = pjoin(F.dir[1], "loading.sock");
	struct stat st;
	int status;
	pid_t pid;

	assert_int_equal(make_model(dir, "llama-mini", 64 << 20, 4, 1, 9), 0);
	snprintf(spec, sizeof(spec), "m=%s", dir);
	snprintf(lock, sizeof(lock), "%s.lock", sock);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		int fd = open(pjoin(F.dir[1], "err"), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
		dup2(fd, 2);
		execl(getenv("WSRVD"), "wsrvd", "--socket", sock, "--model", spec, (char *)NULL);
		_exit(127);
	}
	/* The socket exists from before the load on. */
	for (int i = 0; i < 5000 && stat(sock, &st) < 0; i++)
		sleep_ms(1);
	assert_int_equal(kill(pid, SIGTERM), 0);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	harden_slurp(pjoin(F.dir[1], "err"));
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
	if (!strstr(text, "stopped by a signal while loading"))
		fail_msg("no stop while loading in: %s", text);
	assert_int_equal(stat(sock, &st), -1);
	assert_int_equal(stat(lock, &st), -1);
	rm_rf(dir);
	free(dir);
}

/* 5: a WSRV_SOCKET too long for sun_path was truncated; the server did not
 * read WSRV_SOCKET at all. */
static void socket_env_honoured_and_checked(void **s)
{
	static char longenv[300], env[300];
	const char *envs[] = { longenv, NULL }, *envs2[] = { env, NULL };
	struct wsrv_client *c;
	char spec[512], path[256];
	struct stat st;

	memset(longenv, 0, sizeof(longenv));
	strcpy(longenv, "WSRV_SOCKET=/tmp/");
	memset(longenv + 17, 'a', 150);
	setenv("WSRV_SOCKET", longenv + 12, 1);
	assert_null(wsrv_default_socket());
	assert_int_equal(wsrv_connect(NULL, NULL, &c), -ENAMETOOLONG);
	assert_non_null(strstr(wsrv_last_error(), "WSRV_SOCKET"));
	unsetenv("WSRV_SOCKET");
	snprintf(spec, sizeof(spec), "m=%s", F.dir[0]);
	/* A usage error, as from --socket (issue 61 item 13: it was 1). */
	assert_int_equal(wsrvd(0, envs, "--no-lock", "--model", spec, NULL), 2);
	assert_non_null(strstr(text, "longer than"));
	/* The server takes WSRV_SOCKET as the client does: --load-only would
	 * not listen, so check through a start that fails on a live lock. */
	snprintf(path, sizeof(path), "%s", pjoin(F.dir[1], "env.sock"));
	snprintf(env, sizeof(env), "WSRV_SOCKET=%s", path);
	assert_int_equal(mkfifo(pjoin(F.dir[1], "env.sock"), 0600), 0);
	assert_int_equal(wsrvd(0, envs2, "--no-lock", "--model", spec, NULL), 1);
	assert_non_null(strstr(text, path));
	assert_int_equal(stat(path, &st), 0); /* a FIFO there is not replaced */
	unlink(path);
	unlink(pjoin(F.dir[1], "env.sock.lock"));
}

/* 5b (issue 41): with XDG_RUNTIME_DIR set, a client looked only at
 * $XDG_RUNTIME_DIR/wsrv.sock while the system service listened on
 * /run/wsrv/wsrv.sock, and the error did not say so. Now a client takes
 * the system socket when nothing is at the XDG one (sockpath_client, with
 * a stand-in for /run/wsrv), and the error names both places. */
static void default_socket_finds_the_service(void **s)
{
	char xdg[256], sys_sock[256], buf[SOCKPATH_MAX], err[256];
	struct wsrv_client *c;
	bool fb;
	int fd;

	snprintf(xdg, sizeof(xdg), "%s", pjoin(F.dir[1], "xdg"));
	assert_int_equal(mkdir(xdg, 0700), 0);
	snprintf(sys_sock, sizeof(sys_sock), "%s", pjoin(F.dir[1], "system.sock"));
	unsetenv("WSRV_SOCKET");
	setenv("XDG_RUNTIME_DIR", xdg, 1);
	/* Nothing anywhere: the XDG path, no fallback. */
	assert_int_equal(sockpath_client(sys_sock, buf, sizeof(buf), &fb, err, sizeof(err)), 0);
	assert_false(fb);
	assert_non_null(strstr(buf, "/xdg/wsrv.sock"));
	/* The service's socket only: that one. */
	assert_true((fd = open(sys_sock, O_CREAT | O_WRONLY | O_CLOEXEC, 0600)) >= 0);
	close(fd);
	assert_int_equal(sockpath_client(sys_sock, buf, sizeof(buf), &fb, err, sizeof(err)), 0);
	assert_true(fb);
	assert_string_equal(buf, sys_sock);
	/* Both: the user's own. WSRV_SOCKET: always that. */
	assert_true((fd = open(pjoin(xdg, "wsrv.sock"), O_CREAT | O_WRONLY | O_CLOEXEC, 0600)) >= 0);
	close(fd);
	assert_int_equal(sockpath_client(sys_sock, buf, sizeof(buf), &fb, err, sizeof(err)), 0);
	assert_false(fb);
	unlink(pjoin(xdg, "wsrv.sock"));
	setenv("WSRV_SOCKET", pjoin(F.dir[1], "own.sock"), 1);
	assert_int_equal(sockpath_client(sys_sock, buf, sizeof(buf), &fb, err, sizeof(err)), 0);
	assert_false(fb);
	assert_non_null(strstr(buf, "own.sock"));
	unsetenv("WSRV_SOCKET");
	unlink(sys_sock);
	/* No server: the sentence says where it looked and what to set. */
	if (access(SOCKPATH_SYSTEM, F_OK) != 0) {
		assert_int_equal(wsrv_connect(NULL, NULL, &c), -ENOENT);
		if (!strstr(wsrv_last_error(), "$XDG_RUNTIME_DIR/wsrv.sock") ||
		    !strstr(wsrv_last_error(), SOCKPATH_SYSTEM) || !strstr(wsrv_last_error(), "WSRV_SOCKET"))
			fail_msg("%s", wsrv_last_error());
	}
	unsetenv("XDG_RUNTIME_DIR");
	rmdir(xdg);
}

/* 6: with a low RLIMIT_NOFILE wsrvd accepted --max-clients it could never
 * serve, and failed accept once a second. Asked for, it is refused; left
 * to its default, it is fitted (test_fdlimit) unless too few would fit. */
static void fd_limit_checked(void **s)
{
	char spec[512], sock[256];

	snprintf(spec, sizeof(spec), "m=%s", F.dir[0]);
	snprintf(sock, sizeof(sock), "%s", pjoin(F.dir[1], "lim.sock"));
	assert_int_equal(wsrvd(48, NULL, "--socket", sock, "--no-lock", "--hugepages", "off",
			       "--max-clients", "1024", "--model", spec, NULL), 1);
	assert_non_null(strstr(text, "RLIMIT_NOFILE is 48"));
	assert_non_null(strstr(text, "--max-clients"));
	assert_int_equal(wsrvd(40, NULL, "--socket", sock, "--no-lock", "--hugepages", "off",
			       "--model", spec, NULL), 1);
	assert_non_null(strstr(text, "RLIMIT_NOFILE is 40"));
	assert_non_null(strstr(text, "fewer than 8"));
}

/* 7: a peer's strings went raw into the log. */
static void log_injection_escaped(void **s)
{
	struct test_server ts = { 0 };
	Wsrv__Request q = WSRV__REQUEST__INIT;
	Wsrv__Attach a = WSRV__ATTACH__INIT;
	int fd;

	assert_int_equal(server_start(&ts, "m", F.dir[0], NULL), 0);
	fd = raw_connect(ts.sock);
	raw_hello(fd, "x\n2026-01-01 wsrvd[1]: forged");
	assert_int_equal(raw_recv_code(fd, NULL, NULL), 0);
	a.model = "evil\n2026-01-01 wsrvd[1]: forged";
	q.body_case = WSRV__REQUEST__BODY_ATTACH;
	q.attach = &a;
	raw_send(fd, &q, NULL, 0);
	assert_int_equal(raw_recv_code(fd, NULL, NULL), ENOENT);
	/* Control characters and bytes that are not UTF-8 are refused at the
	 * boundary now (issue 37 item 8), before any log line names them. */
	a.model = "evil \x1b[31m\xff";
	raw_send(fd, &q, NULL, 0);
	assert_int_equal(raw_recv_code(fd, NULL, NULL), EBADMSG);
	close(fd);
	assert_int_equal(server_stop(&ts, SIGTERM), 0);
	harden_slurp(ts.log);
	assert_non_null(strstr(text, "evil\\n2026"));
	assert_null(strstr(text, "\n2026-01-01 wsrvd[1]: forged"));
	assert_null(strchr(text, 0x1b));
	rm_rf(ts.dir);
}

/* 8: --load-only passed what serving then refused. */
static void load_only_refuses_what_serving_refuses(void **s)
{
	char spec[512], spec2[512], file[300], shape[80] = "";
	int st;

	/* A rank-17 tensor. */
	for (int i = 0; i < 17; i++)
		strcat(shape, i ? ",1" : "1");
	snprintf(file, sizeof(file), "%s", pjoin(F.dir[1], "rank17.safetensors"));
	assert_int_equal(st_write(file, hdr("{\"t\":{\"dtype\":\"U8\",\"shape\":[%s],\"data_offsets\":[0,1]}}", shape), 1, NULL), 0);
	snprintf(spec, sizeof(spec), "m=%s", file);
	assert_int_equal(wsrvd(0, NULL, "--load-only", "--no-lock", "--model", spec, NULL), 1);
	assert_non_null(strstr(text, "rank 17"));
	/* More segments than a reply carries: 70 layers, a segment each. */
	snprintf(file, sizeof(file), "%s", pjoin(F.dir[1], "m70"));
	assert_int_equal(make_model(file, "tiny", 1 << 20, 70, 1, 3), 0);
	snprintf(spec, sizeof(spec), "m=%s", file);
	assert_int_equal(wsrvd(0, NULL, "--load-only", "--no-lock", "--max-segment", "4K",
			       "--model", spec, NULL), 1);
	assert_non_null(strstr(text, "71 segments"));
	rm_rf(file);
	snprintf(file, sizeof(file), "%s", pjoin(F.dir[1], "rank17.safetensors"));
	/* The same name twice, refused before anything loads. */
	snprintf(spec2, sizeof(spec2), "m=%s", F.dir[0]);
	st = wsrvd(0, NULL, "--load-only", "--no-lock", "--model", spec, "--model", spec2, NULL);
	assert_int_equal(st, 2);
	assert_non_null(strstr(text, "given twice"));
	unlink(file);
}

/* 9: a FIFO in a model's place blocked the load forever; a directory as
 * config.json was "not valid JSON". */
static void non_regular_files_refused(void **s)
{
	char spec[512], dir[300];
	int st;

	assert_int_equal(mkfifo(pjoin(F.dir[1], "fifo.safetensors"), 0600), 0);
	snprintf(spec, sizeof(spec), "m=%s", pjoin(F.dir[1], "fifo.safetensors"));
	st = wsrvd(0, NULL, "--load-only", "--no-lock", "--model", spec, NULL);
	assert_int_equal(st, 1); /* not 137: it did not hang */
	assert_non_null(strstr(text, "a FIFO"));
	unlink(pjoin(F.dir[1], "fifo.safetensors"));
	snprintf(dir, sizeof(dir), "%s", pjoin(F.dir[1], "cfgdir"));
	assert_int_equal(make_model(dir, "tiny", 1 << 20, 2, 1, 3), 0);
	unlink(pjoin(dir, "config.json"));
	assert_int_equal(mkdir(pjoin(dir, "config.json"), 0755), 0);
	snprintf(spec, sizeof(spec), "m=%s", dir);
	assert_int_equal(wsrvd(0, NULL, "--load-only", "--no-lock", "--model", spec, NULL), 1);
	assert_non_null(strstr(text, "a directory"));
	rmdir(pjoin(dir, "config.json"));
	assert_int_equal(mkfifo(pjoin(dir, "config.json"), 0600), 0);
	assert_int_equal(wsrvd(0, NULL, "--load-only", "--no-lock", "--model", spec, NULL), 1);
	assert_non_null(strstr(text, "a FIFO"));
	rm_rf(dir);
}

/* 10: a closing session's cancel could hit the receive of a new session
 * at the same address. Clients come and go while others keep asking. */
static void churn_never_cancels_others(void **s)
{
	struct test_server ts = { 0 };
	Wsrv__Request q = WSRV__REQUEST__INIT;
	Wsrv__Stats st = WSRV__STATS__INIT;

	assert_int_equal(server_start(&ts, "m", F.dir[0], NULL), 0);
	q.body_case = WSRV__REQUEST__BODY_STATS;
	q.stats = &st;
	for (int i = 0; i < 300; i++) {
		int gone = raw_connect(ts.sock), fd;
		raw_hello(gone, "gone");
		close(gone);
		fd = raw_connect(ts.sock);
		raw_hello(fd, "stays");
		assert_int_equal(raw_recv_code(fd, NULL, NULL), 0);
		raw_send(fd, &q, NULL, 0);
		assert_int_equal(raw_recv_code(fd, NULL, NULL), 0);
		close(fd);
	}
	server_done(&ts);
}

/* 11: a bad first packet got EBADMSG or EMSGSIZE and the connection
 * stayed, where the protocol says EPROTO and close. */
static void bad_first_packet_closes(void **s)
{
	struct test_server ts = { 0 };
	uint8_t junk[64], *big = calloc(1, 70000);
	Wsrv__Request q = WSRV__REQUEST__INIT;
	Wsrv__Hello h = WSRV__HELLO__INIT;
	int fd, p[2];

	assert_int_equal(server_start(&ts, "m", F.dir[0], NULL), 0);
	memset(junk, 0xff, sizeof(junk));
	fd = raw_connect(ts.sock);
	assert_int_equal(pkt_send(fd, junk, sizeof(junk), NULL, 0), 0);
	assert_int_equal(raw_recv_code(fd, NULL, NULL), EPROTO);
	assert_int_equal(raw_recv_code(fd, NULL, NULL), -1);
	close(fd);
	fd = raw_connect(ts.sock);
	assert_int_equal(pkt_send(fd, big, 70000, NULL, 0), 0);
	assert_int_equal(raw_recv_code(fd, NULL, NULL), EPROTO);
	assert_int_equal(raw_recv_code(fd, NULL, NULL), -1);
	close(fd);
	fd = raw_connect(ts.sock);
	assert_int_equal(pipe(p), 0);
	h.protocol = WSRV_PROTOCOL_VERSION;
	q.body_case = WSRV__REQUEST__BODY_HELLO;
	q.hello = &h;
	assert_int_equal(raw_send(fd, &q, p, 2), 0);
	assert_int_equal(raw_recv_code(fd, NULL, NULL), EPROTO);
	assert_int_equal(raw_recv_code(fd, NULL, NULL), -1);
	close(fd);
	close(p[0]);
	close(p[1]);
	free(big);
	attach_and_fetch(ts.sock);
	server_done(&ts);
}

/* A client running as uid: 0 when it is served (its Hello answered),
 * EACCES when refused at once, else -1. In a child process. */
static int client_as(const char *sock, uid_t uid)
{
	pid_t pid = fork();
	int st;

	assert_true(pid >= 0);
	if (pid == 0) {
		struct pollfd p = { .events = POLLIN };
		signal(SIGPIPE, SIG_IGN);
		if (setgid(uid) < 0 || setuid(uid) < 0 || (p.fd = raw_connect(sock)) < 0)
			_exit(3);
		if (poll(&p, 1, 500) == 1)
			_exit(raw_recv_code(p.fd, NULL, NULL) == EACCES ? 1 : 2);
		raw_hello(p.fd, "as-uid");
		_exit(raw_recv_code(p.fd, NULL, NULL) == 0 ? 0 : 2);
	}
	assert_int_equal(waitpid(pid, &st, 0), pid);
	return !WIFEXITED(st) ? -1 : WEXITSTATUS(st) == 0 ? 0 : WEXITSTATUS(st) == 1 ? EACCES : -1;
}

/* Issue 60 item 5: tier pieces are sealed without F_SEAL_SHRINK so that
 * eviction can cut them, and a client of the server's own uid owns their
 * inodes: it made its read-only fd writable (fchmod, then /proc/self/fd
 * O_RDWR) and cut a piece another worker held, whose mapping then faulted.
 * Such a client is inside the server's trust boundary (it could ptrace
 * the server or kill it); --refuse-own-uid, which the shipped unit sets,
 * refuses it, while another allowed user is served. */
static void own_uid_refused(void **s)
{
	struct test_server ts = { .uid = 65534, .gid = 65534 };

	if (geteuid() != 0)
		skip(); /* needs a non-root server, started from root */
	assert_int_equal(chmod(F.dir[0], 0755), 0);
	assert_int_equal(server_start(&ts, "m", F.dir[0], "--refuse-own-uid", "--allow-uid", "65533",
				      "--socket-mode", "0666", NULL), 0);
	assert_int_equal(chmod(ts.dir, 0711), 0);
	assert_int_equal(client_as(ts.sock, 65534), EACCES);
	assert_int_equal(client_as(ts.sock, 65533), 0);
	assert_true(server_log_has(&ts, "(--refuse-own-uid)"));
	server_done(&ts);
}

FIXTURE_MAIN(F,
	cmocka_unit_test(default_socket_finds_the_service),
	cmocka_unit_test(unread_fds_do_not_cut_others_off),
	cmocka_unit_test(stats_of_many_streams),
	cmocka_unit_test(refused_peers_cost_nothing),
	cmocka_unit_test(supplementary_group_allowed),
	cmocka_unit_test(socket_group_lets_the_group_in),
	cmocka_unit_test(socket_reach_warned),
	cmocka_unit_test(allow_list_overflow_refused),
	cmocka_unit_test(live_socket_of_another_service_kept),
	cmocka_unit_test(lock_symlink_not_followed),
	cmocka_unit_test(lock_removed_on_stop),
	cmocka_unit_test(stop_while_loading_cleans_up),
	cmocka_unit_test(socket_env_honoured_and_checked),
	cmocka_unit_test(fd_limit_checked),
	cmocka_unit_test(log_injection_escaped),
	cmocka_unit_test(load_only_refuses_what_serving_refuses),
	cmocka_unit_test(non_regular_files_refused),
	cmocka_unit_test(churn_never_cancels_others),
	cmocka_unit_test(bad_first_packet_closes),
	cmocka_unit_test(own_uid_refused),
)
