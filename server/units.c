/* units.c - size parsing and printing. */
#include "units.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

int parse_size(const char *s, uint64_t *out)
{
	static const char sfx[] = "KMGT";
	unsigned long long v;
	const char *p;
	char *end;
	unsigned shift = 0;

	if (!s || *s < '0' || *s > '9')
		return -EINVAL;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno)
		return -EINVAL;
	if (*end && (p = strchr(sfx, toupper((unsigned char)*end)))) {
		shift = 10 * (unsigned)(p - sfx + 1);
		end++;
	}
	if (*end && strcasecmp(end, "iB") && strcasecmp(end, "B"))
		return -EINVAL;
	if (shift && v > (UINT64_MAX >> shift))
		return -EINVAL;
	*out = (uint64_t)v << shift;
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
