// SPDX-License-Identifier: MIT
/* progress.h - a long load's progress: bytes placed, the rate, the time
 * left. On a terminal a one-line bar on stderr; otherwise (a daemon under
 * systemd, a log file) a log line every few seconds. */
#ifndef WSRV_PROGRESS_H
#define WSRV_PROGRESS_H

#include <stdbool.h>
#include <stdint.h>

#include "clock.h"

enum progress_mode {
	PROGRESS_OFF = 0,
	PROGRESS_AUTO = 1,  /* a bar when stderr is a terminal, else log lines */
	PROGRESS_LINES = 2, /* log lines only (beside a server's other lines) */
};

/* Seconds between log lines: 5, or $WSRV_TEST_PROGRESS_S (tests). */
#define PROGRESS_LINE_S 5.0

struct progress {
	bool bar, lines;
	char what[96];              /* what loads: "model demo" */
	uint64_t total;
	double start, last, every;
};

/* what names the load in the log lines (copied). */
void progress_begin(struct progress *p, enum progress_mode mode, const char *what, uint64_t total);
/* Redraws the bar at most ten times a second; logs a line every
 * p->every seconds. */
void progress_update(struct progress *p, uint64_t done);
void progress_end(struct progress *p);

#endif
