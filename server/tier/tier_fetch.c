// SPDX-License-Identifier: MIT
/* tier_fetch.c - the disk tier's reader threads (tier.h): a segment, or
 * units of one segment queued together, read again from the files with
 * the loader into fresh memfds, each tensor checked against its checksum,
 * sealed, and only then cached and their words raised. */
#include "tier.h"
#include "tier_fetch.h"

#include "tier_evict.h"
#include "tier_state.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "hugemap.h"
#include "load_door.h"
#include "log.h"
#include "memfd_util.h"
#include "units.h"
#include "test_seam.h"

/* What one read takes: segment or units g[0..n) of one segment. */
struct job {
	uint32_t g[BATCH_UNITS];
	uint32_t n;
	uint64_t bytes;
	int fd[BATCH_UNITS];
	const uint8_t *ro[BATCH_UNITS]; /* each its piece's size (unit_size) */
};

/* Whether tensor mt lies in segment or unit ts. */
static bool in_unit(const struct model_tensor *mt, const struct tier_seg *ts)
{
	return mt->segment == ts->seg && mt->part_len && mt->offset >= ts->off && mt->offset < ts->off + ts->len;
}

static const struct model_tensor *first_tensor(const struct model *m, const struct tier_seg *ts)
{
	for (size_t i = 0; i < m->ntensors; i++)
		if (in_unit(&m->tensors[i], ts))
			return &m->tensors[i];
	return NULL;
}

/* Takes other queued units of j's segment into j, in queue order, while
 * they fit (a whole layer's routed experts are asked for together; read
 * one by one, each would be one small read). */
static void gather_locked(struct tier *t, struct job *j, bool ahead)
{
	uint32_t seg = t->s[j->g[0]].seg;

	for (uint32_t i = 0; i < t->qn && j->n < BATCH_UNITS;) {
		uint32_t u = t->q[i];
		struct tier_seg *us = &t->s[u];
		if (u < t->nseg || us->seg != seg || us->single || (us->queue == TQ_AHEAD) != ahead ||
		    us->state != TS_ON_DISK || j->bytes + us->len > BATCH_BYTES) {
			i++;
			continue;
		}
		memmove(t->q + i, t->q + i + 1, (--t->qn - i) * sizeof(*t->q));
		us->queue = TQ_NONE;
		j->g[j->n++] = u;
		j->bytes += us->len;
	}
	t->st.queued = t->qn;
}

static void unmake(const struct tier *t, struct job *j)
{
	for (uint32_t i = 0; i < j->n; i++) {
		if (j->ro[i] && j->ro[i] != MAP_FAILED)
			munmap((void *)j->ro[i], unit_size(t, j->g[i]));
		if (j->fd[i] >= 0)
			close(j->fd[i]);
		j->ro[i] = NULL;
		j->fd[i] = -1;
	}
}

/* A fresh memfd for each of j, mapped: a segment's size, or a unit's
 * (its bytes alone, from offset 0). */
static int make(const struct tier *t, struct job *j, struct errinfo *e)
{
	char label[200];

	for (uint32_t i = 0; i < j->n; i++) {
		uint64_t size = unit_size(t, j->g[i]);
		snprintf(label, sizeof(label), "wsrv:%s:%u", t->own.model->name, j->g[i]);
		if ((j->fd[i] = memfd_new(label, 0, size)) < 0)
			return err_set(e, -ENOMEM, "cannot make a memfd for segment or unit %u", j->g[i]);
		j->ro[i] = hugemap_shared(j->fd[i], size, PROT_READ);
		if (j->ro[i] == MAP_FAILED)
			return err_set(e, -errno, "cannot map segment or unit %u", j->g[i]);
	}
	return 0;
}

/* The loader's options for a read of the tensors want marks. */
static struct loader_opts read_opts(const struct tier *t, const uint8_t *want, struct loader_pool *pool)
{
	struct loader_opts lo = t->lo;

	lo.want = want;
	lo.verify = true;
	lo.layer_order = false;
	lo.on_tensor = NULL;
	lo.progress = PROGRESS_OFF;
	lo.queue_depth = READ_QD;
	lo.pool = pool;
	lo.total_bytes = lo.placed_bytes = NULL;
	return lo;
}

/* Reads j with the loader, every tensor checked, each memfd holding its
 * own pages (a unit's: only them) and sealed (piece_read). Unlocked: the
 * pieces are j's fresh memfds, and the arena is only read. */
static int read_job(struct tier *t, struct job *j, struct loader_pool *pool, struct errinfo *e)
{
	struct model *m = t->own.model;
	struct piece p[BATCH_UNITS];
	uint8_t *want = calloc(m->ntensors + 1, 1);
	struct loader_stats st = { 0 };
	int r = want ? make(t, j, e) : err_set(e, -ENOMEM, "out of memory");

	for (uint32_t i = 0; r == 0 && i < j->n; i++) {
		const struct tier_seg *ts = &t->s[j->g[i]];
		p[i] = (struct piece){ ts->off, ts->len, unit_size(t, j->g[i]), j->fd[i], j->ro[i] };
		for (size_t k = 0; k < m->ntensors; k++)
			want[k] |= in_unit(&m->tensors[k], ts);
	}
	if (r == 0) {
		struct loader_opts lo = read_opts(t, want, pool);
		r = piece_read(m, t->own.arena, t->s[j->g[0]].seg, p, j->n, &lo, &st, e);
		for (uint32_t i = 0; r == 0 && i < j->n; i++)
			j->fd[i] = p[i].fd;
	}
	if (r < 0)
		unmake(t, j);
	free(want);
	return r;
}

/* Unit or segment g of j is cached, its fd and mapping j's i-th. */
static void install_locked(struct tier *t, const struct job *j, uint32_t i, bool ahead)
{
	uint32_t g = j->g[i];
	struct tier_seg *ts = &t->s[g];

	if (g < t->nseg) {
		arena_piece_put(t->own.arena, g, j->fd[i], j->ro[i]);
	} else {
		ts->fd = j->fd[i];
		ts->ro = j->ro[i];
	}
	cache_locked(t, g);
	ts->fresh = ahead ? FRESH_AHEAD : FRESH_READ;
	ts->single = false;
	t->st.read_bytes += ts->len;
}

/* g's read failed: the next request is told (once), and it is logged. A
 * worker learns which tensor: the loader's sentence names the file (and
 * the tensor, for a checksum), this the unit's or layer's first. */
static void failed_locked(struct tier *t, uint32_t g, int r, const struct errinfo *e)
{
	struct tier_seg *ts = &t->s[g];
	const struct model_tensor *mt = first_tensor(t->own.model, ts);

	ts->err = r == -ENOMEM ? r : -EIO;
	ts->single = false;
	snprintf(ts->msg, sizeof(ts->msg), "reading tensor %s (layer %d, %s %u) again from disk: %s",
		 mt ? mt->name : "(none)", mt ? mt->layer : -1, g < t->nseg ? "segment" : "unit", g, e->msg);
	t->st.failures++;
	if (!ts->logged)
		log_warn("model %s: %s", t->own.model->name, ts->msg);
	ts->logged = true;
}

/* After j's read, or its failure r: each cached, or failed, or (a read
 * of several that failed, not for room) queued again to be read alone;
 * their words rise. nfds: the units' memfds taken for it (a failed read's
 * go back). */
static void finish_locked(struct tier *t, struct job *j, int r, const struct errinfo *e, bool ahead, uint32_t nfds)
{
	for (uint32_t i = 0; i < j->n; i++) {
		struct tier_seg *ts = &t->s[j->g[i]];
		if (r != 0)
			ts_to(ts, TS_ON_DISK);
		if (r != 0 && nfds && j->g[i] >= t->nseg)
			tier_unit_fds_put(1); /* its memfd went with the failed read */
		if (r == 0) {
			install_locked(t, j, i, ahead);
		} else if (j->n > 1 && r != -ECANCELED && r != -ENOMEM) {
			ts->single = true;
			t->q[t->qn++] = j->g[i];
			ts->queue = TQ_ASKED;
			continue; /* its word rises when it is read alone */
		} else if (r != -ECANCELED) {
			failed_locked(t, j->g[i], r, e);
		}
		ready_page_tier_bump(t->own.ready, j->g[i]);
	}
	t->st.queued = t->qn;
	/* Pieces queued again, or bytes no longer reading and pieces cached
	 * that a reader waiting for room may take (tier_make_room_locked). */
	pthread_cond_broadcast(&t->cv);
}

/* Reads queued segment or unit g (with other queued units of its
 * segment), the lock held on entry and on return; pool: the reader's ring
 * and buffers, or NULL. */
static void read_one(struct tier *t, uint32_t g, struct loader_pool *pool)
{
	struct tier_seg *ts = &t->s[g];
	struct job j = { .g = { g }, .n = 1, .bytes = ts->len };
	struct errinfo e = { 0 };
	bool ahead = ts->queue == TQ_AHEAD;
	uint32_t nfds;
	int r;

	for (uint32_t i = 0; i < BATCH_UNITS; i++)
		j.fd[i] = -1;
	ts->queue = TQ_NONE;
	/* A read-ahead never waits for room, nor takes what others keep;
	 * nothing is read before the first load has passed it (its
	 * checksums), nor what is in memory already. */
	if (ts->state != TS_ON_DISK)
		return;
	if (g >= t->nseg && !ts->single)
		gather_locked(t, &j, ahead);
	nfds = units_in(t, j.g, j.n);
	if (ahead && !tier_room_ahead_locked(t, j.bytes, nfds))
		return; /* none of them read (each asked for again, if wanted) */
	/* The room is there, under the lock, and its check took the fds:
	 * they go back here, as the read below takes them again once (each
	 * fd is counted once, or none are left for reads there is room for). */
	if (ahead)
		tier_unit_fds_put(nfds);
	/* Reading from here on, while it waits for room too (the lock is
	 * let go then): a request meanwhile must not queue it again, or two
	 * readers read it, and the first one's memfd and budget leak. */
	for (uint32_t i = 0; i < j.n; i++)
		ts_to(&t->s[j.g[i]], TS_READING);
	if ((r = tier_make_room_locked(t, j.bytes, nfds)) < 0) {
		if (r == -EMFILE)
			err_set(&e, -ENOMEM, "the disk tier's memfds (RLIMIT_NOFILE leaves room for a limited number) are "
				"all held by workers; unit %u of model %s waits for a release", g, t->own.model->name);
		else if (r != -ECANCELED)
			err_set(&e, -ENOMEM, "--memory-budget %s is all held by workers; segment or unit %u of model %s waits for a release",
				fmt_bytes(t->budget, (char[32]){ 0 }, 32), g, t->own.model->name);
		if (r != -ECANCELED)
			r = -ENOMEM;
		nfds = 0; /* none taken, none to give back */
	} else {
		t->reading_bytes += j.bytes;
		count_peak(t);
		t->st.reads_in_flight += j.n;
		tier_check_locked(t);
		pthread_mutex_unlock(&t->mu);
		r = read_job(t, &j, pool, &e);
		pthread_mutex_lock(&t->mu);
		t->reading_bytes -= j.bytes;
		t->st.reads_in_flight -= j.n;
	}
	finish_locked(t, &j, r, &e, ahead, nfds);
}

/* Tests only: while the file named by $WSRV_TEST_TIER_EIO exists, every
 * read a tier's reader thread completes reports -EIO, as a disk whose
 * blocks fail would (the first load, on another thread, is untouched). */
static __thread bool tier_reading;

static void eio_hook(const char *path, uint64_t off, int *res)
{
	const char *flag = test_seam("WSRV_TEST_TIER_EIO");

	(void)path;
	(void)off;
	if (tier_reading && flag && access(flag, F_OK) == 0 && *res > 0)
		*res = -EIO;
}

void tier_test_seam(void)
{
	if (test_seam("WSRV_TEST_TIER_EIO"))
		loader_cqe_hook = eio_hook;
}

void *tier_reader_main(void *arg)
{
	struct tier *t = arg;
	struct loader_pool pool;
	struct errinfo e;
	bool own = loader_pool_init(&pool, READ_QD, READ_QD * 4, LOADER_DEFAULT_BLOCK, &e) == 0;

	if (!own) /* each read makes its own then */
		log_warn("model %s: the disk tier's reader keeps no buffers: %s", t->own.model->name, e.msg);
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
	tier_check_locked(t);
	pthread_mutex_unlock(&t->mu);
	loader_pool_fini(&pool);
	return NULL;
}
