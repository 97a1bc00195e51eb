// SPDX-License-Identifier: MIT
/* sockpath.c - the default socket path. */
#include "sockpath.h"
#include "utf8.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>
#include <unistd.h>

_Static_assert(SOCKPATH_MAX == sizeof(((struct sockaddr_un *)0)->sun_path),
	       "SOCKPATH_MAX is sun_path's size");

int sockpath_check(const char *path, char *err, size_t errlen)
{
	size_t n = strlen(path);

	if (n == 0) {
		snprintf(err, errlen, "the socket path is empty");
		return -EINVAL;
	}
	if (n >= SOCKPATH_MAX) {
		snprintf(err, errlen, "socket path of %zu bytes is longer than a Unix socket takes (%d): %.*s...",
			 n, SOCKPATH_MAX - 1, UTF8_CUT(path, 60));
		return -ENAMETOOLONG;
	}
	return 0;
}

int sockpath_client(const char *system, char *buf, size_t cap, bool *fallback, char *err, size_t errlen)
{
	const char *s = getenv("WSRV_SOCKET"), *x = getenv("XDG_RUNTIME_DIR");
	int r = sockpath_default(buf, cap, err, errlen);

	*fallback = false;
	if (r < 0 || (s && *s) || !x || !*x || access(buf, F_OK) == 0 || access(system, F_OK) != 0 ||
	    strlen(system) >= cap)
		return r;
	memcpy(buf, system, strlen(system) + 1);
	*fallback = true;
	return 0;
}

int sockpath_default(char *buf, size_t cap, char *err, size_t errlen)
{
	const char *s = getenv("WSRV_SOCKET"), *x = getenv("XDG_RUNTIME_DIR");
	char tmp[4096 + 16];
	const char *why = "";
	int r;

	if (s && *s) {
		snprintf(tmp, sizeof(tmp), "%s", s);
		why = " (from $WSRV_SOCKET)";
	} else if (x && *x) {
		snprintf(tmp, sizeof(tmp), "%s/wsrv.sock", x);
		why = " (from $XDG_RUNTIME_DIR)";
	} else {
		snprintf(tmp, sizeof(tmp), "/run/wsrv/wsrv.sock");
	}
	r = sockpath_check(tmp, err, errlen);
	if (r == 0 && strlen(tmp) >= cap)
		r = -ENAMETOOLONG;
	if (r < 0) {
		size_t n = strlen(err);
		if (n < errlen)
			snprintf(err + n, errlen - n, "%s", why);
		return r;
	}
	memcpy(buf, tmp, strlen(tmp) + 1);
	return 0;
}
