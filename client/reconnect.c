// SPDX-License-Identifier: MIT
/* reconnect.c - a client outlives its server: when wsrvd restarts (or
 * hands over to a successor), the next call connects again to the same
 * path and re-attaches every model. A model whose weights are the same
 * generation (the same manifest) keeps its mappings, which never stopped
 * being readable, and takes its new attach id; one whose weights changed
 * is stale: its calls fail with -ESTALE until it is attached again. A
 * model still loading goes on loading from the new server
 * (ready_resume.c). */
#include <errno.h>
#include <unistd.h>

#include "client_internal.h"
#include "packet.h"

static void detach_id(struct wsrv_client *c, uint32_t id)
{
	Wsrv__Request q = WSRV__REQUEST__INIT;
	Wsrv__Detach d = WSRV__DETACH__INIT;
	Wsrv__Response *r;
	int fds[1], n = 0;

	d.attach_id = id;
	q.body_case = WSRV__REQUEST__BODY_DETACH;
	q.detach = &d;
	if (cl_exchange(c, &q, -1, &r, fds, 0, &n) == 0)
		wsrv__response__free_unpacked(r, NULL);
}

/* Whether the reply attaches the generation m has mapped (a model loaded
 * here), or (a model still loading here) one whose load can go on under m
 * (ready_resume.c). */
static bool same_weights(struct wsrv_model *m, bool loading, Wsrv__Response *r, int *fds, int n)
{
	const Wsrv__AttachReply *ar = r->attach;

	if (r->body_case != WSRV__RESPONSE__BODY_ATTACH || !ar)
		return false;
	if (loading)
		return cl_ready_resume(m, ar, fds, n) == 0;
	return ar->generation == m->generation && ar->manifest_hash == m->manifest_hash &&
	       ar->manifest_size == m->manifest_len;
}

/* Re-attaches m on the new connection; under c->lock. */
static void reattach(struct wsrv_client *c, struct wsrv_model *m)
{
	Wsrv__Request q = WSRV__REQUEST__INIT;
	Wsrv__Attach a = WSRV__ATTACH__INIT;
	Wsrv__Response *r = NULL;
	bool loading = __atomic_load_n(&m->loading, __ATOMIC_ACQUIRE);
	int fds[WSRV_MAX_FDS], n = 0, ret;

	a.model = m->name;
	a.while_loading = loading;
	q.body_case = WSRV__REQUEST__BODY_ATTACH;
	q.attach = &a;
	ret = cl_exchange(c, &q, -1, &r, fds, WSRV_MAX_FDS, &n);
	if (ret == 0 && same_weights(m, loading, r, fds, n)) {
		if (c->nremap < CL_REMAP) {
			c->remap_old[c->nremap] = m->attach_id;
			c->remap_new[c->nremap++] = r->attach->attach_id;
		}
		__atomic_store_n(&m->attach_id, r->attach->attach_id, __ATOMIC_RELAXED);
	} else {
		cl_debug("model %s: another generation after the reconnect: stale", m->name);
		m->stale = true;
		if (ret == 0 && r->body_case == WSRV__RESPONSE__BODY_ATTACH && r->attach)
			detach_id(c, r->attach->attach_id); /* nothing of it stays at the server */
	}
	pkt_close_fds(fds, n); /* the mappings we have are the ones to keep */
	if (ret == 0)
		wsrv__response__free_unpacked(r, NULL);
}

int cl_reconnect(struct wsrv_client *c)
{
	int fd = cl_open_socket(c->path, c->timeout_ms), r;

	if (fd < 0)
		return cl_wrap(fd, "the server went away, and connecting again failed");
	c->fd = fd;
	c->nremap = 0;
	if ((r = cl_hello(c)) < 0)
		return cl_wrap(r, "the server went away, and the new one refused the handshake");
	for (struct wsrv_model *m = c->models; m && c->fd >= 0; m = m->next)
		if (!m->stale)
			reattach(c, m);
	c->reconnects++;
	cl_debug("connected to %s again (%u models re-attached)", c->path, (unsigned)c->nremap);
	return c->fd >= 0 ? 0 : cl_err(-ENOTCONN, "the server went away again while re-attaching");
}

static int remap_id(const struct wsrv_client *c, uint32_t *id)
{
	for (int i = 0; i < c->nremap; i++)
		if (c->remap_old[i] == *id) {
			*id = c->remap_new[i];
			return 0;
		}
	return cl_err(-ESTALE, "the model of this call has other weights since the server restarted; detach and attach it again");
}

int cl_remap(struct wsrv_client *c, Wsrv__Request *req)
{
	switch (req->body_case) {
	case WSRV__REQUEST__BODY_FETCH_LAYER: return remap_id(c, &req->fetch_layer->attach_id);
	case WSRV__REQUEST__BODY_DETACH: return remap_id(c, &req->detach->attach_id);
	case WSRV__REQUEST__BODY_REGION_OPEN: return remap_id(c, &req->region_open->attach_id);
	case WSRV__REQUEST__BODY_ATTACH_SEGMENTS: return remap_id(c, &req->attach_segments->attach_id);
	default: return 0;
	}
}

void cl_model_link(struct wsrv_client *c, struct wsrv_model *m)
{
	pthread_mutex_lock(&c->lock);
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

int cl_model_fresh(const struct wsrv_model *m)
{
	if (!m->stale)
		return 0;
	return cl_err(-ESTALE, "model %s has other weights since the server restarted; detach and attach it again",
		      m->name);
}
