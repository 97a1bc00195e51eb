// SPDX-License-Identifier: MIT
/* copy_client.h - a worker's side of the copy service, wsrv-copyd
 * (proto/copy.proto; docs/design/copy-service.md, "The copy service"): one connection,
 * a buffer (an exported device allocation) mapped there, runs copied into
 * it from the model's pages the service holds page-locked, and unmapped.
 * Every call is synchronous; an error is a negative errno with a sentence
 * (wsrv_last_error), and the caller then copies by itself. */
#ifndef WSRV_COPY_CLIENT_H
#define WSRV_COPY_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "copy.pb-c.h"

#define WSRV_COPY_PROTOCOL 1u
/* Where workers look for the service when $WSRV_COPYD does not say (the
 * unit's RuntimeDirectory=wsrv-copyd). */
#define WSRV_COPYD_SOCKET "/run/wsrv-copyd/copyd.sock"
/* Runs in one CopyRuns request at most (each under 64 bytes packed: the
 * request fits a packet). */
#define WSRV_COPY_RUNS_MAX 800u
/* CopyRuns requests sent and not yet answered, at most: the service
 * copies one while the worker gathers the next. */
#define COPY_IN_FLIGHT 4

/* One copy (CopyRun). */
struct copy_run {
	uint32_t segment;
	uint64_t src_off, width, height, pitch, dst_off;
};

struct copy_conn;

/* The service's socket: $WSRV_COPYD, else WSRV_COPYD_SOCKET; NULL when
 * $WSRV_COPYD is "off" (or empty). */
const char *copy_service_path(void);

/* Connects to the service at path. 0 and *out (the caller's: copy_close),
 * or a negative errno with a sentence. */
int copy_connect(const char *path, struct copy_conn **out);
void copy_close(struct copy_conn *c);

/* Hands the service fd (an exported allocation of len bytes on the device
 * named device; fd stays the caller's). 0 and *buffer, or <0. */
int copy_map(struct copy_conn *c, const char *device, int fd, uint64_t len, uint32_t *buffer);
/* Asks for runs[0..n) (n <= WSRV_COPY_RUNS_MAX) of generation gen of
 * model (identity: what its bytes are, cl_model_identity) to be copied into
 * buffer, without waiting: at most
 * COPY_IN_FLIGHT such requests unanswered (the service answers them in
 * order, each once its bytes have landed). 0 or <0. */
int copy_runs_send(struct copy_conn *c, uint32_t buffer, const char *model, uint64_t gen, uint64_t identity,
		   const struct copy_run *runs, size_t n);
/* Waits for the oldest unanswered one: 0 and *bytes, or <0 (some may
 * have landed: the caller copies them again). */
int copy_runs_wait(struct copy_conn *c, uint64_t *bytes);
unsigned copy_runs_pending(const struct copy_conn *c);
int copy_unmap(struct copy_conn *c, uint32_t buffer);
/* The service's counters: 0 and *out (its stats body set; the caller
 * frees it with wsrv__copy_response__free_unpacked), or <0. */
int copy_stats(struct copy_conn *c, Wsrv__CopyResponse **out);

#endif
