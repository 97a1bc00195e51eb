// SPDX-License-Identifier: MIT
/* numa_place.h - where the arena's pages go: the choice (from hwloc's view
 * of the machine or the operator's option) and its check (move_pages). */
#ifndef WSRV_NUMA_PLACE_H
#define WSRV_NUMA_PLACE_H

#include <hwloc.h>
#include <stddef.h>
#include <stdint.h>

#include "errinfo.h"

#define NUMA_MAX_NODES 64

enum numa_mode { NUMA_AUTO = 0, NUMA_NODE, NUMA_INTERLEAVE };

struct numa_choice {
	enum numa_mode mode;    /* NUMA_NODE (bind) or NUMA_INTERLEAVE */
	uint64_t nodemask;      /* OS node numbers */
	char desc[96];          /* "node 0", "interleave over nodes 0,1" */
};

/* Chooses a placement on topo. NUMA_NODE binds to node (which must exist with
 * memory); NUMA_INTERLEAVE spreads over every node with memory; NUMA_AUTO
 * binds to the only node of a one-node machine and interleaves otherwise, so
 * workers on every node see the same average distance to the one copy. */
int numa_choose(hwloc_topology_t topo, enum numa_mode mode, int node,
		struct numa_choice *out, struct errinfo *e);

/* numa_choose on this machine's topology. */
int numa_choose_here(enum numa_mode mode, int node, struct numa_choice *out,
		     struct errinfo *e);

/* Applies c to [addr, addr+len) with mbind before the first touch. */
int numa_apply(void *addr, size_t len, const struct numa_choice *c,
	       struct errinfo *e);

/* Where pages of [addr, addr+len) really are: samples up to `samples` pages
 * with move_pages and counts them per node into counts[NUMA_MAX_NODES].
 * Reads each sampled page first, so it is mapped. Returns the number sampled or a negative errno. */
int numa_sample(const void *addr, size_t len, size_t page, size_t samples,
		uint64_t *counts);

#endif
