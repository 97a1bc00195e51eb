// SPDX-License-Identifier: MIT
/* peer_thread.h - a thread that runs until it is told to stop: an eventfd
 * its loop polls beside its own fds, written once to stop it, then joined.
 * The peer engine's serving thread and wsrvd's watch of the peer process
 * are each one. */
#ifndef WSRV_PEER_THREAD_H
#define WSRV_PEER_THREAD_H

#include <pthread.h>
#include <stdbool.h>

#include "errinfo.h"

struct peer_thread {
	pthread_t th;
	int stopfd;   /* polled by the thread: readable once it must stop */
	bool running; /* started, not yet joined */
};

/* Makes the stop fd; the thread is not started. 0 or -errno (said in e).
 * Call peer_thread_end whatever it returns. */
int peer_thread_init(struct peer_thread *t, struct errinfo *e);
/* Starts fn(arg). 0 or -errno (said in e). */
int peer_thread_start(struct peer_thread *t, void *(*fn)(void *), void *arg, struct errinfo *e);
/* Stops and joins the thread if it runs, and closes the stop fd. Safe on
 * a zeroed t after peer_thread_init, and twice. */
void peer_thread_end(struct peer_thread *t);

#endif
