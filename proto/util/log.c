// SPDX-License-Identifier: MIT
/* log.c - timestamped, levelled log lines on stderr; under the journal,
 * sd-daemon priorities instead of the timestamp. */
#include "log.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static enum log_level cur_level = LOG_INFO;
static const char *cur_ident = "wsrv";

void log_set_level(enum log_level level) { cur_level = level; }
enum log_level log_get_level(void) { return cur_level; }
void log_set_ident(const char *ident) { cur_ident = ident; }

/* Whether stderr is the journal's stream: $JOURNAL_STREAM names its
 * device and inode (systemd sets it for a unit's stderr). Then the
 * journal gives each line its time and sender, and takes its priority
 * from an sd-daemon prefix. Asked once. */
static bool to_journal(void)
{
	static int known = -1;
	const char *js;
	unsigned long long dev, ino;
	struct stat st;

	if (known >= 0)
		return known;
	js = getenv("JOURNAL_STREAM");
	known = js && sscanf(js, "%llu:%llu", &dev, &ino) == 2 && fstat(STDERR_FILENO, &st) == 0 &&
		(unsigned long long)st.st_dev == dev && (unsigned long long)st.st_ino == ino;
	return known;
}

/* The line's head: under the journal its priority (<3> error, <4>
 * warning, <6> info, <7> debug) and level; elsewhere the time (UTC),
 * the sender and the level. */
static int head(char *line, size_t cap, enum log_level level)
{
	static const char *const names[] = { "error", "warn", "info", "debug" };
	static const int prio[] = { 3, 4, 6, 7 };
	struct timespec ts;
	struct tm tm;

	if (to_journal())
		return snprintf(line, cap, "<%d>%s: ", prio[level], names[level]);
	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	return snprintf(line, cap, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ %s[%d] %s: ",
			tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
			ts.tv_nsec / 1000000, cur_ident, (int)getpid(), names[level]);
}

void log_msg(enum log_level level, const char *fmt, ...)
{
	char line[2048];
	va_list ap;
	int n;

	if (level > cur_level)
		return;
	n = head(line, sizeof(line), level);
	va_start(ap, fmt);
	if (n > 0 && (size_t)n < sizeof(line))
		vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
	va_end(ap);
	/* One write per line so lines from several processes do not interleave. */
	fprintf(stderr, "%s\n", line);
}
