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

/* RegionOpen for model m's attachment, on the device info describes. */
int region_call_open(struct wsrv_model *m, const struct dev_share_info *info, uint64_t fingerprint,
		     uint64_t bytes, struct region_answer *out);
/* RegionCommit with the handle fd (the caller keeps its copy). */
int region_call_commit(struct wsrv_model *m, uint32_t id, int fd);
int region_call_close(struct wsrv_model *m, uint32_t id);

#endif
