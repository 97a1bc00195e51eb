// SPDX-License-Identifier: MIT
/* stream_peer.c - a layer shard whose source is a peer
 * (docs/design/streams.md, "Layer shards from a peer"): the owner of each
 * layer of the rule (rank layer mod K of the group) keeps that layer's
 * tensors in a device region of its own, filled from host memory once,
 * sealed and offered through wsrvd; each other rank of the group maps the
 * owners' regions (peer access between the devices) and copies a layer
 * it streams from its owner's device instead of from host memory, while
 * the layer before computes. A rank that cannot (no peer access, an
 * owner that never came) copies from host memory, saying why once: the
 * peer source saves host-to-device bytes, it never fails a worker.
 *
 * Every rank computes the same layout: each owner's tensors of the rule,
 * in tensor order, each at the next 256-byte boundary. A region is keyed
 * at the server by the attachment's generation, the device kind, and a
 * fingerprint of its owner's layout (rank, group, tensors, offsets): a
 * new generation has regions of its own. An owner's region stays mapped
 * in every rank that imported it, whatever happens to its owner: its
 * memory lives while a mapping does (an exported allocation), so a rank
 * never reads freed memory when an owner exits mid-pass. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#define XXH_STATIC_LINKING_ONLY  /* XXH3_state_t on the stack */
#include <xxhash.h>

#include "region_calls.h"
#include "stream_internal.h"

/* The regions' device key at the server: one per group and owner, the
 * fingerprint telling them apart. */
#define PEER_KEY "layer-shard"

/* Says once on stderr, and in the debug log, why some layers come from
 * host memory. */
static void host_for(struct wsrv_stream *s, unsigned owner, const char *why)
{
	s->peer.state[owner] = PEER_HOST;
	cl_debug("stream %u: rank %u's layers from host memory: %s", s->id, owner, why);
	if (!s->peer.said) {
		s->peer.said = true;
		fprintf(stderr, "libwsrv: stream %u (rank %d): rank %u's layer shard is copied from host memory, "
			"not from its device: %s\n", s->id, s->rank, owner, why);
	}
}

/* Owner r's region's fingerprint: its rank, the group, and where each of
 * its tensors lies in it. */
static uint64_t fingerprint(const struct wsrv_stream *s, unsigned r)
{
	XXH3_state_t st;
	uint64_t head[2] = { r, s->peer.k };

	XXH3_64bits_reset(&st);
	XXH3_64bits_update(&st, head, sizeof(head));
	for (size_t i = 0; i < cl_ntensors(s->m); i++) {
		uint64_t rec[2] = { i, s->peer.off[i] };
		if (s->peer.owner[i] == (int16_t)r)
			XXH3_64bits_update(&st, rec, sizeof(rec));
	}
	return XXH3_64bits_digest(&st);
}

static int peer_alloc(struct stream_peer *p, size_t n)
{
	p->owner = malloc((n + 1) * sizeof(*p->owner));
	p->off = calloc(n + 1, sizeof(*p->off));
	p->bytes = calloc(p->k, sizeof(*p->bytes));
	p->map = calloc(p->k, sizeof(*p->map));
	p->region = calloc(p->k, sizeof(*p->region));
	p->state = calloc(p->k, sizeof(*p->state));
	p->fp = calloc(p->k, sizeof(*p->fp));
	if (!p->owner || !p->off || !p->bytes || !p->map || !p->region || !p->state || !p->fp)
		return cl_err(-ENOMEM, "out of memory");
	for (size_t i = 0; i <= n; i++)
		p->owner[i] = -1;
	for (unsigned r = 0; r < p->k; r++)
		p->map[r].fd = -1;
	return 0;
}

/* Tensor i's peer rule (a layer shard with a peer source), or NULL. */
static const struct plan_rule *peer_rule(const struct wsrv_plan *p, const struct wsrv_tensor *t)
{
	const struct plan_rule *r = p ? plan_match(p, t->name) : NULL;

	return r && r->residency == WSRV_LAYER_SHARD_PEER && t->layer >= 0 ? r : NULL;
}

int stream_peer_layout(struct wsrv_stream *s, const struct wsrv_plan *p)
{
	size_t n = cl_ntensors(s->m);
	int r;

	/* A plan without a peer source costs the open nothing here. */
	for (size_t i = 0; p && i < p->nrules && !s->peer.k; i++)
		if (p->rules[i].residency == WSRV_LAYER_SHARD_PEER)
			s->peer.k = p->rules[i].k;
	if (!s->peer.k)
		return 0;
	if ((r = peer_alloc(&s->peer, n)) < 0)
		return r;
	for (size_t i = 0; i < n; i++) {
		struct wsrv_tensor t;
		const struct plan_rule *rule;
		unsigned o;
		cl_tensor_nowait(s->m, (uint32_t)i, &t);
		if (!(rule = peer_rule(p, &t)) || !t.size || (s->where[i] != WHERE_STREAMED && s->where[i] != WHERE_SHARD))
			continue;
		if (rule->k != s->peer.k)
			return cl_err(-EINVAL, "plan: the layer shards with a peer source are of one group: %u and %u",
				      s->peer.k, rule->k);
		if (!tp_view_whole(s->views, (uint32_t)i, t.size))
			return cl_err(-EINVAL, "plan: %s is a layer shard with a peer source and tp_plan splits it: "
				      "its owner's copy would be its own slice (a peer source needs whole tensors)",
				      t.name);
		o = (unsigned)t.layer % s->peer.k;
		s->peer.owner[i] = (int16_t)o;
		s->peer.off[i] = s->peer.bytes[o];
		s->peer.bytes[o] += (t.size + 255) & ~255ULL;
	}
	for (unsigned o = 0; o < s->peer.k; o++) /* asked for again and again: once */
		s->peer.fp[o] = fingerprint(s, o);
	return 0;
}

static size_t region_len(const struct stream_peer *p, unsigned r)
{
	size_t g = p->info.granule ? p->info.granule : 4096;

	return (p->bytes[r] + g - 1) / g * g;
}

/* This rank's tensors in private device memory, when its region cannot
 * be made: the others copy them from host memory. 0 or <0. */
static int keep_private(struct wsrv_stream *s, unsigned me, const char *why)
{
	struct dev_share *m = &s->peer.map[me];
	int r;

	cl_debug("stream %u: this rank's layer shard is private (the others copy it from host memory): %s", s->id,
		 why);
	if ((r = s->d->ops->alloc(s->d, region_len(&s->peer, me), &m->ptr)) < 0)
		return r;
	m->len = region_len(&s->peer, me);
	s->peer.own_private = true;
	return stream_upload_set(s, m->ptr, WHERE_SHARD, s->peer.off);
}

/* This rank's region: allocated, filled from host memory, sealed, and
 * offered (committed) when the server makes it the writer; kept private
 * otherwise (another process of this rank offered it first). 0 or <0. */
static int fill_own(struct wsrv_stream *s, unsigned me)
{
	const struct device_ops *o = s->d->ops;
	struct dev_share *m = &s->peer.map[me];
	struct region_answer a = { .fd = -1 };
	int r;

	if ((r = o->share_create(s->d, region_len(&s->peer, me), m)) < 0)
		return keep_private(s, me, wsrv_last_error());
	if ((r = stream_upload_set(s, m->ptr, WHERE_SHARD, s->peer.off)) < 0 || (r = o->share_seal(s->d, m)) < 0)
		return r;
	s->peer.state[me] = PEER_MAPPED;
	if (region_call_open(s->m, PEER_KEY, s->peer.info.kind, s->peer.fp[me], region_len(&s->peer, me), false,
			     &a) < 0) {
		cl_debug("stream %u: the layer shard is not offered: %s", s->id, wsrv_last_error());
		return 0;
	}
	if (a.fd >= 0)
		close(a.fd); /* another process of this rank's: ours serves here */
	if (a.role == WSRV__REGION_ROLE__REGION_WRITER && region_call_commit(s->m, a.id, m->fd) == 0)
		s->peer.region[me] = a.id;
	else if (a.role == WSRV__REGION_ROLE__REGION_WRITER)
		region_call_close(s->m, a.id);
	else if (a.role == WSRV__REGION_ROLE__REGION_READER)
		s->peer.region[me] = a.id;
	close(m->fd); /* the server has its own */
	m->fd = -1;
	return 0;
}

/* Owner r's region, mapped here once it is committed: true when it is
 * (or never will be: PEER_HOST), false while its owner has not come. */
static bool try_owner(struct wsrv_stream *s, unsigned r)
{
	struct region_answer a = { .fd = -1 };
	int e;

	if (s->peer.state[r] != PEER_WAIT)
		return true;
	if (region_call_open(s->m, PEER_KEY, s->peer.info.kind, s->peer.fp[r], region_len(&s->peer, r), true,
			     &a) < 0) {
		host_for(s, r, wsrv_last_error());
		return true;
	}
	if (a.role != WSRV__REGION_ROLE__REGION_READER)
		return false;
	e = s->d->ops->share_import(s->d, a.fd, region_len(&s->peer, r), &s->peer.map[r]);
	close(a.fd);
	s->peer.region[r] = a.id;
	if (e < 0) {
		host_for(s, r, wsrv_last_error());
		return true;
	}
	s->peer.state[r] = PEER_MAPPED;
	return true;
}

/* How long the open waits for the group's owners: what a fill takes, as a
 * shared region's readers wait (stream_share.c). */
static double wait_s(const struct wsrv_stream *s)
{
	uint64_t most = 0;

	for (unsigned r = 0; r < s->peer.k; r++)
		if (s->peer.bytes[r] > most)
			most = s->peer.bytes[r];
	return s->sh.timeout_ms ? s->sh.timeout_ms / 1e3 : SHARE_BASE_S + (double)most / SHARE_FLOOR_RATE;
}

int stream_peer_open(struct wsrv_stream *s)
{
	const struct device_ops *o = s->d ? s->d->ops : NULL;
	unsigned me = (unsigned)s->rank, left;
	int r;

	if (!s->peer.k || !o)
		return 0;
	if (!o->share_info || !o->share_create || !o->copy_peer || o->share_info(s->d, &s->peer.info) < 0) {
		for (unsigned k = 0; k < s->peer.k; k++)
			if (k != me)
				host_for(s, k, "this device backend cannot share device memory");
		return me < s->peer.k && s->peer.bytes[me] ? keep_private(s, me, "no shared device memory") : 0;
	}
	if (me < s->peer.k && s->peer.bytes[me] && (r = fill_own(s, me)) < 0)
		return r;
	s->peer.deadline = mono_now() + wait_s(s);
	/* The group starts together: each waits a while for the others. */
	for (unsigned pause = 1;; pause = pause < 32 ? pause * 2 : 50) {
		left = 0;
		for (unsigned k = 0; k < s->peer.k; k++)
			if (k != me && s->peer.bytes[k])
				left += !try_owner(s, k);
		if (!left || mono_now() > s->peer.deadline)
			break;
		nanosleep(&(struct timespec){ 0, (long)pause * 1000000L }, NULL);
	}
	for (unsigned k = 0; left && k < s->peer.k; k++)
		if (s->peer.state[k] == PEER_WAIT && s->peer.bytes[k] && !s->peer.said) {
			s->peer.said = true;
			fprintf(stderr, "libwsrv: stream %u (rank %d): rank %u has not offered its layer shard in "
				"%.0f s; its layers are copied from host memory until it does\n", s->id, s->rank, k,
				wait_s(s));
		}
	return 0;
}

const void *stream_peer_src(struct wsrv_stream *s, uint32_t i)
{
	int16_t r;

	if (!s->peer.k || (r = s->peer.owner[i]) < 0 || r == s->rank)
		return NULL;
	/* An owner not there at the open is asked again, at most once a
	 * second; its layers come from host memory meanwhile. */
	if (s->peer.state[r] == PEER_WAIT && mono_now() >= s->peer.deadline && !try_owner(s, (unsigned)r))
		s->peer.deadline = mono_now() + 1.0;
	if (s->peer.state[r] != PEER_MAPPED)
		return NULL;
	return (const uint8_t *)s->peer.map[r].ptr + s->peer.off[i];
}

void *stream_peer_addr(const struct wsrv_stream *s, uint32_t i)
{
	return (uint8_t *)s->peer.map[s->rank].ptr + s->peer.off[i];
}

void stream_peer_close(struct wsrv_stream *s)
{
	struct stream_peer *p = &s->peer;
	bool connected = cl_connected(cl_model_client(s->m));

	for (unsigned r = 0; s->d && p->map && r < p->k; r++) {
		if (r == (unsigned)s->rank && p->own_private)
			s->d->ops->free(s->d, p->map[r].ptr, p->map[r].len);
		else if (p->map[r].ptr || p->map[r].fd >= 0)
			s->d->ops->share_free(s->d, &p->map[r]);
		if (p->region[r] && connected)
			region_call_close(s->m, p->region[r]);
	}
	free(p->owner);
	free(p->off);
	free(p->bytes);
	free(p->map);
	free(p->region);
	free(p->state);
	free(p->fp);
	*p = (struct stream_peer){ 0 };
}
