// SPDX-License-Identifier: MIT
/* publish_cover.c - each tensor's written ranges, kept sorted and merged
 * (publish_cover.h). A tensor written in one call, as most are, holds one
 * range and allocates nothing. */
#include "publish_cover.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

struct range {
	uint64_t lo, hi;            /* [lo, hi) */
};

struct tensor_cover {
	struct range one;           /* the first range, inline */
	struct range *more;         /* the rest, sorted, owned; NULL: none */
	uint32_t n, cap;            /* ranges in all; capacity of more */
	bool pointed;
};

struct pub_cover {
	pthread_mutex_t lock;
	size_t n;
	struct tensor_cover t[];
};

int pub_cover_new(size_t ntensors, struct pub_cover **out)
{
	struct pub_cover *c;

	if (ntensors > (SIZE_MAX - sizeof(*c)) / sizeof(c->t[0]) ||
	    !(c = calloc(1, sizeof(*c) + ntensors * sizeof(c->t[0]))))
		return -ENOMEM;
	pthread_mutex_init(&c->lock, NULL);
	c->n = ntensors;
	*out = c;
	return 0;
}

void pub_cover_free(struct pub_cover *c)
{
	if (!c)
		return;
	for (size_t i = 0; i < c->n; i++)
		free(c->t[i].more);
	pthread_mutex_destroy(&c->lock);
	free(c);
}

/* Range k of t (k < t->n): the inline one first. */
static struct range *at(struct tensor_cover *t, uint32_t k)
{
	return k == 0 ? &t->one : &t->more[k - 1];
}

/* Merges r into t's sorted, disjoint ranges. 0 or -ENOMEM. */
static int merge(struct tensor_cover *t, struct range r)
{
	uint32_t k = 0, w;

	/* Those entirely before r stay; those touching r join it. */
	while (k < t->n && at(t, k)->hi < r.lo)
		k++;
	for (w = k; w < t->n && at(t, w)->lo <= r.hi; w++) {
		r.lo = at(t, w)->lo < r.lo ? at(t, w)->lo : r.lo;
		r.hi = at(t, w)->hi > r.hi ? at(t, w)->hi : r.hi;
	}
	if (w == k) { /* a new range at k: room for one more */
		if (t->n >= 1 && t->n - 1 == t->cap) {
			uint32_t cap = t->cap ? t->cap * 2 : 4;
			struct range *m = realloc(t->more, cap * sizeof(*m));
			if (!m)
				return -ENOMEM;
			t->more = m;
			t->cap = cap;
		}
		for (uint32_t j = t->n; j > k; j--)
			*at(t, j) = *at(t, j - 1);
		t->n++;
	} else { /* k .. w-1 become one, at k */
		for (uint32_t j = w; j < t->n; j++)
			*at(t, k + 1 + j - w) = *at(t, j);
		t->n -= w - k - 1;
	}
	*at(t, k) = r;
	return 0;
}

int pub_cover_add(struct pub_cover *c, uint32_t i, uint64_t off, uint64_t len)
{
	int r = 0;

	if (i >= c->n || !len)
		return 0;
	pthread_mutex_lock(&c->lock);
	r = merge(&c->t[i], (struct range){ off, off + len });
	pthread_mutex_unlock(&c->lock);
	return r;
}

void pub_cover_pointed(struct pub_cover *c, uint32_t i)
{
	if (i < c->n)
		__atomic_store_n(&c->t[i].pointed, true, __ATOMIC_RELAXED);
}

bool pub_cover_was_pointed(const struct pub_cover *c, uint32_t i)
{
	return i < c->n && __atomic_load_n(&c->t[i].pointed, __ATOMIC_RELAXED);
}

uint64_t pub_cover_bytes(struct pub_cover *c, uint32_t i, uint64_t from, uint64_t to)
{
	struct tensor_cover *t;
	uint64_t n = 0;

	if (i >= c->n)
		return 0;
	t = &c->t[i];
	pthread_mutex_lock(&c->lock);
	for (uint32_t k = 0; k < t->n; k++) {
		uint64_t lo = at(t, k)->lo > from ? at(t, k)->lo : from;
		uint64_t hi = at(t, k)->hi < to ? at(t, k)->hi : to;
		n += hi > lo ? hi - lo : 0;
	}
	pthread_mutex_unlock(&c->lock);
	return n;
}
