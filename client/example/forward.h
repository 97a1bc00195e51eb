// SPDX-License-Identifier: MIT
/* forward.h - the example worker's computation: a forward pass over a
 * model's layers, a matrix-vector product per 2-D weight, with BF16, F16,
 * F32 and FP8 E4M3 (with its block scales, of the block size config.json
 * states) decoded to float. */
#ifndef WSRV_EXAMPLE_FORWARD_H
#define WSRV_EXAMPLE_FORWARD_H

#include <stddef.h>
#include <stdint.h>

#include "wsrv.h"

/* Runs `passes` passes over every layer, reading the weights through the
 * stream s (their device addresses), or straight from the shared mapping
 * when s is NULL. The activation starts from a fixed vector; the result is
 * its xxh3-64 in *digest. Same bytes, same order: the same bits either way. */
int forward_pass(struct wsrv_model *m, struct wsrv_stream *s, int passes, uint64_t *digest);

/* forward_pass over the shared mapping, where a disk tier's layers (wsrvd
 * --memory-budget) not mapped in m are each mapped through an attachment
 * of model of their own on c, let go once computed, so that a check never
 * holds more than a layer beyond what m holds. */
int forward_pass_direct(struct wsrv_client *c, const char *model, struct wsrv_model *m, int passes,
			uint64_t *digest);

/* Why the last forward_pass in this thread failed, when it was the model's
 * fault (a scale that does not fit its weight); else "". */
const char *forward_error(void);

/* The float value of an FP8 E4M3 byte (NaN for 0x7f and 0xff). */
float fp8_e4m3(uint8_t b);

#endif
