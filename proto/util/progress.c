// SPDX-License-Identifier: MIT
/* progress.c - the loader's progress bar. */
#include "progress.h"

#include "clock.h"

#include <stdio.h>
#include <time.h>
#include <unistd.h>

void progress_begin(struct progress *p, bool wanted, uint64_t total)
{
	p->on = wanted && isatty(STDERR_FILENO);
	p->total = total;
	p->start = p->last = mono_now();
}

static void draw(const struct progress *p, uint64_t done, double t)
{
	double el = t - p->start, rate = el > 0 ? (double)done / el : 0;
	double frac = p->total ? (double)done / (double)p->total : 1;
	double eta = rate > 0 ? (double)(p->total - done) / rate : 0;
	char bar[31];
	int fill = (int)(frac * 30);

	for (int i = 0; i < 30; i++)
		bar[i] = i < fill ? '#' : '.';
	bar[30] = 0;
	fprintf(stderr, "\r[%s] %6.2f / %.2f GB  %5.2f GB/s  ETA %4.1fs ", bar,
		(double)done / 1e9, (double)p->total / 1e9, rate / 1e9, eta);
}

void progress_update(struct progress *p, uint64_t done)
{
	double t;

	if (!p->on)
		return;
	t = mono_now();
	if (t - p->last < 0.1)
		return;
	p->last = t;
	draw(p, done, t);
}

void progress_end(struct progress *p)
{
	if (!p->on)
		return;
	draw(p, p->total, mono_now());
	fputc('\n', stderr);
}
