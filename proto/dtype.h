// SPDX-License-Identifier: MIT
/* dtype.h - the 22 safetensors element types and their widths in bits. */
#ifndef WSRV_DTYPE_H
#define WSRV_DTYPE_H

#include <stdint.h>

/* Order and values are part of the manifest format (proto/manifest.h):
 * append only. */
enum dtype {
	DT_BOOL = 0, DT_F4, DT_F6_E2M3, DT_F6_E3M2, DT_U8, DT_I8,
	DT_F8_E5M2, DT_F8_E4M3, DT_F8_E8M0, DT_F8_E4M3FNUZ, DT_F8_E5M2FNUZ,
	DT_I16, DT_U16, DT_F16, DT_BF16, DT_I32, DT_U32, DT_F32,
	DT_I64, DT_U64, DT_F64, DT_C64,
	DT_COUNT
};

/* Returns 0 and sets *out when s names a dtype exactly, else -EINVAL. */
int dtype_parse(const char *s, enum dtype *out);
/* The safetensors spelling ("BF16"); "?" for an out-of-range value. */
const char *dtype_name(enum dtype d);
/* Bits per element: 4, 6, 8, 16, 32 or 64; 0 for an out-of-range value. */
unsigned dtype_bits(enum dtype d);

#endif
