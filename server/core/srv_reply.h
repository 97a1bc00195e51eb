// SPDX-License-Identifier: MIT
/* srv_reply.h - a reply's packet: a Response packed into it, or an Error. */
#ifndef WSRV_SRV_REPLY_H
#define WSRV_SRV_REPLY_H

#include "srv.h"
#include "wsrv.pb-c.h"

/* Packs resp into r, or an EMSGSIZE error when it does not fit. */
void srv_pack(struct reply *r, Wsrv__Response *resp);

/* Packs an Ok reply. */
void srv_reply_ok(struct reply *r, uint64_t seq);

/* Packs an Error reply with errno code and sentence; returns -code, for
 * `return srv_reply_error(...)`. */
int srv_reply_error(struct reply *r, uint64_t seq, int code, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

#endif
