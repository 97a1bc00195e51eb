// SPDX-License-Identifier: MIT
/* ratelimit.c - a log line per event, up to a rate (ratelimit.h). */
#include "ratelimit.h"

bool ratelimit_pass(struct ratelimit *rl, double now)
{
	if (now - rl->start >= rl->window) {
		rl->start = now;
		rl->passed = 0;
	}
	if (rl->passed < rl->burst) {
		rl->passed++;
		return true;
	}
	rl->suppressed++;
	return false;
}
