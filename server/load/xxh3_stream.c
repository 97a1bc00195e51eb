// SPDX-License-Identifier: MIT
/* xxh3_stream.c - chooses the AVX2 build or libxxhash once, at first use. */
#include "xxh3_stream.h"

#include <stdbool.h>
#include <xxhash.h>

#if WSRV_HAVE_XXH3_AVX2
#include "xxh3_avx2.h"

static bool use_avx2(void)
{
	static int have = -1;

	if (have < 0) {
		__builtin_cpu_init();
		have = __builtin_cpu_supports("avx2") != 0;
	}
	return have;
}
#else
static bool use_avx2(void) { return false; }
#define xxh3_avx2_new() NULL
#define xxh3_avx2_reset(s) (void)(s)
#define xxh3_avx2_update(s, p, n) (void)(s)
#define xxh3_avx2_digest(s) 0
#define xxh3_avx2_free(s) (void)(s)
#endif

struct xxh3_stream *xxh3_stream_new(void)
{
	return use_avx2() ? xxh3_avx2_new() : (void *)XXH3_createState();
}

void xxh3_stream_reset(struct xxh3_stream *s)
{
	if (use_avx2())
		xxh3_avx2_reset(s);
	else
		XXH3_64bits_reset((XXH3_state_t *)s);
}

void xxh3_stream_update(struct xxh3_stream *s, const void *p, size_t n)
{
	if (use_avx2())
		xxh3_avx2_update(s, p, n);
	else
		XXH3_64bits_update((XXH3_state_t *)s, p, n);
}

uint64_t xxh3_stream_digest(const struct xxh3_stream *s)
{
	return use_avx2() ? xxh3_avx2_digest(s) : XXH3_64bits_digest((const XXH3_state_t *)s);
}

void xxh3_stream_free(struct xxh3_stream *s)
{
	if (!s)
		return;
	if (use_avx2())
		xxh3_avx2_free(s);
	else
		XXH3_freeState((XXH3_state_t *)s);
}

const char *xxh3_stream_impl(void)
{
	return use_avx2() ? "avx2" : "sse2";
}
