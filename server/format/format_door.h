// SPDX-License-Identifier: MIT
/* format_door.h - the door of server/format/, safetensors files read into a
 * model; its manifest written: what other rooms may call and see of it. A
 * file outside the room includes this header, never one of its own
 * (tools/call-graph holds it); what is not named here is the room's alone. */
#ifndef WSRV_FORMAT_DOOR_H
#define WSRV_FORMAT_DOOR_H

#include "file_open.h"      /* opening a regular file, never a device or a FIFO */
#include "layer_name.h"     /* which layer a tensor belongs to, from its name */
#include "manifest_write.h" /* a loaded model's manifest, in its own sealed memfd */
#include "model.h"          /* a model: its files, tensors, layers and layout */
#include "st_reader.h"      /* one .safetensors header, read strictly */

#endif
