// SPDX-License-Identifier: MIT
/* runner.c - each case in a process of its own (runner.h). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fd_check.h"
#include "runner.h"

#define CASE_TIMEOUT_S 150

static void *group_state;
static int case_index = -1;

int test_case_index(void)
{
	return case_index;
}

/* cmocka's group setup in a case's process: the runner's state. */
static int pass_state(void **state)
{
	*state = group_state;
	return 0;
}

/* In the case's process: setup, the case, teardown, the fd check. Never
 * returns. */
static void case_child(const struct test_group *g, const struct CMUnitTest *t)
{
	int fds, failed, kept = 0;

	prctl(PR_SET_PDEATHSIG, SIGKILL);
	fds = count_fds();
	if (g->case_setup && g->case_setup() != 0) {
		fprintf(stderr, "%s: the case's setup failed\n", t->name);
		exit(1);
	}
	failed = _cmocka_run_group_tests(t->name, t, 1, pass_state, NULL);
	if (g->case_teardown && (kept = g->case_teardown()) < 0) {
		fprintf(stderr, "%s: the case's teardown failed\n", t->name);
		failed = 1;
	}
	if (fd_leak_check(fds + (kept > 0 ? kept : 0)) < 0) {
		fprintf(stderr, "%s: the case left fds open (above)\n", t->name);
		failed = 1;
	}
	fflush(NULL);
	exit(failed ? 1 : 0);
}

static int case_timeout_ms(void)
{
	const char *s = getenv("WSRV_TEST_CASE_TIMEOUT");
	long v = s ? strtol(s, NULL, 10) : 0;

	return (int)(v > 0 && v < 3600 ? v : CASE_TIMEOUT_S) * 1000;
}

/* Waits for the case's process up to the time limit (then kills it):
 * 0 when it passed, else -1 with a line saying how it ended. */
static int case_wait(const char *name, pid_t pid)
{
	int pfd = (int)syscall(SYS_pidfd_open, pid, 0), st = 0, limit = case_timeout_ms();
	struct pollfd p = { .fd = pfd, .events = POLLIN };
	bool timed_out = pfd >= 0 && poll(&p, 1, limit) == 0;

	if (timed_out)
		kill(pid, SIGKILL);
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	if (pfd >= 0)
		close(pfd);
	if (timed_out)
		fprintf(stderr, "[ TIMEOUT  ] %s: still running after %d s; killed\n", name, limit / 1000);
	else if (WIFSIGNALED(st))
		fprintf(stderr, "[ CRASHED  ] %s: killed by signal %d (%s)\n", name, WTERMSIG(st),
			strsignal(WTERMSIG(st)));
	else if (WEXITSTATUS(st) != 0)
		fprintf(stderr, "[  FAILED  ] %s: exit status %d\n", name, WEXITSTATUS(st));
	return !timed_out && WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

static int case_run(const struct test_group *g, const struct CMUnitTest *t)
{
	pid_t pid;

	fflush(NULL);
	pid = fork();
	if (pid < 0) {
		fprintf(stderr, "%s: fork: %s\n", t->name, strerror(errno));
		return -1;
	}
	if (pid == 0) {
		case_index = (int)(t - g->tests);
		case_child(g, t);
	}
	return case_wait(t->name, pid);
}

/* cmocka alone, every case in this process (test_group.in_process). A
 * failed group teardown fails the program too: cmocka 1.1.5 prints
 * "GROUP TEARDOWN FAILED" and still exits 0. */
static int (*inproc_teardown)(void **);
static int inproc_teardown_rc;

static int teardown_noted(void **st)
{
	inproc_teardown_rc = inproc_teardown ? inproc_teardown(st) : 0;
	return inproc_teardown_rc;
}

static int run_in_process(const struct test_group *g)
{
	int failed;

	inproc_teardown = g->teardown;
	failed = _cmocka_run_group_tests(g->name, g->tests, g->n, g->setup, teardown_noted);
	if (failed == 0 && inproc_teardown_rc != 0) {
		fprintf(stderr, "%s: the group teardown failed (above): the program fails\n", g->name);
		return 1;
	}
	return failed ? 1 : 0;
}

int test_group_main(const struct test_group *g)
{
	size_t failed = 0;
	int down = 0;

	if (g->in_process)
		return run_in_process(g);
	if (g->setup && g->setup(&group_state) != 0) {
		fprintf(stderr, "%s: the group setup failed\n", g->name);
		return 1;
	}
	for (size_t i = 0; i < g->n; i++)
		failed += case_run(g, &g->tests[i]) < 0;
	if (g->teardown && (down = g->teardown(&group_state)) != 0)
		fprintf(stderr, "%s: the group teardown failed (above)\n", g->name);
	fprintf(stderr, "%s: %zu of %zu cases passed%s\n", g->name, g->n - failed, g->n,
		down ? "; the teardown failed" : "");
	return failed || down ? 1 : 0;
}
