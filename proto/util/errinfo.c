// SPDX-License-Identifier: MIT
/* errinfo.c - building error sentences. */
#include "errinfo.h"
#include "utf8.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

__attribute__((format(printf, 2, 0))) static void vset(struct errinfo *e, const char *fmt, va_list ap)
{
	vsnprintf(e->msg, sizeof(e->msg), fmt, ap);
	utf8_trim(e->msg); /* a sentence cut short ends on a whole character */
}

int err_set(struct errinfo *e, int code, const char *fmt, ...)
{
	va_list ap;

	if (!e)
		return code;
	e->rule = 0;
	va_start(ap, fmt);
	vset(e, fmt, ap);
	va_end(ap);
	return code;
}

int err_rule(struct errinfo *e, int code, int rule, const char *fmt, ...)
{
	va_list ap;

	if (!e)
		return code;
	va_start(ap, fmt);
	vset(e, fmt, ap);
	va_end(ap);
	e->rule = rule;
	return code;
}

void err_prefix(struct errinfo *e, const char *prefix)
{
	char tmp[ERRINFO_MSG_MAX];
	size_t n;

	if (!e)
		return;
	n = strnlen(prefix, sizeof(tmp) - 3);
	memcpy(tmp, prefix, n);
	memcpy(tmp + n, ": ", 2);
	/* Truncates the old sentence when the two do not fit. */
	memcpy(tmp + n + 2, e->msg, sizeof(tmp) - n - 3);
	tmp[sizeof(tmp) - 1] = 0;
	memcpy(e->msg, tmp, sizeof(tmp));
}
