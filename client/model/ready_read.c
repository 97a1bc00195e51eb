// SPDX-License-Identifier: MIT
/* ready_read.c - the readiness page read: the one module that reads a
 * loading model's words and checksums on the newest server's page
 * (ready_read.h). It calls nothing of the model room but its door. */
#include "ready_read.h"

#include "attached.h"

const struct rd_view *cl_rv(const struct wsrv_model *m)
{
	return &__atomic_load_n(&m->ready, __ATOMIC_ACQUIRE)->rv;
}

uint32_t cl_load_word(const uint32_t *w)
{
	return __atomic_load_n(w, __ATOMIC_ACQUIRE);
}

bool cl_tiered(const struct wsrv_model *m, uint32_t seg)
{
	const struct rd_view *v = m->ready ? cl_rv(m) : NULL;
	uint32_t w;

	if (seg >= m->nseg)
		return seg < cl_npieces(m);
	w = v && v->tier ? cl_load_word(&v->tier[seg]) : RD_TIER_RESIDENT;
	return w != RD_TIER_RESIDENT && w != RD_TIER_PARTS;
}

const uint32_t *cl_tier_word(const struct wsrv_model *m, uint32_t g)
{
	const struct rd_view *v = cl_rv(m);

	if (!v->tier || (g >= m->nseg && (!v->units || v->nunits != m->nunits)))
		return NULL;
	return &v->tier[g];
}

uint64_t cl_page_xxh3(const struct wsrv_model *m, uint32_t i)
{
	return __atomic_load_n(&cl_rv(m)->xxh3[i], __ATOMIC_RELAXED);
}

/* The futex word of segment seg (or of the model: RD_WORD_MODEL) on the
 * newest server's page. */
const uint32_t *cl_page_word(const struct wsrv_model *m, uint32_t seg)
{
	const struct rd_view *v = cl_rv(m);

	return seg == RD_WORD_MODEL ? &v->h->state : &v->segments[seg];
}
