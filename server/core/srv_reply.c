// SPDX-License-Identifier: MIT
/* srv_reply.c - packing a reply into its packet, and Error replies. */
#include "srv_reply.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>

#include "clock.h"
#include "log.h"
#include "ratelimit.h"
#include "memfd_util.h"
#include "pb_text.h"
#include "utf8.h"

static void pack_into(void *map, void *resp)
{
	wsrv__response__pack(resp, map);
}

/* Packs resp into a new sealed memfd; r gets a Bulk packet naming it.
 * 0, or a negative errno with r untouched. */
static int pack_bulk(struct reply *r, const Wsrv__Response *resp, size_t n)
{
	Wsrv__Response b = WSRV__RESPONSE__INIT;
	Wsrv__Bulk bulk = WSRV__BULK__INIT;
	int fd;

	if (n > SRV_MAX_BULK)
		return -EMSGSIZE;
	if (r->fd_room < 1)
		return -EAGAIN;
	if ((fd = memfd_new_sealed("wsrv:reply", n, pack_into, (void *)resp)) < 0)
		return fd;
	bulk.size = n;
	b.seq = resp->seq;
	b.body_case = WSRV__RESPONSE__BODY_BULK;
	b.bulk = &bulk;
	r->len = wsrv__response__pack(&b, r->buf);
	r->fds[0] = fd;
	r->nfds = 1;
	r->owned_fd = fd;
	return 0;
}

static void pack_text(struct reply *r, Wsrv__Response *resp)
{
	size_t n = wsrv__response__get_packed_size(resp);
	Wsrv__Error err = WSRV__ERROR__INIT;
	Wsrv__Response e = WSRV__RESPONSE__INIT;
	char why[160];
	int rc;

	/* What clients refuse as malformed never leaves: a string still not
	 * text here (srv_pack could not mend it) is told as an error. */
	if (pb_text_check(&resp->base, why, sizeof(why)) < 0) {
		log_err("a reply was not text (%s): sent as an error instead", why);
		err.code = EPROTO;
		err.message = "the server built a reply that is not UTF-8 text (a bug; its log names the field)";
		e.seq = resp->seq;
		e.body_case = WSRV__RESPONSE__BODY_ERROR;
		e.error = &err;
		resp = &e;
		r->nfds = 0;
		n = wsrv__response__get_packed_size(resp);
	}
	if (n <= r->cap) {
		r->len = wsrv__response__pack(resp, r->buf);
		return;
	}
	/* Only a reply built from the server's own state gets here (a long
	 * model list, many streams' stats): it goes in a memfd. A reply with
	 * fds of its own (Attach) is always small. */
	rc = r->nfds ? -EMSGSIZE : pack_bulk(r, resp, n);
	if (rc == 0)
		return;
	err.code = -rc;
	err.message = rc == -EAGAIN ? "the reply needs a file descriptor, and this client has not read the ones sent before"
		: "the reply is too large to send";
	snprintf(r->msg, sizeof(r->msg), "%s", err.message);
	e.seq = resp->seq;
	e.body_case = WSRV__RESPONSE__BODY_ERROR;
	e.error = &err;
	r->nfds = 0;
	r->len = wsrv__response__pack(&e, r->buf);
}

/* A field that is not text (a model directory "caf\xe9", a path in an
 * error) goes escaped, so that it cannot take the reply, and every
 * healthy model listed beside it, down. */
void srv_pack(struct reply *r, Wsrv__Response *resp)
{
	static struct ratelimit rl = { .window = 60, .burst = 3 }; /* the loop's thread only */
	struct pb_mend md;
	char why[160];

	if ((pb_text_mend(&resp->base, &md, why, sizeof(why)) < 0 || *why) && ratelimit_pass(&rl, mono_now()))
		log_warn("a reply's %s was not text: sent escaped", why);
	pack_text(r, resp);
	pb_text_unmend(&md);
}

int srv_reply_error(struct reply *r, uint64_t seq, int code, const char *fmt, ...)
{
	Wsrv__Response resp = WSRV__RESPONSE__INIT;
	Wsrv__Error err = WSRV__ERROR__INIT;
	char msg[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	utf8_trim(msg); /* a sentence cut short ends on a whole character */
	utf8_copy(r->msg, sizeof(r->msg), msg);
	err.code = code;
	err.message = msg;
	resp.seq = seq;
	resp.body_case = WSRV__RESPONSE__BODY_ERROR;
	resp.error = &err;
	r->nfds = 0;
	r->owned_fd = -1;
	srv_pack(r, &resp);
	return -code;
}

void srv_reply_ok(struct reply *r, uint64_t seq)
{
	Wsrv__Response resp = WSRV__RESPONSE__INIT;
	Wsrv__Ok ok = WSRV__OK__INIT;

	resp.seq = seq;
	resp.body_case = WSRV__RESPONSE__BODY_OK;
	resp.ok = &ok;
	srv_pack(r, &resp);
}
