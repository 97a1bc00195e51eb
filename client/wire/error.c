// SPDX-License-Identifier: MIT
/* error.c - the last error's sentence, per thread; debug lines on demand. */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>

#include "wire.h"
#include "dtype.h"

static __thread char last[512];

int cl_err(int code, const char *fmt, ...)
{
	char msg[sizeof(last)];
	va_list ap;

	/* Into a buffer of its own first: callers pass wsrv_last_error()
	 * (which is last) as an argument, and formatting into the buffer
	 * being read would garble it ("...failed: n: in failed: ..."). */
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	memcpy(last, msg, sizeof(last));
	cl_debug("error %d: %s", code, last);
	return code;
}

int cl_wrap(int code, const char *fmt, ...)
{
	char was[sizeof(last)], what[256];
	va_list ap;

	snprintf(was, sizeof(was), "%s", last);
	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	return cl_err(code, "%s: %s", what, was);
}

static pthread_once_t debug_once = PTHREAD_ONCE_INIT;
static bool debug_on;

static void debug_init(void)
{
	debug_on = getenv("WSRV_DEBUG") != NULL;
}

void cl_debug(const char *fmt, ...)
{
	va_list ap;

	pthread_once(&debug_once, debug_init);
	if (!debug_on)
		return;
	va_start(ap, fmt);
	fprintf(stderr, "libwsrv: ");
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
}

WSRV_EXPORT const char *wsrv_last_error(void)
{
	return last;
}

WSRV_EXPORT const char *wsrv_version(void)
{
	return WSRV_VERSION;
}

WSRV_EXPORT const char *wsrv_dtype_name(int dtype)
{
	return dtype_name((enum dtype)dtype);
}
