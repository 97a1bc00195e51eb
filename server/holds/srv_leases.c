// SPDX-License-Identifier: MIT
/* srv_leases.c - a session's layer leases (srv_leases.h). */
#include "srv_leases.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "sorted.h"
#include "srv_attachments.h"

static int lease_cmp(const void *key, const void *elem)
{
	return sorted_cmp_u64(*(const uint64_t *)key, ((const struct lease *)elem)->id);
}

/* Lease number i of s goes; its model (if its attachment is still
 * there) counts one fewer. */
static void drop(struct server *srv, struct session *s, uint32_t i)
{
	int mi = attach_model(s, s->leases[i].attach_id);

	if (mi >= 0)
		srv->models[mi].leases--;
	memmove(&s->leases[i], &s->leases[i + 1], (s->nleases - i - 1) * sizeof(*s->leases));
	s->nleases--;
}

int lease_add(struct server *srv, struct session *s, uint32_t mi, uint32_t attach_id, int32_t layer,
	      uint64_t *id)
{
	struct lease *v;

	if (s->nleases >= srv->cfg.max_leases)
		return -ENOSPC;
	if (!(v = realloc(s->leases, (s->nleases + 1) * sizeof(*v))))
		return -ENOMEM;
	s->leases = v;
	/* Ids only grow: appended, the table stays in order. */
	v[s->nleases++] = (struct lease){ s->next_lease, attach_id, layer };
	srv->models[mi].leases++;
	*id = s->next_lease++;
	return 0;
}

int lease_release(struct server *srv, struct session *s, uint64_t id)
{
	long i = sorted_index(&id, s->leases, s->nleases, sizeof(*s->leases), lease_cmp);

	if (i < 0)
		return -ENOENT;
	drop(srv, s, (uint32_t)i);
	return 0;
}

void lease_drop_attachment(struct server *srv, struct session *s, uint32_t attach_id)
{
	for (uint32_t i = s->nleases; i-- > 0;)
		if (s->leases[i].attach_id == attach_id)
			drop(srv, s, i);
}

void lease_release_all(struct server *srv, struct session *s)
{
	for (uint32_t i = 0; i < s->nleases; i++) {
		int mi = attach_model(s, s->leases[i].attach_id);
		if (mi >= 0)
			srv->models[mi].leases--;
	}
	s->nleases = 0;
}
