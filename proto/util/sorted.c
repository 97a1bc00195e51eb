// SPDX-License-Identifier: MIT
/* sorted.c - a binary search that says where, and a partition point
 * (sorted.h). */
#include "sorted.h"

#include <stdlib.h>

long sorted_index(const void *key, const void *base, size_t n, size_t stride,
		  int (*cmp)(const void *key, const void *elem))
{
	const char *hit = n ? bsearch(key, base, n, stride, cmp) : NULL;

	return hit ? (long)((size_t)(hit - (const char *)base) / stride) : -1;
}

size_t sorted_first(const void *key, const void *base, size_t n, size_t stride,
		    bool (*before)(const void *key, const void *elem))
{
	size_t lo = 0, hi = n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (before(key, (const char *)base + mid * stride))
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}
