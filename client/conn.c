// SPDX-License-Identifier: MIT
/* conn.c - the connection: connect, handshake, one request at a time. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "client_internal.h"
#include "packet.h"
#include "sockpath.h"

WSRV_EXPORT const char *wsrv_default_socket(void)
{
	static __thread char buf[SOCKPATH_MAX];
	char err[256];
	int r = sockpath_default(buf, sizeof(buf), err, sizeof(err));

	if (r < 0) {
		cl_err(r, "%s", err);
		return NULL;
	}
	return buf;
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
	if (!inner || inner->body_case == WSRV__RESPONSE__BODY_BULK || inner->seq != (*r)->seq) {
		if (inner)
			wsrv__response__free_unpacked(inner, NULL);
		return cl_err(-EBADMSG, "the server sent a malformed bulk reply");
	}
	wsrv__response__free_unpacked(*r, NULL);
	*r = inner;
	return 0;
}

/* Receives the reply to seq, skipping nothing: a Goodbye ends the
 * connection; a Bulk reply is read from its memfd. Caller holds the lock. */
static int recv_reply(struct wsrv_client *c, uint64_t seq, Wsrv__Response **out,
		      int *fds, int maxfds, int *nfds)
{
	int got[WSRV_MAX_FDS], n = 0;
	Wsrv__Response *r = NULL;
	long len = pkt_recv(c->fd, c->buf, c->max_packet, got, WSRV_MAX_FDS, &n);

	/* What the server sent unasked (a new generation) comes first; a
	 * server that sends nothing else is cut off after a bound. */
	for (int events = 0; len > 0 && (r = wsrv__response__unpack(NULL, (size_t)len, c->buf)) &&
	     r->body_case == WSRV__RESPONSE__BODY_EVENT; events++) {
		if (events == 4096) {
			wsrv__response__free_unpacked(r, NULL);
			pkt_close_fds(got, n);
			return cl_err(-EBADMSG, "the server sent events and no reply");
		}
		cl_note_event(c, r->event);
		wsrv__response__free_unpacked(r, NULL);
		pkt_close_fds(got, n);
		n = 0;
		len = pkt_recv(c->fd, c->buf, c->max_packet, got, WSRV_MAX_FDS, &n);
	}
	if (len > 0 && r)
		wsrv__response__free_unpacked(r, NULL);

	/* A server that refused us and closed may leave ECONNRESET ahead of
	 * its Error packet in our queue: the packet is the next receive. */
	if (len == -ECONNRESET)
		len = pkt_recv(c->fd, c->buf, c->max_packet, got, WSRV_MAX_FDS, &n);
	if (len == -EAGAIN || len == -EWOULDBLOCK)
		return cl_err(-ETIMEDOUT, "the server did not answer in time");
	if (len < 0)
		return cl_err(len == -EMSGSIZE ? -EBADMSG : -ENOTCONN,
			      "lost the server: %s", strerror((int)-len));
	r = wsrv__response__unpack(NULL, (size_t)len, c->buf);
	if (!r || (n > maxfds && !(r->body_case == WSRV__RESPONSE__BODY_BULK && n == 1))) {
		pkt_close_fds(got, n);
		if (r)
			wsrv__response__free_unpacked(r, NULL);
		return cl_err(-EBADMSG, "the server sent a malformed reply");
	}
	if (r->body_case == WSRV__RESPONSE__BODY_GOODBYE) {
		pkt_close_fds(got, n);
		wsrv__response__free_unpacked(r, NULL);
		c->goodbye = true;
		return cl_err(-ENOTCONN, "the server is stopping");
	}
	if (r->seq != seq && r->body_case != WSRV__RESPONSE__BODY_ERROR) {
		pkt_close_fds(got, n);
		wsrv__response__free_unpacked(r, NULL);
		return cl_err(-EBADMSG, "the server answered another request");
	}
	if (r->body_case == WSRV__RESPONSE__BODY_BULK) {
		int ret = n == 1 ? unbulk(got[0], &r)
			: cl_err(-EBADMSG, "the server sent a bulk reply with %d fds", n);
		pkt_close_fds(got, n);
		n = 0;
		if (ret < 0) {
			wsrv__response__free_unpacked(r, NULL);
			return ret;
		}
	}
	memcpy(fds, got, sizeof(int) * (size_t)n);
	*nfds = n;
	*out = r;
	return 0;
}

/* After a failed send: did the server say why before it left? */
static int lost(struct wsrv_client *c, int err)
{
	int fds[WSRV_MAX_FDS], n = 0;
	long len = recv(c->fd, c->buf, c->max_packet, MSG_DONTWAIT | MSG_PEEK);
	Wsrv__Response *r;

	if (len > 0 && (len = pkt_recv(c->fd, c->buf, c->max_packet, fds, WSRV_MAX_FDS, &n)) > 0) {
		pkt_close_fds(fds, n);
		r = wsrv__response__unpack(NULL, (size_t)len, c->buf);
		if (r && r->body_case == WSRV__RESPONSE__BODY_GOODBYE) {
			wsrv__response__free_unpacked(r, NULL);
			c->goodbye = true;
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

void cl_drop(struct wsrv_client *c)
{
	if (c->fd >= 0) {
		close(c->fd);
		c->fd = -1;
	}
}

int cl_call(struct wsrv_client *c, Wsrv__Request *req, Wsrv__Response **resp,
	    int *fds, int maxfds, int *nfds)
{
	return cl_call_fd(c, req, -1, resp, fds, maxfds, nfds);
}

int cl_exchange(struct wsrv_client *c, Wsrv__Request *req, int send_fd, Wsrv__Response **resp,
		int *fds, int maxfds, int *nfds)
{
	size_t len;
	int ret;

	if (c->fd < 0)
		return cl_err(-ENOTCONN, "not connected to the server (it stopped or was lost); connect again");
	req->seq = ++c->seq;
	len = wsrv__request__get_packed_size(req);
	if (len > c->max_packet)
		return cl_err(-EMSGSIZE, "request of %zu bytes is over the server's %u", len, c->max_packet);
	wsrv__request__pack(req, c->buf);
	ret = pkt_send(c->fd, c->buf, len, send_fd >= 0 ? &send_fd : NULL, send_fd >= 0);
	if (ret < 0)
		ret = lost(c, ret);
	else
		ret = recv_reply(c, req->seq, resp, fds, maxfds, nfds);
	if (ret == -ENOTCONN || ret == -ETIMEDOUT || ret == -EBADMSG || ret == -EACCES)
		cl_drop(c);
	return ret;
}

/* Under c->lock: cl_reconnect; when it fails, -ENOTCONN saying why the
 * connection went (why) and why it could not be made again. */
static int again(struct wsrv_client *c, const char *why)
{
	char was[256];
	int r;

	snprintf(was, sizeof(was), "%s", why);
	if ((r = cl_reconnect(c)) == 0)
		return 0;
	return cl_err(-ENOTCONN, "%s (connecting again: %s)", was, wsrv_last_error());
}

bool cl_hung_up(int fd)
{
	struct pollfd p = { .fd = fd, .events = POLLRDHUP };

	return fd < 0 || (poll(&p, 1, 0) == 1 && (p.revents & (POLLHUP | POLLRDHUP | POLLERR)));
}

int cl_revive(struct wsrv_client *c)
{
	int r = 0;

	pthread_mutex_lock(&c->lock);
	if (c->fd >= 0 && cl_hung_up(c->fd))
		cl_drop(c);
	if (c->fd < 0)
		r = c->path[0] ? again(c, "the server went away")
			       : cl_err(-ENOTCONN, "the server went away");
	pthread_mutex_unlock(&c->lock);
	return r;
}

int cl_call_fd(struct wsrv_client *c, Wsrv__Request *req, int send_fd, Wsrv__Response **resp,
	       int *fds, int maxfds, int *nfds)
{
	Wsrv__Response *r = NULL;
	int ret, n = 0;

	pthread_mutex_lock(&c->lock);
	/* A server that went away (a restart, a hand-over) is connected to
	 * again, once per call, and the request sent again there. */
	ret = 0;
	if (c->fd < 0 && c->path[0]) {
		ret = again(c, "not connected to the server");
		if (ret == 0)
			ret = cl_remap(c, req);
	}
	if (ret == 0)
		ret = cl_exchange(c, req, send_fd, &r, fds, maxfds, &n);
	if (ret == -ENOTCONN && c->path[0] && c->fd < 0 && (ret = again(c, wsrv_last_error())) == 0 &&
	    (ret = cl_remap(c, req)) == 0)
		ret = cl_exchange(c, req, send_fd, &r, fds, maxfds, &n);
	pthread_mutex_unlock(&c->lock);
	if (ret == 0 && r->body_case == WSRV__RESPONSE__BODY_ERROR) {
		ret = error_reply(r);
		wsrv__response__free_unpacked(r, NULL);
		pkt_close_fds(fds, n);
		return ret;
	}
	if (ret == 0) {
		*resp = r;
		*nfds = n;
	}
	return ret;
}

int cl_query(struct wsrv_client *c, Wsrv__Request *q, int want, Wsrv__Response **out,
	     const char *what)
{
	Wsrv__Response *r = NULL;
	int fds[1], n, ret = cl_call(c, q, &r, fds, 0, &n);

	if (ret < 0)
		return ret;
	if ((int)r->body_case != want) {
		wsrv__response__free_unpacked(r, NULL);
		return cl_err(-EBADMSG, "the server sent the wrong reply to %s", what);
	}
	*out = r;
	return 0;
}

/* Under c->lock. */
int cl_hello(struct wsrv_client *c)
{
	Wsrv__Request q = WSRV__REQUEST__INIT;
	Wsrv__Hello h = WSRV__HELLO__INIT;
	Wsrv__Response *r;
	int fds[1], n, ret;

	h.protocol = WSRV_PROTOCOL_VERSION;
	h.client_name = c->name;
	h.pid = (uint32_t)getpid();
	q.body_case = WSRV__REQUEST__BODY_HELLO;
	q.hello = &h;
	ret = cl_exchange(c, &q, -1, &r, fds, 0, &n);
	if (ret == 0 && r->body_case == WSRV__RESPONSE__BODY_ERROR) {
		ret = error_reply(r);
		wsrv__response__free_unpacked(r, NULL);
		cl_drop(c);
	}
	if (ret < 0)
		return ret;
	if (r->body_case != WSRV__RESPONSE__BODY_HELLO || !r->hello ||
	    r->hello->protocol != WSRV_PROTOCOL_VERSION) {
		wsrv__response__free_unpacked(r, NULL);
		return cl_err(-EPROTONOSUPPORT, "the server does not speak protocol %u", WSRV_PROTOCOL_VERSION);
	}
	/* Never trust a larger packet than ours. */
	if (r->hello->max_packet >= 1024 && r->hello->max_packet < c->max_packet)
		c->max_packet = r->hello->max_packet;
	snprintf(c->server_version, sizeof(c->server_version), "%s",
		 r->hello->server_version ? r->hello->server_version : "");
	wsrv__response__free_unpacked(r, NULL);
	return 0;
}

int cl_open_socket(const char *path, int timeout_ms)
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

WSRV_EXPORT int wsrv_connect(const char *path, const struct wsrv_connect_opts *opts,
			     struct wsrv_client **out)
{
	struct wsrv_connect_opts o;
	struct wsrv_client *c;
	int fd, ret;

	CL_NEED(out);
	if ((ret = CL_OPTS(opts, &o)) < 0)
		return ret;
	if (o.timeout_ms < 0)
		return cl_err(-EINVAL, "opts->timeout_ms is %d; it must be 0 or more", o.timeout_ms);
	if (!path && !(path = wsrv_default_socket()))
		return -ENAMETOOLONG;
	fd = cl_open_socket(path, o.timeout_ms > 0 ? o.timeout_ms : 10000);
	if (fd < 0)
		return fd;
	c = calloc(1, sizeof(*c));
	if (c)
		c->buf = malloc(WSRV_MAX_PACKET);
	if (!c || !c->buf) {
		free(c);
		close(fd);
		return cl_err(-ENOMEM, "out of memory");
	}
	c->fd = fd;
	c->refs = 1;
	c->max_packet = WSRV_MAX_PACKET;
	c->timeout_ms = o.timeout_ms > 0 ? o.timeout_ms : 10000;
	snprintf(c->path, sizeof(c->path), "%s", path);
	snprintf(c->name, sizeof(c->name), "%s", o.client_name ? o.client_name : "");
	pthread_mutex_init(&c->lock, NULL);
	pthread_mutex_lock(&c->lock);
	ret = cl_hello(c);
	/* Accepted by a server that was handing its socket over (wsrvd
	 * --take-over) and said Goodbye to our Hello: the socket now belongs
	 * to its successor, so a new connection is served. Twice at most. */
	for (int again = 0; ret == -ENOTCONN && c->goodbye && again < 2; again++) {
		cl_drop(c); /* closed already when the exchange failed */
		c->goodbye = false;
		c->seq = 0;
		c->fd = cl_open_socket(path, c->timeout_ms);
		ret = c->fd < 0 ? c->fd : cl_hello(c);
	}
	pthread_mutex_unlock(&c->lock);
	if (ret < 0) {
		cl_unref(c);
		return ret;
	}
	*out = c;
	return 0;
}

void cl_unref(struct wsrv_client *c)
{
	pthread_mutex_lock(&c->lock);
	unsigned left = --c->refs;
	pthread_mutex_unlock(&c->lock);
	if (left)
		return;
	cl_drop(c);
	pthread_mutex_destroy(&c->lock);
	free(c->buf);
	free(c);
}

bool cl_connected(struct wsrv_client *c)
{
	bool up;

	pthread_mutex_lock(&c->lock);
	up = c->fd >= 0;
	pthread_mutex_unlock(&c->lock);
	return up;
}

WSRV_EXPORT void wsrv_disconnect(struct wsrv_client *c)
{
	if (!c)
		return;
	pthread_mutex_lock(&c->lock);
	cl_drop(c);
	c->path[0] = 0; /* closed on purpose: never connected again */
	pthread_mutex_unlock(&c->lock);
	cl_unref(c);
}

