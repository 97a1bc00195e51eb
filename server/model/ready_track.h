// SPDX-License-Identifier: MIT
/* ready_track.h - serving while loading: counts each segment's tensors
 * as the loader places them; when a segment's last one is placed, seals
 * that segment and marks it ready on the readiness page. */
#ifndef WSRV_READY_TRACK_H
#define WSRV_READY_TRACK_H

#include <stdint.h>

#include "load_door.h"
#include "errinfo.h"
#include "format_door.h"

struct tier;

struct ready_track {
	const struct model *m;
	struct arena *a;
	struct ready_page *page;
	struct tier *tier;          /* a disk tier told of each segment sealed, or NULL */
	uint32_t *left;             /* per segment: tensors still to place */
	uint8_t *placed;            /* per tensor */
	int err;                    /* the first sealing failure */
	struct errinfo e;
};

/* Counts what o->want reads (part_len > 0) per segment; segments with
 * nothing to read are sealed and marked ready at once. */
int ready_track_init(struct ready_track *t, const struct model *m, struct arena *a,
		     struct ready_page *page, const uint8_t *want, struct errinfo *e);
/* A loader_opts.on_tensor: arg is the ready_track. */
void ready_track_tensor(void *arg, uint32_t idx);
/* A loader_opts.on_tensor_start: a disk tier counts the segment's pages
 * from its first tensor on (tier_fill_begin). */
void ready_track_tensor_start(void *arg, uint32_t idx);
/* The tensor a failed load names: the first not placed, in read order
 * (layer 0, the global group, then the layers); UINT32_MAX if none. */
uint32_t ready_track_first_missing(const struct ready_track *t);
void ready_track_free(struct ready_track *t);

#endif
