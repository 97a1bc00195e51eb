// SPDX-License-Identifier: MIT
/* generations_door.h - the door of server/generations/, serving while
 * loading, reloads, publishes, restarts: what other rooms may call and see
 * of it. A file outside the room includes this header, never one of its own
 * (tools/call-graph holds it); what is not named here is the room's alone. */
#ifndef WSRV_GENERATIONS_DOOR_H
#define WSRV_GENERATIONS_DOOR_H

#include "srv_early.h"     /* serving while loading */
#include "srv_handover.h"  /* restarts through systemd's fd store */
#include "srv_peers.h"     /* the options of hosts that fill from each other */
#include "srv_publish.h"   /* a producer publishing a generation */
#include "srv_reload.h"    /* a new generation from files while workers run */
#include "srv_successor.h" /* the taking side of a take-over */
#include "srv_takeover.h"  /* the serving side of a take-over */

#endif
