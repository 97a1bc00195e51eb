// SPDX-License-Identifier: MIT
/* progress.h - a one-line progress bar on stderr (bytes, GB/s, ETA), drawn
 * only when stderr is a terminal. */
#ifndef WSRV_PROGRESS_H
#define WSRV_PROGRESS_H

#include <stdbool.h>
#include <stdint.h>

#include "clock.h"

struct progress {
	bool on;
	uint64_t total;
	double start, last;
};

void progress_begin(struct progress *p, bool wanted, uint64_t total);
/* Redraws at most ten times a second. */
void progress_update(struct progress *p, uint64_t done);
void progress_end(struct progress *p);


#endif
