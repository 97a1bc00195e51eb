// SPDX-License-Identifier: MIT
/* transport.c - one connection to wsrvd: connect, handshake, one request
 * and its reply at a time; what the server sends unasked goes to the
 * session's callback. Nothing here connects again. */
#include <errno.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "wire.h"
#include "memfd_util.h"
#include "packet.h"
#include "pb_text.h"
#include "sockpath.h"
#include "transport.h"

/* A reader relies on the seals memfd_check asks for: the size cannot change
 * under its mapping, and no one can write the bytes it reads. */
int cl_check_fd(int fd, const char *what, uint64_t want, uint64_t *size)
{
	uint64_t got = 0;
	int seals = 0, r = memfd_check(fd, want, false, 0, &got, &seals);

	if (r == -EBADF)
		return cl_err(-EBADMSG, "%s: the server sent %llu bytes (or not a file) where %llu were promised",
			      what, (unsigned long long)got, (unsigned long long)want);
	if (r == -EPERM)
		return cl_err(-EBADMSG, "%s: not sealed against writes and resizing (seals 0x%x)", what, seals);
	if (r < 0)
		return cl_err(r, "%s: fstat: %s", what, strerror(-r));
	*size = got;
	return 0;
}

int cl_check_piece_fd(int fd, uint64_t want, uint64_t *size)
{
	uint64_t got = 0;
	int seals = 0, r = memfd_check_cuttable(fd, want, &got, &seals);

	if (r == -EBADF)
		return cl_err(-EBADMSG, "a disk tier's piece: the server sent %llu bytes (or not a file) where %llu were promised",
			      (unsigned long long)got, (unsigned long long)want);
	if (r == -EPERM)
		return cl_err(-EBADMSG, "a disk tier's piece: not sealed against writes and growth (seals 0x%x)", seals);
	if (r < 0)
		return cl_err(r, "a disk tier's piece: fstat: %s", strerror(-r));
	*size = got;
	return 0;
}

static int error_reply(const Wsrv__Response *r)
{
	const Wsrv__Error *e = r->error;
	int code = e && e->code > 0 && e->code < 4096 ? e->code : EPROTO;

	return cl_err(-code, "server: %s", e && e->message ? e->message : "error");
}

#define BULK_MAX (64u << 20)

/* A Bulk reply's memfd (fd, owned by the caller): sealed, regular, of the
 * size announced, at most BULK_MAX; the Response in it replaces *r. */
static int unbulk(int fd, Wsrv__Response **r)
{
	uint64_t size = (*r)->bulk ? (*r)->bulk->size : 0, got;
	Wsrv__Response *inner;
	char why[160];
	void *p;
	int ret;

	if (size == 0 || size > BULK_MAX)
		return cl_err(-EBADMSG, "the server sent a bulk reply of %llu bytes",
			      (unsigned long long)size);
	ret = cl_check_fd(fd, "bulk reply", size, &got);
	if (ret < 0)
		return ret;
	if (got != size)
		return cl_err(-EBADMSG, "the server sent a bulk reply of %llu bytes where %llu were stated",
			      (unsigned long long)got, (unsigned long long)size);
	p = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED)
		return cl_err(-errno, "cannot map a bulk reply: %s", strerror(errno));
	inner = wsrv__response__unpack(NULL, size, p);
	munmap(p, size);
	if (!inner || inner->body_case == WSRV__RESPONSE__BODY_BULK || inner->seq != (*r)->seq ||
	    pb_text_check(&inner->base, why, sizeof(why)) < 0) {
		if (inner)
			wsrv__response__free_unpacked(inner, NULL);
		return cl_err(-EBADMSG, "the server sent a malformed bulk reply");
	}
	wsrv__response__free_unpacked(*r, NULL);
	*r = inner;
	return 0;
}

/* Receives the reply to seq, skipping nothing: a Goodbye ends the
 * connection; a Bulk reply is read from its memfd. */
/* Receives packets until one is not an Event, handing each event (its
 * strings text) to the callback: what the server sent unasked (a new
 * generation) comes first; a server that sends nothing else is cut off
 * after a bound (*flood set, -EBADMSG). The length of the packet left in
 * w->buf with its fds in got (*n), or -errno (no fds left open). */
static long skip_events(struct cl_wire *w, int *got, int *n, bool *flood)
{
	long len = pkt_recv(w->fd, w->buf, w->max_packet, got, WSRV_MAX_FDS, n);
	Wsrv__Response *r;
	char why[160];

	for (int events = 0; len > 0; events++) {
		r = wsrv__response__unpack(NULL, (size_t)len, w->buf);
		if (!r || r->body_case != WSRV__RESPONSE__BODY_EVENT) {
			if (r)
				wsrv__response__free_unpacked(r, NULL);
			break;
		}
		if (w->on_event && pb_text_check(&r->base, why, sizeof(why)) == 0)
			w->on_event(w->user, r->event);
		wsrv__response__free_unpacked(r, NULL);
		pkt_close_fds(got, *n);
		*n = 0;
		if (events == 4096) {
			*flood = true;
			return cl_err(-EBADMSG, "the server sent events and no reply");
		}
		len = pkt_recv(w->fd, w->buf, w->max_packet, got, WSRV_MAX_FDS, n);
	}
	return len;
}

/* What the reply r (with n fds) says is wrong with it: 0, or -errno with
 * the sentence set. */
static int check_reply(struct cl_wire *w, const Wsrv__Response *r, uint64_t seq, int n, int maxfds)
{
	char why[160];

	if (!r || (n > maxfds && !(r->body_case == WSRV__RESPONSE__BODY_BULK && n == 1)) ||
	    pb_text_check(&r->base, why, sizeof(why)) < 0)
		return cl_err(-EBADMSG, "the server sent a malformed reply");
	if (r->body_case == WSRV__RESPONSE__BODY_GOODBYE) {
		w->goodbye = true;
		return cl_err(-ENOTCONN, "the server is stopping");
	}
	if (r->seq != seq && r->body_case != WSRV__RESPONSE__BODY_ERROR)
		return cl_err(-EBADMSG, "the server answered another request");
	if (r->body_case == WSRV__RESPONSE__BODY_BULK && n != 1)
		return cl_err(-EBADMSG, "the server sent a bulk reply with %d fds", n);
	return 0;
}

static int recv_reply(struct cl_wire *w, uint64_t seq, Wsrv__Response **out,
		      int *fds, int maxfds, int *nfds)
{
	int got[WSRV_MAX_FDS], n = 0, ret;
	Wsrv__Response *r = NULL;
	bool flood = false;
	long len = skip_events(w, got, &n, &flood);

	/* A server that refused us and closed may leave ECONNRESET ahead of
	 * its Error packet in our queue: the packet is the next receive. */
	if (len == -ECONNRESET)
		len = pkt_recv(w->fd, w->buf, w->max_packet, got, WSRV_MAX_FDS, &n);
	if (len == -EAGAIN || len == -EWOULDBLOCK)
		return cl_err(-ETIMEDOUT, "the server did not answer in time");
	if (flood)
		return (int)len;
	if (len < 0)
		return cl_err(len == -EMSGSIZE ? -EBADMSG : -ENOTCONN, "lost the server: %s", strerror((int)-len));
	r = wsrv__response__unpack(NULL, (size_t)len, w->buf);
	ret = check_reply(w, r, seq, n, maxfds);
	if (ret == 0 && r->body_case == WSRV__RESPONSE__BODY_BULK) {
		ret = unbulk(got[0], &r);
		pkt_close_fds(got, n);
		n = 0;
	}
	if (ret < 0) { /* the one way out of a failure */
		pkt_close_fds(got, n);
		if (r)
			wsrv__response__free_unpacked(r, NULL);
		return ret;
	}
	memcpy(fds, got, sizeof(int) * (size_t)n);
	*nfds = n;
	*out = r;
	return 0;
}

/* After a failed send: did the server say why before it left? */
static int lost(struct cl_wire *w, int err)
{
	int fds[WSRV_MAX_FDS], n = 0;
	long len = recv(w->fd, w->buf, w->max_packet, MSG_DONTWAIT | MSG_PEEK);
	Wsrv__Response *r;

	if (len > 0 && (len = pkt_recv(w->fd, w->buf, w->max_packet, fds, WSRV_MAX_FDS, &n)) > 0) {
		pkt_close_fds(fds, n);
		r = wsrv__response__unpack(NULL, (size_t)len, w->buf);
		if (r && r->body_case == WSRV__RESPONSE__BODY_GOODBYE) {
			wsrv__response__free_unpacked(r, NULL);
			w->goodbye = true;
			return cl_err(-ENOTCONN, "the server is stopping");
		}
		if (r && r->body_case == WSRV__RESPONSE__BODY_ERROR) {
			int code = error_reply(r);
			wsrv__response__free_unpacked(r, NULL);
			return code;
		}
		if (r)
			wsrv__response__free_unpacked(r, NULL);
	}
	return cl_err(-ENOTCONN, "lost the server: %s", strerror(-err));
}

void wire_close(struct cl_wire *w)
{
	if (w->fd >= 0) {
		close(w->fd);
		w->fd = -1;
	}
}

int wire_init(struct cl_wire *w, cl_event_fn on_event, void *user)
{
	*w = (struct cl_wire){ .fd = -1, .max_packet = WSRV_MAX_PACKET, .on_event = on_event, .user = user };
	w->buf = malloc(WSRV_MAX_PACKET);
	return w->buf ? 0 : cl_err(-ENOMEM, "out of memory");
}

void wire_fini(struct cl_wire *w)
{
	wire_close(w);
	free(w->buf);
	w->buf = NULL;
}

int wire_call(struct cl_wire *w, Wsrv__Request *req, int send_fd, Wsrv__Response **resp,
	      int *fds, int maxfds, int *nfds)
{
	Wsrv__Response *r = NULL;
	size_t len;
	int ret, n = 0;

	if (w->fd < 0)
		return cl_err(-ENOTCONN, "not connected to the server (it stopped or was lost); connect again");
	req->seq = ++w->seq;
	len = wsrv__request__get_packed_size(req);
	if (len > w->max_packet)
		return cl_err(-EMSGSIZE, "request of %zu bytes is over the server's %u", len, w->max_packet);
	wsrv__request__pack(req, w->buf);
	w->unanswered = false;
	ret = pkt_send(w->fd, w->buf, len, send_fd >= 0 ? &send_fd : NULL, send_fd >= 0);
	if (ret < 0) {
		ret = lost(w, ret);
	} else {
		ret = recv_reply(w, req->seq, &r, fds, maxfds, &n);
		w->unanswered = ret == -ENOTCONN || ret == -ETIMEDOUT;
	}
	if (ret == -ENOTCONN || ret == -ETIMEDOUT || ret == -EBADMSG || ret == -EACCES)
		wire_close(w);
	if (ret == 0 && r->body_case == WSRV__RESPONSE__BODY_ERROR) {
		ret = error_reply(r);
		wsrv__response__free_unpacked(r, NULL);
		pkt_close_fds(fds, n);
	}
	if (ret == 0) {
		*resp = r;
		*nfds = n;
	}
	return ret;
}

/* The handshake on a new connection. */
static int wire_hello(struct cl_wire *w, const char *name)
{
	Wsrv__Request q = WSRV__REQUEST__INIT;
	Wsrv__Hello h = WSRV__HELLO__INIT;
	Wsrv__Response *r;
	int fds[1], n, ret;

	h.protocol = WSRV_PROTOCOL_VERSION;
	h.client_name = (char *)name;
	h.pid = (uint32_t)getpid();
	h.disk_tier = WSRV_DISK_TIER;
	q.body_case = WSRV__REQUEST__BODY_HELLO;
	q.hello = &h;
	if ((ret = wire_call(w, &q, -1, &r, fds, 0, &n)) < 0)
		return ret;
	if (r->body_case != WSRV__RESPONSE__BODY_HELLO || !r->hello ||
	    r->hello->protocol != WSRV_PROTOCOL_VERSION) {
		wsrv__response__free_unpacked(r, NULL);
		return cl_err(-EPROTONOSUPPORT, "the server does not speak protocol %u", WSRV_PROTOCOL_VERSION);
	}
	/* Never trust a larger packet than ours. */
	if (r->hello->max_packet >= 1024 && r->hello->max_packet < w->max_packet)
		w->max_packet = r->hello->max_packet;
	snprintf(w->server_version, sizeof(w->server_version), "%s",
		 r->hello->server_version ? r->hello->server_version : "");
	wsrv__response__free_unpacked(r, NULL);
	return 0;
}

/* A connected socket to the server at path (receive and send timeouts
 * timeout_ms), or a negative errno with a sentence. */
static int open_socket(const char *path, int timeout_ms)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	struct timeval tv = { timeout_ms / 1000, (timeout_ms % 1000) * 1000 };
	char err[256];
	int fd = sockpath_check(path, err, sizeof(err));

	if (fd < 0)
		return cl_err(fd, "%s", err);
	strcpy(a.sun_path, path);
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return cl_err(-errno, "socket: %s", strerror(errno));
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
		int code = errno;
		close(fd);
		return cl_err(-code, "cannot connect to wsrvd at %s: %s", path, strerror(code));
	}
	return fd;
}

int wire_connect(struct cl_wire *w, const char *path, int timeout_ms, const char *name)
{
	int ret = -ENOTCONN;

	/* Accepted by a server that was handing its socket over and said
	 * Goodbye to our Hello: the socket now belongs to its successor, so
	 * a new connection is served. Twice at most. */
	for (int tries = 0; tries < 3 && (tries == 0 || (ret == -ENOTCONN && w->goodbye)); tries++) {
		wire_close(w);
		w->goodbye = false;
		w->seq = 0;
		w->max_packet = WSRV_MAX_PACKET;
		int fd = open_socket(path, timeout_ms);
		if (fd < 0)
			return fd;
		w->fd = fd;
		ret = wire_hello(w, name);
	}
	if (ret < 0)
		wire_close(w);
	return ret;
}

bool wire_hung_up(const struct cl_wire *w)
{
	struct pollfd p = { .fd = w->fd, .events = POLLRDHUP };

	return w->fd < 0 || (poll(&p, 1, 0) == 1 && (p.revents & (POLLHUP | POLLRDHUP | POLLERR)));
}

/* One packet that is there, read and handed on. 1 when one was read, 0
 * when none was waiting. */
static int read_one(struct cl_wire *w)
{
	struct pollfd p = { w->fd, POLLIN, 0 };
	int fds[WSRV_MAX_FDS], n = 0;
	Wsrv__Response *r;
	char why[160];
	long len;

	if (poll(&p, 1, 0) <= 0)
		return 0;
	len = pkt_recv(w->fd, w->buf, w->max_packet, fds, WSRV_MAX_FDS, &n);
	pkt_close_fds(fds, n);
	if (len <= 0) { /* the server is gone: the next call connects again */
		wire_close(w);
		return 0;
	}
	r = wsrv__response__unpack(NULL, (size_t)len, w->buf);
	if (r && r->body_case == WSRV__RESPONSE__BODY_EVENT && w->on_event &&
	    pb_text_check(&r->base, why, sizeof(why)) == 0)
		w->on_event(w->user, r->event);
	if (r && r->body_case == WSRV__RESPONSE__BODY_GOODBYE)
		wire_close(w);
	if (r)
		wsrv__response__free_unpacked(r, NULL);
	return w->fd >= 0;
}

void wire_read_events(struct cl_wire *w)
{
	while (w->fd >= 0 && read_one(w) > 0)
		;
}
