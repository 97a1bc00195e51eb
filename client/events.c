// SPDX-License-Identifier: MIT
/* events.c - what the server sends unasked: a new generation of a model a
 * client has attached (wsrvctl reload). libwsrv notes it whenever it reads
 * from the connection; a worker that waits for one polls the connection's
 * fd and reads what arrived with wsrv_client_poll_events, then switches
 * between passes (detach, attach again). */
#include <errno.h>
#include <poll.h>
#include <string.h>

#include "client_internal.h"
#include "packet.h"

void cl_note_event(struct wsrv_client *c, const Wsrv__Event *ev)
{
	if (!ev || !ev->model)
		return;
	for (struct wsrv_model *m = c->models; m; m = m->next)
		if (strcmp(m->name, ev->model) == 0 && ev->generation > m->latest)
			m->latest = ev->generation;
	cl_debug("model %s: generation %llu announced", ev->model, (unsigned long long)ev->generation);
}

WSRV_EXPORT int wsrv_client_fd(struct wsrv_client *c)
{
	int fd;

	CL_NEED(c);
	pthread_mutex_lock(&c->lock);
	fd = c->fd;
	pthread_mutex_unlock(&c->lock);
	return fd >= 0 ? fd : cl_err(-ENOTCONN, "not connected to the server");
}

/* Under c->lock: one packet that is there, read and noted. 1 when one was
 * read, 0 when none was waiting. */
static int read_one(struct wsrv_client *c)
{
	struct pollfd p = { c->fd, POLLIN, 0 };
	int fds[WSRV_MAX_FDS], n = 0;
	Wsrv__Response *r;
	long len;

	if (poll(&p, 1, 0) <= 0)
		return 0;
	len = pkt_recv(c->fd, c->buf, c->max_packet, fds, WSRV_MAX_FDS, &n);
	pkt_close_fds(fds, n);
	if (len <= 0) { /* the server is gone: the next call connects again */
		cl_drop(c);
		return 0;
	}
	r = wsrv__response__unpack(NULL, (size_t)len, c->buf);
	if (r && r->body_case == WSRV__RESPONSE__BODY_EVENT)
		cl_note_event(c, r->event);
	if (r && r->body_case == WSRV__RESPONSE__BODY_GOODBYE)
		cl_drop(c);
	if (r)
		wsrv__response__free_unpacked(r, NULL);
	return c->fd >= 0;
}

WSRV_EXPORT int wsrv_client_poll_events(struct wsrv_client *c)
{
	int newer = 0;

	CL_NEED(c);
	pthread_mutex_lock(&c->lock);
	while (c->fd >= 0 && read_one(c) > 0)
		;
	for (struct wsrv_model *m = c->models; m; m = m->next)
		newer += m->latest > m->generation;
	pthread_mutex_unlock(&c->lock);
	return newer;
}

WSRV_EXPORT int wsrv_model_generation(const struct wsrv_model *m, uint64_t *mapped, uint64_t *latest)
{
	CL_NEED(m);
	pthread_mutex_lock(&m->c->lock);
	if (mapped)
		*mapped = m->generation;
	if (latest)
		*latest = m->latest;
	pthread_mutex_unlock(&m->c->lock);
	return 0;
}
