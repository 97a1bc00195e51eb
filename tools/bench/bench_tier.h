// SPDX-License-Identifier: MIT
/* bench_tier.h - `wsrv-bench tier`'s parts: the passes (bench_tier.c) and
 * the MoE figures (bench_tier_moe.c). */
#ifndef WSRV_BENCH_TIER_H
#define WSRV_BENCH_TIER_H

#include <stdbool.h>
#include <stdint.h>

#include "wsrv.h"

/* The first model's tier counters on the server at sock: 0 or -errno. */
int tier_now(const char *sock, struct wsrv_tier_info *t);

/* --moe: the MoE figures of the model at dir under budget bytes. The
 * process's exit code. */
int bench_tier_moe(const char *dir, uint64_t budget, bool json);

#endif
