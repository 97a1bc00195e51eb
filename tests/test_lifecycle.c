// SPDX-License-Identifier: MIT
/* test_lifecycle.c - the one check of every lifecycle's moves
 * (lifecycle.h): an allowed move passes and is logged at debug level as
 * "what who: from -> to"; a move the table refuses, or a state past the
 * enum, is logged as an error and refused (and asserted, in a build with
 * asserts: the process aborts). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fixture.h"
#include "lifecycle.h"
#include "log.h"

static struct fixture F = { .tag = "lifecycle" };

enum door_state { DOOR_SHUT, DOOR_OPEN, DOOR_GONE, DOOR_STATE_MAX };
static const char *const names[DOOR_STATE_MAX] = { [DOOR_SHUT] = "shut", [DOOR_OPEN] = "open", [DOOR_GONE] = "gone" };
static const unsigned moves[DOOR_STATE_MAX] = {
	[DOOR_SHUT] = LIFE_BIT(DOOR_OPEN) | LIFE_BIT(DOOR_GONE),
	[DOOR_OPEN] = LIFE_BIT(DOOR_SHUT),
};
static const struct lifecycle door = { "door", DOOR_STATE_MAX, names, moves };

/* In a child with stderr into a file: the check's result (0, or 100 +
 * errno), or 128 + the signal that ended it. */
static int checked(unsigned from, unsigned to, const char *log)
{
	pid_t pid = fork();

	assert_true(pid >= 0);
	if (pid == 0) {
		int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
		dup2(fd, 2);
		log_set_level(LOG_DEBUG);
		int r = life_check(&door, 7, from, to);
		_exit(r == 0 ? 0 : 100 - r);
	}
	return child_status(pid);
}

static void allowed_moves_are_logged(void **st)
{
	char *dir = test_tmpdir("lifecycle");
	const char *log = pjoin(dir, "log");

	(void)st;
	assert_int_equal(checked(DOOR_SHUT, DOOR_OPEN, log), 0);
	assert_true(file_has(log, 0, "door 7: shut -> open"));
	assert_int_equal(checked(DOOR_OPEN, DOOR_SHUT, log), 0);
	assert_true(file_has(log, 0, "door 7: open -> shut"));
	rm_rf(dir);
	free(dir);
}

static void refused_moves_are_errors(void **st)
{
	char *dir = test_tmpdir("lifecycle");
	const char *log = pjoin(dir, "log");
#ifdef NDEBUG
	int want = 100 + EINVAL;
#else
	int want = 128 + SIGABRT;
#endif

	(void)st;
	assert_int_equal(checked(DOOR_GONE, DOOR_OPEN, log), want);
	assert_true(file_has(log, 0, "door 7: no move from gone to open"));
	assert_int_equal(checked(DOOR_OPEN, DOOR_STATE_MAX, log), want);
	assert_true(file_has(log, 0, "no move from open to (unknown)"));
	assert_string_equal(life_name(&door, 9), "(unknown)");
	rm_rf(dir);
	free(dir);
}

FIXTURE_MAIN(F,
	cmocka_unit_test(allowed_moves_are_logged),
	cmocka_unit_test(refused_moves_are_errors),
)
