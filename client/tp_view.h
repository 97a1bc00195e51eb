// SPDX-License-Identifier: MIT
/* tp_view.h - tensor-parallel views: what rank r of W sees of each tensor
 * under a tp_plan, as one 2-D copy (height rows of width bytes, pitch
 * apart) from the tensor's bytes. */
#ifndef WSRV_TP_VIEW_H
#define WSRV_TP_VIEW_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "client_internal.h"
#include "manifest.h"

struct tp_view {
	bool present;               /* false: another rank's expert */
	uint32_t rank;
	uint64_t shape[MF_MAX_RANK];
	uint64_t src_off;           /* first byte, from the tensor's start */
	uint64_t width, height, pitch;
	uint64_t bytes;             /* width * height, packed on the device */
};

/* Resolves every tensor of m for rank of world under tp_plan (a JSON object
 * pattern -> strategy; NULL or world 1: every tensor whole) into views
 * (ntensors entries). Returns 0, or -EINVAL naming the tensor, dimension
 * and world when a shape does not divide or a strategy is unknown. */
int tp_resolve(const struct wsrv_model *m, const json_t *tp_plan, int rank, int world,
	       struct tp_view *views);

#endif
