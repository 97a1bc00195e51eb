// SPDX-License-Identifier: MIT
/* cliarg.c - strict numbers from the command line. */
#include "cliarg.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "units.h"

long cliarg_long(const char *prog, const char *opt, const char *s, long lo, long hi)
{
	char *end;
	long v;

	errno = 0;
	v = s ? strtol(s, &end, 10) : 0;
	if (!s || errno || end == s || *end || v < lo || v > hi) {
		fprintf(stderr, "%s: %s '%s': expected a whole number from %ld to %ld\n", prog, opt,
			s ? s : "", lo, hi);
		exit(2);
	}
	return v;
}

double cliarg_double(const char *prog, const char *opt, const char *s, double lo, double hi)
{
	char *end;
	double v;

	errno = 0;
	v = s ? strtod(s, &end) : 0;
	if (!s || errno || end == s || *end || !isfinite(v) || v < lo || v > hi) {
		fprintf(stderr, "%s: %s '%s': expected a number from %g to %g\n", prog, opt,
			s ? s : "", lo, hi);
		exit(2);
	}
	return v;
}

uint64_t cliarg_size(const char *prog, const char *opt, const char *s, uint64_t lo, uint64_t hi)
{
	uint64_t v;

	if (!s || parse_size(s, &v) < 0 || v < lo || v > hi) {
		char a[32], b[32];
		fprintf(stderr, "%s: %s '%s': expected a size from %s to %s, such as 512M, 1.5G or 2GiB "
			"(K, M, G, T and KiB, MiB, GiB, TiB are powers of 1024; KB, MB, GB are not taken)\n",
			prog, opt, s ? s : "", fmt_bytes(lo, a, sizeof(a)), fmt_bytes(hi, b, sizeof(b)));
		exit(2);
	}
	return v;
}
