// SPDX-License-Identifier: MIT
/* tier.c - a host memory budget and a disk tier (tier.h). */
#include "tier.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "arena_folio.h"
#include "hugemap.h"
#include "log.h"
#include "memfd_util.h"
#include "units.h"

#define ROOM_WAIT_S 10      /* how long a read waits for a hold to go */
#define READERS 2           /* reads at once: one's copy and checksum beside the other's I/O */
#define READ_AHEAD 2        /* tiered segments queued after a miss, in layer order */
#define CACHE_ROOM 4        /* layer segments the cache keeps room for: a worker's in use
                             * and prefetched, another's, and one being read */

struct tier_seg {
	bool disk;              /* lives on the disk tier */
	bool cached;            /* its fd and mapping are in the arena */
	bool queued, reading;
	bool logged;            /* its failure was logged */
	int err;                /* the last read's failure, told once */
	char msg[1400];
	uint32_t holds;
	uint64_t used;          /* when last taken (a tick) */
};

struct hold {
	uint64_t holder;
	uint32_t seg;
};

struct tier {
	pthread_mutex_t mu;
	pthread_cond_t cv;      /* a queued read, a release, stop */
	pthread_t th[READERS];
	int running;             /* reader threads started */
	bool stop;
	struct loaded_model *lm; /* the owner's */
	struct loader_opts lo;
	uint64_t budget, resident, cached, reading_bytes, tick;
	struct tier_seg *s;
	uint32_t nseg;
	uint32_t *q, qn;        /* queued reads, first in first out */
	struct hold *h;
	size_t nh, caph;
	struct tier_stats st;
};

static uint64_t seg_size(const struct tier *t, uint32_t g)
{
	return t->lm->arena->seg[g].size;
}

/* The segment's fd and mapping go; pages a client still maps stay its. */
static void drop_locked(struct tier *t, uint32_t g)
{
	struct arena_seg *as = &t->lm->arena->seg[g];

	if (as->ro)
		munmap((void *)as->ro, as->size);
	if (as->fd >= 0)
		close(as->fd);
	as->ro = NULL;
	as->fd = -1;
	if (t->s[g].cached)
		t->cached -= as->size;
	t->s[g].cached = false;
}

/* The least recently used cached segment nobody holds, or UINT32_MAX. */
static uint32_t victim(const struct tier *t)
{
	uint32_t best = UINT32_MAX;

	for (uint32_t g = 0; g < t->nseg; g++)
		if (t->s[g].cached && !t->s[g].holds && (best == UINT32_MAX || t->s[g].used < t->s[best].used))
			best = g;
	return best;
}

static bool fits(const struct tier *t, uint64_t more)
{
	return t->resident + t->cached + t->reading_bytes + more <= t->budget;
}

/* Makes room for size bytes: evicts, then waits for releases a while. */
static int make_room_locked(struct tier *t, uint64_t size)
{
	struct timespec until;

	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += ROOM_WAIT_S;
	while (!fits(t, size) && !t->stop) {
		uint32_t v = victim(t);
		if (v != UINT32_MAX) {
			drop_locked(t, v);
			t->st.evictions++;
			continue;
		}
		if (pthread_cond_timedwait(&t->cv, &t->mu, &until) == ETIMEDOUT)
			return fits(t, size) ? 0 : -ENOMEM;
	}
	return t->stop ? -ECANCELED : 0;
}

/* Reads segment g into a fresh memfd with the loader, checking every
 * tensor against its checksum, and seals it. Unlocked: the arena's
 * segments are copied aside, this one fresh, so that the loader touches
 * none of the shared state. */
static int read_segment(struct tier *t, uint32_t g, int *fdp, const uint8_t **rop, struct errinfo *e)
{
	struct arena tmp = *t->lm->arena;
	struct model *m = t->lm->model;
	struct loader_opts lo = t->lo;
	struct loader_stats st = { 0 };
	uint8_t *want = calloc(m->ntensors + 1, 1);
	struct arena_seg *segs = calloc(tmp.nseg, sizeof(*segs));
	char label[200];
	int fd, r;

	snprintf(label, sizeof(label), "wsrv:%s:%u", m->name, g);
	if (!want || !segs || (fd = memfd_new(label, 0, seg_size(t, g))) < 0) {
		free(want);
		free(segs);
		return err_set(e, -ENOMEM, "cannot make a memfd for segment %u", g);
	}
	for (uint32_t i = 0; i < tmp.nseg; i++)
		segs[i].fd = -1;
	segs[g] = (struct arena_seg){ .fd = fd, .size = seg_size(t, g) };
	segs[g].ro = hugemap_shared(fd, segs[g].size, PROT_READ);
	for (size_t i = 0; i < m->ntensors; i++)
		want[i] = m->tensors[i].segment == g && m->tensors[i].part_len;
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

static const struct model_tensor *first_tensor(const struct model *m, uint32_t g)
{
	for (size_t i = 0; i < m->ntensors; i++)
		if (m->tensors[i].segment == g && m->tensors[i].part_len)
			return &m->tensors[i];
	return NULL;
}

/* One queued read, the lock held on entry and on return. */
static void read_one(struct tier *t, uint32_t g)
{
	struct tier_seg *ts = &t->s[g];
	uint64_t size = seg_size(t, g);
	const uint8_t *ro = NULL;
	struct errinfo e = { 0 };
	int fd = -1, r;

	ts->queued = false;
	if (ts->cached)
		return;
	if ((r = make_room_locked(t, size)) < 0) {
		if (r == -ECANCELED)
			return;
		err_set(&e, -ENOMEM, "--memory-budget %s is all held by workers; segment %u of model %s waits for a release",
			fmt_bytes(t->budget, (char[32]){ 0 }, 32), g, t->lm->model->name);
	} else {
		ts->reading = true;
		t->reading_bytes += size;
		t->st.reads_in_flight++;
		pthread_mutex_unlock(&t->mu);
		r = read_segment(t, g, &fd, &ro, &e);
		pthread_mutex_lock(&t->mu);
		ts->reading = false;
		t->reading_bytes -= size;
		t->st.reads_in_flight--;
	}
	if (r == 0) {
		t->lm->arena->seg[g].fd = fd;
		t->lm->arena->seg[g].ro = ro;
		ts->cached = true;
		ts->used = ++t->tick;
		t->cached += size;
		t->st.read_bytes += size;
	} else {
		/* A worker learns which tensor: the loader's sentence names the
		 * file (and the tensor, for a checksum), this the layer's first. */
		const struct model_tensor *mt = first_tensor(t->lm->model, g);
		ts->err = r == -ENOMEM ? r : -EIO;
		snprintf(ts->msg, sizeof(ts->msg), "reading tensor %s (layer %d, segment %u) again from disk: %s",
			 mt ? mt->name : "(none)", mt ? mt->layer : -1, g, e.msg);
		t->st.failures++;
		if (!ts->logged)
			log_warn("model %s: %s", t->lm->model->name, ts->msg);
		ts->logged = true;
	}
	ready_page_tier_bump(&t->lm->ready, g);
}

static void *reader_main(void *arg)
{
	struct tier *t = arg;

	pthread_mutex_lock(&t->mu);
	while (!t->stop) {
		if (!t->qn) {
			pthread_cond_wait(&t->cv, &t->mu);
			continue;
		}
		uint32_t g = t->q[0];
		memmove(t->q, t->q + 1, --t->qn * sizeof(*t->q));
		t->st.queued = t->qn;
		read_one(t, g);
	}
	pthread_mutex_unlock(&t->mu);
	return NULL;
}

/* Segments with global tensors stay; then whole segments in layer order
 * while they fit beside room for two tiered ones. -ENOMEM (with what is
 * needed) when even the global group and those two do not. */
static int choose(struct tier *t, struct errinfo *e)
{
	const struct model *m = t->lm->model;
	uint64_t global = 0, largest = 0;
	char b[3][32];

	for (size_t i = 0; i < m->ntensors; i++)
		if (m->tensors[i].layer < 0 && !t->s[m->tensors[i].segment].disk) {
			t->s[m->tensors[i].segment].disk = true; /* marks "global" for now */
			global += seg_size(t, m->tensors[i].segment);
		}
	for (uint32_t g = 0; g < t->nseg; g++) {
		bool is_global = t->s[g].disk;
		t->s[g].disk = false;
		if (is_global)
			t->resident += seg_size(t, g);
		else if (seg_size(t, g) > largest)
			largest = seg_size(t, g);
		t->s[g].used = is_global; /* 1: resident already */
	}
	if (global + 2 * largest > t->budget)
		return err_set(e, -ENOMEM,
			       "--memory-budget %s is too small for model %s: its global group (embeddings, norms, head) takes %s and a layer segment up to %s, so it needs at least %s (the global group and two layer segments: one in use, one being read)",
			       fmt_bytes(t->budget, b[0], 32), m->name, fmt_bytes(global, b[1], 32),
			       fmt_bytes(largest, b[2], 32), fmt_bytes(global + 2 * largest, (char[32]){ 0 }, 32));
	/* The cache is shared by every worker, which drift apart: it keeps
	 * room for CACHE_ROOM segments at least and half of what the global
	 * group leaves at most is given to resident layers. */
	uint64_t room = (t->budget - global) / 2 > CACHE_ROOM * largest ? (t->budget - global) / 2 : CACHE_ROOM * largest;
	for (size_t l = 0; l < m->nlayers; l++) {
		uint32_t g = m->layers[l].segment;
		if (t->s[g].used || t->s[g].disk)
			continue;
		if (t->resident + seg_size(t, g) + room <= t->budget) {
			t->s[g].used = 1;
			t->resident += seg_size(t, g);
		} else {
			t->s[g].disk = true;
		}
	}
	for (uint32_t g = 0; g < t->nseg; g++) {
		t->s[g].used = 0;
		if (t->s[g].disk)
			ready_page_tier_on_disk(&t->lm->ready, g);
	}
	return 0;
}

int tier_create(struct loaded_model *lm, uint64_t budget, const struct loader_opts *lo,
		struct tier **out, struct errinfo *e)
{
	struct tier *t = calloc(1, sizeof(*t));
	int r;

	if (!t)
		return err_set(e, -ENOMEM, "out of memory");
	t->lm = lm;
	t->lo = *lo;
	t->budget = budget;
	t->nseg = lm->arena->nseg;
	t->s = calloc(t->nseg, sizeof(*t->s));
	t->q = calloc(t->nseg, sizeof(*t->q));
	pthread_mutex_init(&t->mu, NULL);
	pthread_cond_init(&t->cv, NULL);
	r = t->s && t->q ? choose(t, e) : err_set(e, -ENOMEM, "out of memory");
	for (int i = 0; r == 0 && i < READERS; i++)
		if ((r = -pthread_create(&t->th[i], NULL, reader_main, t)) < 0)
			err_set(e, r, "cannot start the disk tier's readers: %s", strerror(-r));
		else
			t->running++;
	if (r < 0) {
		tier_free(t);
		return r;
	}
	/* Reads fill 4 KiB pages; a sweep would walk segments being dropped. */
	lm->arena->folios = false;
	arena_folio_free(lm->arena);
	if (!lm->arena->hugetlb)
		snprintf(lm->arena->hugepage_note, sizeof(lm->arena->hugepage_note),
			 "4 KiB pages (a disk tier: segments read again fill 4 KiB pages)");
	*out = t;
	return 0;
}

void tier_first_pass(struct tier *t, uint32_t g)
{
	if (!t || g >= t->nseg)
		return;
	pthread_mutex_lock(&t->mu);
	if (t->s[g].disk && !t->s[g].cached) {
		if (fits(t, seg_size(t, g))) {
			t->s[g].cached = true;
			t->s[g].used = ++t->tick;
			t->cached += seg_size(t, g);
		} else {
			drop_locked(t, g);
		}
	}
	pthread_mutex_unlock(&t->mu);
}

bool tier_on_disk(const struct tier *t, uint32_t g)
{
	return t && g < t->nseg && t->s[g].disk;
}

/* Records holder's hold of g (once per holder and segment). */
static int hold_locked(struct tier *t, uint64_t holder, uint32_t g)
{
	for (size_t i = 0; i < t->nh; i++)
		if (t->h[i].holder == holder && t->h[i].seg == g)
			return 0;
	if (t->nh == t->caph) {
		size_t cap = t->caph ? 2 * t->caph : 64;
		struct hold *h = realloc(t->h, cap * sizeof(*h));
		if (!h)
			return -ENOMEM;
		t->h = h;
		t->caph = cap;
	}
	t->h[t->nh++] = (struct hold){ holder, g };
	t->s[g].holds++;
	return 0;
}

static void queue_locked(struct tier *t, uint32_t g)
{
	t->q[t->qn++] = g;
	t->s[g].queued = true;
	t->st.queued = t->qn;
}

/* After a miss on g, the next tiered segments (the layers that follow)
 * are queued too, while the budget has room for them without evicting:
 * the disk stays busy while the worker copies and computes. */
static void read_ahead_locked(struct tier *t, uint32_t g)
{
	uint64_t more = seg_size(t, g);

	for (uint32_t k = g + 1, n = 0; k < t->nseg && n < READ_AHEAD; k++) {
		struct tier_seg *ks = &t->s[k];
		if (!ks->disk)
			continue;
		n++;
		if (ks->cached || ks->queued || ks->reading || ks->err)
			continue;
		if (!fits(t, more + seg_size(t, k)))
			return;
		more += seg_size(t, k);
		queue_locked(t, k);
	}
}

int tier_take(struct tier *t, uint64_t holder, uint32_t g, int *fd, char *msg, size_t len)
{
	struct tier_seg *ts = &t->s[g];
	int r = 0;

	pthread_mutex_lock(&t->mu);
	if (!ts->disk) {
		*fd = t->lm->arena->seg[g].fd;
	} else if (ts->err) {
		r = ts->err;
		snprintf(msg, len, "%s", ts->msg);
		ts->err = 0; /* told once; the next request reads again */
	} else if (ts->cached && (r = hold_locked(t, holder, g)) == 0) {
		ts->used = ++t->tick;
		t->st.hits++;
		*fd = t->lm->arena->seg[g].fd;
	} else if (r == 0) {
		if (!ts->queued && !ts->reading) {
			queue_locked(t, g);
			t->st.misses++;
			read_ahead_locked(t, g);
			pthread_cond_broadcast(&t->cv);
		}
		r = -EAGAIN;
	}
	pthread_mutex_unlock(&t->mu);
	return r;
}

static void unhold_locked(struct tier *t, size_t i)
{
	t->s[t->h[i].seg].holds--;
	t->h[i] = t->h[--t->nh];
	pthread_cond_broadcast(&t->cv);
}

int tier_release(struct tier *t, uint64_t holder, uint32_t g)
{
	int r = -ENOENT;

	pthread_mutex_lock(&t->mu);
	for (size_t i = 0; i < t->nh; i++)
		if (t->h[i].holder == holder && t->h[i].seg == g) {
			unhold_locked(t, i);
			r = 0;
			break;
		}
	pthread_mutex_unlock(&t->mu);
	return r;
}

void tier_release_all(struct tier *t, uint64_t holder)
{
	pthread_mutex_lock(&t->mu);
	for (size_t i = t->nh; i-- > 0;)
		if (t->h[i].holder == holder)
			unhold_locked(t, i);
	pthread_mutex_unlock(&t->mu);
}

void tier_stats(struct tier *t, struct tier_stats *st)
{
	pthread_mutex_lock(&t->mu);
	*st = t->st;
	st->budget = t->budget;
	st->resident_bytes = t->resident;
	st->cached_bytes = t->cached;
	st->disk_bytes = st->held_bytes = 0;
	for (uint32_t g = 0; g < t->nseg; g++) {
		if (t->s[g].disk && !t->s[g].cached)
			st->disk_bytes += seg_size(t, g);
		if (t->s[g].holds)
			st->held_bytes += seg_size(t, g);
	}
	pthread_mutex_unlock(&t->mu);
}

void tier_free(struct tier *t)
{
	if (!t)
		return;
	if (t->running) {
		pthread_mutex_lock(&t->mu);
		t->stop = true;
		pthread_cond_broadcast(&t->cv);
		pthread_mutex_unlock(&t->mu);
		for (int i = 0; i < t->running; i++)
			pthread_join(t->th[i], NULL);
	}
	pthread_mutex_destroy(&t->mu);
	pthread_cond_destroy(&t->cv);
	free(t->s);
	free(t->q);
	free(t->h);
	free(t);
}
