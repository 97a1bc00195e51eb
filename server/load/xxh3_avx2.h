// SPDX-License-Identifier: MIT
/* xxh3_avx2.h - xxh3-64 streaming compiled for AVX2 (xxh3_avx2.c is built
 * with -mavx2; call it only where the CPU has AVX2). The state is opaque. */
#ifndef WSRV_XXH3_AVX2_H
#define WSRV_XXH3_AVX2_H

#include <stddef.h>
#include <stdint.h>

void *xxh3_avx2_new(void);
void xxh3_avx2_reset(void *s);
void xxh3_avx2_update(void *s, const void *p, size_t n);
uint64_t xxh3_avx2_digest(const void *s);
void xxh3_avx2_free(void *s);

#endif
