// SPDX-License-Identifier: MIT
/* peer_table.c - a model's offer to peers. */
#include "peer_table.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "fullio.h"
#include "memfd_util.h"

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

static size_t al8(size_t n)
{
	return (n + 7) & ~(size_t)7;
}

/* The offsets of a table of n tensors in its memfd. */
static void table_layout(struct peer_table_head *h, uint32_t n)
{
	h->t_off = al8(sizeof(*h));
	h->xxh3_off = al8(h->t_off + (uint64_t)n * sizeof(struct peer_tensor));
	h->state_off = al8(h->xxh3_off + (uint64_t)n * sizeof(uint64_t));
	h->size = al8(h->state_off + n + 1);
}

/* t's arrays at their places in its mapping. */
static void table_point(struct peer_table *t, const struct peer_table_head *h)
{
	uint8_t *b = t->tmap;

	t->t = (struct peer_tensor *)(b + h->t_off);
	t->xxh3 = (uint64_t *)(b + h->xxh3_off);
	t->state = b + h->state_off;
}

static int hold_segments(struct peer_table *t, const struct arena *a, struct errinfo *e)
{
	t->nseg = arena_nseg(a);
	t->hugetlb = arena_hugetlb(a);
	if (!(t->fd = malloc((arena_nseg(a) + 1) * sizeof(*t->fd))))
		return err_set(e, -ENOMEM, "out of memory");
	for (uint32_t i = 0; i < arena_nseg(a); i++)
		t->fd[i] = -1;
	for (uint32_t i = 0; i < arena_nseg(a); i++)
		if ((t->fd[i] = fcntl(arena_seg_fd(a, i), F_DUPFD_CLOEXEC, 3)) < 0)
			return err_set(e, -errno, "peers: cannot hold segment %u: %s", i, strerror(errno));
	return 0;
}

int peer_table_create(const struct model *m, const struct arena *a, struct peer_table **out,
		      struct errinfo *e)
{
	struct peer_table *t = calloc(1, sizeof(*t));
	struct peer_table_head h = { .magic = PEER_TABLE_MAGIC };
	char label[160];
	int r;

	if (!t)
		return err_set(e, -ENOMEM, "out of memory");
	t->tfd = -1;
	snprintf(t->name, sizeof(t->name), "%s", m->name);
	t->layout = peer_layout_hash(m);
	t->ntensors = (uint32_t)m->ntensors;
	memcpy(h.name, t->name, sizeof(h.name));
	h.layout = t->layout;
	h.ntensors = t->ntensors;
	h.nseg = arena_nseg(a);
	table_layout(&h, t->ntensors);
	snprintf(label, sizeof(label), "wsrv:%s:peers", m->name);
	if ((t->tfd = memfd_new_mapped(label, h.size, &t->tmap)) < 0) {
		r = t->tfd;
		t->tfd = -1;
		peer_table_free(t);
		return err_set(e, r, "peers: cannot make the table: %s", strerror(-r));
	}
	t->tlen = h.size;
	memcpy(t->tmap, &h, sizeof(h));
	table_point(t, &h);
	for (size_t i = 0; i < m->ntensors; i++)
		t->t[i] = (struct peer_tensor){ m->tensors[i].segment,
						m->tensors[i].offset + m->tensors[i].part_off,
						m->tensors[i].part_len };
	if ((r = hold_segments(t, a, e)) < 0) {
		peer_table_free(t);
		return r;
	}
	*out = t;
	return 0;
}

/* Whether the imported table's head and entries fit its memfd and the
 * segments (sizes from fstat). */
static int import_check(const struct peer_table *t, const struct peer_table_head *h, struct errinfo *e)
{
	struct peer_table_head want = *h;

	table_layout(&want, h->ntensors);
	if (h->magic != PEER_TABLE_MAGIC || h->size != want.size || h->t_off != want.t_off ||
	    h->xxh3_off != want.xxh3_off || h->state_off != want.state_off || h->size > t->tlen ||
	    h->nseg != t->nseg || !memchr(h->name, 0, sizeof(h->name)))
		return err_set(e, -EBADMSG, "peers: a malformed table");
	for (uint32_t i = 0; i < h->ntensors; i++) {
		const struct peer_tensor *x = &t->t[i];
		if (x->seg >= t->nseg || x->off > t->map_len[x->seg] || x->size > t->map_len[x->seg] - x->off)
			return err_set(e, -EBADMSG, "peers: table entry %u lies outside its segment", i);
	}
	return 0;
}

static int map_imported(struct peer_table *t, struct errinfo *e)
{
	struct stat st;

	if (fstat(t->tfd, &st) < 0 || st.st_size < (off_t)sizeof(struct peer_table_head))
		return err_set(e, -EBADMSG, "peers: a table of no size");
	t->tlen = (size_t)st.st_size;
	if ((t->tmap = mmap(NULL, t->tlen, PROT_READ, MAP_SHARED, t->tfd, 0)) == MAP_FAILED) {
		t->tmap = NULL;
		return err_set(e, -errno, "peers: cannot map a table: %s", strerror(errno));
	}
	t->map = calloc(t->nseg + 1, sizeof(*t->map));
	t->map_len = calloc(t->nseg + 1, sizeof(*t->map_len));
	if (!t->map || !t->map_len)
		return err_set(e, -ENOMEM, "out of memory");
	for (uint32_t i = 0; i < t->nseg; i++) {
		void *p;
		if (fstat(t->fd[i], &st) < 0 || st.st_size <= 0)
			return err_set(e, -EBADMSG, "peers: segment %u has no size", i);
		p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, t->fd[i], 0);
		if (p == MAP_FAILED)
			return err_set(e, -errno, "peers: cannot map segment %u: %s", i, strerror(errno));
		t->map[i] = p;
		t->map_len[i] = (size_t)st.st_size;
	}
	return 0;
}

int peer_table_import(int tfd, int *seg_fds, uint32_t nseg, bool hugetlb, struct peer_table **out,
		      struct errinfo *e)
{
	struct peer_table *t = calloc(1, sizeof(*t));
	struct peer_table_head h;
	int r;

	if (!t || !(t->fd = malloc((nseg + 1) * sizeof(int)))) {
		close(tfd);
		for (uint32_t i = 0; i < nseg; i++)
			close(seg_fds[i]);
		free(t);
		return err_set(e, -ENOMEM, "out of memory");
	}
	t->tfd = tfd;
	t->nseg = nseg;
	t->hugetlb = hugetlb;
	memcpy(t->fd, seg_fds, nseg * sizeof(int));
	if ((r = map_imported(t, e)) == 0) {
		memcpy(&h, t->tmap, sizeof(h));
		table_point(t, &h);
		t->ntensors = h.ntensors;
		t->layout = h.layout;
		memcpy(t->name, h.name, sizeof(t->name));
		r = import_check(t, &h, e);
	}
	if (r < 0) {
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
	if (t->tmap)
		munmap(t->tmap, t->tlen);
	if (t->tfd >= 0)
		close(t->tfd);
	free(t->fd);
	free(t->map);
	free(t->map_len);
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

	if (t->hugetlb) {
		memcpy(dst, peer_table_ptr(t, i, off), len);
		return 0;
	}
	r = pread_full(t->fd[t->t[i].seg], dst, len, t->t[i].off + off);
	return r == -ENODATA ? -EIO : r;
}
