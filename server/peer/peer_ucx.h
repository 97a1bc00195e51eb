// SPDX-License-Identifier: MIT
/* peer_ucx.h - the UCX steps both sides of a peer connection take: a
 * context and worker for active messages, a handler, a forced close. */
#ifndef WSRV_PEER_UCX_H
#define WSRV_PEER_UCX_H

#include <stdbool.h>
#include <ucp/api/ucp.h>

#include "errinfo.h"

/* A context with active messages only (and wakeup when asked: a worker
 * fd to wait on) and a single-threaded worker. On failure what was made
 * is left in *ctx / *worker for the caller's cleanup. */
int peer_ucx_open(bool wakeup, ucp_context_h *ctx, ucp_worker_h *worker, struct errinfo *e);

/* Sets cb(arg) as the handler of active message id. 0 or -EIO. */
int peer_ucx_handler(ucp_worker_h worker, unsigned id, ucp_am_recv_callback_t cb, void *arg);

/* An eager message's data of len bytes as one record of size n, copied
 * into out (message bytes come unaligned); false when it is not one. */
bool peer_ucx_record(const ucp_am_recv_param_t *p, const void *data, size_t len, void *out, size_t n);

/* Closes ep at once: its outstanding operations complete, failed, during
 * progress. Returns the close's request (NULL when done already); the
 * caller frees it (ucp_request_free), after waiting for it if it must. */
void *peer_ucx_close(ucp_ep_h ep);

/* UCX is to use only the network device that holds addr ("ADDR:PORT"):
 * its TCP data lanes then listen on that address alone, not on every
 * interface. Sets UCX_NET_DEVICES, unless the operator set it, before
 * the context is made; nothing for an address no device holds
 * (0.0.0.0). */
void peer_ucx_only_device_of(const char *addr);

#endif
