// SPDX-License-Identifier: MIT
/* metrics_door.h - the door of server/metrics/, the Stats reply and the
 * Prometheus endpoint: what other rooms may call and see of it. A file
 * outside the room includes this header, never one of its own
 * (tools/call-graph holds it); what is not named here is the room's alone. */
#ifndef WSRV_METRICS_DOOR_H
#define WSRV_METRICS_DOOR_H

#include "srv_metrics.h" /* --metrics-listen: GET /metrics */
#include "srv_stats.h"   /* the Stats reply */

#endif
