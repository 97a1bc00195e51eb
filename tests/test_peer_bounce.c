// SPDX-License-Identifier: MIT
/* test_peer_bounce.c - the pieces of a peer fill that keep a 4 KiB arena
 * out of this process's page tables (issue 23): the pool of reused
 * buffers, the checksum summed as pieces land (in order from where they
 * were received, the rest read back with pread), and arena_read. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "arena.h"
#include "arena_struct.h"
#include "fixture.h"
#include "peer_bounce.h"
#include "peer_fill_sum.h"

static struct fixture F = { .tag = "peer-bounce" };

/* Buffers are reused, bounded by the limit, and a free one that is too
 * small is given up for a larger one. */
static void pool_reuses_and_bounds(void **s)
{
	struct bounce_pool p;
	uint8_t *a, *b, *c, *d;
	int ia, ib, ic, id;

	(void)s;
	bounce_init(&p, 4096, 3 * 4096);
	ia = bounce_get(&p, 100, &a);
	ib = bounce_get(&p, 4096, &b);
	ic = bounce_get(&p, 4096, &c);
	assert_true(ia >= 0 && ib >= 0 && ic >= 0);
	assert_int_equal(p.bytes, 3 * 4096); /* each at least the unit */
	assert_int_equal(bounce_get(&p, 1, &d), -EBUSY); /* limit reached */
	bounce_put(&p, ib);
	id = bounce_get(&p, 4000, &d);
	assert_int_equal(id, ib); /* the same buffer again */
	assert_ptr_equal(d, b);
	/* Free ones too small, and dropping one would not make room: refused,
	 * and nothing dropped. */
	bounce_put(&p, ia);
	bounce_put(&p, ic);
	assert_int_equal(bounce_get(&p, 8192, &d), -EBUSY);
	assert_int_equal(p.bytes, 3 * 4096);
	bounce_trim(&p);
	assert_int_equal(p.bytes, 4096); /* only the busy one is left */
	assert_true(bounce_get(&p, 8192, &d) >= 0);
	assert_int_equal(p.bytes, 4096 + 8192);
	bounce_fini(&p);

	/* A free one too small is given up when that makes room. */
	bounce_init(&p, 4096, 8192);
	ia = bounce_get(&p, 4096, &a);
	bounce_put(&p, ia);
	ib = bounce_get(&p, 8192, &b);
	assert_int_equal(ib, ia);
	assert_int_equal(p.bytes, 8192);
	bounce_fini(&p);
}

/* A 4 KiB arena filled by write, with seg 0 of n random bytes written. */
static struct arena *filled_arena(uint64_t n, uint8_t **bytes)
{
	struct arena_opts o = { .hugepages = HUGEPAGES_OFF, .lock = LOCK_OFF };
	struct arena *a;
	struct errinfo e;

	*bytes = malloc(n);
	assert_non_null(*bytes);
	for (uint64_t i = 0; i < n; i++)
		(*bytes)[i] = (uint8_t)(i * 2654435761u >> 13);
	assert_int_equal(arena_create("peer-bounce", 1, &n, &o, &a, &e), 0);
	assert_true(arena_fills_by_write(a));
	assert_int_equal(arena_write(a, 0, 0, *bytes, n, &e), 0);
	return a;
}

/* Pieces landing in order, out of order, or not seen at all give the
 * xxh3 of the whole; a tensor started again starts its sum again. */
static void sums_in_any_order(void **s)
{
	const uint64_t n = 3u << 20, piece = 256u << 10, at = 4096;
	struct fill_sums sums;
	struct errinfo e;
	uint8_t *bytes;
	struct arena *a = filled_arena(n + at, &bytes);
	uint64_t want = XXH3_64bits(bytes + at, n), h = 0;

	(void)s;
	assert_int_equal(fill_sums_init(&sums, 3, a, &e), 0);
	/* Tensor 0 in order. */
	assert_int_equal(fill_sums_start(&sums, 0), 0);
	for (uint64_t off = 0; off < n; off += piece)
		fill_sums_piece(&sums, 0, off, bytes + at + off, piece);
	assert_int_equal(fill_sums_end(&sums, 0, 0, at, n, &h, &e), 0);
	assert_int_equal(h, want);
	/* Tensor 1 backwards: all read back. */
	assert_int_equal(fill_sums_start(&sums, 1), 0);
	for (uint64_t off = n; off > 0; off -= piece)
		fill_sums_piece(&sums, 1, off - piece, bytes + at + off - piece, piece);
	h = 0;
	assert_int_equal(fill_sums_end(&sums, 1, 0, at, n, &h, &e), 0);
	assert_int_equal(h, want);
	/* Tensor 2: half in order, then started again, then nothing seen. */
	assert_int_equal(fill_sums_start(&sums, 2), 0);
	fill_sums_piece(&sums, 2, 0, "not these bytes", 15);
	assert_int_equal(fill_sums_start(&sums, 2), 0);
	h = 0;
	assert_int_equal(fill_sums_end(&sums, 2, 0, at, n, &h, &e), 0);
	assert_int_equal(h, want);
	/* Ended without being started: refused with a sentence. */
	assert_int_equal(fill_sums_end(&sums, 2, 0, at, n, &h, &e), -EINVAL);
	assert_non_null(strstr(e.msg, "not being fetched"));
	fill_sums_fini(&sums);
	arena_free(a);
	free(bytes);
}

/* arena_read gives the written bytes; past the segment it is an error. */
static void peer_bounce_read_back(void **s)
{
	uint8_t *bytes, got[8192];
	struct arena *a = filled_arena(1u << 20, &bytes);
	struct errinfo e;

	(void)s;
	assert_int_equal(arena_read(a, 0, 12345, got, sizeof(got), &e), 0);
	assert_memory_equal(got, bytes + 12345, sizeof(got));
	assert_int_equal(arena_read(a, 0, a->seg[0].size - 10, got, 100, &e), -EIO);
	assert_non_null(strstr(e.msg, "end of the segment"));
	arena_free(a);
	free(bytes);
}

FIXTURE_MAIN(F,
	cmocka_unit_test(pool_reuses_and_bounds),
	cmocka_unit_test(sums_in_any_order),
	cmocka_unit_test(peer_bounce_read_back),
)
