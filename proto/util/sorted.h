// SPDX-License-Identifier: MIT
/* sorted.h - the one binary search, for every array kept sorted by a
 * key: layers by index, leases by id, experts by id, tensors by name
 * (libc's bsearch, with the position it found); and its partition point,
 * for arrays of ranges searched by where a value falls (holes, units,
 * page-locked ranges, a stream's sources). */
#ifndef WSRV_SORTED_H
#define WSRV_SORTED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The index in base[0..n) (elements stride bytes apart, ascending as cmp
 * orders them) of the element cmp(key, element) finds equal, or -1. */
long sorted_index(const void *key, const void *base, size_t n, size_t stride,
		  int (*cmp)(const void *key, const void *elem));

/* The partition point of base[0..n) (elements stride bytes apart): the
 * number of leading elements for which before(key, element) holds, which
 * must hold for a prefix of the array and for nothing after it. It is n
 * when it holds for all. */
size_t sorted_first(const void *key, const void *base, size_t n, size_t stride,
		    bool (*before)(const void *key, const void *elem));

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
