// SPDX-License-Identifier: MIT
/* serving_door.h - the door of server/serving/, the io_uring loop that
 * serves every client: what other rooms may call and see of it. A file
 * outside the room includes this header, never one of its own
 * (tools/call-graph holds it); what is not named here is the room's alone. */
#ifndef WSRV_SERVING_DOOR_H
#define WSRV_SERVING_DOOR_H

#include "srv_loop.h" /* the one io_uring event loop */

#endif
