// SPDX-License-Identifier: MIT
/* session.c - a client's session with wsrvd, over one transport at a
 * time, and a new transport when the server went away (with what was
 * attached through it attached again: c->replay, the model room's). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <stdbool.h>

#include "wire.h"
#include "sockpath.h"
#include "clock.h"

WSRV_EXPORT const char *wsrv_default_socket(void)
{
	static __thread char buf[SOCKPATH_MAX];
	char err[256];
	bool fallback;
	int r = sockpath_client(SOCKPATH_SYSTEM, buf, sizeof(buf), &fallback, err, sizeof(err));

	if (r < 0) {
		cl_err(r, "%s", err);
		return NULL;
	}
	return buf;
}

/* Under c->lock, with no connection: connects to c->path again and
 * attaches every model of c there; when that fails, -ENOTCONN saying
 * why the connection went (why) and why it could not be made again. */
static int again(struct wsrv_client *c, const char *why)
{
	char was[256];
	int r;

	snprintf(was, sizeof(was), "%s", why);
	r = wire_connect(&c->w, c->path, c->timeout_ms, c->name);
	if (r == 0) {
		c->reconnects++;
		if (!c->replay || (r = c->replay(c)) == 0)
			return 0;
	}
	return cl_err(-ENOTCONN, "%s; connecting again failed: %s", was, wsrv_last_error());
}

int cl_revive(struct wsrv_client *c)
{
	int r = 0;

	pthread_mutex_lock(&c->lock);
	if (wire_hung_up(&c->w))
		wire_close(&c->w);
	if (c->w.fd < 0)
		r = !c->path[0] ? cl_err(-ENOTCONN, "the server went away")
				: (r = again(c, "the server went away")) < 0 ? r : 1;
	pthread_mutex_unlock(&c->lock);
	return r;
}

/* Under c->lock: aim(arg) for the connection about to carry the request
 * (aim NULL: the request names nothing the server gave an id). */
static int aim_at(int (*aim)(void *arg), void *arg)
{
	return aim ? aim(arg) : 0;
}

/* Whether q may be sent again on a new connection after the old one
 * went with q asked and unanswered: what it did (if anything) belonged
 * to the old session, which the server ended with it (its attachments,
 * leases, holds and regions' holds go), so asking again on the new one
 * does it once. A request that changes the server's own state, beyond
 * any session, would be done twice: a reload, a publish step, a
 * take-over step; and a region's commit or a stream's report, whose
 * session is gone, would be refused or counted twice. */
static bool repeats(const Wsrv__Request *q)
{
	switch (q->body_case) {
	case WSRV__REQUEST__BODY_LIST_MODELS:
	case WSRV__REQUEST__BODY_ATTACH:
	case WSRV__REQUEST__BODY_FETCH_LAYER:
	case WSRV__REQUEST__BODY_RELEASE:
	case WSRV__REQUEST__BODY_DETACH:
	case WSRV__REQUEST__BODY_STATS:
	case WSRV__REQUEST__BODY_REGION_OPEN:
	case WSRV__REQUEST__BODY_REGION_CLOSE:
	case WSRV__REQUEST__BODY_ATTACH_SEGMENTS:
		return true;
	default:
		return false;
	}
}

/* Under c->lock: the call after the connection went (c->w closed; why:
 * its sentence): connected again, the request is sent again unless it
 * went out unanswered and does not repeat; then -ECONNRESET says the
 * outcome is unknown. */
static int call_again(struct wsrv_client *c, int (*aim)(void *arg), void *arg, Wsrv__Request *req, int send_fd,
		      Wsrv__Response **resp, int *fds, int maxfds, int *nfds)
{
	bool asked = c->w.unanswered;
	char why[256];
	int ret;

	snprintf(why, sizeof(why), "%s", wsrv_last_error());
	if ((ret = again(c, why)) < 0)
		return ret;
	if (asked && !repeats(req))
		return cl_err(-ECONNRESET, "%s after the request went out: whether the server did it is unknown, and it is not asked twice (see wsrvctl status)",
			      why);
	if ((ret = aim_at(aim, arg)) < 0)
		return ret;
	return wire_call(&c->w, req, send_fd, resp, fds, maxfds, nfds);
}

static int session_call(struct wsrv_client *c, int (*aim)(void *arg), void *arg, Wsrv__Request *req,
		int send_fd, Wsrv__Response **resp, int *fds, int maxfds, int *nfds)
{
	int ret = 0;

	pthread_mutex_lock(&c->lock);
	/* A server that went away (a restart, a hand-over) is connected to
	 * again, once per call, and the request sent again there when that
	 * cannot do it twice (repeats). */
	if (c->w.fd < 0 && c->path[0])
		ret = again(c, "not connected to the server");
	if (ret == 0 && (ret = aim_at(aim, arg)) == 0)
		ret = wire_call(&c->w, req, send_fd, resp, fds, maxfds, nfds);
	if (ret == -ENOTCONN && c->path[0] && c->w.fd < 0)
		ret = call_again(c, aim, arg, req, send_fd, resp, fds, maxfds, nfds);
	pthread_mutex_unlock(&c->lock);
	return ret;
}

int cl_call(struct wsrv_client *c, Wsrv__Request *req, Wsrv__Response **resp,
	    int *fds, int maxfds, int *nfds)
{
	return session_call(c, NULL, NULL, req, -1, resp, fds, maxfds, nfds);
}

int cl_call_fd(struct wsrv_client *c, Wsrv__Request *req, int send_fd, Wsrv__Response **resp,
	       int *fds, int maxfds, int *nfds)
{
	return session_call(c, NULL, NULL, req, send_fd, resp, fds, maxfds, nfds);
}

int cl_call_aimed(struct wsrv_client *c, int (*aim)(void *arg), void *arg, Wsrv__Request *req,
		  Wsrv__Response **resp, int *fds, int maxfds, int *nfds)
{
	return session_call(c, aim, arg, req, -1, resp, fds, maxfds, nfds);
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

/* wsrv_connect(NULL) found no server: where it looked, and how to say
 * where one is. */
static int no_default_server(int r)
{
	const char *x = getenv("XDG_RUNTIME_DIR"), *s = getenv("WSRV_SOCKET");

	if (r != -ENOENT && r != -ECONNREFUSED)
		return r;
	if (s && *s)
		return cl_wrap(r, "no wsrvd on $WSRV_SOCKET");
	if (x && *x)
		return cl_wrap(r, "no wsrvd on the default socket: $XDG_RUNTIME_DIR/wsrv.sock (%s/wsrv.sock), "
			       "nor on the system service's %s; set WSRV_SOCKET (wsrvctl: --socket) to "
			       "where wsrvd listens", x, SOCKPATH_SYSTEM);
	return cl_wrap(r, "no wsrvd on the default socket, the system service's %s; set WSRV_SOCKET "
		       "(wsrvctl: --socket) to where wsrvd listens", SOCKPATH_SYSTEM);
}

static struct wsrv_client *client_new(const char *path, int timeout_ms, const char *name)
{
	struct wsrv_client *c = calloc(1, sizeof(*c));

	if (!c || wire_init(&c->w, NULL, c) < 0) {
		free(c);
		return NULL;
	}
	c->refs = 1;
	c->timeout_ms = timeout_ms;
	snprintf(c->path, sizeof(c->path), "%s", path);
	snprintf(c->name, sizeof(c->name), "%s", name ? name : "");
	pthread_mutex_init(&c->lock, NULL);
	return c;
}

/* Whether r says that no server answers on the path yet. */
static bool nobody_there(int r)
{
	return r == -ENOENT || r == -ECONNREFUSED || r == -EAGAIN;
}

/* wire_connect, tried again every 100 ms while nobody answers, until
 * wait_ms have passed (0: once). Under c->lock. */
static int connect_waiting(struct wsrv_client *c, const char *path, int32_t wait_ms)
{
	double until = mono_now() + wait_ms / 1e3;
	int r;

	while (nobody_there(r = wire_connect(&c->w, path, c->timeout_ms, c->name)) && wait_ms > 0 &&
	       mono_now() < until)
		usleep(100 * 1000);
	if (nobody_there(r) && wait_ms > 0)
		return cl_err(r, "no wsrvd answered on %s within %.1f s of waiting (%s)", path, wait_ms / 1e3,
			      strerror(-r));
	return r;
}

WSRV_EXPORT int wsrv_connect(const char *path, const struct wsrv_connect_opts *opts,
			     struct wsrv_client **out)
{
	struct wsrv_connect_opts o;
	struct wsrv_client *c;
	int ret;

	CL_NEED(out);
	if ((ret = CL_OPTS(opts, &o)) < 0)
		return ret;
	if (o.timeout_ms < 0 || o.wait_ms < 0)
		return cl_err(-EINVAL, "opts->%s is %d; it must be 0 or more", o.timeout_ms < 0 ? "timeout_ms" : "wait_ms",
			      o.timeout_ms < 0 ? o.timeout_ms : o.wait_ms);
	bool by_default = !path;

	if (!path && !(path = wsrv_default_socket()))
		return -ENAMETOOLONG;
	c = client_new(path, o.timeout_ms > 0 ? o.timeout_ms : 10000, o.client_name);
	if (!c)
		return cl_err(-ENOMEM, "out of memory");
	pthread_mutex_lock(&c->lock);
	ret = connect_waiting(c, path, o.wait_ms);
	pthread_mutex_unlock(&c->lock);
	if (ret < 0) {
		cl_unref(c);
		return by_default ? no_default_server(ret) : ret;
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
	wire_fini(&c->w);
	pthread_mutex_destroy(&c->lock);
	free(c);
}

bool cl_connected(struct wsrv_client *c)
{
	bool up;

	pthread_mutex_lock(&c->lock);
	up = c->w.fd >= 0;
	pthread_mutex_unlock(&c->lock);
	return up;
}

WSRV_EXPORT void wsrv_disconnect(struct wsrv_client *c)
{
	if (!c)
		return;
	pthread_mutex_lock(&c->lock);
	wire_close(&c->w);
	c->path[0] = 0; /* closed on purpose: never connected again */
	pthread_mutex_unlock(&c->lock);
	cl_unref(c);
}

WSRV_EXPORT int wsrv_client_fd(struct wsrv_client *c)
{
	int fd;

	CL_NEED(c);
	pthread_mutex_lock(&c->lock);
	fd = c->w.fd;
	pthread_mutex_unlock(&c->lock);
	return fd >= 0 ? fd : cl_err(-ENOTCONN, "not connected to the server");
}
