// SPDX-License-Identifier: MIT
/* error.c - the last error's sentence, per thread; debug lines on demand. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "client_internal.h"
#include "dtype.h"

static __thread char last[512];

int cl_err(int code, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(last, sizeof(last), fmt, ap);
	va_end(ap);
	cl_debug("error %d: %s", code, last);
	return code;
}

void cl_debug(const char *fmt, ...)
{
	static int on = -1;
	va_list ap;

	if (on < 0)
		on = getenv("WSRV_DEBUG") != NULL;
	if (!on)
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

WSRV_EXPORT const char *wsrv_dtype_name(int dtype)
{
	return dtype_name((enum dtype)dtype);
}
