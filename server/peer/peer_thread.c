// SPDX-License-Identifier: MIT
/* peer_thread.c - a thread stopped through an eventfd (peer_thread.h). */
#include "peer_thread.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "log.h"

int peer_thread_init(struct peer_thread *t, struct errinfo *e)
{
	t->running = false;
	t->stopfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	return t->stopfd < 0 ? err_set(e, -errno, "eventfd: %s", strerror(errno)) : 0;
}

int peer_thread_start(struct peer_thread *t, void *(*fn)(void *), void *arg, struct errinfo *e)
{
	int r = -pthread_create(&t->th, NULL, fn, arg);

	if (r < 0)
		return err_set(e, r, "peers: cannot start a thread: %s", strerror(-r));
	t->running = true;
	return 0;
}

void peer_thread_end(struct peer_thread *t)
{
	uint64_t one = 1;

	if (t->running) {
		if (write(t->stopfd, &one, sizeof(one)) < 0)
			log_warn("peers: cannot stop the thread: %s", strerror(errno));
		pthread_join(t->th, NULL);
		t->running = false;
	}
	if (t->stopfd >= 0)
		close(t->stopfd);
	t->stopfd = -1;
}
