// SPDX-License-Identifier: MIT
/* clock.c - the monotonic clock. */
#include "clock.h"

#include <time.h>

double mono_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}
