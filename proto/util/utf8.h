// SPDX-License-Identifier: MIT
/* utf8.h - strict UTF-8 validation (no overlong forms, no surrogates, nothing
 * above U+10FFFF), the same acceptance as Rust's str::from_utf8. */
#ifndef WSRV_UTF8_H
#define WSRV_UTF8_H

#include <stdbool.h>
#include <stddef.h>

/* Returns true when buf[0..len) is valid UTF-8; else false and, when bad_at is
 * non-NULL, the offset of the first byte of the first invalid sequence. */
bool utf8_valid(const unsigned char *buf, size_t len, size_t *bad_at);

/* Length of the well-formed sequence at p (left bytes there), 0 if it is
 * malformed or cut short. */
size_t utf8_seq_len(const unsigned char *p, size_t left);

/* How many bytes of s (NUL-terminated) to keep so that at most max are
 * kept and no character is cut: for "%.*s" (one rule wherever a name or
 * a message is shortened: a cut character makes a reply invalid UTF-8,
 * which clients refuse). Bytes that are not UTF-8 count one each. */
int utf8_fit(const char *s, size_t max);

/* The two "%.*s" arguments for s cut to at most n bytes by utf8_fit. */
#define UTF8_CUT(s, n) utf8_fit((s), (n)), (s)

/* Copies src into dst (cap bytes, NUL-terminated), cut by utf8_fit. */
void utf8_copy(char *dst, size_t cap, const char *src);

/* Cuts s where a character at its end was left incomplete (by a printf
 * that ran out of room). */
void utf8_trim(char *s);

/* Whether the well-formed character at p (n bytes) is one a name or a
 * message must not hold: C0 and C1 controls but tab and newline, DEL, and
 * the bidirectional overrides and isolates (U+202A-U+202E, U+2066-U+2069),
 * which make a log line or a table read in another order. */
bool utf8_hidden(const unsigned char *p, size_t n);

/* Whether s[0..n) is text, the rule every string on the wire keeps
 * (pb_text.h): well-formed UTF-8 with no character utf8_hidden refuses. */
bool utf8_text(const char *s, size_t n);

#endif
