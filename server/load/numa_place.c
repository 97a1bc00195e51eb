// SPDX-License-Identifier: MIT
/* numa_place.c - choosing, applying and verifying the arena's NUMA policy. */
#include "numa_place.h"

#include <errno.h>
#include <numa.h>
#include <numaif.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void mask_desc(uint64_t mask, char *buf, size_t len)
{
	size_t n = 0;

	buf[0] = 0;
	for (int i = 0; i < NUMA_MAX_NODES && n < len; i++)
		if (mask & (1ULL << i))
			n += (size_t)snprintf(buf + n, len - n, "%s%d", n ? "," : "", i);
}

int numa_choose(hwloc_topology_t topo, enum numa_mode mode, int node,
		struct numa_choice *out, struct errinfo *e)
{
	int n = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE);
	uint64_t all = 0;
	char list[64];

	for (int i = 0; i < n; i++) {
		hwloc_obj_t o = hwloc_get_obj_by_type(topo, HWLOC_OBJ_NUMANODE, i);
		if (o->os_index < NUMA_MAX_NODES)
			all |= 1ULL << o->os_index;
	}
	if (!all)
		return err_set(e, -ENODEV, "hwloc reports no NUMA node");
	memset(out, 0, sizeof(*out));
	if (mode == NUMA_NODE) {
		if (node < 0 || node >= NUMA_MAX_NODES || !(all & (1ULL << node)))
			return err_set(e, -EINVAL, "--numa-node %d: no such NUMA node", node);
		out->mode = NUMA_NODE;
		out->nodemask = 1ULL << node;
		snprintf(out->desc, sizeof(out->desc), "node %d", node);
		return 0;
	}
	if (mode == NUMA_AUTO && __builtin_popcountll(all) == 1) {
		out->mode = NUMA_NODE;
		out->nodemask = all;
		snprintf(out->desc, sizeof(out->desc), "node %d (the only one)",
			 __builtin_ctzll(all));
		return 0;
	}
	out->mode = NUMA_INTERLEAVE;
	out->nodemask = all;
	mask_desc(all, list, sizeof(list));
	snprintf(out->desc, sizeof(out->desc), "interleave over nodes %s", list);
	return 0;
}

int numa_choose_here(enum numa_mode mode, int node, struct numa_choice *out,
		     struct errinfo *e)
{
	hwloc_topology_t topo;
	int r;

	if (hwloc_topology_init(&topo) < 0)
		return err_set(e, -ENOMEM, "hwloc: cannot initialise a topology");
	if (hwloc_topology_load(topo) < 0) {
		hwloc_topology_destroy(topo);
		return err_set(e, -EIO, "hwloc: cannot load this machine's topology");
	}
	r = numa_choose(topo, mode, node, out, e);
	hwloc_topology_destroy(topo);
	return r;
}

int numa_apply(void *addr, size_t len, const struct numa_choice *c,
	       struct errinfo *e)
{
	unsigned long mask = (unsigned long)c->nodemask;
	int policy = c->mode == NUMA_NODE ? MPOL_BIND : MPOL_INTERLEAVE;

	if (numa_available() < 0)
		return 0; /* no NUMA support in this kernel: one node, nothing to do */
	if (mbind(addr, len, policy, &mask, NUMA_MAX_NODES + 1, MPOL_MF_STRICT) < 0)
		return err_set(e, -errno, "mbind (%s): %s", c->desc, strerror(errno));
	return 0;
}

int numa_sample(const void *addr, size_t len, size_t page, size_t samples,
		uint64_t *counts)
{
	size_t npages = (len + page - 1) / page;
	size_t n = npages < samples ? npages : samples;
	void **pages;
	int *status;
	int r = 0;

	if (n == 0)
		return 0;
	pages = calloc(n, sizeof(*pages));
	status = calloc(n, sizeof(*status));
	if (!pages || !status) {
		r = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		pages[i] = (char *)addr + (i * npages / n) * page;
		/* A page not mapped here (never faulted in) has no node to report. */
		(void)*(volatile const char *)pages[i];
	}
	/* nodes == NULL: only report where each page is. */
	if (numa_move_pages(0, n, pages, NULL, status, 0) < 0) {
		r = -errno;
		goto out;
	}
	for (size_t i = 0; i < n; i++)
		if (status[i] >= 0 && status[i] < NUMA_MAX_NODES)
			counts[status[i]]++;
	r = (int)n;
out:
	free(pages);
	free(status);
	return r;
}
