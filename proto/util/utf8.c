// SPDX-License-Identifier: MIT
/* utf8.c - strict UTF-8 validation, following the Unicode table of
 * well-formed byte sequences (Unicode 15, table 3-7). */
#include "utf8.h"

#include <string.h>

size_t utf8_seq_len(const unsigned char *p, size_t left)
{
	unsigned char c = p[0], lo = 0x80, hi = 0xBF;
	size_t n;

	if (c < 0x80)
		return 1;
	if (c >= 0xC2 && c <= 0xDF)
		n = 2;
	else if (c >= 0xE0 && c <= 0xEF)
		n = 3;
	else if (c >= 0xF0 && c <= 0xF4)
		n = 4;
	else
		return 0;
	if (left < n)
		return 0;
	/* The second byte's range is narrowed for the lead bytes that would
	 * otherwise allow overlong forms, surrogates or values past U+10FFFF. */
	if (c == 0xE0)
		lo = 0xA0;
	else if (c == 0xED)
		hi = 0x9F;
	else if (c == 0xF0)
		lo = 0x90;
	else if (c == 0xF4)
		hi = 0x8F;
	if (p[1] < lo || p[1] > hi)
		return 0;
	for (size_t i = 2; i < n; i++)
		if (p[i] < 0x80 || p[i] > 0xBF)
			return 0;
	return n;
}

bool utf8_valid(const unsigned char *buf, size_t len, size_t *bad_at)
{
	size_t i = 0;

	while (i < len) {
		/* Fast path over runs of ASCII, which headers are made of. */
		while (i + 8 <= len) {
			unsigned long long w;
			memcpy(&w, buf + i, 8);
			if (w & 0x8080808080808080ULL)
				break;
			i += 8;
		}
		if (i >= len)
			break;
		size_t n = utf8_seq_len(buf + i, len - i);
		if (n == 0) {
			if (bad_at)
				*bad_at = i;
			return false;
		}
		i += n;
	}
	return true;
}
