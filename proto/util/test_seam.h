// SPDX-License-Identifier: MIT
/* test_seam.h - the tests' seams: $WSRV_TEST_* variables that make wsrvd
 * fail tier reads, stall peers, pause a take-over or shorten a deadline.
 * They are read only in builds with -DWSRV_TEST_SEAMS (meson's test_seams:
 * debug builds and tools/check's); in a packager's release build
 * test_seam is always NULL, so no environment or file can make a
 * production wsrvd fail. */
#ifndef WSRV_TEST_SEAM_H
#define WSRV_TEST_SEAM_H

#include <stdbool.h>
#include <stdlib.h>

/* $name when this build reads the tests' seams, else NULL. */
static inline const char *test_seam(const char *name)
{
#ifdef WSRV_TEST_SEAMS
	return getenv(name);
#else
	(void)name;
	return NULL;
#endif
}

/* Whether this build reads them. */
static inline bool test_seams_built(void)
{
#ifdef WSRV_TEST_SEAMS
	return true;
#else
	return false;
#endif
}

#endif
