// SPDX-License-Identifier: MIT
/* tier_read.c - the disk tier's reader threads: room made by eviction, a
 * segment read again into a fresh sealed memfd and checked (tier.h). */
#include "tier_read.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "hugemap.h"
#include "loader.h"
#include "loader_pool.h"
#include "log.h"
#include "memfd_util.h"
#include "units.h"

/* The fd and mapping of segment or unit g go; pages a client still maps
 * stay its. */
void tier_drop_locked(struct tier *t, uint32_t g)
{
	struct tier_seg *ts = &t->s[g];
	struct arena_seg *as = &t->lm->arena->seg[ts->seg];
	const uint8_t **ro = g < t->nseg ? &as->ro : &ts->ro;
	int *fd = g < t->nseg ? &as->fd : &ts->fd;

	if (*ro)
		munmap((void *)*ro, as->size);
	if (*fd >= 0)
		close(*fd);
	*ro = NULL;
	*fd = -1;
	if (ts->cached)
		t->cached -= unit_size(t, g);
	ts->cached = false;
}

/* Whether worker w took s since it was read. */
static bool took(const struct tier_seg *s, uint64_t w)
{
	if (s->ntakers > TAKERS)
		return true;
	for (unsigned k = 0; k < s->ntakers; k++)
		if (s->takers[k] == w)
			return true;
	return false;
}

/* How soon segment g is taken next, in segments: the least distance
 * forward from a worker's place (its last take or request; workers go in
 * layer order, and wrap) to g, of the workers that have yet to take it;
 * UINT32_MAX when none has (a pass left it). */
static uint32_t next_use(const struct tier *t, uint32_t g)
{
	uint32_t best = UINT32_MAX;

	for (size_t i = 0; i < t->nplaces; i++) {
		uint32_t d = (g + t->n - t->places[i].seg) % t->n;
		if (d < best && !took(&t->s[g], t->places[i].worker))
			best = d;
	}
	return best;
}

/* Which goes first: the lower class, then the later next use, then the
 * least recently used.
 * 0: taken since it was read, none again. One no worker still comes for
 *    (a pass left it) goes first of all; then the one furthest from its
 *    next use (Belady's choice, with the workers' places, tier_read.h):
 *    workers close together keep what the ones behind take next, and
 *    workers far apart lose the least.
 * 1: hot, a worker took it again since it was read: a scan of the model
 *    must not flush it.
 * 2: not taken yet: read for a worker that is about to take it, or ahead
 *    of one (evicting it first would read it again, and again). */
static int victim_class(const struct tier_seg *s)
{
	return s->hot ? 1 : !s->ntakers ? 2 : 0;
}

/* The cached segment nobody holds that goes first, of class at most
 * worst (with all_took: only one no worker still comes for), or
 * UINT32_MAX. */
static uint32_t victim(const struct tier *t, int worst, bool all_took)
{
	uint32_t best = UINT32_MAX, bn = 0;
	int bc = 3;

	for (uint32_t g = 0; g < t->n; g++) {
		const struct tier_seg *s = &t->s[g];
		int c;
		if (!s->cached || s->holds || (c = victim_class(s)) > worst)
			continue;
		uint32_t n = c == 0 ? next_use(t, g) : 0;
		if (all_took && n != UINT32_MAX)
			continue;
		if (best == UINT32_MAX || c < bc || (c == bc && (n > bn || (n == bn && s->used < t->s[best].used)))) {
			best = g;
			bc = c;
			bn = n;
		}
	}
	return best;
}

/* Room for a read-ahead of size bytes, and beside it for the largest
 * segment (a request must never find the budget all taken by reads ahead
 * and evict a hot segment, or wait): what is free, and what a pass left
 * (class 0, no worker still coming for it); never a hot segment, nor one
 * a worker has yet to take. Whether it fits. */
static bool room_ahead_locked(struct tier *t, uint64_t size)
{
	while (!fits(t, size + t->largest)) {
		uint32_t v = victim(t, 0, true);
		if (v == UINT32_MAX)
			return false;
		tier_drop_locked(t, v);
		t->st.evictions++;
	}
	return true;
}

/* Makes room for size bytes: evicts, then waits for releases a while. */
static int make_room_locked(struct tier *t, uint64_t size)
{
	struct timespec until;

	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += ROOM_WAIT_S;
	while (!fits(t, size) && !t->stop) {
		uint32_t v = victim(t, 2, false);
		if (v != UINT32_MAX) {
			tier_drop_locked(t, v);
			t->st.evictions++;
			continue;
		}
		if (pthread_cond_timedwait(&t->cv, &t->mu, &until) == ETIMEDOUT)
			return fits(t, size) ? 0 : -ENOMEM;
	}
	return t->stop ? -ECANCELED : 0;
}

/* Whether tensor mt lies in segment or unit ts. */
static bool in_unit(const struct model_tensor *mt, const struct tier_seg *ts)
{
	return mt->segment == ts->seg && mt->part_len && mt->offset >= ts->off && mt->offset < ts->off + ts->len;
}

/* Reads segment or unit u into a fresh memfd of its segment's size with
 * the loader (a unit's holds only its pages), checking every tensor
 * against its checksum, and seals it. Unlocked: the arena's segments are
 * copied aside, this one fresh, so that the loader touches none of the
 * shared state. */
static int read_segment(struct tier *t, uint32_t u, struct loader_pool *pool, int *fdp, const uint8_t **rop,
			struct errinfo *e)
{
	struct arena tmp = *t->lm->arena;
	struct model *m = t->lm->model;
	const struct tier_seg *ts = &t->s[u];
	uint32_t g = ts->seg;
	uint64_t size = t->lm->arena->seg[g].size;
	struct loader_opts lo = t->lo;
	struct loader_stats st = { 0 };
	uint8_t *want = calloc(m->ntensors + 1, 1);
	struct arena_seg *segs = calloc(tmp.nseg, sizeof(*segs));
	char label[200];
	int fd, r;

	snprintf(label, sizeof(label), "wsrv:%s:%u", m->name, u);
	if (!want || !segs || (fd = memfd_new(label, 0, size)) < 0) {
		free(want);
		free(segs);
		return err_set(e, -ENOMEM, "cannot make a memfd for segment %u", g);
	}
	for (uint32_t i = 0; i < tmp.nseg; i++)
		segs[i].fd = -1;
	segs[g] = (struct arena_seg){ .fd = fd, .size = size };
	segs[g].ro = hugemap_shared(fd, segs[g].size, PROT_READ);
	for (size_t i = 0; i < m->ntensors; i++)
		want[i] = in_unit(&m->tensors[i], ts);
	tmp.seg = segs;
	tmp.folios = tmp.folios_later = tmp.sweeping = tmp.sealed = false;
	/* By write, into 4 KiB pages, whatever the first load used. */
	tmp.fill_by_write = true;
	tmp.hugetlb = false;
	tmp.page_size = 4096;
	lo.want = want;
	lo.verify = true;
	lo.layer_order = false;
	lo.on_tensor = NULL;
	lo.progress = PROGRESS_OFF;
	lo.queue_depth = READ_QD;
	lo.pool = pool;
	lo.total_bytes = lo.placed_bytes = NULL;
	r = segs[g].ro == MAP_FAILED ? err_set(e, -errno, "cannot map segment %u", g) : 0;
	if (r == 0 && (r = loader_run(m, &tmp, &lo, &st, e)) == 0)
		r = arena_seal_segment(&tmp, g, e);
	if (r == 0) {
		*fdp = fd;
		*rop = segs[g].ro;
	} else {
		if (segs[g].ro && segs[g].ro != MAP_FAILED)
			munmap((void *)segs[g].ro, segs[g].size);
		close(fd);
	}
	free(want);
	free(segs);
	return r;
}

static const struct model_tensor *first_tensor(const struct model *m, const struct tier_seg *ts)
{
	for (size_t i = 0; i < m->ntensors; i++)
		if (in_unit(&m->tensors[i], ts))
			return &m->tensors[i];
	return NULL;
}

/* One queued read, the lock held on entry and on return; pool: the
 * reader's ring and buffers, or NULL. */
static void read_one(struct tier *t, uint32_t g, struct loader_pool *pool)
{
	struct tier_seg *ts = &t->s[g];
	uint64_t size = unit_size(t, g);
	const uint8_t *ro = NULL;
	struct errinfo e = { 0 };
	int fd = -1, r;

	bool ahead = ts->ahead;

	ts->queued = false;
	ts->ahead = false;
	/* A read-ahead never waits for room, nor takes what others keep;
	 * nothing is read before the first load has passed it (its
	 * checksums). */
	if (ts->cached || !ts->passed || (ahead && !room_ahead_locked(t, size)))
		return;
	/* Reading from here on, while it waits for room too (the lock is
	 * let go then): a request meanwhile must not queue it again, or two
	 * readers read it, and the first one's memfd and budget leak. */
	ts->reading = true;
	if ((r = make_room_locked(t, size)) < 0) {
		ts->reading = false;
		if (r == -ECANCELED)
			return;
		err_set(&e, -ENOMEM, "--memory-budget %s is all held by workers; segment or unit %u of model %s waits for a release",
			fmt_bytes(t->budget, (char[32]){ 0 }, 32), g, t->lm->model->name);
	} else {
		t->reading_bytes += size;
		t->st.reads_in_flight++;
		pthread_mutex_unlock(&t->mu);
		r = read_segment(t, g, pool, &fd, &ro, &e);
		pthread_mutex_lock(&t->mu);
		ts->reading = false;
		t->reading_bytes -= size;
		t->st.reads_in_flight--;
	}
	if (r == 0) {
		*(g < t->nseg ? &t->lm->arena->seg[g].fd : &ts->fd) = fd;
		*(g < t->nseg ? &t->lm->arena->seg[g].ro : &ts->ro) = ro;
		ts->cached = true;
		ts->prefetched = ahead;
		ts->fresh = true;
		ts->ntakers = 0;
		ts->hot = false;
		ts->used = ++t->tick;
		t->cached += size;
		t->st.read_bytes += size;
	} else {
		/* A worker learns which tensor: the loader's sentence names the
		 * file (and the tensor, for a checksum), this the layer's first. */
		const struct model_tensor *mt = first_tensor(t->lm->model, ts);
		ts->err = r == -ENOMEM ? r : -EIO;
		snprintf(ts->msg, sizeof(ts->msg), "reading tensor %s (layer %d, %s %u) again from disk: %s",
			 mt ? mt->name : "(none)", mt ? mt->layer : -1, g < t->nseg ? "segment" : "unit", g, e.msg);
		t->st.failures++;
		if (!ts->logged)
			log_warn("model %s: %s", t->lm->model->name, ts->msg);
		ts->logged = true;
	}
	ready_page_tier_bump(&t->lm->ready, g);
}

/* Tests only: while the file named by $WSRV_TEST_TIER_EIO exists, every
 * read a tier's reader thread completes reports -EIO, as a disk whose
 * blocks fail would (the first load, on another thread, is untouched). */
static __thread bool tier_reading;

static void eio_hook(const char *path, uint64_t off, int *res)
{
	const char *flag = getenv("WSRV_TEST_TIER_EIO");

	(void)path;
	(void)off;
	if (tier_reading && flag && access(flag, F_OK) == 0 && *res > 0)
		*res = -EIO;
}

void tier_test_seam(void)
{
	if (getenv("WSRV_TEST_TIER_EIO"))
		loader_cqe_hook = eio_hook;
}

void *tier_reader_main(void *arg)
{
	struct tier *t = arg;
	struct loader_pool pool;
	struct errinfo e;
	bool own = loader_pool_init(&pool, READ_QD, READ_QD * 4, LOADER_DEFAULT_BLOCK, &e) == 0;

	if (!own) /* each read makes its own then */
		log_warn("model %s: the disk tier's reader keeps no buffers: %s", t->lm->model->name, e.msg);
	tier_reading = true;
	pthread_mutex_lock(&t->mu);
	while (!t->stop) {
		if (!t->qn) {
			pthread_cond_wait(&t->cv, &t->mu);
			continue;
		}
		uint32_t g = t->q[0];
		memmove(t->q, t->q + 1, --t->qn * sizeof(*t->q));
		t->st.queued = t->qn;
		read_one(t, g, own ? &pool : NULL);
	}
	pthread_mutex_unlock(&t->mu);
	loader_pool_fini(&pool);
	return NULL;
}
