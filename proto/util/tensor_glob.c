// SPDX-License-Identifier: MIT
/* tensor_glob.c - patterns over tensor names. */
#include "tensor_glob.h"

#include <stdio.h>
#include <string.h>

bool tensor_glob(const char *g, const char *s)
{
	if (*g == 0)
		return *s == 0;
	if (*g == '*') {
		const char *e = s;
		while (*e && *e != '.')
			e++;
		return e > s && tensor_glob(g + 1, e);
	}
	return *g == *s && tensor_glob(g + 1, s + 1);
}

void tensor_module_path(const char *name, char *buf, size_t cap)
{
	static const char *const sfx[] = { ".weight_scale_inv", ".weight", ".bias" };
	size_t n = strlen(name);

	snprintf(buf, cap, "%s", name);
	for (size_t i = 0; i < 3; i++) {
		size_t k = strlen(sfx[i]);
		if (n > k && strcmp(name + n - k, sfx[i]) == 0 && n - k < cap) {
			buf[n - k] = 0;
			break;
		}
	}
}

bool tensor_pattern_match(const char *pattern, const char *name)
{
	char mod[512];

	tensor_module_path(name, mod, sizeof(mod));
	return tensor_glob(pattern, mod) || (strncmp(mod, "model.", 6) == 0 && tensor_glob(pattern, mod + 6));
}
