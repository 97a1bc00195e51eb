// SPDX-License-Identifier: MIT
/* publish.c - a producer (a trainer) publishing a new generation of a
 * model: writable mappings of the server's new memfds, laid out as the
 * current generation; commit unmaps them and asks the server to seal,
 * checksum and publish, then waits until the generation serves. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "manifest.h"
#include "name_index.h"
#include "wire.h"
#include "clock.h"
#include "fullio.h"
#include "packet.h"
#include "publish_cover.h"

struct wsrv_publish {
	struct wsrv_client *c;      /* holds a reference */
	char *model;
	uint32_t id;
	uint64_t generation;        /* the one it will be */
	void *manifest;             /* the layout, read-only */
	size_t manifest_len;
	struct mf_view v;
	struct name_index names;    /* v's tensors by name, owned */
	uint32_t nseg;
	uint8_t *seg[WSRV_MAX_FDS]; /* writable */
	size_t seg_len[WSRV_MAX_FDS];
	int fd[WSRV_MAX_FDS];       /* the segments' memfds, for write; owned until commit or abort */
	bool keep_reserved;         /* wsrv_publish_keep_reserved */
	struct pub_cover *cover;    /* what was written of each tensor, owned */
	/* wsrv_publish_keep_current: the generation this one follows,
	 * attached (owned), and where each of its segments is mapped. */
	struct wsrv_model *base;
	const uint8_t *base_seg[WSRV_MAX_FDS];
	pthread_mutex_t fill_lock;  /* a page's fill from base, then its write */
};

/* Drops the segment's writable mapping (the server's F_SEAL_WRITE needs
 * none left). Kept reserved, the range becomes inaccessible anonymous
 * memory in the same step (MAP_FIXED replaces it at once), so that no
 * later mapping, the next publish's included, can land under a pointer
 * the caller kept; the caller unmaps it. */
static void unmap_segment(struct wsrv_publish *p, uint32_t i)
{
	if (p->keep_reserved &&
	    mmap(p->seg[i], p->seg_len[i], PROT_NONE, MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
		 -1, 0) != MAP_FAILED)
		return;
	munmap(p->seg[i], p->seg_len[i]);
}

static void unmap(struct wsrv_publish *p)
{
	for (uint32_t i = 0; i < p->nseg; i++) {
		if (p->seg[i])
			unmap_segment(p, i);
		if (p->fd[i] >= 0)
			close(p->fd[i]);
		p->fd[i] = -1;
	}
	if (p->manifest)
		munmap(p->manifest, p->manifest_len);
	name_index_free(&p->names);
	pub_cover_free(p->cover);
	p->cover = NULL;
	p->nseg = 0;
	p->manifest = NULL;
}

static void publish_free(struct wsrv_publish *p)
{
	unmap(p);
	if (p->base)
		wsrv_detach(p->base);
	pthread_mutex_destroy(&p->fill_lock);
	free(p->model);
	cl_unref(p->c);
	free(p);
}

/* Maps the layout and the segments the server sent. */
static int map_all(struct wsrv_publish *p, int *fds, int n, const Wsrv__PublishReply *pr)
{
	uint64_t sizes[WSRV_MAX_FDS];
	char err[256];
	struct stat st;

	if (n != (int)pr->n_segment_sizes + 1 || n < 2)
		return cl_err(-EBADMSG, "the server sent %d fds for %zu segments", n, pr->n_segment_sizes);
	for (int i = 1; i < n; i++) {
		if (fstat(fds[i], &st) < 0 || (uint64_t)st.st_size < pr->segment_sizes[i - 1])
			return cl_err(-EBADMSG, "publish segment %d is smaller than stated", i - 1);
		sizes[i - 1] = (uint64_t)st.st_size;
		p->seg_len[i - 1] = (size_t)st.st_size;
		p->seg[i - 1] = mmap(NULL, p->seg_len[i - 1], PROT_READ | PROT_WRITE, MAP_SHARED, fds[i], 0);
		if (p->seg[i - 1] == MAP_FAILED) {
			p->seg[i - 1] = NULL;
			return cl_err(-errno, "cannot map publish segment %d: %s", i - 1, strerror(errno));
		}
		p->nseg = (uint32_t)i;
		p->fd[i - 1] = fds[i];
		fds[i] = -1; /* p's now */
	}
	p->manifest_len = (size_t)pr->manifest_size;
	p->manifest = mmap(NULL, p->manifest_len, PROT_READ, MAP_SHARED, fds[0], 0);
	if (p->manifest == MAP_FAILED) {
		p->manifest = NULL;
		return cl_err(-errno, "cannot map the layout: %s", strerror(errno));
	}
	if (manifest_check(p->manifest, p->manifest_len, sizes, p->nseg, &p->v, err, sizeof(err)) < 0)
		return cl_err(-EBADMSG, "the server sent a bad layout: %s", err);
	uint32_t dup = 0;
	int r = name_index_build(&p->names, &p->v, &dup);
	if (r == -EEXIST)
		return cl_err(-EBADMSG, "the server sent a layout that lists tensor %u's name twice", dup);
	if (r == 0)
		r = pub_cover_new(p->v.h->ntensors, &p->cover);
	return r < 0 ? cl_err(r, "out of memory") : 0;
}

WSRV_EXPORT int wsrv_publish_begin(struct wsrv_client *c, const char *model, struct wsrv_publish **out)
{
	Wsrv__Request q = WSRV__REQUEST__INIT;
	Wsrv__PublishBegin b = WSRV__PUBLISH_BEGIN__INIT;
	Wsrv__Response *r;
	struct wsrv_publish *p;
	int fds[WSRV_MAX_FDS], n = 0, ret;

	CL_NEED(c);
	CL_NEED(model);
	CL_NEED(out);
	b.model = (char *)model;
	q.body_case = WSRV__REQUEST__BODY_PUBLISH_BEGIN;
	q.publish_begin = &b;
	if ((ret = cl_call(c, &q, &r, fds, WSRV_MAX_FDS, &n)) < 0)
		return ret;
	if (r->body_case != WSRV__RESPONSE__BODY_PUBLISH || !r->publish || !(p = calloc(1, sizeof(*p)))) {
		pkt_close_fds(fds, n);
		wsrv__response__free_unpacked(r, NULL);
		return cl_err(-EBADMSG, "the server sent the wrong reply to PublishBegin");
	}
	pthread_mutex_lock(&c->lock);
	c->refs++;
	pthread_mutex_unlock(&c->lock);
	p->c = c;
	pthread_mutex_init(&p->fill_lock, NULL);
	for (uint32_t i = 0; i < WSRV_MAX_FDS; i++)
		p->fd[i] = -1;
	p->model = strdup(model);
	p->id = r->publish->publish_id;
	p->generation = r->publish->generation;
	ret = p->model ? map_all(p, fds, n, r->publish) : cl_err(-ENOMEM, "out of memory");
	pkt_close_fds(fds, n); /* what p did not keep (the layout's: its mapping reads it) */
	wsrv__response__free_unpacked(r, NULL);
	if (ret < 0) {
		wsrv_publish_abort(p);
		return ret;
	}
	*out = p;
	return 0;
}

/* Tensor name of p's layout (its index in *r), or NULL with the error
 * set in *r. */
static const struct mf_tensor *find_tensor(struct wsrv_publish *p, const char *name, int *r)
{
	int i;

	if (!p->manifest) {
		*r = cl_err(-EINVAL, "the publish is committed or aborted");
		return NULL;
	}
	if ((i = name_index_find(&p->names, &p->v, name)) < 0) {
		*r = cl_err(-ENOENT, "model %s has no tensor '%s'", p->model, name);
		return NULL;
	}
	*r = i;
	return &p->v.tensors[i];
}

/* Fills the pages of segment g that [lo, hi) touches and nothing wrote
 * yet with the current generation's bytes (wsrv_publish_keep_current).
 * Page by page with SEEK_DATA, which finds a page written at once and
 * skips a run of holes in one step (SEEK_HOLE would walk every written
 * page after it). Under fill_lock: two writers of distinct ranges that
 * share an edge page fill it once, before either writes into it. 0 or
 * <0. */
static int fill_pages(struct wsrv_publish *p, uint32_t g, uint64_t lo, uint64_t hi)
{
	uint64_t end = (hi + 4095) & ~4095ULL, at = lo & ~4095ULL;
	int r = 0;

	end = end < p->seg_len[g] ? end : p->seg_len[g];
	pthread_mutex_lock(&p->fill_lock);
	while (r == 0 && at < end) {
		off_t d = lseek(p->fd[g], (off_t)at, SEEK_DATA);
		uint64_t data = d >= 0 ? (uint64_t)d : end; /* ENXIO: no data after */
		if (d < 0 && errno != ENXIO) {
			r = -errno;
		} else if (data > at) { /* holes up to the next page written */
			uint64_t stop = data < end ? data : end;
			r = pwrite_full(p->fd[g], p->base_seg[g] + at, stop - at, at);
			at = stop;
		} else {
			at += 4096;
		}
	}
	pthread_mutex_unlock(&p->fill_lock);
	return r < 0 ? cl_err(r, "filling segment %u from the current generation: %s", g, strerror(-r)) : 0;
}

/* The pages a write of [lo, hi) of segment g covers only in part: filled
 * from the current generation first, so that their other bytes stay. */
static int fill_edges(struct wsrv_publish *p, uint32_t g, uint64_t lo, uint64_t hi)
{
	int r = 0;

	if (lo & 4095)
		r = fill_pages(p, g, lo, lo + 1);
	if (r == 0 && (hi & 4095))
		r = fill_pages(p, g, hi - 1, hi);
	return r;
}

WSRV_EXPORT int wsrv_publish_keep_current(struct wsrv_publish *p)
{
	struct wsrv_tensor t = { .struct_size = sizeof(t) };
	uint64_t gen = 0;
	int r;

	CL_NEED(p);
	if (!p->manifest)
		return cl_err(-EINVAL, "the publish is committed or aborted");
	if (p->base)
		return 0;
	if ((r = wsrv_attach(p->c, p->model, &p->base)) < 0)
		return r;
	wsrv_model_generation(p->base, &gen, NULL);
	for (uint32_t i = 0; r == 0 && gen + 1 == p->generation && i < p->v.h->ntensors; i++) {
		const struct mf_tensor *pt = &p->v.tensors[i];
		if ((r = wsrv_model_find(p->base, p->v.strings + pt->name_off, &t)) < 0)
			break;
		if (t.segment != pt->segment || t.offset != pt->offset || t.size != pt->size || !t.data) {
			r = -ESTALE;
			break;
		}
		p->base_seg[t.segment] = (const uint8_t *)t.data - t.offset;
	}
	if (r == 0 && gen + 1 != p->generation)
		r = -ESTALE;
	if (r < 0) {
		wsrv_detach(p->base);
		p->base = NULL;
		return cl_err(r, "model %s: this publish follows generation %llu, and the current one (%llu) is %s",
			      p->model, (unsigned long long)p->generation - 1, (unsigned long long)gen,
			      r == -ESTALE ? "not laid out as it" : "not readable here");
	}
	return 0;
}

WSRV_EXPORT int wsrv_publish_tensor(struct wsrv_publish *p, const char *name, void **data, uint64_t *size)
{
	const struct mf_tensor *t;
	int r = 0;

	CL_NEED(p);
	CL_NEED(name);
	if (!(t = find_tensor(p, name, &r)))
		return r;
	if (data) {
		/* On the current bytes, the producer's stores land on what it
		 * changes: the tensor's pages nothing wrote are filled first. */
		if (p->base && (r = fill_pages(p, t->segment, t->offset, t->offset + t->size)) < 0)
			return r;
		*data = p->seg[t->segment] + t->offset;
		pub_cover_pointed(p->cover, (uint32_t)(t - p->v.tensors)); /* its writes are the server's to see */
	}
	if (size)
		*size = t->size;
	return 0;
}

WSRV_EXPORT int wsrv_publish_write(struct wsrv_publish *p, const char *name, uint64_t offset,
				   const void *src, uint64_t len)
{
	const struct mf_tensor *t;
	uint32_t i;
	int r = 0;

	CL_NEED(p);
	CL_NEED(name);
	CL_NEED(src || !len);
	if (!(t = find_tensor(p, name, &r)))
		return r;
	if (offset > t->size || len > t->size - offset)
		return cl_err(-ERANGE, "tensor '%s' is %llu bytes: %llu bytes at %llu do not fit", name,
			      (unsigned long long)t->size, (unsigned long long)len, (unsigned long long)offset);
	i = (uint32_t)r;
	if (p->base && len && (r = fill_edges(p, t->segment, t->offset + offset, t->offset + offset + len)) < 0)
		return r;
	/* In pieces pwrite_full finishes: a call writes at most about 2 GiB. */
	r = pwrite_full(p->fd[t->segment], src, (size_t)len, t->offset + offset);
	if (r < 0)
		return cl_err(r, "writing tensor '%s': %s", name, strerror(-r));
	if (pub_cover_add(p->cover, i, offset, len) < 0)
		return cl_err(-ENOMEM, "out of memory recording what tensor '%s' holds", name);
	return 0;
}

/* Waits until the model's current generation is want (0), or the server
 * says the publish failed. */
static int wait_published(struct wsrv_publish *p)
{
	for (double t0 = mono_now(); mono_now() - t0 < 3600;) {
		struct wsrv_model_list *l;
		struct wsrv_model_info mi;
		struct wsrv_generation g;
		struct timespec ts = { 0, 2000000 };
		char why[256] = "";
		int found = 0;
		if (wsrv_list_models(p->c, &l) < 0)
			return -ENOTCONN;
		for (size_t i = 0; wsrv_model_list_at(l, i, &mi) == 0; i++)
			if (strcmp(mi.name, p->model) == 0 && wsrv_model_list_generation(l, i, &g) == 0 &&
			    !g.retired) {
				found = g.generation >= p->generation ? 1 : strstr(g.reload, "failed") ? -1 : 0;
				snprintf(why, sizeof(why), "%s", g.reload);
			}
		wsrv_model_list_free(l);
		if (found)
			return found > 0 ? 0 : cl_err(-EIO, "the server could not publish generation %llu: %s",
						      (unsigned long long)p->generation, why);
		nanosleep(&ts, NULL);
	}
	return cl_err(-ETIMEDOUT, "generation %llu was not published in an hour", (unsigned long long)p->generation);
}

WSRV_EXPORT int wsrv_publish_keep_reserved(struct wsrv_publish *p)
{
	CL_NEED(p);
	p->keep_reserved = true;
	return 0;
}

WSRV_EXPORT int wsrv_publish_segment(const struct wsrv_publish *p, uint32_t i, void **addr, uint64_t *len)
{
	CL_NEED(p && addr && len);
	if (i >= p->nseg)
		return -ENOENT;
	*addr = p->seg[i];
	*len = p->seg_len[i];
	return 0;
}

/* The bytes of tensor i a publish must write: its held part. */
static void held_range(const struct wsrv_publish *p, uint32_t i, uint64_t *from, uint64_t *to)
{
	*from = p->v.parts ? p->v.parts[i].offset : 0;
	*to = p->v.parts ? *from + p->v.parts[i].length : p->v.tensors[i].size;
}

/* -ENODATA, naming them, when tensors were never written whole by
 * wsrv_publish_write and never handed out by pointer (whose pages the
 * server checks); else 0. */
static int check_written(struct wsrv_publish *p)
{
	char names[320] = "";
	size_t used = 0, missing = 0, named = 0;

	for (uint32_t i = 0; i < p->v.h->ntensors; i++) {
		uint64_t from, to, got;
		held_range(p, i, &from, &to);
		if (to == from || pub_cover_was_pointed(p->cover, i) ||
		    (got = pub_cover_bytes(p->cover, i, from, to)) == to - from)
			continue;
		if (named < 4 && used < sizeof(names) - 1) {
			int n = snprintf(names + used, sizeof(names) - used, "%s%.80s (%llu of %llu bytes)",
					 named ? ", " : "", p->v.strings + p->v.tensors[i].name_off,
					 (unsigned long long)got, (unsigned long long)(to - from));
			used += n > 0 ? (size_t)n : 0;
			used = used < sizeof(names) ? used : sizeof(names) - 1;
			named++;
		}
		missing++;
	}
	if (!missing)
		return 0;
	return cl_err(-ENODATA, "publish of model %s refused: %zu tensor%s never written whole: %s%s; "
		      "write %s and commit again, or abort",
		      p->model, missing, missing == 1 ? " was" : "s were", names,
		      missing > named ? ", ..." : "", missing == 1 ? "it" : "them");
}

WSRV_EXPORT int wsrv_publish_commit(struct wsrv_publish *p, uint64_t *generation)
{
	Wsrv__Request q = WSRV__REQUEST__INIT;
	Wsrv__PublishCommit cm = WSRV__PUBLISH_COMMIT__INIT;
	Wsrv__Response *r;
	int ret;

	CL_NEED(p);
	if (p->manifest && !p->base && (ret = check_written(p)) < 0)
		return ret; /* p stays open */
	unmap(p); /* no writable mapping may remain: the server seals F_SEAL_WRITE */
	cm.publish_id = p->id;
	cm.base_current = p->base != NULL;
	q.body_case = WSRV__REQUEST__BODY_PUBLISH_COMMIT;
	q.publish_commit = &cm;
	ret = cl_query(p->c, &q, WSRV__RESPONSE__BODY_OK, &r, "PublishCommit");
	if (ret == 0) {
		wsrv__response__free_unpacked(r, NULL);
		ret = wait_published(p);
	}
	if (ret == 0 && generation)
		*generation = p->generation;
	publish_free(p);
	return ret;
}

WSRV_EXPORT void wsrv_publish_abort(struct wsrv_publish *p)
{
	Wsrv__Request q = WSRV__REQUEST__INIT;
	Wsrv__PublishAbort ab = WSRV__PUBLISH_ABORT__INIT;
	Wsrv__Response *r;

	if (!p)
		return;
	unmap(p);
	ab.publish_id = p->id;
	q.body_case = WSRV__REQUEST__BODY_PUBLISH_ABORT;
	q.publish_abort = &ab;
	if (p->id && cl_connected(p->c) && cl_query(p->c, &q, WSRV__RESPONSE__BODY_OK, &r, "PublishAbort") == 0)
		wsrv__response__free_unpacked(r, NULL);
	publish_free(p);
}
