// SPDX-License-Identifier: MIT
/* srv_publish.h - a producer publishing a new generation (srv_publish.c). */
#ifndef WSRV_SRV_PUBLISH_H
#define WSRV_SRV_PUBLISH_H

#include "errinfo.h"
#include "core_door.h"

struct publish;

/* The requests: each fills r, returns 0 or the errno it replied with. */
int publish_begin(struct server *srv, struct session *s, const Wsrv__PublishBegin *q, uint64_t seq,
		  struct reply *r);
int publish_commit(struct server *srv, struct session *s, const Wsrv__PublishCommit *q, uint64_t seq,
		   struct reply *r);
int publish_abort(struct server *srv, struct session *s, const Wsrv__PublishAbort *q, uint64_t seq,
		  struct reply *r);
/* The producer's session ends: an uncommitted publish is dropped. */
void publish_session_gone(struct server *srv, const struct session *s);

#endif
