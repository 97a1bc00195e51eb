// SPDX-License-Identifier: MIT
/* progress.c - a long load's progress, as a bar or as log lines. */
#include "progress.h"

#include "clock.h"
#include "log.h"
#include "units.h"
#include "test_seam.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

void progress_begin(struct progress *p, enum progress_mode mode, const char *what, uint64_t total)
{
	const char *every = test_seam("WSRV_TEST_PROGRESS_S");

	p->bar = mode == PROGRESS_AUTO && isatty(STDERR_FILENO);
	p->lines = mode == PROGRESS_LINES || (mode == PROGRESS_AUTO && !p->bar);
	snprintf(p->what, sizeof(p->what), "%s", what ? what : "the load");
	p->total = total;
	p->start = p->last = mono_now();
	p->every = every && atof(every) > 0 ? atof(every) : PROGRESS_LINE_S;
}

/* done bytes at t: their rate (bytes a second) and the seconds left. */
static void pace(const struct progress *p, uint64_t done, double t, double *rate, double *left)
{
	double el = t - p->start;

	*rate = el > 0 ? (double)done / el : 0;
	*left = *rate > 0 && p->total > done ? (double)(p->total - done) / *rate : 0;
}

static void draw(const struct progress *p, uint64_t done, double t)
{
	double frac = p->total ? (double)done / (double)p->total : 1, rate, left;
	char bar[31], d[32], all[32], r[32];
	int fill = (int)(frac * 30);

	pace(p, done, t, &rate, &left);
	for (int i = 0; i < 30; i++)
		bar[i] = i < fill ? '#' : '.';
	bar[30] = 0;
	fprintf(stderr, "\r[%s] %s / %s  %s/s  %4.1f s left ", bar, fmt_bytes(done, d, sizeof(d)),
		fmt_bytes(p->total, all, sizeof(all)), fmt_bytes((uint64_t)rate, r, sizeof(r)), left);
}

static void line(const struct progress *p, uint64_t done, double t)
{
	double rate, left;
	char d[32], all[32], r[32];

	pace(p, done, t, &rate, &left);
	log_info("%s: %s of %s placed (%.0f%%), %s/s, about %.0f s left", p->what,
		 fmt_bytes(done, d, sizeof(d)), fmt_bytes(p->total, all, sizeof(all)),
		 p->total ? 100.0 * (double)done / (double)p->total : 100.0,
		 fmt_bytes((uint64_t)rate, r, sizeof(r)), left);
}

void progress_update(struct progress *p, uint64_t done)
{
	double t;

	if (!p->bar && !p->lines)
		return;
	t = mono_now();
	if (t - p->last < (p->bar ? 0.1 : p->every))
		return;
	p->last = t;
	if (p->bar)
		draw(p, done, t);
	else
		line(p, done, t);
}

void progress_end(struct progress *p)
{
	if (!p->bar)
		return;
	draw(p, p->total, mono_now());
	fputc('\n', stderr);
}
