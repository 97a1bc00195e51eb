// SPDX-License-Identifier: MIT
/* events.c - what the server sends unasked: a new generation of a model a
 * client has attached (wsrvctl reload). libwsrv notes it whenever it reads
 * from the connection; a worker that waits for one polls the connection's
 * fd and reads what arrived with wsrv_client_poll_events, then switches
 * between passes (detach, attach again). */
#include <errno.h>
#include <string.h>

#include "attached.h"

void cl_note_event(void *user, const Wsrv__Event *ev)
{
	struct wsrv_client *c = user;

	if (!ev || !ev->model)
		return;
	for (struct wsrv_model *m = c->models; m; m = m->next)
		if (strcmp(m->name, ev->model) == 0 && ev->generation > m->latest)
			m->latest = ev->generation;
	cl_debug("model %s: generation %llu announced", ev->model, (unsigned long long)ev->generation);
}

WSRV_EXPORT int wsrv_client_poll_events(struct wsrv_client *c)
{
	int newer = 0;

	CL_NEED(c);
	pthread_mutex_lock(&c->lock);
	wire_read_events(&c->w);
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
