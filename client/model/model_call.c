// SPDX-License-Identifier: MIT
/* model_call.c - the model room on the session: the models attached
 * through a client, the hooks that attach them again on a new connection
 * (replay.c) and note announced generations (events.c), and requests that
 * name a model by the id the current server gave it. */
#include <errno.h>

#include "attached.h"

/* The request's attach id, written under c->lock for the connection that
 * is about to carry it. */
struct aim {
	const struct wsrv_model *m;
	uint32_t *id;
};

static int aim_model(void *arg)
{
	struct aim *a = arg;
	int r = cl_model_fresh(a->m);

	if (r == 0)
		*a->id = a->m->attach_id;
	return r;
}

int cl_call_model(struct wsrv_model *m, uint32_t *id, Wsrv__Request *req, Wsrv__Response **resp,
		  int *fds, int maxfds, int *nfds)
{
	struct aim a = { .m = m, .id = id };

	return cl_call_aimed(m->c, aim_model, &a, req, resp, fds, maxfds, nfds);
}

int cl_model_fresh(const struct wsrv_model *m)
{
	if (!m->stale)
		return 0;
	return cl_err(-ESTALE, "model %s has other weights since the server restarted; detach and attach it again",
		      m->name);
}

void cl_model_link(struct wsrv_client *c, struct wsrv_model *m)
{
	pthread_mutex_lock(&c->lock);
	c->replay = cl_replay;
	c->w.on_event = cl_note_event;
	c->w.user = c;
	m->next = c->models;
	c->models = m;
	pthread_mutex_unlock(&c->lock);
}

void cl_model_unlink(struct wsrv_client *c, struct wsrv_model *m)
{
	pthread_mutex_lock(&c->lock);
	for (struct wsrv_model **p = &c->models; *p; p = &(*p)->next)
		if (*p == m) {
			*p = m->next;
			break;
		}
	pthread_mutex_unlock(&c->lock);
}
