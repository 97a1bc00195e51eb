// SPDX-License-Identifier: MIT
/* bench_pinned.h - the GPU benchmarks' baseline: copies from page-locked
 * memory to the device, timed by events. */
#ifndef WSRV_BENCH_PINNED_H
#define WSRV_BENCH_PINNED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cuda_api.h"

/* n copies of lens[i] bytes from one page-locked buffer to one device
 * buffer (each as large as the largest copy) on stream st of context ctx,
 * between two events; with warm, one copy first, untimed (the driver's
 * first-copy setup). GB/s, or -1 when something failed. */
double bench_pinned_gbps(const struct cuda_api *cu, CUcontext ctx, CUstream st, const uint64_t *lens, size_t n,
			 bool warm);

#endif
