// SPDX-License-Identifier: MIT
/* layer_name.c - matching "prefix{N}suffix" patterns at the start of a name. */
#include "layer_name.h"

#include <errno.h>
#include <string.h>

static const char *const builtin[] = {
	"model.language_model.layers.{N}.",
	"model.layers.{N}.",
	"layers.{N}.",
	"transformer.h.{N}.",
	"blk.{N}.",
};

int layer_pattern_check(const char *pattern)
{
	const char *p = strstr(pattern, "{N}");

	if (!p || strstr(p + 3, "{N}"))
		return -EINVAL;
	return 0;
}

/* Returns the index when name matches pattern, else -1. */
static int32_t match(const char *name, const char *pattern)
{
	const char *ph = strstr(pattern, "{N}");
	size_t plen = (size_t)(ph - pattern);
	const char *suffix = ph + 3;
	const char *p = name + plen;
	int32_t v = 0;
	int digits = 0;

	if (strncmp(name, pattern, plen) != 0)
		return -1;
	while (*p >= '0' && *p <= '9') {
		if (++digits > 6)
			return -1;
		v = v * 10 + (*p - '0');
		p++;
	}
	/* "01" is not a layer index: a leading zero means a different name. */
	if (digits == 0 || (digits > 1 && name[plen] == '0'))
		return -1;
	if (strncmp(p, suffix, strlen(suffix)) != 0)
		return -1;
	return v;
}

int32_t layer_from_name(const char *name, const char *const *extra, size_t nextra)
{
	for (size_t i = 0; i < nextra; i++) {
		int32_t v = match(name, extra[i]);
		if (v >= 0)
			return v;
	}
	for (size_t i = 0; i < sizeof(builtin) / sizeof(builtin[0]); i++) {
		int32_t v = match(name, builtin[i]);
		if (v >= 0)
			return v;
	}
	return LAYER_GLOBAL;
}

int32_t expert_from_name(const char *name)
{
	for (const char *p = strstr(name, ".experts."); p; p = strstr(p + 1, ".experts.")) {
		const char *q = p + strlen(".experts.");
		int32_t v = 0;
		int digits = 0;
		while (*q >= '0' && *q <= '9' && digits < 7) {
			v = v * 10 + (*q++ - '0');
			digits++;
		}
		if (digits && digits < 7 && *q == '.')
			return v;
	}
	return -1;
}
