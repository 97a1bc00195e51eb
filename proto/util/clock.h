// SPDX-License-Identifier: MIT
/* clock.h - the monotonic clock in seconds, the one both sides use. */
#ifndef WSRV_CLOCK_H
#define WSRV_CLOCK_H

/* CLOCK_MONOTONIC as seconds. Thread-safe, no allocation. */
double mono_now(void);

#endif
