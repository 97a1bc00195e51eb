// SPDX-License-Identifier: MIT
/* test_log.c - the log's lines under the journal (issue 49 item 3): every
 * line had the same priority there, so `journalctl -p err` found nothing,
 * and carried a timestamp the journal adds itself. With stderr the
 * journal's stream ($JOURNAL_STREAM is its device and inode), each line
 * starts with its sd-daemon priority and has no timestamp; elsewhere the
 * format is the one it always was. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fixture.h"
#include "log.h"

static struct fixture F = { .tag = "log", .models = { { "" } } };

/* A child logs an error, a warning and an info line into path, with
 * $JOURNAL_STREAM naming that file when journal. */
static char *lines_of(const char *path, bool journal)
{
	pid_t pid = fork();
	size_t len;
	int st;

	assert_true(pid >= 0);
	if (pid == 0) {
		int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
		struct stat sb;
		char js[64];
		if (fd < 0 || dup2(fd, STDERR_FILENO) < 0 || fstat(STDERR_FILENO, &sb) < 0)
			_exit(1);
		snprintf(js, sizeof(js), "%llu:%llu", (unsigned long long)sb.st_dev, (unsigned long long)sb.st_ino);
		if (journal)
			setenv("JOURNAL_STREAM", js, 1);
		else
			unsetenv("JOURNAL_STREAM");
		log_err("one %d", 1);
		log_warn("two");
		log_info("three");
		_exit(0);
	}
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	return (char *)read_file(path, &len);
}

static void priorities_under_the_journal(void **s)
{
	char *t = lines_of(pjoin(F.dir[0], "journal.txt"), true);

	assert_non_null(t);
	assert_string_equal(t, "<3>error: one 1\n<4>warn: two\n<6>info: three\n");
	free(t);
}

static void timestamps_elsewhere(void **s)
{
	char *t = lines_of(pjoin(F.dir[0], "plain.txt"), false);

	assert_non_null(t);
	assert_true(t[0] == '2' && t[4] == '-' && strstr(t, "Z wsrv[") && strstr(t, "] error: one 1\n"));
	assert_null(strstr(t, "<3>"));
	free(t);
}

FIXTURE_MAIN(F,
	cmocka_unit_test(priorities_under_the_journal),
	cmocka_unit_test(timestamps_elsewhere),
)
