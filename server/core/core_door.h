// SPDX-License-Identifier: MIT
/* core_door.h - the door of server/core/, wsrvd's core: its state, the model
 * table, replies, counters: what other rooms may call and see of it. A file
 * outside the room includes this header, never one of its own
 * (tools/call-graph holds it); what is not named here is the room's alone. */
#ifndef WSRV_CORE_DOOR_H
#define WSRV_CORE_DOOR_H

#include "srv.h"              /* the server: its models, sessions and limits */
#include "srv_access.h"       /* who may reach the socket (the allow lists) */
#include "srv_counters.h"     /* what it counts for the metrics */
#include "srv_fdlimit.h"      /* the client limit fitted to RLIMIT_NOFILE */
#include "srv_models.h"       /* a model's generations: which one serves new attaches */
#include "srv_refuse.h"       /* a connection turned away, with its reason */
#include "srv_region_table.h" /* the device regions' table */
#include "srv_reply.h"        /* a reply's packet, or an Error */

#endif
