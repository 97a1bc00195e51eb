// SPDX-License-Identifier: MIT
/* tier_door.h - the door of server/tier/, a memory budget and a disk tier:
 * what other rooms may call and see of it. A file outside the room includes
 * this header, never one of its own (tools/call-graph holds it); what is not
 * named here is the room's alone. */
#ifndef WSRV_TIER_DOOR_H
#define WSRV_TIER_DOOR_H

#include "tier.h"       /* a memory budget and a disk tier for one model */
#include "tier_plan.h"  /* what a budget keeps in memory and what goes to disk */
#include "tier_units.h" /* routed experts as units of the tier */

#endif
