// SPDX-License-Identifier: MIT
/* srv_handover.h - restarting without reloading: memfds and a state record
 * kept in systemd's fd store, adopted by the next wsrvd. */
#ifndef WSRV_SRV_HANDOVER_H
#define WSRV_SRV_HANDOVER_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct server;

/* An fd received by name. */
struct handed {
	char name[64];
	int fd;                     /* owned; -1 once taken */
};

struct handover {
	struct handed *v;
	size_t n;
	json_t *state;              /* the predecessor's state record, or NULL */
	double started;             /* the first start (unix seconds), this one's if none */
};

/* An empty hand-over (started: now). */
void handover_init(struct handover *h);
/* Adds fd (taken) by name; then handover_read_state reads and takes the
 * state record among them. */
int handover_add(struct handover *h, const char *name, int fd);
void handover_read_state(struct handover *h);
/* srv's state record in a sealed memfd (the caller owns it), or -errno. */
int handover_state_fd(const struct server *srv, double started);

/* The fds a predecessor left (LISTEN_FDS / LISTEN_FDNAMES, checked against
 * LISTEN_PID), and its state record. Always 0: nothing inherited is fine. */
int handover_collect(struct handover *h);
/* The fd called name (the caller owns it), or -1. */
int handover_take(struct handover *h, const char *name);
/* The predecessor's model `name`: its index (the fds are "m<i>-manifest"
 * and "m<i>-seg<k>"), generation, segment count, files' identity and path
 * (into h's state: valid until handover_done); -1 when it served no such
 * model. The path is the one it served, which a reload may have changed
 * from the command line's: a successor adopts what was served, not what
 * its own command line names. */
int handover_model(const struct handover *h, const char *name, uint64_t *generation, uint32_t *nseg,
		   uint64_t *files, const char **path);
/* Says, once each in a warning, which of the predecessor's models are
 * not among names[0..n): a take-over or restart with another --model list
 * serves them no more, and their memory goes with the hand-over's. */
void handover_say_dropped(const struct handover *h, const char *const *names, int n);
/* Closes what nobody took. */
void handover_done(struct handover *h);

/* Under systemd (NOTIFY_SOCKET), replaces the store's content (what h
 * held, NULL: none, and what srv pushed before) with srv's current
 * generations' memfds and its state record. 0 or the notify error. */
int handover_store(struct server *srv, const struct handover *h);

#endif
