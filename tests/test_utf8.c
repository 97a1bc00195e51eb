// SPDX-License-Identifier: MIT
/* test_utf8.c - cutting text on character boundaries and the characters a
 * name may not hold (issue 48, items 7 and 13): the helpers every cut and
 * every check goes through, and the log's escaping of what is refused.
 * And the other text an operator types: sizes (units.h). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "escape.h"
#include "fixture.h"
#include "utf8.h"
#include "units.h"

static struct fixture F = { .tag = "utf8" };

static void fit_never_cuts_a_character(void **st)
{
	char out[8];

	(void)st;
	assert_int_equal(utf8_fit("abc", 8), 3);
	assert_int_equal(utf8_fit("a\xc3\xa9", 2), 1);         /* "é" does not fit */
	assert_int_equal(utf8_fit("a\xc3\xa9", 3), 3);
	assert_int_equal(utf8_fit("\xe6\x97\xa5\xe6\x97\xa5", 5), 3);
	assert_int_equal(utf8_fit("\xf0\x9f\x98\x80x", 3), 0); /* a 4-byte one */
	assert_int_equal(utf8_fit("\xff\xfe", 1), 1);          /* not UTF-8: a byte each */
	utf8_copy(out, sizeof(out), "abcdef\xc3\xa9");         /* 7 kept at most: 6 */
	assert_string_equal(out, "abcdef");
	snprintf(out, sizeof(out), "%.*s", UTF8_CUT("ab\xe6\x97\xa5", 4));
	assert_string_equal(out, "ab");
}

static void trim_drops_an_incomplete_end(void **st)
{
	char a[] = "ab\xc3", b[] = "ab\xe2\x80", c[] = "ab\xc3\xa9", d[] = "ab";

	(void)st;
	utf8_trim(a);
	utf8_trim(b);
	utf8_trim(c);
	utf8_trim(d);
	assert_string_equal(a, "ab");
	assert_string_equal(b, "ab");
	assert_string_equal(c, "ab\xc3\xa9");
	assert_string_equal(d, "ab");
}

static void hidden_characters(void **st)
{
	(void)st;
	assert_true(utf8_hidden((const unsigned char *)"\x1b", 1));
	assert_true(utf8_hidden((const unsigned char *)"\0", 1));
	assert_false(utf8_hidden((const unsigned char *)"\t", 1));
	assert_true(utf8_hidden((const unsigned char *)"\xc2\x85", 2));     /* NEL */
	assert_false(utf8_hidden((const unsigned char *)"\xc2\xa0", 2));    /* NBSP */
	assert_true(utf8_hidden((const unsigned char *)"\xe2\x80\xae", 3)); /* RLO */
	assert_true(utf8_hidden((const unsigned char *)"\xe2\x81\xa9", 3)); /* PDI */
	assert_false(utf8_hidden((const unsigned char *)"\xe2\x80\x8e", 3)); /* LRM */
	/* The log writes an override as bytes, not as itself. */
	assert_string_equal(esc("a\xe2\x80\xae" "b"), "a\\xe2\\x80\\xaeb");
}

/* Issue 61 item 13: "2GB", "2TB" and "2gb" were read as GiB and TiB
 * without a word. Powers of 1024 are written K, M, G (either case) or
 * KiB, MiB, GiB; the SI forms are refused. */
static void sizes_say_what_they_mean(void **st)
{
	static const char *const bad[] = { "2GB", "2TB", "2gb", "2KB", "2Gb", "2gib", "2 G", "G", "1.5", "2X" };
	uint64_t v = 0;

	(void)st;
	assert_int_equal(parse_size("2G", &v), 0);
	assert_int_equal(v, 2ull << 30);
	assert_int_equal(parse_size("2g", &v), 0);
	assert_int_equal(v, 2ull << 30);
	assert_int_equal(parse_size("2GiB", &v), 0);
	assert_int_equal(v, 2ull << 30);
	assert_int_equal(parse_size("1.5T", &v), 0);
	assert_int_equal(v, 3ull << 39);
	assert_int_equal(parse_size("4096", &v), 0);
	assert_int_equal(v, 4096);
	assert_int_equal(parse_size("512B", &v), 0);
	assert_int_equal(v, 512);
	/* Issue 69 item 5: a fraction at T or P wrapped past nine digits
	 * (0.50000000T read as 168.40 GiB); read exactly now, rounded down
	 * to a byte, or refused past 19 digits. */
	assert_int_equal(parse_size("0.50000000T", &v), 0);
	assert_int_equal(v, 1ull << 39);
	assert_int_equal(parse_size("0.25000P", &v), 0);
	assert_int_equal(v, 1ull << 48);
	assert_int_equal(parse_size("1.99999999T", &v), 0);
	assert_int_equal(v, (1ull << 40) + (uint64_t)(((unsigned __int128)99999999 << 40) / 100000000));
	assert_int_equal(parse_size("0.9999999999999999999P", &v), 0); /* 19 digits */
	assert_int_equal(v, (uint64_t)(((unsigned __int128)9999999999999999999ull << 50) / 10000000000000000000ull));
	assert_int_equal(parse_size("0.1K", &v), 0);
	assert_int_equal(v, 102); /* 102.4, rounded down */
	assert_int_equal(parse_size("0.99999999999999999999P", &v), -EINVAL); /* 20 digits */
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		if (parse_size(bad[i], &v) != -EINVAL)
			fail_msg("'%s' was taken as a size", bad[i]);
}

FIXTURE_MAIN(F,
	cmocka_unit_test(fit_never_cuts_a_character),
	cmocka_unit_test(trim_drops_an_incomplete_end),
	cmocka_unit_test(hidden_characters),
	cmocka_unit_test(sizes_say_what_they_mean),
)
