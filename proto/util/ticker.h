// SPDX-License-Identifier: MIT
/* ticker.h - a command-line tool's word on a long step. The tool names
 * each step as it begins (ticker_step); a step that runs past
 * TICKER_FIRST_S without a new one gets a line on stderr, "PROG: STEP
 * (N s)", and another every TICKER_EVERY_S while it lasts, so that no
 * tool sits silent for more than a couple of seconds. One ticker per
 * process, a thread of its own; every call is safe from any thread, and a
 * no-op before ticker_start and in a child forked after it. */
#ifndef WSRV_TICKER_H
#define WSRV_TICKER_H

#define TICKER_FIRST_S 2.0
#define TICKER_EVERY_S 10.0

/* Starts the thread; prog prefixes the lines (copied). 0 or -errno. */
int ticker_start(const char *prog);
/* The step under way from now on (printf-style; NULL: none, nothing is
 * said until the next). */
void ticker_step(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The same step's words, changed (a count that moves: "layer 12 of
 * 61"), its clock kept: a step of many short parts still gets its line. */
void ticker_update(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Stops and joins the thread. */
void ticker_stop(void);

#endif
