// SPDX-License-Identifier: MIT
/* opts.c - reading the caller's extensible option structs (see wsrv.h). */
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "wire.h"

/* More than any option struct will ever be: a size past it is a caller's
 * garbage, not a newer header. */
#define OPTS_MAX 4096

static bool zero(const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (p[i])
			return false;
	return true;
}

int cl_opts(const void *o, void *copy, size_t lib_size, size_t min_size,
	    size_t reserved_off, const char *what)
{
	uint32_t size;

	memset(copy, 0, lib_size);
	if (!o)
		return 0;
	memcpy(&size, o, sizeof(size));
	if (size < min_size)
		return cl_err(-EINVAL, "%s: the options' struct_size is %u; set it to sizeof the struct (%zu)",
			      what, size, lib_size);
	if (size > OPTS_MAX)
		return cl_err(-E2BIG, "%s: the options' struct_size %u is not a struct size", what, size);
	if (size > lib_size && !zero((const uint8_t *)o + lib_size, size - lib_size))
		return cl_err(-E2BIG, "%s: options this libwsrv (%s) does not know are set",
			      what, WSRV_VERSION);
	memcpy(copy, o, size < lib_size ? size : lib_size);
	if (!zero((const uint8_t *)copy + reserved_off, lib_size - reserved_off))
		return cl_err(-EINVAL, "%s: the options' reserved fields must be zero", what);
	return 0;
}
