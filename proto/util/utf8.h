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

#endif
