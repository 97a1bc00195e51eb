// SPDX-License-Identifier: MIT
/* units.h - sizes with suffixes ("64M", "2G") and human-readable bytes. */
#ifndef WSRV_UNITS_H
#define WSRV_UNITS_H

#include <stddef.h>
#include <stdint.h>

/* Parses a decimal count with an optional K, M, G, T or P suffix (either
 * case; powers of 1024), the IEC form too ("2GiB"), or "B" alone for
 * bytes; with a suffix, a fraction ("1.5G") is taken, rounded down to
 * whole bytes. The SI forms ("2GB", "2gb": powers of 1000) are refused,
 * not read as 1024's. Returns 0, or -EINVAL for anything else, a value
 * over 2^64-1 included. */
int parse_size(const char *s, uint64_t *out);

/* "[4096, 1024]" into buf; returns buf. */
const char *fmt_shape(const uint64_t *shape, uint32_t rank, char *buf, size_t len);

/* "1.50 GiB" into buf; returns buf. */
const char *fmt_bytes(uint64_t n, char *buf, size_t len);

#endif
