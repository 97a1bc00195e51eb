// SPDX-License-Identifier: MIT
/* units.c - size parsing and printing. */
#include "units.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* The fraction ".ddd" at p scaled by 2^shift into *add, read exactly and
 * rounded down to a whole byte; *end past it. At most 19 digits (more is
 * refused, never cut: -EINVAL), so that the digits times 2^50 (P) fit in
 * 128 bits: in 64, the product wraps past nine digits at T and P. */
static int fraction(const char *p, unsigned shift, uint64_t *add, const char **end)
{
	unsigned __int128 num = 0, den = 1;
	unsigned digits = 0;

	*add = 0;
	*end = p;
	if (*p != '.')
		return 0;
	p++;
	if (!isdigit((unsigned char)*p))
		return -EINVAL;
	for (; isdigit((unsigned char)*p); p++) {
		if (++digits > 19)
			return -EINVAL;
		num = num * 10 + (unsigned)(*p - '0');
		den *= 10;
	}
	*end = p;
	*add = (uint64_t)((num << shift) / den); /* < 2^shift: it fits */
	return 0;
}

int parse_size(const char *s, uint64_t *out)
{
	static const char sfx[] = "KMGTP";
	unsigned long long v;
	const char *p, *end;
	char *iend;
	unsigned shift = 0;
	uint64_t add;

	if (!s || *s < '0' || *s > '9')
		return -EINVAL;
	errno = 0;
	v = strtoull(s, &iend, 10);
	if (errno)
		return -EINVAL;
	end = iend;
	/* The suffix decides how the fraction scales: find it past the digits. */
	for (p = end; *p == '.' || isdigit((unsigned char)*p); p++)
		;
	if (*p && strchr(sfx, toupper((unsigned char)*p)))
		shift = 10 * (unsigned)(strchr(sfx, toupper((unsigned char)*p)) - sfx + 1);
	if (fraction(end, shift, &add, &end) < 0 || (end != iend && shift == 0))
		return -EINVAL; /* "1.5" bytes is not a size */
	if (shift)
		end++;
	/* K, M, G... are powers of 1024, as are KiB, MiB, GiB... (IEC). KB,
	 * GB, TB say powers of 1000 (SI): refused rather than read as
	 * 1024's, as is anything else. "B" alone is bytes. */
	if (*end && !(shift && strcmp(end, "iB") == 0) && !(!shift && strcmp(end, "B") == 0))
		return -EINVAL;
	if (shift && v > (UINT64_MAX >> shift))
		return -EINVAL;
	v <<= shift;
	if (v > UINT64_MAX - add)
		return -EINVAL;
	*out = (uint64_t)v + add;
	return 0;
}

const char *fmt_bytes(uint64_t n, char *buf, size_t len)
{
	static const char *const u[] = { "B", "KiB", "MiB", "GiB", "TiB" };
	double v = (double)n;
	int i = 0;

	while (v >= 1024 && i < 4) {
		v /= 1024;
		i++;
	}
	if (i == 0)
		snprintf(buf, len, "%llu B", (unsigned long long)n);
	else
		snprintf(buf, len, "%.2f %s", v, u[i]);
	return buf;
}

const char *fmt_shape(const uint64_t *shape, uint32_t rank, char *buf, size_t len)
{
	size_t n = (size_t)snprintf(buf, len, "[");

	for (uint32_t d = 0; d < rank && n < len; d++)
		n += (size_t)snprintf(buf + n, len - n, "%s%llu", d ? ", " : "",
				      (unsigned long long)shape[d]);
	if (n < len)
		snprintf(buf + n, len - n, "]");
	return buf;
}
