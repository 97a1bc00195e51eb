// SPDX-License-Identifier: MIT
/* xxh3_avx2.c - libxxhash's own code, inlined into this file and compiled
 * with -mavx2 (XXH_INLINE_ALL keeps every symbol static, so nothing clashes
 * with the library). */
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "xxh3_avx2.h"

void *xxh3_avx2_new(void)
{
	return XXH3_createState();
}

void xxh3_avx2_reset(void *s)
{
	XXH3_64bits_reset(s);
}

void xxh3_avx2_update(void *s, const void *p, size_t n)
{
	XXH3_64bits_update(s, p, n);
}

uint64_t xxh3_avx2_digest(const void *s)
{
	return XXH3_64bits_digest(s);
}

void xxh3_avx2_free(void *s)
{
	XXH3_freeState(s);
}
