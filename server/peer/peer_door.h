// SPDX-License-Identifier: MIT
/* peer_door.h - the door of server/peer/, hosts filling from each other:
 * what other rooms may call and see of it. A file outside the room includes
 * this header, never one of its own (tools/call-graph holds it); what is not
 * named here is the room's alone. */
#ifndef WSRV_PEER_DOOR_H
#define WSRV_PEER_DOOR_H

#include "peer_child.h" /* the peer process */
#include "peer_fill.h"  /* a model filled from peers, the files for the rest */
#include "peer_serve.h" /* wsrvd --peer-listen */

#endif
