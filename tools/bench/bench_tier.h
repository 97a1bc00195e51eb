// SPDX-License-Identifier: MIT
/* bench_tier.h - `wsrv-bench tier --moe`, the MoE figures
 * (bench_tier_moe.c), for the passes' main (bench_tier.c). */
#ifndef WSRV_BENCH_TIER_H
#define WSRV_BENCH_TIER_H

#include <stdbool.h>
#include <stdint.h>

/* --moe: the MoE figures of the model at dir under budget bytes. The
 * process's exit code. */
int bench_tier_moe(const char *dir, uint64_t budget, bool json);

#endif
