// SPDX-License-Identifier: MIT
/* srv_reply.c - packing a reply into its packet, and Error replies. */
#include "srv_reply.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>

void srv_pack(struct reply *r, Wsrv__Response *resp)
{
	size_t n = wsrv__response__get_packed_size(resp);
	Wsrv__Error err = WSRV__ERROR__INIT;
	Wsrv__Response e = WSRV__RESPONSE__INIT;

	if (n > r->cap) {
		/* Only a reply built from the server's own state can get here
		 * (e.g. a model list longer than a packet): say so instead. */
		err.code = EMSGSIZE;
		err.message = "the reply does not fit in one packet";
		e.seq = resp->seq;
		e.body_case = WSRV__RESPONSE__BODY_ERROR;
		e.error = &err;
		r->nfds = 0;
		resp = &e;
		n = wsrv__response__get_packed_size(resp);
	}
	r->len = wsrv__response__pack(resp, r->buf);
}

void srv_reply_error(struct reply *r, uint64_t seq, int code, const char *fmt, ...)
{
	Wsrv__Response resp = WSRV__RESPONSE__INIT;
	Wsrv__Error err = WSRV__ERROR__INIT;
	char msg[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	snprintf(r->msg, sizeof(r->msg), "%s", msg);
	err.code = code;
	err.message = msg;
	resp.seq = seq;
	resp.body_case = WSRV__RESPONSE__BODY_ERROR;
	resp.error = &err;
	r->nfds = 0;
	srv_pack(r, &resp);
}
