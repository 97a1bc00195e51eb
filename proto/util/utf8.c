// SPDX-License-Identifier: MIT
/* utf8.c - strict UTF-8 validation, following the Unicode table of
 * well-formed byte sequences (Unicode 15, table 3-7). */
#include "utf8.h"

#include <stdio.h>
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

int utf8_fit(const char *s, size_t max)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t i = 0, len = strnlen(s, max + 4);

	while (i < len) {
		size_t n = utf8_seq_len(p + i, len - i);
		if (n == 0)
			n = 1;
		if (i + n > max)
			break;
		i += n;
	}
	return (int)i;
}

void utf8_copy(char *dst, size_t cap, const char *src)
{
	if (cap)
		snprintf(dst, cap, "%.*s", utf8_fit(src, cap - 1), src);
}

void utf8_trim(char *s)
{
	size_t len = strlen(s), k = len;

	/* Back over at most three continuation bytes to a lead byte. */
	while (k > 0 && len - k < 4 && ((unsigned char)s[k - 1] & 0xC0) == 0x80)
		k--;
	if (k > 0 && (unsigned char)s[k - 1] >= 0xC0 &&
	    utf8_seq_len((const unsigned char *)s + k - 1, len - k + 1) == 0)
		s[k - 1] = '\0';
}

bool utf8_hidden(const unsigned char *p, size_t n)
{
	if (n == 1)
		return (p[0] < 0x20 && p[0] != '\t' && p[0] != '\n') || p[0] == 0x7f;
	if (n == 2)
		return p[0] == 0xC2 && p[1] < 0xA0; /* U+0080-U+009F */
	if (n == 3 && p[0] == 0xE2 && p[1] == 0x80)
		return p[2] >= 0xAA && p[2] <= 0xAE; /* U+202A-U+202E */
	if (n == 3 && p[0] == 0xE2 && p[1] == 0x81)
		return p[2] >= 0xA6 && p[2] <= 0xA9; /* U+2066-U+2069 */
	return false;
}

bool utf8_text(const char *s, size_t n)
{
	const unsigned char *p = (const unsigned char *)s;

	for (size_t i = 0; i < n;) {
		size_t k = utf8_seq_len(p + i, n - i);
		if (k == 0 || utf8_hidden(p + i, k))
			return false;
		i += k;
	}
	return true;
}
