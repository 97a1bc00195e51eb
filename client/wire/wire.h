// SPDX-License-Identifier: MIT
/* wire.h - libwsrv's lowest room: errors, options, and the session with
 * wsrvd (a transport at a time, connected again when the server went
 * away). It knows no model: the model room above it sets the session's
 * hooks (replay, events) at its first attach, so no call runs back up. */
#ifndef WSRV_CLIENT_WIRE_H
#define WSRV_CLIENT_WIRE_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <string.h>

#include "transport.h"
#include "wsrv.h"
#include "wsrv.pb-c.h"

struct wsrv_model;

/* A session (session.c): what the caller holds, over one transport at a
 * time. */
struct wsrv_client {
	struct cl_wire w;            /* under lock */
	pthread_mutex_t lock;        /* one request at a time; the fields below */
	unsigned refs;               /* the caller's, plus one per model */
	/* To connect again after the server restarted. */
	char path[108];              /* "" once disconnected on purpose */
	char name[65];
	int timeout_ms;
	/* Under lock, on a new connection: attaches again what was attached
	 * through this session; set by the model room (NULL: nothing is). */
	int (*replay)(struct wsrv_client *c);
	struct wsrv_model *models;   /* the model room's list (not owned) */
	unsigned reconnects;
};

/* Marks a definition as part of the ABI; everything else is hidden
 * (-fvisibility=hidden), and libwsrv.map names each symbol's version. */
#define WSRV_EXPORT __attribute__((visibility("default")))

/* Returns -EINVAL with a sentence naming the function when p is NULL. */
#define CL_NEED(p) do { \
	if (!(p)) \
		return cl_err(-EINVAL, "%s: %s is NULL", __func__, #p); \
} while (0)

/* A result struct, zeroed, with its size set (see wsrv.h). */
#define CL_RESULT(out) do { \
	memset((out), 0, sizeof(*(out))); \
	(out)->struct_size = sizeof(*(out)); \
} while (0)

/* A getter's prelude: obj and out are not NULL, found (an expression
 * that records its own error, such as an index out of range) is true, and
 * out is a zeroed result struct with its size set; else -EINVAL or
 * -ERANGE. */
#define CL_GET(obj, out, found) do { \
	CL_NEED(obj); \
	CL_NEED(out); \
	if (!(found)) \
		return -ERANGE; \
	CL_RESULT(out); \
} while (0)

/* Copies the caller's options o (NULL: none, every field its default) into
 * copy, lib_size bytes zeroed first. o's first field is its size: less
 * than min_size (the first version's) is -EINVAL; a tail past lib_size
 * must be zero (-E2BIG), and so must the bytes from reserved_off on
 * (-EINVAL). what (the caller's name) starts the sentence. (opts.c) */
int cl_opts(const void *o, void *copy, size_t lib_size, size_t min_size,
	    size_t reserved_off, const char *what);
#define CL_OPTS(o, copy) cl_opts((o), (copy), sizeof(*(copy)), sizeof(*(copy)), \
				 offsetof(__typeof__(*(copy)), reserved), __func__)

/* Records the sentence for wsrv_last_error and returns code. (error.c) */
int cl_err(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* cl_err with the error already set kept after fmt: "fmt: earlier". */
int cl_wrap(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void cl_debug(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* A string the server sent, never NULL. */
static inline const char *cl_str(const char *s)
{
	return s ? s : "";
}

/* Is the connection still up? Takes the client's lock. */
bool cl_connected(struct wsrv_client *c);
void cl_unref(struct wsrv_client *c);

/* Sends req and receives its Response (caller frees with
 * wsrv__response__free_unpacked) and up to maxfds fds (owned by the caller
 * on success), as wire_call does. A server that went away is connected to
 * again first (and c->replay run), and the request sent there. Takes the
 * client's lock. */
int cl_call(struct wsrv_client *c, Wsrv__Request *req, Wsrv__Response **resp,
	    int *fds, int maxfds, int *nfds);
/* cl_call that sends send_fd (>= 0; the caller keeps it) with the request. */
int cl_call_fd(struct wsrv_client *c, Wsrv__Request *req, int send_fd, Wsrv__Response **resp,
	       int *fds, int maxfds, int *nfds);
/* cl_call that, under the lock and on the connection the request goes
 * out on, runs aim(arg) first: a request that names what the current
 * server knows by an id writes the id there (a reconnect changes it). A
 * negative return of aim is the call's. */
int cl_call_aimed(struct wsrv_client *c, int (*aim)(void *arg), void *arg, Wsrv__Request *req,
		  Wsrv__Response **resp, int *fds, int maxfds, int *nfds);
/* cl_call for a request whose reply carries no fds and must be of body
 * case want; what names the request in the sentence. */
int cl_query(struct wsrv_client *c, Wsrv__Request *q, int want, Wsrv__Response **out,
	     const char *what);

/* Takes c->lock: when the server hung up (it died or restarted), closes
 * the connection and connects again, replaying what was attached (the
 * one place a waiter's reconnect happens). 0 when the connection was
 * there, 1 when it was made again, <0 when it could not be. */
int cl_revive(struct wsrv_client *c);

#endif
