// SPDX-License-Identifier: MIT
/* runner.h - how a test program runs its cases, after Wayland's and
 * PipeWire's runners: the group's setup once, then each case in a child
 * process of its own, with its own fd-leak check and a time limit, then
 * the group's teardown. A case that fails, crashes, leaks or hangs is
 * reported by name and fails the program; it cannot take the cases after
 * it, or the teardown, down with it. The cases are cmocka's
 * (cmocka_unit_test...), asserts and all. Include cmocka.h first. */
#ifndef WSRV_TEST_RUNNER_H
#define WSRV_TEST_RUNNER_H

#include <stdbool.h>
#include <stddef.h>

struct CMUnitTest;

struct test_group {
	const char *name;
	const struct CMUnitTest *tests;
	size_t n;
	/* In the runner, before the first case and after the last: 0, or
	 * nonzero to fail the program. The state setup leaves is each case's
	 * *state. May be NULL. */
	int (*setup)(void **state);
	int (*teardown)(void **state);
	/* In each case's process, around the case: 0, or nonzero to fail
	 * it. case_teardown returns the fds kept open on purpose (a real CUDA
	 * driver's), or a negative number to fail the case. May be NULL. */
	int (*case_setup)(void);
	int (*case_teardown)(void);
	/* Every case in the runner's own process, one after another: for a
	 * program that holds a CUDA context in its setup, which a forked
	 * child cannot use. */
	bool in_process;
};

/* In a case's process: its index in the group (0 for the first), for
 * what must differ between cases that a process can no longer count
 * alone (ports, say); -1 in the runner. */
int test_case_index(void);

/* Runs g; the exit status for main: 0 when every case passed and the
 * teardown found nothing left open. A case's time limit is
 * WSRV_TEST_CASE_TIMEOUT seconds (default 150). */
int test_group_main(const struct test_group *g);

/* The group of a program with cases tests[] and group setup and teardown
 * (each may be NULL). */
#define test_group_run(tests, setup, teardown)                                  \
	test_group_main(&(struct test_group){ #tests, tests,                     \
		sizeof(tests) / sizeof((tests)[0]), setup, teardown, NULL, NULL, false })

#endif
