// SPDX-License-Identifier: MIT
/* peer_table.c - a model's offer to peers. */
#include "peer_table.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>
#include <xxhash.h>

#include "fullio.h"

uint64_t peer_layout_hash(const struct model *m)
{
	XXH3_state_t *s = XXH3_createState();
	uint64_t h;

	if (!s)
		return 0;
	XXH3_64bits_reset(s);
	XXH3_64bits_update(s, &m->ntensors, sizeof(m->ntensors));
	/* What the bytes are, not only where they lie: a published
	 * generation, or other files of the same shape, hash differently. */
	XXH3_64bits_update(s, &m->content_id, sizeof(m->content_id));
	for (size_t i = 0; i < m->ntensors; i++) {
		const struct model_tensor *t = &m->tensors[i];
		uint64_t rec[7] = { t->dtype, t->rank, t->segment, t->offset, t->size, t->part_off, t->part_len };
		XXH3_64bits_update(s, t->name, strlen(t->name) + 1);
		XXH3_64bits_update(s, rec, sizeof(rec));
		XXH3_64bits_update(s, t->shape, t->rank * sizeof(uint64_t));
	}
	XXH3_64bits_update(s, &m->nsegments, sizeof(m->nsegments));
	XXH3_64bits_update(s, m->seg_size, m->nsegments * sizeof(uint64_t));
	h = XXH3_64bits_digest(s);
	XXH3_freeState(s);
	return h;
}

static int map_segments(struct peer_table *t, const struct arena *a, struct errinfo *e)
{
	t->nseg = a->nseg;
	t->map = calloc(a->nseg, sizeof(*t->map));
	t->map_len = calloc(a->nseg, sizeof(*t->map_len));
	if (!a->hugetlb && (t->fd = malloc(a->nseg * sizeof(*t->fd))))
		for (uint32_t i = 0; i < a->nseg; i++)
			t->fd[i] = -1;
	if (!t->map || !t->map_len || (!a->hugetlb && !t->fd))
		return err_set(e, -ENOMEM, "out of memory");
	for (uint32_t i = 0; i < a->nseg; i++) {
		if (t->fd && (t->fd[i] = fcntl(a->seg[i].fd, F_DUPFD_CLOEXEC, 3)) < 0)
			return err_set(e, -errno, "peers: cannot hold segment %u: %s", i, strerror(errno));
		void *p = mmap(NULL, a->seg[i].size, PROT_READ, MAP_SHARED, a->seg[i].fd, 0);
		if (p == MAP_FAILED)
			return err_set(e, -errno, "peers: cannot map segment %u: %s", i, strerror(errno));
		t->map[i] = p;
		t->map_len[i] = a->seg[i].size;
	}
	return 0;
}

int peer_table_create(const struct model *m, const struct arena *a, struct peer_table **out,
		      struct errinfo *e)
{
	struct peer_table *t = calloc(1, sizeof(*t));
	int r;

	if (!t)
		return err_set(e, -ENOMEM, "out of memory");
	snprintf(t->name, sizeof(t->name), "%s", m->name);
	t->layout = peer_layout_hash(m);
	t->ntensors = (uint32_t)m->ntensors;
	t->t = calloc(m->ntensors + 1, sizeof(*t->t));
	t->xxh3 = calloc(m->ntensors + 1, sizeof(*t->xxh3));
	t->state = calloc(m->ntensors + 1, 1);
	if (!t->t || !t->xxh3 || !t->state) {
		peer_table_free(t);
		return err_set(e, -ENOMEM, "out of memory");
	}
	for (size_t i = 0; i < m->ntensors; i++)
		t->t[i] = (struct peer_tensor){ m->tensors[i].segment,
						m->tensors[i].offset + m->tensors[i].part_off,
						m->tensors[i].part_len };
	if ((r = map_segments(t, a, e)) < 0) {
		peer_table_free(t);
		return r;
	}
	*out = t;
	return 0;
}

void peer_table_free(struct peer_table *t)
{
	if (!t)
		return;
	for (uint32_t i = 0; t->map && i < t->nseg; i++)
		if (t->map[i])
			munmap((void *)t->map[i], t->map_len[i]);
	for (uint32_t i = 0; t->fd && i < t->nseg; i++)
		if (t->fd[i] >= 0)
			close(t->fd[i]);
	free(t->fd);
	free(t->map);
	free(t->map_len);
	free(t->t);
	free(t->xxh3);
	free(t->state);
	free(t);
}

void peer_table_set_ready(struct peer_table *t, uint32_t i, uint64_t xxh3)
{
	t->xxh3[i] = xxh3;
	__atomic_store_n(&t->state[i], PEER_READY, __ATOMIC_RELEASE);
}

void peer_table_set_coming(struct peer_table *t, uint32_t i)
{
	__atomic_store_n(&t->state[i], PEER_COMING, __ATOMIC_RELEASE);
}

unsigned peer_table_state(const struct peer_table *t, uint32_t i)
{
	return __atomic_load_n(&t->state[i], __ATOMIC_ACQUIRE);
}

int peer_table_read(const struct peer_table *t, uint32_t i, uint64_t off, void *dst, size_t len)
{
	int r;

	if (!t->fd) {
		memcpy(dst, peer_table_ptr(t, i, off), len);
		return 0;
	}
	r = pread_full(t->fd[t->t[i].seg], dst, len, t->t[i].off + off);
	return r == -ENODATA ? -EIO : r;
}
