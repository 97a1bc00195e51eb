// SPDX-License-Identifier: MIT
/* units.c - a disk tier's units as this client sees them (attached.h):
 * the server's table, checked and copied; which piece each tensor's bytes
 * come from; and a segment with units mapped around them (its memfd
 * leaves them out; their ranges stay unreadable while not mapped). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "attached.h"
#include "sorted.h"

#define UNIT_PAGE 4096u

/* Whether unit u is whole pages inside its segment, after unit before. */
static bool unit_ok(const struct wsrv_model *m, const struct rd_unit *u, const struct rd_unit *before)
{
	if (u->segment >= m->nseg || u->offset % UNIT_PAGE || u->length % UNIT_PAGE || !u->length ||
	    u->offset > m->seg_len[u->segment] || u->length > m->seg_len[u->segment] - u->offset)
		return false;
	/* In order and apart: a tensor's unit is found by bisection. */
	return !before || before->segment < u->segment ||
	       (before->segment == u->segment && before->offset + before->length <= u->offset);
}

/* A place in a segment: what the units are searched by. */
struct seg_at {
	uint32_t seg;
	uint64_t off;
};

/* Whether unit elem ends by the place key (units are in order). */
static bool unit_ends_by(const void *key, const void *elem)
{
	const struct seg_at *k = key;
	const struct rd_unit *u = elem;

	return u->segment < k->seg || (u->segment == k->seg && u->offset + u->length <= k->off);
}

/* The unit holding [off, off + len) of segment seg, or -1. */
static long unit_at(const struct wsrv_model *m, uint32_t seg, uint64_t off, uint64_t len)
{
	struct seg_at k = { seg, off };
	uint32_t lo = (uint32_t)sorted_first(&k, m->units, m->nunits, sizeof(*m->units), unit_ends_by);

	if (lo < m->nunits && m->units[lo].segment == seg && m->units[lo].offset <= off &&
	    off + len <= m->units[lo].offset + m->units[lo].length)
		return (long)lo;
	return -1;
}

/* The per-piece state grows from the segments' to the pieces'. */
static int grow(struct wsrv_model *m)
{
	struct cl_piece_st *pst = realloc(m->pst, (m->nseg + m->nunits + 1) * sizeof(*pst));

	if (!pst)
		return cl_err(-ENOMEM, "out of memory");
	memset(pst + m->nseg, 0, (m->nunits + 1) * sizeof(*pst));
	m->pst = pst;
	return 0;
}

/* Each tensor's piece: its unit's, or its segment. */
static int find_pieces(struct wsrv_model *m)
{
	uint32_t nt = m->v.h->ntensors;

	if (!(m->piece = calloc(nt + 1, sizeof(*m->piece))))
		return cl_err(-ENOMEM, "out of memory");
	for (uint32_t i = 0; i < nt; i++) {
		const struct mf_tensor *t = &m->v.tensors[i];
		long u = t->size ? unit_at(m, t->segment, t->offset, t->size) : -1;
		m->piece[i] = u < 0 ? t->segment : m->nseg + (uint32_t)u;
	}
	return 0;
}

int cl_units_setup(struct wsrv_model *m, const struct rd_view *v)
{
	uint32_t n = v->units ? v->nunits : 0; /* the checked count, not the page's */
	struct rd_unit *u;
	int r;

	if (!n)
		return 0;
	if (n > (1u << 24))
		return cl_err(-EBADMSG, "the server announced %u disk tier units", n);
	/* Copied first, then checked: the page is the server's to write. */
	if (!(u = malloc(n * sizeof(*u))))
		return cl_err(-ENOMEM, "out of memory");
	memcpy(u, v->units, n * sizeof(*u));
	for (uint32_t k = 0; k < n; k++)
		if (!unit_ok(m, &u[k], k ? &u[k - 1] : NULL)) {
			free(u);
			return cl_err(-EBADMSG, "the server announced disk tier unit %u out of its segment or order", k);
		}
	m->units = u;
	m->nunits = n;
	if ((r = grow(m)) < 0)
		return r;
	return find_pieces(m);
}

void cl_piece_range(const struct wsrv_model *m, uint32_t p, uint8_t **addr, size_t *len, uint64_t *off)
{
	if (p < m->nseg) {
		*addr = (uint8_t *)m->seg[p];
		*len = m->seg_len[p];
		*off = 0;
		return;
	}
	const struct rd_unit *u = &m->units[p - m->nseg];
	*addr = (uint8_t *)m->seg[u->segment] + u->offset;
	*len = u->length;
	*off = 0; /* a unit's memfd holds its bytes alone */
}

/* The first unit of segment g (units are in order), or nunits. */
static uint32_t first_unit(const struct wsrv_model *m, uint32_t g)
{
	struct seg_at k = { g, 0 };

	return (uint32_t)sorted_first(&k, m->units, m->nunits, sizeof(*m->units), unit_ends_by);
}

uint64_t cl_units_left_out(const struct wsrv_model *m, uint32_t g)
{
	uint64_t out = 0;

	for (uint32_t k = first_unit(m, g); k < m->nunits && m->units[k].segment == g; k++)
		out += m->units[k].length;
	return out;
}

/* Maps [a, b) of segment g from fd's byte a - out. */
static int map_run(struct wsrv_model *m, uint32_t g, int fd, uint64_t a, uint64_t b, uint64_t out)
{
	if (b > a && mmap((uint8_t *)m->seg[g] + a, b - a, PROT_READ, MAP_SHARED | MAP_FIXED, fd, (off_t)(a - out)) ==
			     MAP_FAILED)
		return cl_err(-errno, "cannot map segment %u: %s", g, strerror(errno));
	return 0;
}

int cl_units_map_around(struct wsrv_model *m, uint32_t g, int fd)
{
	uint64_t a = 0, out = 0;
	int r = 0;

	for (uint32_t k = first_unit(m, g); r == 0 && k < m->nunits && m->units[k].segment == g; k++) {
		const struct rd_unit *u = &m->units[k];
		r = map_run(m, g, fd, a, u->offset, out);
		out += u->length;
		a = u->offset + u->length;
	}
	return r < 0 ? r : map_run(m, g, fd, a, m->seg_len[g], out);
}

void cl_units_free(struct wsrv_model *m)
{
	free(m->units);
	free(m->piece);
	m->units = NULL;
	m->piece = NULL;
	m->nunits = 0;
}
