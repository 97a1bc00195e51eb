// SPDX-License-Identifier: MIT
/* checksum_pass.h - every tensor's checksum over its bytes in a sealed
 * arena, read on several threads. */
#ifndef WSRV_CHECKSUM_PASS_H
#define WSRV_CHECKSUM_PASS_H

#include <stdint.h>

#include "load_door.h"
#include "format_door.h"

/* sums[i] = xxh3-64 of tensor i's held bytes (t->part_off, t->part_len)
 * as a's read-only mapping holds them (sums: m->ntensors entries, the
 * caller's). Up to 8 threads, as many as the CPUs this process may run
 * on, each a run of tensors of about equal bytes; a run whose thread
 * cannot be started is done on the caller's. */
void checksum_pass(const struct arena *a, const struct model *m, uint64_t *sums);

#endif
