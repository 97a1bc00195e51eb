// SPDX-License-Identifier: MIT
/* sorted.c - a binary search that says where (sorted.h). */
#include "sorted.h"

#include <stdlib.h>

long sorted_index(const void *key, const void *base, size_t n, size_t stride,
		  int (*cmp)(const void *key, const void *elem))
{
	const char *hit = n ? bsearch(key, base, n, stride, cmp) : NULL;

	return hit ? (long)((size_t)(hit - (const char *)base) / stride) : -1;
}
