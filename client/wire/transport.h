// SPDX-License-Identifier: MIT
/* transport.h - one connection to wsrvd: a socket, the handshake, and
 * one request and its reply at a time, with the fds both carry. It never
 * connects again and knows no model: the session (session.c) above it
 * does both. Not thread-safe: the session's lock guards it. */
#ifndef WSRV_CLIENT_TRANSPORT_H
#define WSRV_CLIENT_TRANSPORT_H

#include <stdbool.h>
#include <stdint.h>

#include "wsrv.pb-c.h"

/* What the server sends unasked (a new generation), handed to the
 * session as it is read. */
typedef void (*cl_event_fn)(void *user, const Wsrv__Event *ev);

struct cl_wire {
	int fd;                      /* -1 once closed */
	bool goodbye;                /* the server said Goodbye (stopping or replaced) */
	bool unanswered;             /* the last wire_call's request went out and
	                              * its reply never came: done or not, unknown */
	uint64_t seq;
	uint32_t max_packet;
	uint8_t *buf;                /* WSRV_MAX_PACKET bytes (owned) */
	char server_version[32];
	cl_event_fn on_event;        /* may be NULL */
	void *user;
};

/* Sets w up, closed, with its buffer: 0 or -ENOMEM. */
int wire_init(struct cl_wire *w, cl_event_fn on_event, void *user);
/* Closes w and frees its buffer. */
void wire_fini(struct cl_wire *w);

/* Connects w (closed) to the server at path, with receive and send
 * timeouts of timeout_ms, and says Hello as name. A server handing its
 * socket over (wsrvd --take-over) says Goodbye to the Hello: its successor
 * is asked, twice at most. 0, or a negative errno with a sentence (w is
 * closed then). */
int wire_connect(struct cl_wire *w, const char *path, int timeout_ms, const char *name);

/* Sends req (its seq set here) with send_fd (>= 0; the caller keeps it)
 * and receives its Response (the caller frees it with
 * wsrv__response__free_unpacked) and up to maxfds fds (the caller's on
 * success). An Error reply becomes its negative code and sentence. A
 * connection that broke, timed out or sent nonsense is closed: -ENOTCONN,
 * -ETIMEDOUT or -EBADMSG. */
int wire_call(struct cl_wire *w, Wsrv__Request *req, int send_fd, Wsrv__Response **resp,
	      int *fds, int maxfds, int *nfds);

/* Reads what the server sent unasked and is waiting, without blocking;
 * closes w when the server hung up or said Goodbye. */
void wire_read_events(struct cl_wire *w);

/* Whether w is closed, or hung up by the server. */
bool wire_hung_up(const struct cl_wire *w);
/* Closes the connection (w stays set up). */
void wire_close(struct cl_wire *w);

/* Checks an fd the server sent: a regular file of at least want bytes,
 * sealed against resizing and writes. Sets *size to its size. 0, or
 * -EBADMSG (or fstat's errno) with a sentence naming what. */
int cl_check_fd(int fd, const char *what, uint64_t want, uint64_t *size);
/* cl_check_fd of a disk tier's piece, which the server may cut to nothing
 * once every holder let it go: sealed against writes and growth, not
 * necessarily against shrinking (memfd_check_cuttable). */
int cl_check_piece_fd(int fd, uint64_t want, uint64_t *size);

#endif
