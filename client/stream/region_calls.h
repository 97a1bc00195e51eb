// SPDX-License-Identifier: MIT
/* region_calls.h - the device-region requests to the server. */
#ifndef WSRV_REGION_CALLS_H
#define WSRV_REGION_CALLS_H

#include "model_door.h"
#include "device.h"

struct region_answer {
	int role;                   /* a Wsrv__RegionRole */
	uint32_t id;                /* 0 with REGION_WAIT */
	uint32_t writer_pid;
	int fd;                     /* a reader's handle, owned by the caller; else -1 */
};

/* RegionOpen for model m's attachment, keyed by device (an identity, or
 * a layer shard's key) and kind; read_only: never made the writer (WAIT
 * until someone commits it). */
int region_call_open(struct wsrv_model *m, const char *device, int kind, uint64_t fingerprint,
		     uint64_t bytes, bool read_only, struct region_answer *out);
/* RegionCommit with the handle fd (the caller keeps its copy). */
int region_call_commit(struct wsrv_model *m, uint32_t id, int fd);
int region_call_close(struct wsrv_model *m, uint32_t id);

#endif
