// SPDX-License-Identifier: MIT
/* loaded_door.h - the door of server/model/, a loaded model: loaded,
 * adopted, checked, reported: what other rooms may call and see of it. A
 * file outside the room includes this header, never one of its own
 * (tools/call-graph holds it); what is not named here is the room's alone. */
#ifndef WSRV_LOADED_DOOR_H
#define WSRV_LOADED_DOOR_H

#include "checksum_pass.h" /* every tensor's checksum over sealed bytes */
#include "load_args.h"     /* the options that say how models load */
#include "model_adopt.h"   /* a model served again from an earlier wsrvd's memfds */
#include "model_load.h"    /* files to a sealed arena: the whole load */
#include "report.h"        /* what a loaded model is, for people or scripts */

#endif
