// SPDX-License-Identifier: MIT
/* piece_door.c - a stream's pieces through one door (piece_door.h): a
 * disk tier's are lent, taken and given back in one request per batch
 * (tier_take.c); the others are kept once mapped, waited for while the
 * server loads them (ready_wait.c). */
#include <errno.h>
#include <stdlib.h>

#include "piece_door.h"
#include "ready_wait.h"
#include "tier_take.h"

/* Pieces p[0..n) that are kept, each waited for or tried. */
static int need_kept(struct wsrv_model *m, const uint32_t *p, size_t n, bool wait, enum cl_piece_got *got)
{
	int r = 0;

	for (size_t i = 0; i < n && r >= 0; i++) {
		if (cl_tiered(m, p[i]))
			continue;
		r = wait ? cl_piece_wait(m, p[i]) : cl_piece_try(m, p[i]);
		if (r == 0 && wait)
			r = 1;
		if (r == 1)
			got[i] = PIECE_KEPT;
	}
	return r < 0 ? r : 0;
}

/* Pieces p[0..n) that are lent, taken in one batch. */
static int need_lent(struct wsrv_model *m, const uint32_t *p, size_t n, bool wait, enum cl_piece_got *got)
{
	uint32_t *lent = calloc(n + 1, sizeof(*lent));
	size_t *at = calloc(n + 1, sizeof(*at)), k = 0;
	bool *ok = calloc(n + 1, sizeof(*ok));
	int r = lent && at && ok ? 0 : cl_err(-ENOMEM, "out of memory");

	for (size_t i = 0; r == 0 && i < n; i++)
		if (cl_tiered(m, p[i])) {
			at[k] = i;
			lent[k++] = p[i];
		}
	if (r == 0 && k)
		r = cl_tier_use_many(m, lent, k, wait, ok);
	for (size_t j = 0; ok && j < k; j++)
		if (ok[j])
			got[at[j]] = PIECE_LENT;
	free(lent);
	free(at);
	free(ok);
	return r;
}

int cl_pieces_need(struct wsrv_model *m, const uint32_t *p, size_t n, bool wait, enum cl_piece_got *got)
{
	int r;

	for (size_t i = 0; i < n; i++)
		got[i] = PIECE_NOT_YET;
	/* The lent ones first: their reads go on while the kept are waited for. */
	r = need_lent(m, p, n, wait, got);
	return r < 0 ? r : need_kept(m, p, n, wait, got);
}

int cl_pieces_done(struct wsrv_model *m, const uint32_t *p, size_t n)
{
	return n ? cl_tier_drop_many(m, p, n) : 0;
}

int cl_piece_kept_now(struct wsrv_model *m, uint32_t g)
{
	return cl_tiered(m, g) ? 0 : cl_piece_try(m, g);
}
