// SPDX-License-Identifier: MIT
/* peer_bounce.c - reused buffers between a 4 KiB arena and the network. */
#include "peer_bounce.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

void bounce_init(struct bounce_pool *p, size_t unit, size_t limit)
{
	memset(p, 0, sizeof(*p));
	p->unit = unit;
	p->limit = limit;
}

static void bounce_drop(struct bounce_pool *p, int i)
{
	free(p->buf[i]);
	p->buf[i] = NULL;
	p->bytes -= p->cap[i];
	p->cap[i] = 0;
}

int bounce_get(struct bounce_pool *p, size_t len, uint8_t **out)
{
	size_t want = len > p->unit ? len : p->unit;
	int empty = -1, small = -1;

	for (int i = 0; i < BOUNCE_MAX; i++) {
		if (p->buf[i] && !p->busy[i] && p->cap[i] >= len) {
			p->busy[i] = 1;
			*out = p->buf[i];
			return i;
		}
		if (!p->buf[i] && empty < 0)
			empty = i;
		if (p->buf[i] && !p->busy[i])
			small = i; /* free but too small: given up for a larger one */
	}
	if (p->bytes + want > p->limit && small >= 0 && p->bytes - p->cap[small] + want <= p->limit) {
		bounce_drop(p, small);
		empty = small;
	}
	if (empty < 0 || p->bytes + want > p->limit || !(p->buf[empty] = malloc(want)))
		return -EBUSY;
	p->cap[empty] = want;
	p->bytes += want;
	p->busy[empty] = 1;
	*out = p->buf[empty];
	return empty;
}

void bounce_put(struct bounce_pool *p, int i)
{
	if (i >= 0 && i < BOUNCE_MAX)
		p->busy[i] = 0;
}

void bounce_trim(struct bounce_pool *p)
{
	for (int i = 0; i < BOUNCE_MAX; i++)
		if (p->buf[i] && !p->busy[i])
			bounce_drop(p, i);
}

void bounce_fini(struct bounce_pool *p)
{
	for (int i = 0; i < BOUNCE_MAX; i++)
		free(p->buf[i]);
	memset(p, 0, sizeof(*p));
}
