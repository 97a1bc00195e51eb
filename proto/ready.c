// SPDX-License-Identifier: MIT
/* ready.c - the readiness page's layout and its checker (ready.h). */
#include "ready.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

static uint64_t round8(uint64_t v) { return (v + 7) & ~7ull; }

uint64_t ready_size(uint32_t nseg, uint32_t nt)
{
	uint64_t segs = round8((uint64_t)nseg * sizeof(uint32_t));

	return sizeof(struct rd_header) + segs + (uint64_t)nt * sizeof(uint64_t);
}

uint64_t ready_size_tiered(uint32_t nseg, uint32_t nt, uint32_t nunits)
{
	return ready_size(nseg, nt) + round8(((uint64_t)nseg + nunits) * sizeof(uint32_t)) +
	       (uint64_t)nunits * sizeof(struct rd_unit);
}

void ready_init(void *buf, uint32_t nseg, uint32_t nt, uint64_t total_bytes, bool tiered, uint32_t nunits)
{
	struct rd_header *h = buf;

	memcpy(h->magic, RD_MAGIC, sizeof(h->magic));
	h->version = RD_VERSION;
	h->header_size = sizeof(*h);
	h->nsegments = nseg;
	h->ntensors = nt;
	h->state = RD_LOADING;
	h->failed_tensor = UINT32_MAX;
	h->total_bytes = total_bytes;
	h->segments_off = sizeof(*h);
	h->xxh3_off = sizeof(*h) + round8((uint64_t)nseg * sizeof(uint32_t));
	h->total_size = ready_size(nseg, nt);
	if (tiered) {
		uint32_t *tier = (uint32_t *)(void *)((char *)buf + h->total_size);
		h->tier_off = h->total_size;
		h->total_size = ready_size_tiered(nseg, nt, nunits);
		for (uint32_t i = 0; i < nseg; i++)
			tier[i] = RD_TIER_RESIDENT;
		h->nunits = nunits;
		if (nunits)
			h->units_off = h->tier_off + round8(((uint64_t)nseg + nunits) * sizeof(uint32_t));
	}
}

int ready_check(const void *buf, size_t len, uint32_t nseg, uint32_t nt, struct rd_view *v,
		char *err, size_t errlen)
{
	/* The page is the server's to write: every word is read once, into
	 * hc, and only the copy is checked and used, so that a count the
	 * server raises after the check cannot send the client past the
	 * page. */
	struct rd_header hc, *h = &hc;
	uint64_t want = ready_size(nseg, nt);
	bool tiered;

	if (len < sizeof(hc)) {
		snprintf(err, errlen, "not a readiness page");
		return -EBADMSG;
	}
	memcpy(&hc, buf, sizeof(hc));
	__atomic_thread_fence(__ATOMIC_ACQUIRE);
	tiered = h->tier_off != 0;
	if (memcmp(h->magic, RD_MAGIC, sizeof(h->magic)) != 0) {
		snprintf(err, errlen, "not a readiness page");
		return -EBADMSG;
	}
	if (h->version != RD_VERSION || h->header_size != sizeof(*h)) {
		snprintf(err, errlen, "readiness page version %u, header %u bytes (this client reads %u, %zu)",
			 h->version, h->header_size, RD_VERSION, sizeof(*h));
		return -EBADMSG;
	}
	if (tiered && h->tier_off != want) {
		snprintf(err, errlen, "readiness page with its disk tier at %llu, not %llu",
			 (unsigned long long)h->tier_off, (unsigned long long)want);
		return -EBADMSG;
	}
	if (tiered)
		want = ready_size_tiered(nseg, nt, h->nunits);
	if (h->nunits && (!tiered || h->units_off != want - (uint64_t)h->nunits * sizeof(struct rd_unit))) {
		snprintf(err, errlen, "readiness page with %u disk tier units at %llu", h->nunits,
			 (unsigned long long)h->units_off);
		return -EBADMSG;
	}
	if (h->nsegments != nseg || h->ntensors != nt || h->total_size != want || len < want ||
	    h->segments_off != sizeof(*h) ||
	    h->xxh3_off != sizeof(*h) + round8((uint64_t)nseg * sizeof(uint32_t))) {
		snprintf(err, errlen, "readiness page for %u segments and %u tensors does not fit a manifest of %u and %u",
			 h->nsegments, h->ntensors, nseg, nt);
		return -EBADMSG;
	}
	v->h = buf;
	v->nsegments = h->nsegments;
	v->nunits = h->nunits;
	v->segments = (const uint32_t *)(const void *)((const char *)buf + h->segments_off);
	v->xxh3 = (const uint64_t *)(const void *)((const char *)buf + h->xxh3_off);
	v->tier = tiered ? (const uint32_t *)(const void *)((const char *)buf + h->tier_off) : NULL;
	v->units = h->nunits ? (const struct rd_unit *)(const void *)((const char *)buf + h->units_off) : NULL;
	return 0;
}
