// SPDX-License-Identifier: MIT
/* dtype.c - dtype names and widths, as the reference implementation has them. */
#include "dtype.h"

#include <errno.h>
#include <string.h>

static const struct {
	const char *name;
	unsigned bits;
} table[DT_COUNT] = {
	[DT_BOOL] = { "BOOL", 8 },           [DT_F4] = { "F4", 4 },
	[DT_F6_E2M3] = { "F6_E2M3", 6 },     [DT_F6_E3M2] = { "F6_E3M2", 6 },
	[DT_U8] = { "U8", 8 },               [DT_I8] = { "I8", 8 },
	[DT_F8_E5M2] = { "F8_E5M2", 8 },     [DT_F8_E4M3] = { "F8_E4M3", 8 },
	[DT_F8_E8M0] = { "F8_E8M0", 8 },     [DT_F8_E4M3FNUZ] = { "F8_E4M3FNUZ", 8 },
	[DT_F8_E5M2FNUZ] = { "F8_E5M2FNUZ", 8 },
	[DT_I16] = { "I16", 16 },            [DT_U16] = { "U16", 16 },
	[DT_F16] = { "F16", 16 },            [DT_BF16] = { "BF16", 16 },
	[DT_I32] = { "I32", 32 },            [DT_U32] = { "U32", 32 },
	[DT_F32] = { "F32", 32 },            [DT_I64] = { "I64", 64 },
	[DT_U64] = { "U64", 64 },            [DT_F64] = { "F64", 64 },
	[DT_C64] = { "C64", 64 },
};

int dtype_parse(const char *s, enum dtype *out)
{
	for (int i = 0; i < DT_COUNT; i++) {
		if (strcmp(s, table[i].name) == 0) {
			*out = (enum dtype)i;
			return 0;
		}
	}
	return -EINVAL;
}

const char *dtype_name(enum dtype d)
{
	return (unsigned)d < DT_COUNT ? table[d].name : "?";
}

unsigned dtype_bits(enum dtype d)
{
	return (unsigned)d < DT_COUNT ? table[d].bits : 0;
}
