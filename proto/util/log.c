// SPDX-License-Identifier: MIT
/* log.c - timestamped, levelled log lines on stderr. */
#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

static enum log_level cur_level = LOG_INFO;
static const char *cur_ident = "wsrv";

void log_set_level(enum log_level level) { cur_level = level; }
enum log_level log_get_level(void) { return cur_level; }
void log_set_ident(const char *ident) { cur_ident = ident; }

void log_msg(enum log_level level, const char *fmt, ...)
{
	static const char *const names[] = { "error", "warn", "info", "debug" };
	char line[2048];
	struct timespec ts;
	struct tm tm;
	va_list ap;
	int n;

	if (level > cur_level)
		return;
	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	n = snprintf(line, sizeof(line),
		     "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ %s[%d] %s: ",
		     tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
		     tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000, cur_ident,
		     (int)getpid(), names[level]);
	va_start(ap, fmt);
	if (n > 0 && (size_t)n < sizeof(line))
		vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
	va_end(ap);
	/* One write per line so lines from several processes do not interleave. */
	fprintf(stderr, "%s\n", line);
}
