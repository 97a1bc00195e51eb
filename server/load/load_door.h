// SPDX-License-Identifier: MIT
/* load_door.h - the door of server/load/, a model's shared memory (the
 * arena) and the loader: what other rooms may call and see of it. A file
 * outside the room includes this header, never one of its own
 * (tools/call-graph holds it); what is not named here is the room's alone. */
#ifndef WSRV_LOAD_DOOR_H
#define WSRV_LOAD_DOOR_H

#include "arena.h"       /* a model's shared memory: create, fill, seal, read */
#include "arena_folio.h" /* 2 MiB folios made chunk by chunk */
#include "arena_sweep.h" /* 2 MiB folios made after a load or an adoption */
#include "folio_probe.h" /* whether this host writes straight into 2 MiB folios */
#include "loader.h"      /* a model's files read into its arena with io_uring */
#include "loader_pool.h" /* a loader's ring and read buffers, kept across reads */
#include "piece_read.h"  /* what the arena and the loader offer a disk tier */
#include "ready_page.h"  /* a loading model's readiness page */
#include "xxh3_stream.h" /* streaming xxh3-64 on the widest vector unit */

#endif
