// SPDX-License-Identifier: MIT
/* ready_page.h - the server's side of a loading model's readiness page
 * (proto/ready.h): a memfd sealed against resizing and new writes before
 * any client sees it, written through the mapping made before the seal,
 * each change followed by a wake of every waiter. The loader's thread
 * writes it; the loop only hands its fd out. */
#ifndef WSRV_READY_PAGE_H
#define WSRV_READY_PAGE_H

#include <stdbool.h>
#include <stdint.h>

#include "errinfo.h"
#include "ready.h"

struct ready_page {
	int fd;                     /* memfd, owned; -1: none */
	uint64_t size;
	struct rd_header *h;        /* the writable mapping, owned */
	uint32_t *seg;
	uint64_t *xxh3;
	uint32_t *tier;             /* a disk tier's words, or NULL */
	uint32_t ntier;             /* of them: the segments', then the units' */
	struct rd_unit *units;      /* a disk tier's units (written before any
	                             * client sees the page), or NULL */
};

/* Creates the page for a model named name with nseg segments, nt tensors
 * and total_bytes to place; tiered: with a disk tier's words, every
 * segment resident until ready_page_tier_on_disk, and room for nunits
 * units (on disk). On failure nothing is left. */
int ready_page_create(const char *name, uint32_t nseg, uint32_t nt, uint64_t total_bytes, bool tiered,
		      uint32_t nunits, struct ready_page *p, struct errinfo *e);
/* Segment seg lives on the disk tier (before any client sees the page). */
void ready_page_tier_on_disk(struct ready_page *p, uint32_t seg);
/* Segment seg stays but for its units (the same). */
void ready_page_tier_parts(struct ready_page *p, uint32_t seg);
/* Segment or unit seg (nsegments + the unit's index) was read in (or its
 * read failed): its tier word goes up by one, and its waiters wake. */
void ready_page_tier_bump(struct ready_page *p, uint32_t seg);
/* Tensor idx is placed with this checksum and size. */
void ready_page_tensor(struct ready_page *p, uint32_t idx, uint64_t xxh3, uint64_t bytes);
/* Segment seg is sealed and every tensor in it placed: wakes its waiters. */
void ready_page_segment(struct ready_page *p, uint32_t seg);
/* Whether segment seg is ready (the loop asks, from another thread). */
bool ready_page_segment_ready(const struct ready_page *p, uint32_t seg);
/* The whole model is loaded, its manifest's hash this. */
void ready_page_done(struct ready_page *p, uint64_t manifest_hash);
/* The load failed with err (negative errno) at tensor (UINT32_MAX: none
 * named); msg is the error's sentence. Every segment not ready becomes
 * FAILED, and every waiter wakes. */
void ready_page_fail(struct ready_page *p, int err, uint32_t tensor, const char *msg);
/* Unmaps and closes; a zeroed or freed page is fine. */
void ready_page_free(struct ready_page *p);

#endif
