// SPDX-License-Identifier: MIT
/* holds_door.h - the door of server/holds/, what clients hold: attachments,
 * leases, pieces, regions: what other rooms may call and see of it. A file
 * outside the room includes this header, never one of its own
 * (tools/call-graph holds it); what is not named here is the room's alone. */
#ifndef WSRV_HOLDS_DOOR_H
#define WSRV_HOLDS_DOOR_H

#include "srv_attach.h"      /* the Attach reply */
#include "srv_attachments.h" /* a session's attachments */
#include "srv_identity.h"    /* whom a client's holds count against */
#include "srv_leases.h"      /* a session's layer leases */
#include "srv_pieces.h"      /* AttachSegments: a model's pieces handed out */
#include "srv_region.h"      /* device regions, brokered */

#endif
