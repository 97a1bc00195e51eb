// SPDX-License-Identifier: MIT
/* ready_page.c - writing a loading model's readiness page (ready_page.h). */
#include "ready_page.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "memfd_util.h"

/* Shared futex: waiters in other processes map the same memfd page. */
static void wake_all(uint32_t *word)
{
	syscall(SYS_futex, word, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

int ready_page_create(const char *name, uint32_t nseg, uint32_t nt, uint64_t total_bytes, bool tiered,
		      uint32_t nunits, struct ready_page *p, struct errinfo *e)
{
	int seals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_FUTURE_WRITE | F_SEAL_SEAL;
	char label[200];
	void *b;
	int r;

	*p = (struct ready_page){ .fd = -1, .size = tiered ? ready_size_tiered(nseg, nt, nunits) : ready_size(nseg, nt) };
	snprintf(label, sizeof(label), "wsrv:%s:ready", name);
	if ((r = memfd_new_mapped(label, p->size, &b)) < 0)
		return err_set(e, r, "%s: %s", label, strerror(-r));
	p->fd = r;
	p->h = b;
	ready_init(b, nseg, nt, total_bytes, tiered, nunits);
	p->seg = (uint32_t *)(void *)((char *)b + p->h->segments_off);
	p->xxh3 = (uint64_t *)(void *)((char *)b + p->h->xxh3_off);
	p->tier = tiered ? (uint32_t *)(void *)((char *)b + p->h->tier_off) : NULL;
	p->units = nunits ? (struct rd_unit *)(void *)((char *)b + p->h->units_off) : NULL;
	p->ntier = tiered ? nseg + nunits : 0;
	/* The mapping above stays writable; nobody can make another, and
	 * clients get a read-only description. */
	if ((r = memfd_seal(p->fd, seals)) < 0 || (r = memfd_readers_only(&p->fd)) < 0) {
		err_set(e, r, "%s: cannot seal: %s", label, strerror(-r));
		ready_page_free(p);
		return r;
	}
	return 0;
}

void ready_page_tensor(struct ready_page *p, uint32_t idx, uint64_t xxh3, uint64_t bytes)
{
	if (!p->h || idx >= p->h->ntensors)
		return;
	__atomic_store_n(&p->xxh3[idx], xxh3, __ATOMIC_RELAXED);
	__atomic_fetch_add(&p->h->placed_bytes, bytes, __ATOMIC_RELAXED);
}

void ready_page_segment(struct ready_page *p, uint32_t seg)
{
	if (!p->h || seg >= p->h->nsegments)
		return;
	__atomic_store_n(&p->seg[seg], RD_READY, __ATOMIC_RELEASE);
	wake_all(&p->seg[seg]);
}

void ready_page_tier_on_disk(struct ready_page *p, uint32_t seg)
{
	if (p->tier && seg < p->h->nsegments)
		__atomic_store_n(&p->tier[seg], 0, __ATOMIC_RELEASE);
}

void ready_page_tier_parts(struct ready_page *p, uint32_t seg)
{
	if (p->tier && seg < p->h->nsegments)
		__atomic_store_n(&p->tier[seg], RD_TIER_PARTS, __ATOMIC_RELEASE);
}

void ready_page_tier_bump(struct ready_page *p, uint32_t seg)
{
	if (!p->tier || seg >= p->ntier)
		return;
	__atomic_fetch_add(&p->tier[seg], 1, __ATOMIC_RELEASE);
	wake_all(&p->tier[seg]);
}

bool ready_page_segment_ready(const struct ready_page *p, uint32_t seg)
{
	return p->h && seg < p->h->nsegments &&
	       __atomic_load_n(&p->seg[seg], __ATOMIC_ACQUIRE) == RD_READY;
}

void ready_page_done(struct ready_page *p, uint64_t manifest_hash)
{
	if (!p->h)
		return;
	p->h->manifest_hash = manifest_hash;
	__atomic_store_n(&p->h->state, RD_READY, __ATOMIC_RELEASE);
	wake_all(&p->h->state);
}

void ready_page_fail(struct ready_page *p, int err, uint32_t tensor, const char *msg)
{
	if (!p->h)
		return;
	p->h->error = err;
	p->h->failed_tensor = tensor;
	snprintf(p->h->message, sizeof(p->h->message), "%s", msg ? msg : "");
	for (uint32_t i = 0; i < p->h->nsegments; i++) {
		uint32_t want = RD_LOADING;
		if (__atomic_compare_exchange_n(&p->seg[i], &want, RD_FAILED, false,
						__ATOMIC_RELEASE, __ATOMIC_RELAXED))
			wake_all(&p->seg[i]);
	}
	__atomic_store_n(&p->h->state, RD_FAILED, __ATOMIC_RELEASE);
	wake_all(&p->h->state);
}

void ready_page_free(struct ready_page *p)
{
	if (p->h)
		munmap(p->h, p->size);
	if (p->fd >= 0)
		close(p->fd);
	*p = (struct ready_page){ .fd = -1 };
}
