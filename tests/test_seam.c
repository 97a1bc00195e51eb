// SPDX-License-Identifier: MIT
/* test_seam.c - the tests' seams are a build's choice (issue 48 item 10):
 * $WSRV_TEST_TIER_EIO failed every tier read of any wsrvd whose
 * environment had it (and whose file existed). This program is built
 * without WSRV_TEST_SEAMS (meson.build: -U), as a packager's release
 * build is: a seam set in the environment reads as unset. And a wsrvd
 * built with them says so in --version. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "fixture.h"
#include "test_seam.h"

static struct fixture F = { .tag = "seam", .models = { { "" } } };

static void seams_off_read_nothing(void **st)
{
	(void)st;
	setenv("WSRV_TEST_TIER_EIO", "/", 1);
	assert_false(test_seams_built());
	assert_null(test_seam("WSRV_TEST_TIER_EIO"));
	unsetenv("WSRV_TEST_TIER_EIO");
}

/* The wsrvd under test says whether it was built with them: with them
 * (for the other tests) it says so in --version; a packager's says
 * nothing of them (WSRVD_SEAMS: meson's test_seams for this build). */
static void version_names_them(void **st)
{
	const char *argv[] = { getenv("WSRVD"), "--version", NULL };
	const char *out = pjoin(F.dir[0], "version.out");
	uint8_t *text;
	size_t len;

	(void)st;
	assert_non_null(argv[0]);
	assert_int_equal(run_prog(argv, NULL, out, pjoin(F.dir[0], "version.err"), 0, 10), 0);
	assert_non_null(text = read_file(out, &len));
	if (WSRVD_SEAMS)
		assert_non_null(strstr((char *)text, "not for production"));
	else
		assert_null(strstr((char *)text, "seams"));
	free(text);
}

FIXTURE_MAIN(F,
	cmocka_unit_test(seams_off_read_nothing),
	cmocka_unit_test(version_names_them),
)
