// SPDX-License-Identifier: MIT
/* ctl_budget.c - `wsrvctl inspect PATH --memory-budget SIZE`: what wsrvd
 * would keep in memory under that budget, the cache it leaves, and the
 * smallest budget that starts, from the same plan the server applies
 * (tier_plan.h), before any server runs. */
#include "ctl_budget.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "format_door.h"
#include "ready.h"
#include "tier_door.h"
#include "units.h"

static uint64_t page_up(uint64_t b)
{
	return (b + 4095) & ~(uint64_t)4095;
}

/* What stays beside the segments from the start: the laid-out manifest
 * and the readiness page, as wsrvd makes them. */
static int overhead(const struct model *m, const uint64_t *size, uint32_t nunits, uint64_t *out)
{
	uint64_t msize = 0;
	struct errinfo e;
	int fd = -1, r = manifest_create(m, size, 4096, &fd, &msize, &e);

	if (fd >= 0)
		close(fd);
	*out = page_up(msize) + page_up(ready_size_tiered(m->nsegments, (uint32_t)m->ntensors, nunits));
	return r;
}

/* The plan of budget over m: 0 (state, units and sums set), or -errno. */
static int plan(const struct model *m, uint64_t budget, uint8_t *state, struct tier_choice *c, uint64_t *laid)
{
	uint32_t n = tier_units_of(m, NULL);
	struct rd_unit *u = calloc(n + 1, sizeof(*u));
	uint64_t *size = calloc(m->nsegments + 1, sizeof(*size)), extra = 0;
	int r = u && size ? 0 : -ENOMEM;

	*laid = 0;
	for (uint32_t g = 0; r == 0 && g < m->nsegments; g++)
		*laid += size[g] = tier_seg_bytes(m, g);
	if (r == 0 && n)
		tier_units_of(m, u);
	if (r == 0)
		r = overhead(m, size, n, &extra);
	if (r == 0)
		r = tier_choose(m, size, u, n, extra, budget, state, c);
	free(u);
	free(size);
	return r;
}

static void print_plan(const struct model *m, uint64_t budget, const struct tier_choice *c, uint64_t laid, bool fits)
{
	char b[8][32];

	printf("\nmemory budget %s for %s of weights (%s laid out in 4 KiB pages):\n", fmt_bytes(budget, b[0], 32),
	       fmt_bytes(m->data_bytes, b[1], 32), fmt_bytes(laid, b[2], 32));
	if (!tier_wanted(m, budget)) {
		printf("  it holds all of it: no disk tier (wsrvd serves the model as without a budget)\n");
		return;
	}
	printf("  %s %s: the global group (embeddings, norms, head)%s, the manifest and readiness page%s\n",
	       fits ? "stays in memory  " : "always stays     ", fmt_bytes(c->resident, b[3], 32),
	       c->units ? ", each MoE layer but its routed experts" : "",
	       fits ? ",\n                    and the whole layers that fit beside the cache" : "");
	if (fits)
		printf("  on the disk tier  %s: %u layer segment%s and %u routed expert%s, read again as workers need "
		       "them\n", fmt_bytes(c->disk_bytes, b[4], 32), c->disk_segments, c->disk_segments == 1 ? "" : "s",
		       c->units, c->units == 1 ? "" : "s");
	if (fits)
		printf("  cache             %s: what the budget leaves for pieces read from disk (a worker may hold "
		       "half by default, --memory-budget-share)\n", fmt_bytes(c->cache, b[5], 32));
	printf("  smallest budget   %s starts: what stays and two of the largest piece on disk (%s: one in use, one "
	       "being read)%s\n", fmt_bytes(c->need, b[6], 32), fmt_bytes(c->largest, b[7], 32),
	       fits ? "" : "; this budget is below it: wsrvd would refuse the model");
}

int ctl_budget(const struct model *m, uint64_t budget, json_t *root)
{
	uint8_t *state = calloc(m->nsegments + 1, 1);
	struct tier_choice c = { 0 };
	uint64_t laid = 0;
	int r = state ? plan(m, budget, state, &c, &laid) : -ENOMEM;

	free(state);
	if (r < 0 && r != -ENOMEM)
		fprintf(stderr, "wsrvctl inspect: cannot plan the budget: %s\n", strerror(-r));
	if (r < 0 && r != -ENOMEM)
		return 1;
	bool fits = r == 0, whole = !tier_wanted(m, budget);
	if (!root)
		print_plan(m, budget, &c, laid, fits || whole);
	else
		json_object_set_new(root, "budget", json_pack("{s:I, s:b, s:I, s:I, s:I, s:I, s:I, s:i, s:i}",
			"budget", (json_int_t)budget, "tiered", !whole, "resident_bytes", (json_int_t)c.resident,
			"cache_bytes", (json_int_t)(fits ? c.cache : 0), "disk_bytes", (json_int_t)c.disk_bytes,
			"smallest_budget", (json_int_t)c.need, "largest_piece", (json_int_t)c.largest,
			"disk_segments", (int)c.disk_segments, "units", (int)c.units));
	return fits || whole ? 0 : 1;
}
