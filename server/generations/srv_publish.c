// SPDX-License-Identifier: MIT
/* srv_publish.c - a producer (a trainer) publishes a new generation of a
 * model: the server hands it the current generation's layout (a manifest
 * without checksums) and writable memfds; the producer writes every tensor,
 * unmaps them and commits; the server seals the memfds with F_SEAL_WRITE
 * (which the kernel refuses while any writable mapping of them exists, so
 * nothing can change them after), then checksums and publishes on the
 * reload thread. A producer that aborts, or whose connection ends before
 * the commit, publishes nothing and leaves nothing behind. */
#include "srv_publish.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <xxhash.h>

#include "loaded_door.h"
#include "escape.h"
#include "fullio.h"
#include "log.h"
#include "test_seam.h"
#include "format_door.h"
#include "memfd_util.h"
#include "core_door.h"
#include "srv_reload.h"
#include "wsrv.pb-c.h"
#include "utf8.h"

#define PUBLISH_SEALS (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL)

struct publish {
	uint64_t session;           /* the producer's; 0 once committed */
	uint32_t id;
	uint32_t model;             /* the generation it follows */
	struct model *m;            /* its layout, owned */
	int seg[WSRV_MAX_FDS];      /* owned until the arena takes them */
	uint32_t nseg;
	int layout_fd;              /* the manifest without checksums, owned */
	uint64_t layout_size;
	pid_t pid;
	double t0;                  /* PublishBegin (mono_now): the producer's clock starts there too */
	bool base;                  /* PublishCommit.base_current */
	const struct loaded_model *cur; /* the generation it follows: current
	                             * until this publish ends (no reload runs
	                             * beside a publish) */
	bool shared[WSRV_MAX_FDS];  /* base: segment i is cur's memfd */
};

static bool may_publish(const struct server *srv, const struct session *s)
{
	for (size_t i = 0; i < srv->cfg.n_publish_uid; i++)
		if (srv->cfg.publish_uid[i] == s->cred.uid)
			return true;
	for (size_t i = 0; i < srv->cfg.n_publish_gid; i++)
		if (srv->cfg.publish_gid[i] == s->cred.gid)
			return true;
	return false;
}

static void publish_free(struct publish *p)
{
	if (!p)
		return;
	for (uint32_t i = 0; i < p->nseg; i++)
		if (p->seg[i] >= 0)
			close(p->seg[i]);
	if (p->layout_fd >= 0)
		close(p->layout_fd);
	model_free(p->m);
	free(p);
}

static int new_segments(struct publish *p, struct errinfo *e)
{
	for (uint32_t i = 0; i < p->nseg; i++) {
		uint64_t size = (p->m->seg_size[i] + 4095) & ~4095ULL;
		char label[80];
		snprintf(label, sizeof(label), "wsrv:%s:published:%u", p->m->name, i);
		p->seg[i] = memfd_new(label, 0, size ? size : 4096);
		if (p->seg[i] < 0)
			return err_set(e, p->seg[i], "cannot make a segment of %llu bytes: %s",
				       (unsigned long long)size, strerror(-p->seg[i]));
		/* Its size is the layout's, before the producer sees it: a
		 * producer cannot grow it before committing, for the arena to
		 * take. */
		int r = memfd_seal(p->seg[i], F_SEAL_SHRINK | F_SEAL_GROW);
		if (r < 0)
			return err_set(e, r, "cannot seal a segment's size: %s", strerror(-r));
	}
	return 0;
}

/* The current generation's layout, from its files (which must still give
 * exactly it), with new segments to write into. */
static int prepare(struct server *srv, uint32_t mi, struct publish *p, struct errinfo *e)
{
	const struct loaded_model *cur = srv->models[mi].lm;
	uint64_t sizes[WSRV_MAX_FDS];
	int r;

	p->model = mi;
	p->nseg = arena_nseg(cur->arena);
	for (uint32_t i = 0; i < p->nseg; i++)
		sizes[i] = arena_seg_size(cur->arena, i);
	r = model_open_like(cur->model->name, cur->model->path, &srv->load->model, p->nseg, &p->m, e);
	if (r == 0)
		r = model_match_manifest(p->m, cur->manifest_fd, p->nseg, sizes, e);
	if (r < 0)
		return err_prefix(e, "the layout of the current generation"), r;
	for (size_t i = 0; i < p->m->ntensors; i++)
		p->m->tensors[i].xxh3 = 0; /* not known until the commit */
	if ((r = new_segments(p, e)) < 0)
		return r;
	for (uint32_t i = 0; i < p->nseg; i++)
		sizes[i] = (p->m->seg_size[i] + 4095) & ~4095ULL;
	return manifest_create(p->m, sizes, 4096, &p->layout_fd, &p->layout_size, e);
}

static void reply_begin(struct server *srv, struct publish *p, uint64_t seq, struct reply *r)
{
	Wsrv__Response resp = WSRV__RESPONSE__INIT;
	Wsrv__PublishReply pr = WSRV__PUBLISH_REPLY__INIT;
	uint64_t sizes[WSRV_MAX_FDS];

	r->fds[0] = p->layout_fd;
	for (uint32_t i = 0; i < p->nseg; i++) {
		r->fds[i + 1] = p->seg[i];
		sizes[i] = (p->m->seg_size[i] + 4095) & ~4095ULL;
	}
	r->nfds = (int)p->nseg + 1;
	pr.publish_id = p->id;
	pr.manifest_size = p->layout_size;
	pr.n_segment_sizes = p->nseg;
	pr.segment_sizes = sizes;
	pr.generation = srv->models[p->model].generation + 1;
	resp.seq = seq;
	resp.body_case = WSRV__RESPONSE__BODY_PUBLISH;
	resp.publish = &pr;
	srv_pack(r, &resp);
}

int publish_begin(struct server *srv, struct session *s, const Wsrv__PublishBegin *q, uint64_t seq,
		  struct reply *r)
{
	static uint32_t next_id;
	struct publish *p;
	struct errinfo e;
	int mi = srv_find_current(srv, q->model);

	if (!may_publish(srv, s))
		return srv_reply_error(r, seq, EPERM, "this user may not publish (--allow-publish-uid, --allow-publish-gid)");
	if (mi < 0)
		return srv_reply_error(r, seq, ENOENT, "no model named '%.*s'", UTF8_CUT(q->model ? q->model : "", 64));
	if (srv_model_loading(&srv->models[mi]))
		return srv_reply_error(r, seq, EBUSY, "model '%.*s' is still loading; publish once it is loaded",
				       UTF8_CUT(q->model, 64));
	if (srv->models[mi].lm->tier)
		return srv_reply_error(r, seq, EOPNOTSUPP,
				       "model '%.*s' has a disk tier (--memory-budget), which reads its tensors again from their files, and a published generation has none: write the new weights to safetensors files and reload from them (wsrvctl reload %.*s --path DIR)",
				       UTF8_CUT(q->model, 64), UTF8_CUT(q->model, 64));
	if (srv->takeover)
		return srv_reply_error(r, seq, EAGAIN, "a take-over of this server is under way; publish once it is done");
	if (srv->publish || srv->reload || !srv->load)
		return srv_reply_error(r, seq, EBUSY, "%s", srv->publish ? "another producer is publishing; try again after it"
							          : "a reload is under way; try again after it");
	if (arena_nseg(srv->models[mi].lm->arena) + 1 > WSRV_MAX_FDS)
		return srv_reply_error(r, seq, E2BIG, "the model has more segments than one reply carries");
	if (!(p = calloc(1, sizeof(*p))))
		return srv_reply_error(r, seq, ENOMEM, "out of memory");
	p->layout_fd = -1;
	for (uint32_t i = 0; i < WSRV_MAX_FDS; i++)
		p->seg[i] = -1;
	if (prepare(srv, (uint32_t)mi, p, &e) < 0) {
		srv_reply_error(r, seq, EINVAL, "cannot publish %.*s: %s", UTF8_CUT(q->model, 64), e.msg);
		publish_free(p);
		return -EINVAL;
	}
	p->cur = srv->models[mi].lm;
	p->session = s->id;
	p->pid = s->cred.pid;
	p->t0 = mono_now();
	p->id = ++next_id;
	srv->publish = p;
	reply_begin(srv, p, seq, r);
	log_info("client %llu (pid %d) publishes generation %llu of model %s", (unsigned long long)s->id,
		 (int)s->cred.pid, (unsigned long long)srv->models[mi].generation + 1, esc(q->model));
	return 0;
}

static struct publish *mine(struct server *srv, const struct session *s, uint32_t id, uint64_t seq,
			    struct reply *r)
{
	struct publish *p = srv->publish;

	if (!p || p->session != s->id || p->id != id) {
		srv_reply_error(r, seq, EPERM, "publish %u is not one this client is making", id);
		return NULL;
	}
	return p;
}

static const struct gen_job_ops publish_ops;

int publish_commit(struct server *srv, struct session *s, const Wsrv__PublishCommit *q, uint64_t seq,
		   struct reply *r)
{
	struct publish *p = mine(srv, s, q->publish_id, seq, r);
	int ret;

	if (!p)
		return -EPERM;
	/* Set before the job's thread starts: publish_work reads it there. */
	p->base = q->base_current;
	/* Sealed on the job's thread (publish_work): with a page pinned (by
	 * vmsplice, or I/O in flight), F_SEAL_WRITE waits for the pin, and
	 * on the loop that wait would stall every client. */
	if ((ret = gen_job_start(srv, p->model, &publish_ops, p, "a producer's bytes")) < 0) {
		srv_reply_error(r, seq, -ret, "cannot start publishing: %s", strerror(-ret));
		return ret;
	}
	const char *pause = test_seam("WSRV_TEST_PUBLISH_COMMIT_PAUSE_MS"); /* tests: the thread first */
	if (pause)
		usleep((useconds_t)atoi(pause) * 1000);
	snprintf(srv->models[p->model].reload, sizeof(srv->models[p->model].reload),
		 "publishing generation %llu", (unsigned long long)srv->models[p->model].generation + 1);
	p->session = 0; /* the thread has it now */
	log_info("publish %u committed; sealing and checksumming", p->id);
	srv_reply_ok(r, seq);
	return 0;
}

int publish_abort(struct server *srv, struct session *s, const Wsrv__PublishAbort *q, uint64_t seq,
		  struct reply *r)
{
	struct publish *p = mine(srv, s, q->publish_id, seq, r);

	if (!p)
		return -EPERM;
	log_info("publish %u aborted by its producer", p->id);
	srv->count.outcomes[SRV_PUBLISH_ABORTED]++;
	srv->publish = NULL;
	publish_free(p);
	srv_reply_ok(r, seq);
	return 0;
}

void publish_session_gone(struct server *srv, const struct session *s)
{
	struct publish *p = srv->publish;

	if (!p || p->session != s->id)
		return;
	log_warn("publish %u: its producer (pid %d) left before committing; nothing published",
		 p->id, (int)p->pid);
	srv->count.outcomes[SRV_PUBLISH_ABORTED]++;
	srv->publish = NULL;
	publish_free(p);
}

/* A published generation is its bytes, not its files: its identity is
 * a digest of its checksums, which no files' identity equals (a peer
 * filling from files is refused it; a client resuming across a restart
 * onto files sees another model). */
static void published_ids(struct model *m)
{
	uint64_t c = 0x7075626c69736864ull; /* "publishd" */

	for (size_t i = 0; i < m->ntensors; i++)
		c = XXH3_64bits_withSeed(&m->tensors[i].xxh3, sizeof(m->tensors[i].xxh3), c);
	m->content_id = m->source_id = c;
}

/* Seals every segment against any change: none may be mapped writable,
 * or have a page pinned, any more. */
static int seal_all(struct publish *p, struct errinfo *e)
{
	for (uint32_t i = 0; i < p->nseg; i++) {
		if (p->shared[i])
			continue; /* the current generation's, sealed already */
		int r = memfd_seal(p->seg[i], PUBLISH_SEALS);
		if (r == -EBUSY)
			return err_set(e, r, "cannot seal segment %u: it is still mapped writable, or a page of it is "
				       "pinned (vmsplice, I/O in flight); unmap it, let the I/O end, and publish again", i);
		if (r < 0)
			return err_set(e, r, "cannot seal segment %u: %s", i, strerror(-r));
	}
	return 0;
}

/* A memfd's runs of pages nothing wrote (holes: a fresh memfd's page
 * exists only once something wrote it, by write(2) or through a mapping),
 * found in one pass over it: SEEK_HOLE walks the pages written, so asking
 * it once per tensor cost each tensor the rest of its segment (a Kimi-K2
 * shape's publish ran past two minutes). */
struct holes {
	uint64_t (*v)[2];           /* [start, end), in order; owned */
	size_t n, cap;
};

static int holes_find(int fd, uint64_t len, struct holes *h)
{
	off_t at = 0, d;

	h->n = 0;
	while ((at = lseek(fd, at, SEEK_HOLE)) >= 0 && (uint64_t)at < len) {
		d = lseek(fd, at, SEEK_DATA);
		uint64_t end = d < 0 || (uint64_t)d > len ? len : (uint64_t)d;
		if (h->n == h->cap) {
			size_t cap = h->cap ? h->cap * 2 : 64;
			uint64_t (*v)[2] = realloc(h->v, cap * sizeof(*v));
			if (!v)
				return -ENOMEM;
			h->v = v;
			h->cap = cap;
		}
		h->v[h->n][0] = (uint64_t)at;
		h->v[h->n++][1] = end;
		at = (off_t)end;
	}
	return at < 0 && errno != ENXIO ? -errno : 0;
}

/* Whether bytes [from, to) meet a hole (holes in order). */
static bool meets_hole(const struct holes *h, uint64_t from, uint64_t to)
{
	size_t lo = 0, hi = h->n;

	while (lo < hi) { /* the first hole that ends past from */
		size_t mid = (lo + hi) / 2;
		if (h->v[mid][1] <= from)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < h->n && h->v[lo][0] < to;
}

/* -ENODATA, naming them, when a tensor has a page nothing wrote: a
 * producer that never wrote it whole (the library refuses what it can
 * see by the byte: this is what went through pointers). Sealed already:
 * nothing can change the answer. */
static int check_written(const struct publish *p, struct errinfo *e)
{
	struct holes h = { 0 };
	size_t missing = 0;
	const char *first = NULL;
	int r = 0;

	for (uint32_t g = 0; g < p->nseg && r == 0; g++) {
		if ((r = holes_find(p->seg[g], (p->m->seg_size[g] + 4095) & ~4095ULL, &h)) < 0)
			break;
		for (size_t i = 0; h.n && i < p->m->ntensors; i++) {
			const struct model_tensor *t = &p->m->tensors[i];
			uint64_t from = t->offset + t->part_off;
			if (t->segment == g && t->part_len && meets_hole(&h, from, from + t->part_len)) {
				first = first ? first : t->name;
				missing++;
			}
		}
	}
	free(h.v);
	if (r < 0)
		return err_set(e, r, "cannot read which pages were written: %s", strerror(-r));
	if (!missing)
		return 0;
	return err_set(e, -ENODATA, "%zu tensor%s never written whole (%s%s): nothing published",
		       missing, missing == 1 ? " was" : "s were", esc(first), missing > 1 ? " and more" : "");
}

/* Copies segment i's pages nothing wrote (holes) below len from the
 * current generation's bytes. */
static int fill_holes(struct publish *p, uint32_t i, uint64_t len, struct errinfo *e)
{
	const uint8_t *src = arena_ptr(p->cur->arena, i, 0);
	struct holes h = { 0 };
	int r = holes_find(p->seg[i], len, &h);

	for (size_t k = 0; r == 0 && k < h.n; k++)
		r = pwrite_full(p->seg[i], src + h.v[k][0], h.v[k][1] - h.v[k][0], h.v[k][0]);
	free(h.v);
	return r < 0 ? err_set(e, r, "cannot copy the current generation's bytes into segment %u: %s", i, strerror(-r))
		     : 0;
}

/* base_current: a segment nothing wrote becomes the current generation's
 * own memfd (shared: no copy, no memory); one something wrote gets the
 * current bytes in the pages nothing wrote. The producer's write(2)s and
 * stores are done (it committed; its library unmapped). */
static int from_current(struct publish *p, struct errinfo *e)
{
	for (uint32_t i = 0; i < p->nseg; i++) {
		uint64_t len = (p->m->seg_size[i] + 4095) & ~4095ULL;
		const struct arena *cur = p->cur->arena;
		int r, fd;
		if (arena_seg_size(cur, i) < len || !arena_ptr(cur, i, 0))
			return err_set(e, -ESTALE, "segment %u of the current generation is not this layout's", i);
		if (lseek(p->seg[i], 0, SEEK_DATA) < 0 && errno == ENXIO) {
			if ((fd = fcntl(arena_seg_fd(cur, i), F_DUPFD_CLOEXEC, 0)) < 0)
				return err_set(e, -errno, "cannot share segment %u: %s", i, strerror(errno));
			close(p->seg[i]);
			p->seg[i] = fd;
			p->shared[i] = true;
		} else if ((r = fill_holes(p, i, len, e)) < 0) {
			return r;
		}
	}
	return 0;
}

/* On the job's thread: the sealed segments become an arena (locked as
 * the server's loads are), checksummed, with its manifest. */
static int publish_work(void *arg, const char *name, const char *path, const struct load_opts *o,
			struct loaded_model **out, struct errinfo *e)
{
	struct publish *p = arg;
	enum lock_mode lock = o->arena.lock;
	struct loaded_model *lm = loaded_model_new();
	int r;

	if (!lm)
		return err_set(e, -ENOMEM, "out of memory");
	if ((p->base && (r = from_current(p, e)) < 0) || (r = seal_all(p, e)) < 0 ||
	    (!p->base && (r = check_written(p, e)) < 0)) {
		free(lm);
		return r;
	}
	r = arena_adopt(p->nseg, p->seg, p->m->seg_size, 4096, lock, &lm->arena, e);
	if (r < 0) {
		free(lm);
		return r;
	}
	for (uint32_t i = 0; i < p->nseg; i++)
		p->seg[i] = -1; /* the arena's now */
	/* Of the held part, as loaded ones (a partial model: its parts). */
	uint64_t *sums = calloc(p->m->ntensors + 1, sizeof(*sums));
	if (!sums) {
		loaded_model_free(lm);
		return err_set(e, -ENOMEM, "out of memory");
	}
	checksum_pass(lm->arena, p->m, sums);
	for (size_t i = 0; i < p->m->ntensors; i++)
		p->m->tensors[i].xxh3 = sums[i];
	free(sums);
	published_ids(p->m);
	lm->model = p->m;
	p->m = NULL;
	uint64_t sizes[WSRV_MAX_FDS];
	for (uint32_t i = 0; i < arena_nseg(lm->arena); i++)
		sizes[i] = arena_seg_size(lm->arena, i);
	r = manifest_create(lm->model, sizes, 4096, &lm->manifest_fd, &lm->manifest_size, e);
	if (r == 0) {
		void *mp = mmap(NULL, lm->manifest_size, PROT_READ, MAP_SHARED, lm->manifest_fd, 0);
		if (mp != MAP_FAILED) {
			lm->manifest_hash = XXH3_64bits(mp, lm->manifest_size);
			munmap(mp, lm->manifest_size);
		}
	}
	if (r < 0) {
		loaded_model_free(lm);
		return r;
	}
	model_adopted_folios(lm, o, " once published"); /* written in 4 KiB pages: folios as a load's */
	*out = lm;
	return 0;
}

/* On the loop, once the job's thread is joined. */
static void publish_done(struct server *srv, void *arg, int rc)
{
	struct publish *p = arg;

	if (srv->publish == p)
		srv->publish = NULL;
	log_info("publish %u %s", p->id, rc == 0 ? "done" : "failed");
	publish_free(p);
}

static double publish_began(const void *arg)
{
	return ((const struct publish *)arg)->t0;
}

static const struct gen_job_ops publish_ops = {
	.what = "publish", .made = "published", .ok = SRV_PUBLISH_OK, .failed = SRV_PUBLISH_FAILED,
	.work = publish_work, .done = publish_done, .began = publish_began,
};
