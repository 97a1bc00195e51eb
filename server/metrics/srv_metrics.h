// SPDX-License-Identifier: MIT
/* srv_metrics.h - --metrics-listen: GET /metrics in Prometheus' text
 * format, served by libmicrohttpd on a thread of its own from the last
 * snapshot the loop published. The loop never waits on it: a publish that
 * finds the HTTP thread copying the snapshot keeps its text for the next
 * one. */
#ifndef WSRV_SRV_METRICS_H
#define WSRV_SRV_METRICS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "errinfo.h"
#include "core_door.h"

struct srv_metrics;

/* Listens on addr ("IP:PORT", "[IPv6]:PORT"; numeric, port 0 for any) and
 * serves from a thread: 0, or a negative errno with e set. *out is the
 * caller's (srv_metrics_stop). It listens with SO_REUSEPORT; share_port
 * (--take-over: the old server listens until it hands over) binds beside
 * a server of the same user that has the port, and otherwise a port in use
 * is refused, so that two servers never answer one port by mistake. */
/* Checks --metrics-listen's value as srv_metrics_start reads it, without
 * binding: 0, or -EINVAL with the sentence in e. */
int srv_metrics_check(const char *addr, struct errinfo *e);
int srv_metrics_start(const char *addr, bool share_port, struct srv_metrics **out, struct errinfo *e);

/* The port it listens on (the one chosen, for port 0). */
uint16_t srv_metrics_port(const struct srv_metrics *m);

/* Hands the server text (malloc'd, len bytes) to the HTTP side, which owns
 * it from then on. Never blocks. */
void srv_metrics_publish(struct srv_metrics *m, char *text, size_t len);

/* Ends every connection whose request has taken longer than the
 * deadline (srv_metrics.c); the tick calls it once a second. */
void srv_metrics_sweep(struct srv_metrics *m);

/* Stops the thread and frees everything; m may be NULL. */
void srv_metrics_stop(struct srv_metrics *m);

/* srv's state as exposition text (srv_metrics_text.c): *out malloc'd. */
int srv_metrics_render(const struct server *srv, char **out, size_t *len);

/* Renders and publishes when srv serves metrics (the loop's tick). */
void srv_metrics_tick(struct server *srv);

#endif
