// SPDX-License-Identifier: MIT
/* attach.c - receiving a model: fds checked, manifest validated, mapped
 * read-only; detach, fetch and release. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "attached.h"
#include "ready_wait.h"
#include "hugemap.h"
#include "packet.h"

static const void *map_ro(int fd, size_t len)
{
	void *p = mmap(NULL, len ? len : 1, PROT_READ, MAP_SHARED, fd, 0);

	return p == MAP_FAILED ? NULL : p;
}

static void unmap_all(struct wsrv_model *m)
{
	for (uint32_t i = 0; m->seg && i < m->nseg; i++)
		if (m->seg[i])
			munmap((void *)m->seg[i], m->seg_len[i] ? m->seg_len[i] : 1);
	if (m->manifest)
		munmap((void *)m->manifest, m->manifest_len);
	cl_ready_free(m);
}

static int map_segments(struct wsrv_model *m, const int *fds, const Wsrv__AttachReply *ar)
{
	uint64_t sizes[WSRV_MAX_FDS];
	char err[256];
	int r;

	for (uint32_t i = 0; i < m->nseg; i++) {
		r = cl_check_fd(fds[i + 1], "segment", ar->segment_sizes[i], &sizes[i]);
		if (r < 0)
			return r;
		m->seg_len[i] = (size_t)sizes[i];
		void *p = hugemap_shared(fds[i + 1], m->seg_len[i], PROT_READ);
		if (p == MAP_FAILED)
			return cl_err(-errno, "cannot map segment %u: %s", i, strerror(errno));
		m->seg[i] = p;
	}
	if (manifest_check(m->manifest, m->manifest_len, sizes, m->nseg, &m->v, err, sizeof(err)) < 0)
		return cl_err(-EBADMSG, "the server sent a bad manifest: %s", err);
	return 0;
}

static int attach_setup(struct wsrv_model *m, const int *fds, int nfds, const Wsrv__AttachReply *ar)
{
	uint64_t msize;
	int r;

	if (nfds < 1 || (ar->loading ? nfds < 2 : (size_t)nfds != ar->n_segment_sizes + 1) ||
	    ar->n_segment_sizes == 0 || ar->n_segment_sizes >= WSRV_MAX_FDS ||
	    ar->manifest_size < sizeof(struct mf_header))
		return cl_err(-EBADMSG, "the server sent %d fds for %zu segments", nfds, ar->n_segment_sizes);
	m->nseg = (uint32_t)ar->n_segment_sizes;
	m->seg = calloc(m->nseg + 1, sizeof(*m->seg));
	m->seg_len = calloc(m->nseg + 1, sizeof(*m->seg_len));
	if (!m->seg || !m->seg_len)
		return cl_err(-ENOMEM, "out of memory");
	r = cl_check_fd(fds[0], "manifest", ar->manifest_size, &msize);
	if (r < 0)
		return r;
	m->manifest_len = (size_t)ar->manifest_size;
	m->manifest = map_ro(fds[0], m->manifest_len);
	if (!m->manifest)
		return cl_err(-errno, "cannot map the manifest: %s", strerror(errno));
	return ar->loading ? cl_ready_setup(m, fds, nfds, ar) : map_segments(m, fds, ar);
}

static void attached_free(struct wsrv_model *m)
{
	unmap_all(m);
	free(m->seg);
	free(m->seg_len);
	name_index_free(&m->names);
	pthread_mutex_destroy(&m->hash_lock);
	free(m->name);
	if (m->c)
		cl_unref(m->c);
	free(m);
}

static int attach_call(struct wsrv_client *c, const char *model, Wsrv__Response **r,
		       int *fds, int *nfds)
{
	Wsrv__Request q = WSRV__REQUEST__INIT;
	Wsrv__Attach a = WSRV__ATTACH__INIT;
	int ret;

	a.model = (char *)model;
	a.while_loading = true; /* ready_wait.c waits for each layer */
	q.body_case = WSRV__REQUEST__BODY_ATTACH;
	q.attach = &a;
	ret = cl_call(c, &q, r, fds, WSRV_MAX_FDS, nfds);
	if (ret == 0 && ((*r)->body_case != WSRV__RESPONSE__BODY_ATTACH || !(*r)->attach)) {
		pkt_close_fds(fds, *nfds);
		wsrv__response__free_unpacked(*r, NULL);
		return cl_err(-EBADMSG, "the server sent the wrong reply to Attach");
	}
	return ret;
}

WSRV_EXPORT int wsrv_attach(struct wsrv_client *c, const char *model, struct wsrv_model **out)
{
	struct wsrv_model *m;
	int fds[WSRV_MAX_FDS], nfds = 0, r;
	Wsrv__Response *resp;

	CL_NEED(c);
	CL_NEED(model);
	CL_NEED(out);
	m = calloc(1, sizeof(*m));
	if (!m || !(m->name = strdup(model))) {
		free(m);
		return cl_err(-ENOMEM, "out of memory");
	}
	pthread_mutex_init(&m->hash_lock, NULL);
	r = attach_call(c, model, &resp, fds, &nfds);
	if (r < 0) {
		pthread_mutex_destroy(&m->hash_lock);
		free(m->name);
		free(m);
		return r;
	}
	pthread_mutex_lock(&c->lock);
	c->refs++;
	pthread_mutex_unlock(&c->lock);
	m->c = c;
	m->attach_id = resp->attach->attach_id;
	m->generation = m->latest = resp->attach->generation;
	m->manifest_hash = resp->attach->manifest_hash;
	r = attach_setup(m, fds, nfds, resp->attach);
	/* The mappings keep the memory; the fds are not needed any more. */
	pkt_close_fds(fds, nfds);
	wsrv__response__free_unpacked(resp, NULL);
	if (r < 0) {
		attached_free(m);
		return r;
	}
	m->refs = 1;
	cl_model_link(c, m);
	*out = m;
	return 0;
}

/* Lease ids: the connection's number (reconnects) above, the server's id
 * below. */
#define LEASE_BITS 40
#define LEASE_MASK ((1ULL << LEASE_BITS) - 1)

static unsigned epoch(struct wsrv_client *c)
{
	unsigned e;

	pthread_mutex_lock(&c->lock);
	e = c->reconnects;
	pthread_mutex_unlock(&c->lock);
	return e;
}

/* A request answered by Ok; m and id as for cl_call_model (m NULL: the
 * request names no model). */
static int simple_call(struct wsrv_client *c, struct wsrv_model *m, uint32_t *id, Wsrv__Request *q)
{
	Wsrv__Response *r;
	int fds[1], n, ret = m ? cl_call_model(m, id, q, &r, fds, 0, &n) : cl_call(c, q, &r, fds, 0, &n);

	if (ret < 0)
		return ret;
	ret = r->body_case == WSRV__RESPONSE__BODY_OK ? 0
		: cl_err(-EBADMSG, "the server sent the wrong reply");
	wsrv__response__free_unpacked(r, NULL);
	return ret;
}

/* Tells the server (when it is the one m was attached through) and frees
 * m: its holders are all gone. */
static void model_detach(struct wsrv_model *m)
{
	Wsrv__Request q = WSRV__REQUEST__INIT;
	Wsrv__Detach d = WSRV__DETACH__INIT;

	q.body_case = WSRV__REQUEST__BODY_DETACH;
	q.detach = &d;
	cl_model_unlink(m->c, m);
	if (cl_connected(m->c) && !m->stale) /* a server that is gone has forgotten us anyway */
		simple_call(m->c, m, &d.attach_id, &q);
	attached_free(m);
}

void cl_model_hold(struct wsrv_model *m)
{
	__atomic_add_fetch(&m->refs, 1, __ATOMIC_RELAXED);
}

void cl_model_drop(struct wsrv_model *m)
{
	if (__atomic_sub_fetch(&m->refs, 1, __ATOMIC_ACQ_REL) == 0)
		model_detach(m);
}

WSRV_EXPORT void wsrv_detach(struct wsrv_model *m)
{
	if (m)
		cl_model_drop(m);
}

WSRV_EXPORT int wsrv_fetch_layer(struct wsrv_model *m, int32_t index, struct wsrv_lease *out)
{
	Wsrv__Request q = WSRV__REQUEST__INIT;
	Wsrv__FetchLayer f = WSRV__FETCH_LAYER__INIT;
	Wsrv__Response *r;
	struct wsrv_layer l;
	int fds[1], n, ret;

	CL_NEED(m);
	CL_NEED(out);
	f.layer = index;
	q.body_case = WSRV__REQUEST__BODY_FETCH_LAYER;
	q.fetch_layer = &f;
	ret = cl_call_model(m, &f.attach_id, &q, &r, fds, 0, &n);
	if (ret < 0)
		return ret;
	/* The extent must be the one the validated manifest has. */
	if (r->body_case != WSRV__RESPONSE__BODY_FETCH || !r->fetch || r->fetch->n_extents != 1 ||
	    wsrv_model_layer(m, index, &l) < 0 || r->fetch->extents[0]->segment != l.segment ||
	    r->fetch->extents[0]->offset != l.offset || r->fetch->extents[0]->length != l.length) {
		wsrv__response__free_unpacked(r, NULL);
		return cl_err(-EBADMSG, "the server's extent for layer %d disagrees with its manifest", index);
	}
	CL_RESULT(out);
	/* The id names the connection too: a lease ends with it. */
	out->id = (uint64_t)epoch(m->c) << LEASE_BITS | (r->fetch->lease & LEASE_MASK);
	out->layer = l;
	wsrv__response__free_unpacked(r, NULL);
	return 0;
}

WSRV_EXPORT int wsrv_release(struct wsrv_model *m, uint64_t lease_id)
{
	Wsrv__Request q = WSRV__REQUEST__INIT;
	Wsrv__Release rl = WSRV__RELEASE__INIT;
	unsigned e;
	int r;

	CL_NEED(m);
	e = epoch(m->c);
	if (lease_id >> LEASE_BITS != e)
		return 0; /* granted by a server that is gone: ended with it */
	rl.lease = lease_id & LEASE_MASK;
	q.body_case = WSRV__REQUEST__BODY_RELEASE;
	q.release = &rl;
	r = simple_call(m->c, NULL, NULL, &q);
	/* The server went away during the call: the one that answered never
	 * granted it. */
	return r == -ENOENT && epoch(m->c) != e ? 0 : r;
}
