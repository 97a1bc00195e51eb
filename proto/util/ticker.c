// SPDX-License-Identifier: MIT
/* ticker.c - a command-line tool's word on a long step (ticker.h). */
#include "ticker.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"

/* The one ticker; its fields under lock. */
static struct {
	pthread_mutex_t lock;
	pthread_cond_t wake;
	pthread_t thread;
	bool running, stop;
	pid_t pid;                 /* the process that started it: a child
	                            * forked meanwhile has no ticker thread,
	                            * and may have copied the lock held */
	char prog[48], step[200];
	double since, said;        /* the step's start; its last line (0: none) */
} T = { .lock = PTHREAD_MUTEX_INITIALIZER, .wake = PTHREAD_COND_INITIALIZER };

/* Whether the step has gone on long enough for a(nother) line, at now. */
static bool due(double now)
{
	if (!T.step[0])
		return false;
	return T.said ? now - T.said >= TICKER_EVERY_S : now - T.since >= TICKER_FIRST_S;
}

static void *run(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&T.lock);
	while (!T.stop) {
		struct timespec until;
		double now = mono_now();

		if (due(now)) {
			fprintf(stderr, "%s: %s (%.0f s)\n", T.prog, T.step, now - T.since);
			T.said = now;
		}
		clock_gettime(CLOCK_REALTIME, &until);
		until.tv_nsec += 250 * 1000 * 1000;
		if (until.tv_nsec >= 1000000000) {
			until.tv_sec++;
			until.tv_nsec -= 1000000000;
		}
		pthread_cond_timedwait(&T.wake, &T.lock, &until);
	}
	pthread_mutex_unlock(&T.lock);
	return NULL;
}

int ticker_start(const char *prog)
{
	int r = 0;

	pthread_mutex_lock(&T.lock);
	if (!T.running) {
		snprintf(T.prog, sizeof(T.prog), "%s", prog);
		__atomic_store_n(&T.pid, getpid(), __ATOMIC_RELEASE);
		T.stop = false;
		T.step[0] = 0;
		r = -pthread_create(&T.thread, NULL, run, NULL);
		T.running = r == 0;
	}
	pthread_mutex_unlock(&T.lock);
	return r;
}

/* Whether this process started the ticker (not a child forked since). */
static bool mine(void)
{
	return __atomic_load_n(&T.pid, __ATOMIC_ACQUIRE) == getpid();
}

void ticker_step(const char *fmt, ...)
{
	va_list ap;

	if (!mine())
		return;
	pthread_mutex_lock(&T.lock);
	T.step[0] = 0;
	if (fmt) {
		va_start(ap, fmt);
		vsnprintf(T.step, sizeof(T.step), fmt, ap);
		va_end(ap);
	}
	T.since = mono_now();
	T.said = 0;
	pthread_mutex_unlock(&T.lock);
}

void ticker_update(const char *fmt, ...)
{
	va_list ap;

	if (!mine())
		return;
	pthread_mutex_lock(&T.lock);
	va_start(ap, fmt);
	vsnprintf(T.step, sizeof(T.step), fmt, ap);
	va_end(ap);
	pthread_mutex_unlock(&T.lock);
}

void ticker_stop(void)
{
	if (!mine())
		return;
	pthread_mutex_lock(&T.lock);
	if (!T.running) {
		pthread_mutex_unlock(&T.lock);
		return;
	}
	T.stop = true;
	pthread_cond_signal(&T.wake);
	pthread_mutex_unlock(&T.lock);
	pthread_join(T.thread, NULL);
	T.running = false;
	__atomic_store_n(&T.pid, 0, __ATOMIC_RELEASE);
}
