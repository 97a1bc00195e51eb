// SPDX-License-Identifier: MIT
/* ready_read.h - a loading model's readiness page, read in one place: its
 * view, its words (segments, the model, the disk tier's) and checksums,
 * as the newest server wrote them. The rest of the model room asks these
 * and never reads the page itself. (ready_read.c) */
#ifndef WSRV_CLIENT_READY_READ_H
#define WSRV_CLIENT_READY_READ_H

#include <stdbool.h>
#include <stdint.h>

#include "ready.h"

struct wsrv_model;

/* The model's own word on the page, for cl_page_word. */
#define RD_WORD_MODEL UINT32_MAX

/* The newest readiness page's view (m->ready is not NULL). */
const struct rd_view *cl_rv(const struct wsrv_model *m);
/* A readiness word, read as the server wrote it. */
uint32_t cl_load_word(const uint32_t *w);
/* A model with a disk tier (--memory-budget): whether segment seg lives
 * on it (seg may be a piece: a unit always does). Such a piece is mapped
 * only while something uses it (tier_take.h). */
bool cl_tiered(const struct wsrv_model *m, uint32_t seg);
/* Piece g's tier word on the newest server's page, or NULL (a page with
 * no tier, or not these units). */
const uint32_t *cl_tier_word(const struct wsrv_model *m, uint32_t g);
/* Tensor i's checksum as the page has it (attached while loading, the
 * manifest has 0). */
uint64_t cl_page_xxh3(const struct wsrv_model *m, uint32_t i);

/* The futex word of segment seg (or of the model: RD_WORD_MODEL) on the
 * newest server's page. */
const uint32_t *cl_page_word(const struct wsrv_model *m, uint32_t seg);

#endif
