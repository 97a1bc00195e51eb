// SPDX-License-Identifier: MIT
/* sorted.h - one binary search for every array kept sorted by a key:
 * layers by index, leases by id, experts by id (libc's bsearch, with the
 * position it found). */
#ifndef WSRV_SORTED_H
#define WSRV_SORTED_H

#include <stddef.h>
#include <stdint.h>

/* The index in base[0..n) (elements stride bytes apart, ascending as cmp
 * orders them) of the element cmp(key, element) finds equal, or -1. */
long sorted_index(const void *key, const void *base, size_t n, size_t stride,
		  int (*cmp)(const void *key, const void *elem));

/* Three-way comparisons of the keys those arrays use. */
static inline int sorted_cmp_i32(int32_t a, int32_t b)
{
	return (a > b) - (a < b);
}

static inline int sorted_cmp_u64(uint64_t a, uint64_t b)
{
	return (a > b) - (a < b);
}

#endif
