// SPDX-License-Identifier: MIT
/* test_sorted.c - the one binary search (sorted.h): sorted_index finds
 * exactly what a scan finds, and sorted_first is the partition point a
 * scan finds, on arrays of every small length, with keys before, inside
 * and past them. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include "fixture.h"
#include "sorted.h"

static struct fixture F = { .tag = "sorted" };

static int sorted_cmp(const void *key, const void *elem)
{
	return sorted_cmp_u64(*(const uint64_t *)key, *(const uint64_t *)elem);
}

static bool below(const void *key, const void *elem)
{
	return *(const uint64_t *)elem < *(const uint64_t *)key;
}

/* Ascending, with gaps of 0 to 2 (repeats where 0). */
static void fill(uint64_t *v, size_t n, unsigned seed)
{
	uint64_t x = seed % 3;

	for (size_t i = 0; i < n; i++) {
		v[i] = x;
		x += (seed = seed * 1103515245u + 12345u) >> 16 & 1 ? 2 : (seed >> 20) % 2;
	}
}

static void partition_point_is_a_scans(void **st)
{
	uint64_t v[40];

	(void)st;
	for (size_t n = 0; n <= 40; n++) {
		fill(v, n, (unsigned)n * 7 + 1);
		for (uint64_t key = 0; key < 2 * n + 4; key++) {
			size_t want = 0;
			while (want < n && v[want] < key)
				want++;
			assert_int_equal(sorted_first(&key, v, n, sizeof(*v), below), want);
		}
	}
}

static void index_finds_what_a_scan_finds(void **st)
{
	uint64_t v[40];

	(void)st;
	for (size_t n = 0; n <= 40; n++) {
		fill(v, n, (unsigned)n * 13 + 5);
		for (uint64_t key = 0; key < 2 * n + 4; key++) {
			bool present = false;
			for (size_t i = 0; i < n; i++)
				present |= v[i] == key;
			long at = sorted_index(&key, v, n, sizeof(*v), sorted_cmp);
			if (!present)
				assert_int_equal(at, -1);
			else
				assert_true(at >= 0 && (size_t)at < n && v[at] == key);
		}
	}
}

FIXTURE_MAIN(F,
	cmocka_unit_test(partition_point_is_a_scans),
	cmocka_unit_test(index_finds_what_a_scan_finds),
)
