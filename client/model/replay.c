// SPDX-License-Identifier: MIT
/* replay.c - a client outlives its server: when wsrvd restarts (or hands
 * over to a successor), the session connects again to the same path and
 * attaches every model there again. A model whose weights are the same
 * generation (the same manifest) keeps its mappings, which never stopped
 * being readable, and takes the new server's attach id; one whose weights
 * changed is stale: its calls fail with -ESTALE until it is attached
 * again. A model still loading goes on loading from the new server
 * (ready_resume.c). */
#include <errno.h>
#include <unistd.h>

#include "attached.h"
#include "packet.h"

static void detach_id(struct cl_wire *w, uint32_t id)
{
	Wsrv__Request q = WSRV__REQUEST__INIT;
	Wsrv__Detach d = WSRV__DETACH__INIT;
	Wsrv__Response *r;
	int fds[1], n = 0;

	d.attach_id = id;
	q.body_case = WSRV__REQUEST__BODY_DETACH;
	q.detach = &d;
	if (wire_call(w, &q, -1, &r, fds, 0, &n) == 0)
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

/* Attaches m on the new connection w: true when m goes on under its new
 * id, false when it is stale now. */
static bool reattach(struct cl_wire *w, struct wsrv_model *m)
{
	Wsrv__Request q = WSRV__REQUEST__INIT;
	Wsrv__Attach a = WSRV__ATTACH__INIT;
	Wsrv__Response *r = NULL;
	bool loading = __atomic_load_n(&m->loading, __ATOMIC_ACQUIRE), same;
	int fds[WSRV_MAX_FDS], n = 0, ret;

	a.model = m->name;
	a.while_loading = loading;
	q.body_case = WSRV__REQUEST__BODY_ATTACH;
	q.attach = &a;
	ret = wire_call(w, &q, -1, &r, fds, WSRV_MAX_FDS, &n);
	same = ret == 0 && same_weights(m, loading, r, fds, n);
	if (same) {
		__atomic_store_n(&m->attach_id, r->attach->attach_id, __ATOMIC_RELAXED);
	} else {
		cl_debug("model %s: another generation after the reconnect: stale", m->name);
		m->stale = true;
		if (ret == 0 && r->body_case == WSRV__RESPONSE__BODY_ATTACH && r->attach)
			detach_id(w, r->attach->attach_id); /* nothing of it stays at the server */
	}
	pkt_close_fds(fds, n); /* the mappings we have are the ones to keep */
	if (ret == 0)
		wsrv__response__free_unpacked(r, NULL);
	return same;
}

int cl_replay(struct wsrv_client *c)
{
	unsigned kept = 0;

	for (struct wsrv_model *m = c->models; m && c->w.fd >= 0; m = m->next)
		if (!m->stale)
			kept += reattach(&c->w, m);
	cl_debug("connected to %s again (%u models re-attached)", c->path, kept);
	return c->w.fd >= 0 ? 0 : cl_err(-ENOTCONN, "the server went away again while re-attaching");
}
