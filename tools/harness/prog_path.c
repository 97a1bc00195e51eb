// SPDX-License-Identifier: MIT
/* prog_path.c - a program of this build, found next to the one running
 * (prog_path.h). */
#include "prog_path.h"

#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

const char *prog_path(char *buf, unsigned long cap, const char *rel, const char *env, const char *dflt)
{
	char self[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	struct stat st;

	if (n > 0) {
		self[n] = 0;
		snprintf(buf, cap, "%s/%s", dirname(self), rel);
		if (stat(buf, &st) == 0)
			return buf;
	}
	return getenv(env) ? getenv(env) : dflt;
}
