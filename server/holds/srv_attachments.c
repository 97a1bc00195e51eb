// SPDX-License-Identifier: MIT
/* srv_attachments.c - a session's attachments (srv_attachments.h). */
#include "srv_attachments.h"

#include <errno.h>
#include <stdlib.h>

#include "core_door.h"
#include "tier_door.h"

int attach_add(struct server *srv, struct session *s, uint32_t mi, uint32_t *id)
{
	uint32_t slot = s->nattach, *v;

	for (uint32_t i = 0; i < s->nattach && slot == s->nattach; i++)
		if (!s->attach_model[i])
			slot = i;
	if (slot == s->nattach && s->nattach >= srv->cfg.max_attach)
		return -EMFILE;
	if (slot == s->nattach) {
		if (!(v = realloc(s->attach_model, (s->nattach + 1) * sizeof(*v))))
			return -ENOMEM;
		s->attach_model = v;
		s->nattach++;
	}
	s->attach_model[slot] = mi + 1;
	srv->models[mi].attached++;
	*id = slot + 1;
	return 0;
}

int attach_model(const struct session *s, uint32_t id)
{
	if (id == 0 || id > s->nattach || !s->attach_model[id - 1])
		return -EBADF;
	return (int)(s->attach_model[id - 1] - 1);
}

bool attach_has(const struct session *s, uint32_t mi)
{
	for (uint32_t k = 0; k < s->nattach; k++)
		if (s->attach_model[k] == mi + 1)
			return true;
	return false;
}

uint32_t attach_count(const struct session *s)
{
	uint32_t n = 0;

	for (uint32_t i = 0; i < s->nattach; i++)
		n += s->attach_model[i] != 0;
	return n;
}

void attach_drop(struct server *srv, struct session *s, uint32_t id)
{
	struct srv_model *sm = &srv->models[s->attach_model[id - 1] - 1];

	if (sm->lm && sm->lm->tier)
		tier_release_all(sm->lm->tier, srv_tier_holder(s, id));
	sm->attached--;
	s->attach_model[id - 1] = 0;
	srv_retired_check(srv, sm);
}

void attach_release_all(struct server *srv, struct session *s)
{
	for (uint32_t i = 0; i < s->nattach; i++)
		if (s->attach_model[i])
			attach_drop(srv, s, i + 1);
	free(s->attach_model);
	s->attach_model = NULL;
	s->nattach = 0;
}

/* The model behind an attach id, or NULL with an error reply. */
struct srv_model *srv_attached_model(struct server *srv, struct session *s, uint32_t id,
					uint64_t seq, struct reply *r)
{
	int mi = attach_model(s, id);

	if (mi < 0) {
		srv_reply_error(r, seq, EBADF, "attach id %u is not one of this client's", id);
		return NULL;
	}
	return &srv->models[mi];
}
