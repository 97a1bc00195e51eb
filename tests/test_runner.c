// SPDX-License-Identifier: MIT
/* test_runner.c - the runner itself (tests/support/runner.h): a group
 * whose cases fail, crash, leak an fd and hang fails as a whole, names
 * each, and still runs every case after them and its teardown; a group
 * that passes exits 0; a group whose setup fails runs no case. The inner
 * groups print their failures: they are the point. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "fixture.h"

static struct fixture F = { .tag = "runner" };

static int ran[2] = { -1, -1 };  /* a pipe: each inner case that ran writes a byte */
static int inner_teardowns;      /* in this process: the runner's teardown ran */
static int case_setups;

static void mark(void)
{
	char c = 1;

	assert_int_equal(write(ran[1], &c, 1), 1);
}

static void passes(void **st)
{
	mark();
	assert_ptr_equal(*st, &ran); /* the group's state reaches the case */
}

static void fails(void **st)
{
	mark();
	assert_int_equal(1, 2);
}

static void crashes(void **st)
{
	mark();
	raise(SIGKILL);
}

static void leaks_fd(void **st)
{
	mark();
	assert_true(open("/dev/null", O_RDONLY | O_CLOEXEC) >= 0);
}

static void hangs(void **st)
{
	mark();
	pause();
}

static int inner_setup(void **st)
{
	*st = &ran;
	return 0;
}

static int inner_setup_fails(void **st)
{
	return -1;
}

static int inner_teardown(void **st)
{
	inner_teardowns++;
	return 0;
}

static int case_setup(void)
{
	case_setups++; /* in the case's process: never seen here */
	return 0;
}

/* Bytes written to the pipe so far (the cases that ran). */
static int drain(void)
{
	char buf[64];
	int n = 0;
	ssize_t r;

	while ((r = read(ran[0], buf, sizeof(buf))) > 0)
		n += (int)r;
	return n;
}

/* Runs tests as an inner group: its exit status; *cases_ran says how many
 * of its cases ran. */
static int runner_run(const struct CMUnitTest *tests, size_t n, int (*setup)(void **), int *cases_ran)
{
	struct test_group g = { "inner", tests, n, setup, inner_teardown, case_setup, NULL, false };
	int r;

	assert_int_equal(pipe2(ran, O_CLOEXEC | O_NONBLOCK), 0);
	inner_teardowns = 0;
	r = test_group_main(&g);
	*cases_ran = drain();
	close(ran[0]);
	close(ran[1]);
	return r;
}

static void bad_cases_fail_the_group(void **st)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(fails), cmocka_unit_test(crashes), cmocka_unit_test(leaks_fd),
		cmocka_unit_test(hangs), cmocka_unit_test(passes),
	};
	int n;

	setenv("WSRV_TEST_CASE_TIMEOUT", "1", 1);
	fprintf(stderr, "-- an inner group: four cases fail on purpose --\n");
	assert_int_equal(runner_run(tests, 5, inner_setup, &n), 1);
	unsetenv("WSRV_TEST_CASE_TIMEOUT");
	assert_int_equal(n, 5);                /* every case ran, the last too */
	assert_int_equal(inner_teardowns, 1);  /* and the teardown */
	assert_int_equal(case_setups, 0);      /* case setups ran in the cases' processes */
}

static void good_cases_pass(void **st)
{
	const struct CMUnitTest tests[] = { cmocka_unit_test(passes), cmocka_unit_test(passes) };
	int n;

	assert_int_equal(runner_run(tests, 2, inner_setup, &n), 0);
	assert_int_equal(n, 2);
	assert_int_equal(inner_teardowns, 1);
}

static void failed_setup_runs_nothing(void **st)
{
	const struct CMUnitTest tests[] = { cmocka_unit_test(passes) };
	int n;

	assert_int_equal(runner_run(tests, 1, inner_setup_fails, &n), 1);
	assert_int_equal(n, 0);
	assert_int_equal(inner_teardowns, 0);
}

FIXTURE_MAIN(F,
	cmocka_unit_test(bad_cases_fail_the_group),
	cmocka_unit_test(good_cases_pass),
	cmocka_unit_test(failed_setup_runs_nothing),
)
