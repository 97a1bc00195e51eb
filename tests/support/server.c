// SPDX-License-Identifier: MIT
/* server.c - a wsrvd for a test: started with what the test asks (a uid,
 * limits, an fd store, a network or pid namespace, a seccomp filter),
 * waited for, restarted, stopped; its log read. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "helpers.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <stddef.h>
#include <sys/syscall.h>
#include <linux/filter.h>
#include <linux/seccomp.h>

#include "fdstore_peer.h"
#include "netlab.h"
#include "test_seam.h"
#include "wsrv.h"
#include "wsrvd_run.h"

bool server_log_has(const struct test_server *ts, const char *needle)
{
	return file_has(ts->log, 0, needle);
}

int server_log_wait(const struct test_server *ts, const char *needle, int timeout_s)
{
	for (int i = 0; i < timeout_s * 50; i++) {
		if (server_log_has(ts, needle))
			return 0;
		sleep_ms(20);
	}
	return server_log_has(ts, needle) ? 0 : -ETIMEDOUT;
}

void need_test_seams(const char *what)
{
	if (test_seams_built())
		return;
	fprintf(stderr, "[  SKIPPED ] this build has no test seams (-Dtest_seams): %s\n", what);
	skip();
}

int server_metrics_port(const struct test_server *ts)
{
	size_t n;
	char *log = (char *)read_file(ts->log, &n), *p;
	int port = -1;

	if (log && (p = strstr(log, "metrics on port ")))
		port = atoi(p + strlen("metrics on port "));
	free(log);
	return port;
}

/* In the server's process, before exec: what the test asked of it. */
static pid_t relayed;

static void relay_signal(int sig)
{
	kill(relayed, sig);
}

/* In the server's process, made the first of a new pid namespace: the
 * process that forked it stays outside as its relay (ts->pid), passing
 * signals in and its exit status out. 0 in the server; the relay never
 * returns. */
static int enter_pidns(void)
{
	static const int sigs[] = { SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2 };
	int st;

	if (unshare(CLONE_NEWPID) < 0 || (relayed = fork()) < 0)
		return 123;
	if (relayed == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		return 0;
	}
	for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
		signal(sigs[i], relay_signal);
	while (waitpid(relayed, &st, 0) < 0)
		if (errno != EINTR)
			_exit(122);
	if (WIFSIGNALED(st)) {
		signal(WTERMSIG(st), SIG_DFL);
		raise(WTERMSIG(st));
	}
	_exit(WIFEXITED(st) ? WEXITSTATUS(st) : 122);
}

static int in_server(void *arg)
{
	struct test_server *ts = arg;
	int fd = open(ts->log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);

	if (fd >= 0)
		dup2(fd, 2);
	if (ts->nofile) {
		struct rlimit rl = { ts->nofile, ts->nofile };
		if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
			return 126;
	}
	if (ts->uid && (chmod(ts->dir, 0777) < 0 || setgid(ts->gid) < 0 || setuid(ts->uid) < 0))
		return 126;
	/* Changing credentials cleared it: a server left behind held the
	 * test runner's stdout, and meson waited for it until the timeout. */
	if (ts->uid)
		prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (ts->store && fdstore_pass(ts->store) < 0)
		return 126;
	if (ts->netlab && netlab_enter(ts->netlab, ts->host) < 0)
		return 125;
	if (ts->pidns && enter_pidns() != 0)
		return 123;
	for (size_t k = 0; ts->env && ts->env[k]; k++)
		putenv((char *)ts->env[k]);
	if (ts->seccomp && (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 ||
			    prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ts->seccomp) < 0))
		return 124;
	return 0;
}

const struct sock_fprog *families_filter(const int *allowed, size_t n)
{
	static struct sock_filter f[24];
	static struct sock_fprog prog;
	size_t k = 0;

	assert_true(n <= 16);
	f[k++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr));
	f[k++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_socket, 1, 0);
	f[k++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
	f[k++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[0]));
	for (size_t i = 0; i < n; i++) /* an allowed family: on to the ALLOW after the last */
		f[k++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (uint32_t)allowed[i],
						      (uint8_t)(n - i), 0);
	f[k++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EAFNOSUPPORT);
	f[k++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
	prog = (struct sock_fprog){ .len = (unsigned short)k, .filter = f };
	return &prog;
}

/* A server run as another uid may not reach the build tree (a clone
 * inside a folder only its owner enters: mktemp -d, a packager's build
 * root): it runs a copy of wsrvd in its own folder (ts->dir, which it is
 * given), removed with it. */
static const char *wsrvd_for(struct test_server *ts, char *buf, size_t len)
{
	const char *src = getenv("WSRVD");

	if (!ts->uid || !src)
		return src;
	snprintf(buf, len, "%s/wsrvd", ts->dir);
	return copy_file(src, buf, 0755) == 0 ? buf : src;
}

static int spawn_argv(struct test_server *ts, const char *name, const char *model,
		      const char *const *extra)
{
	const char *argv[40];
	char spec[4200], exe[400];
	int n = 0, r;

	snprintf(spec, sizeof(spec), "%s=%s", name, model);
	argv[n++] = wsrvd_for(ts, exe, sizeof(exe));
	argv[n++] = "--socket";
	argv[n++] = ts->sock;
	argv[n++] = "--no-lock";
	argv[n++] = "--hugepages";
	argv[n++] = "off";
	argv[n++] = "--model";
	argv[n++] = spec;
	ts->early = false;
	for (size_t k = 0; n < 38 && extra && extra[k]; k++) {
		ts->early = ts->early || strcmp(extra[k], "--serve-while-loading") == 0;
		argv[n++] = extra[k];
	}
	argv[n] = NULL;
	if ((r = wsrvd_spawn(argv, in_server, ts, &ts->pid)) < 0)
		return r;
	return ts->no_wait ? 0 : server_wait_ready(ts, 60);
}

void args_collect(va_list ap, const char **out, size_t max)
{
	size_t n = 0;

	while (n + 1 < max && (out[n] = va_arg(ap, const char *)))
		n++;
	out[n] = NULL;
}

static int spawn(struct test_server *ts, const char *name, const char *model, va_list ap)
{
	const char *extra[32];

	args_collect(ap, extra, 32);
	return spawn_argv(ts, name, model, extra);
}

/* A server with a store pushes to it as it loads: keep taking what it
 * sends, or its sd_notify would block on a full queue. */
static void drain_store(void *arg)
{
	struct test_server *ts = arg;

	if (ts->store)
		fdstore_drain_queued(ts->store);
}

int server_wait_ready(struct test_server *ts, int timeout_s)
{
	/* Ready when a client can say hello and, unless the test serves while
	 * loading, every model is loaded. */
	return wsrvd_wait_ready(ts->pid, ts->sock, ts->early, timeout_s, drain_store, ts);
}

int server_start(struct test_server *ts, const char *name, const char *model, ...)
{
	const char *extra[32];
	va_list ap;

	va_start(ap, model);
	args_collect(ap, extra, 32);
	va_end(ap);
	return server_start_argv(ts, name, model, extra);
}

int server_start_argv(struct test_server *ts, const char *name, const char *model,
		      const char *const *extra)
{
	char *d = test_tmpdir("srv");

	if (!d)
		return -ENOMEM;
	snprintf(ts->dir, sizeof(ts->dir), "%s", d);
	snprintf(ts->sock, sizeof(ts->sock), "%s/wsrv.sock", d);
	snprintf(ts->log, sizeof(ts->log), "%s/wsrvd.log", d);
	free(d);
	return spawn_argv(ts, name, model, extra);
}

int server_restart(struct test_server *ts, const char *name, const char *model)
{
	return server_restart_args(ts, name, model, NULL);
}

int server_restart_with(struct test_server *ts, const char *name, const char *model, const char *arg)
{
	return server_restart_args(ts, name, model, arg, NULL);
}

int server_restart_args(struct test_server *ts, const char *name, const char *model, ...)
{
	va_list ap;
	int r;

	va_start(ap, model);
	r = spawn(ts, name, model, ap);
	va_end(ap);
	return r;
}

int server_stop(struct test_server *ts, int sig)
{
	int st = 0;

	if (ts->pid <= 0)
		return -1;
	kill(ts->pid, sig);
	waitpid(ts->pid, &st, 0);
	ts->pid = 0;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

void server_done(struct test_server *ts)
{
	int st = server_stop(ts, SIGTERM);

	if (st != 0)
		fail_msg("wsrvd exited with %d; its log is %s", st, ts->log);
	rm_rf(ts->dir);
}

int wsrvd_options_run(const char *spec, const char *const *args, const char *log)
{
	const char *argv[40] = { getenv("WSRVD"), "--load-only", "--model", spec };
	int n = 4;

	for (int k = 0; args && args[k] && n < 39; k++)
		argv[n++] = args[k];
	argv[n] = NULL;
	return run_prog(argv, NULL, log, log, 0, 20);
}
