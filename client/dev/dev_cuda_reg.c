// SPDX-License-Identifier: MIT
/* dev_cuda_reg.c - page-locking the host memory a stream copies from.
 *
 * A stream registers each range it copies (the model's sealed PROT_READ
 * mapping), so only CU_MEMHOSTREGISTER_READ_ONLY can lock it; a device
 * without read-only registration locks nothing and its copies bounce.
 * Ranges are locked in chunks of at most reg_chunk bytes: a single
 * registration of 512 GiB or more fails on current drivers. Registrations
 * are counted, so streams over the same model share them; the parts of a
 * range no one has locked yet are the only ones locked anew. */
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

#include "wire.h"
#include "dev_cuda.h"
#include "sorted.h"

static bool ends_by(const void *key, const void *elem)
{
	return ((const struct cu_reg *)elem)->b <= *(const uintptr_t *)key;
}

const struct cu_reg *cu_reg_at(const struct cuda_dev *c, uintptr_t p)
{
	/* the first registration that ends past p: it holds p if it starts by it */
	size_t i = sorted_first(&p, c->regs, c->nregs, sizeof(*c->regs), ends_by);

	return i < c->nregs && c->regs[i].a <= p ? &c->regs[i] : NULL;
}

static int by_addr(const void *x, const void *y)
{
	const struct cu_reg *a = x, *b = y;

	return a->a < b->a ? -1 : a->a > b->a;
}

static int add_reg(struct cuda_dev *c, uintptr_t a, uintptr_t b, bool locked, bool borrowed)
{
	if (c->nregs == c->cap_regs) {
		size_t cap = c->cap_regs ? 2 * c->cap_regs : 16;
		struct cu_reg *n = realloc(c->regs, cap * sizeof(*n));
		if (!n)
			return cl_err(-ENOMEM, "out of memory");
		c->regs = n;
		c->cap_regs = cap;
	}
	c->regs[c->nregs++] = (struct cu_reg){ a, b, 1, locked, borrowed };
	return 0;
}

/* Locks [*cur, b), which no registration covers, chunk by chunk, moving
 * *cur past each chunk counted. A chunk the driver refuses is kept
 * unlocked (its copies bounce) and counted like the others, so
 * unregistering stays symmetric. */
static int lock_gap(struct cuda_dev *c, uintptr_t *cur, uintptr_t b, uint64_t *added)
{
	for (uintptr_t p = *cur; p < b; *cur = p) {
		uintptr_t e = b - p > c->reg_chunk ? p + c->reg_chunk : b;
		bool locked = false, borrowed = false;
		int r;
		if (c->ro_ok) {
			CUresult x = c->cu->MemHostRegister((void *)p, e - p,
							    CU_MEMHOSTREGISTER_READ_ONLY | c->reg_flags);
			locked = x == CUDA_SUCCESS;
			/* Portable, by another device of this process (the copy
			 * service's): locked for every context already. */
			borrowed = x == CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED &&
				   (c->reg_flags & CU_MEMHOSTREGISTER_PORTABLE);
			if (!locked && !borrowed)
				cl_debug("cuda: cuMemHostRegister of %zu bytes failed (%s); copies from it bounce",
					 (size_t)(e - p), cuda_api_strerror(c->cu, x));
		}
		if ((r = add_reg(c, p, e, locked || borrowed, borrowed)) < 0) {
			if (locked)
				c->cu->MemHostUnregister((void *)p);
			return r;
		}
		if (locked)
			*added += e - p;
		p = e;
	}
	return 0;
}

static void page_align(const void *p, size_t len, uintptr_t *a, uintptr_t *b)
{
	uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);

	*a = (uintptr_t)p & ~(pg - 1);
	*b = ((uintptr_t)p + len + pg - 1) & ~(pg - 1);
}

int cu_register(struct wsrv_device *d, const void *p, size_t len, uint64_t *added)
{
	struct cuda_dev *c = (struct cuda_dev *)d;
	size_t n0;
	uintptr_t a, b, cur;
	int r = 0;

	/* Below cur, every byte of the range is counted once. */

	*added = 0;
	if (!len)
		return 0;
	page_align(p, len, &a, &b);
	pthread_mutex_lock(&c->lock);
	cu_enter(c);
	n0 = c->nregs;
	cur = a;
	for (size_t i = 0; i < n0 && r == 0; i++) {
		struct cu_reg *g = &c->regs[i];
		if (g->b <= a || g->a >= b)
			continue;
		if (g->a > cur && (r = lock_gap(c, &cur, g->a, added)) < 0)
			break;
		c->regs[i].refs++; /* lock_gap may have moved the array: index */
		cur = c->regs[i].b;
	}
	if (r == 0 && cur < b)
		r = lock_gap(c, &cur, b, added);
	qsort(c->regs, c->nregs, sizeof(*c->regs), by_addr);
	cu_leave(c);
	pthread_mutex_unlock(&c->lock);
	if (r < 0 && cur > a)
		cu_unregister(d, (const void *)a, cur - a); /* what was counted, uncounted */
	return r;
}

static void reg_drop(struct cuda_dev *c, size_t i)
{
	if (c->regs[i].locked && !c->regs[i].borrowed)
		c->cu->MemHostUnregister((void *)c->regs[i].a);
	c->regs[i] = c->regs[--c->nregs];
}

void cu_unregister(struct wsrv_device *d, const void *p, size_t len)
{
	struct cuda_dev *c = (struct cuda_dev *)d;
	uintptr_t a, b;

	if (!len)
		return;
	page_align(p, len, &a, &b);
	pthread_mutex_lock(&c->lock);
	cu_enter(c);
	for (size_t i = c->nregs; i-- > 0;)
		if (c->regs[i].b > a && c->regs[i].a < b && --c->regs[i].refs == 0)
			reg_drop(c, i);
	qsort(c->regs, c->nregs, sizeof(*c->regs), by_addr);
	cu_leave(c);
	pthread_mutex_unlock(&c->lock);
}

/* At destroy: whatever streams left (none, when each was closed). */
void cu_unregister_all(struct cuda_dev *c)
{
	while (c->nregs)
		reg_drop(c, c->nregs - 1);
	free(c->regs);
	c->regs = NULL;
	c->cap_regs = 0;
}
