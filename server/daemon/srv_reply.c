// SPDX-License-Identifier: MIT
/* srv_reply.c - packing a reply into its packet, and Error replies. */
#include "srv_reply.h"

#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

/* Packs resp into a new sealed memfd; r gets a Bulk packet naming it.
 * 0, or a negative errno with r untouched. */
static int pack_bulk(struct reply *r, const Wsrv__Response *resp, size_t n)
{
	Wsrv__Response b = WSRV__RESPONSE__INIT;
	Wsrv__Bulk bulk = WSRV__BULK__INIT;
	uint8_t *p;
	int fd;

	if (n > SRV_MAX_BULK)
		return -EMSGSIZE;
	if (r->fd_room < 1)
		return -EAGAIN;
	fd = memfd_create("wsrv:reply", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0)
		return -errno;
	if (ftruncate(fd, (off_t)n) < 0 ||
	    (p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED) {
		close(fd);
		return -ENOMEM;
	}
	wsrv__response__pack(resp, p);
	munmap(p, n);
	if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) < 0) {
		close(fd);
		return -errno;
	}
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

void srv_pack(struct reply *r, Wsrv__Response *resp)
{
	size_t n = wsrv__response__get_packed_size(resp);
	Wsrv__Error err = WSRV__ERROR__INIT;
	Wsrv__Response e = WSRV__RESPONSE__INIT;
	int rc;

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

int srv_reply_error(struct reply *r, uint64_t seq, int code, const char *fmt, ...)
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
