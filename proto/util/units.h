// SPDX-License-Identifier: MIT
/* units.h - sizes with suffixes ("64M", "2G") and human-readable bytes. */
#ifndef WSRV_UNITS_H
#define WSRV_UNITS_H

#include <stddef.h>
#include <stdint.h>

/* Parses a decimal count with an optional K, M, G, T or P suffix (powers
 * of 1024, an optional trailing "iB" or "B" allowed); with a suffix, a
 * fraction ("1.5G") is taken, rounded down to whole bytes. Returns 0, or
 * -EINVAL for anything else, a value over 2^64-1 included. */
int parse_size(const char *s, uint64_t *out);

/* "[4096, 1024]" into buf; returns buf. */
const char *fmt_shape(const uint64_t *shape, uint32_t rank, char *buf, size_t len);

/* "1.50 GiB" into buf; returns buf. */
const char *fmt_bytes(uint64_t n, char *buf, size_t len);

#endif
