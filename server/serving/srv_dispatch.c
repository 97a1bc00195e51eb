// SPDX-License-Identifier: MIT
/* srv_dispatch.c - one request in, one reply out. Pure with respect to I/O:
 * the event loop does the sending, so this is what the protocol fuzzer
 * drives. */
#include "core_door.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "load_door.h"
#include "escape.h"
#include "tier_door.h"
#include "log.h"
#include "test_seam.h"
#include "pb_text.h"
#include "utf8.h"
#include "holds_door.h"
#include "sorted.h"
#include "metrics_door.h"
#include "generations_door.h"
#include "wsrv.pb-c.h"


static int do_hello(struct server *srv, struct session *s, const Wsrv__Hello *h,
		    uint64_t seq, struct reply *r)
{
	Wsrv__Response resp = WSRV__RESPONSE__INIT;
	Wsrv__HelloReply hr = WSRV__HELLO_REPLY__INIT;

	if (h->protocol != WSRV_PROTOCOL_VERSION) {
		srv_reply_error(r, seq, EPROTONOSUPPORT,
				"protocol version %u is not supported (the server speaks %u)",
				h->protocol, WSRV_PROTOCOL_VERSION);
		session_close(s);
		return -EPROTONOSUPPORT;
	}
	utf8_copy(s->name, sizeof(s->name), h->client_name ? h->client_name : "");
	session_to(s, SS_SERVING);
	s->disk_tier = h->disk_tier;
	hr.protocol = WSRV_PROTOCOL_VERSION;
	hr.server_version = WSRV_VERSION_STRING;
	hr.server_pid = (uint32_t)getpid();
	hr.max_packet = srv->cfg.max_message;
	hr.max_leases = srv->cfg.max_leases;
	hr.client_id = s->id;
	resp.seq = seq;
	resp.body_case = WSRV__RESPONSE__BODY_HELLO;
	resp.hello = &hr;
	srv_pack(r, &resp);
	log_debug("client %llu hello: name '%s', pid %d, uid %d", (unsigned long long)s->id,
		 esc(s->name), (int)s->cred.pid, (int)s->cred.uid);
	return 0;
}

/* The pids of the clients attached to model entry idx (caller frees). */
static uint32_t *holders(const struct server *srv, uint32_t idx, uint32_t max, size_t *n)
{
	uint32_t *v = calloc(max + 1, sizeof(*v));

	*n = 0;
	for (const struct session *s = srv->sessions; v && s && *n < max; s = s->next)
		if (attach_has(s, idx))
			v[(*n)++] = (uint32_t)s->cred.pid;
	return v;
}

/* A disk tier's counters (tier.h) into the model's entry. */
static void tier_info(struct tier *t, Wsrv__ModelInfo *mi)
{
	struct tier_stats st;

	tier_stats(t, &st);
	mi->tier_budget = st.budget;
	mi->tier_resident_bytes = st.resident_bytes;
	mi->tier_cached_bytes = st.cached_bytes;
	mi->tier_peak_bytes = st.peak_bytes;
	mi->tier_disk_bytes = st.disk_bytes;
	mi->tier_held_bytes = st.held_bytes;
	mi->tier_hits = st.hits;
	mi->tier_misses = st.misses;
	mi->tier_read_bytes = st.read_bytes;
	mi->tier_evictions = st.evictions;
	mi->tier_failures = st.failures;
	mi->tier_reads_in_flight = st.reads_in_flight;
}

static void model_info(const struct server *srv, uint32_t idx, Wsrv__ModelInfo *mi)
{
	const struct srv_model *sm = &srv->models[idx];
	const struct loaded_model *lm = sm->lm;
	uint32_t numbered = 0;

	for (size_t i = 0; i < lm->model->nlayers; i++)
		numbered += lm->model->layers[i].index >= 0;
	wsrv__model_info__init(mi);
	mi->name = lm->model->name;
	mi->path = lm->model->path;
	mi->tensor_bytes = lm->model->data_bytes;
	mi->arena_bytes = loaded_model_memory(lm);
	mi->tensors = (uint32_t)lm->model->ntensors;
	mi->layers = numbered;
	mi->segments = arena_nseg(lm->arena);
	mi->page_size = arena_page_size(lm->arena);
	/* Folios made of every 2 MiB chunk: readers map 2 MiB pages. */
	if (arena_folios_complete(lm->arena) && !srv_model_loading(sm))
		mi->page_size = 2u << 20;
	if (lm->tier)
		tier_info(lm->tier, mi);
	mi->numa = (char *)arena_numa_desc(lm->arena);
	mi->pages = (char *)arena_pages_note(lm->arena);
	mi->load_seconds = lm->total_seconds;
	mi->attached = sm->attached;
	mi->generation = sm->generation;
	mi->retired = sm->state == SM_RETIRED;
	mi->reload = (char *)sm->reload;
	mi->loading = srv_model_loading(sm);
	mi->failed = srv_model_failed(sm);
	mi->placed_bytes = loaded_model_placed(lm);
	mi->holder_pids = holders(srv, idx, sm->attached, &mi->n_holder_pids);
	if (lm->model->held) {
		mi->held_first = lm->model->held->first;
		mi->held_last = lm->model->held->last;
		mi->held_world = lm->model->held->world;
		mi->held_bytes = lm->model->held->bytes;
	}
}

static int do_list(struct server *srv, uint64_t seq, struct reply *r)
{
	Wsrv__Response resp = WSRV__RESPONSE__INIT;
	Wsrv__ModelList ml = WSRV__MODEL_LIST__INIT;
	Wsrv__ModelInfo *infos = calloc(srv->nmodels + srv->nunloaded + 1, sizeof(*infos));
	Wsrv__ModelInfo **ptrs = calloc(srv->nmodels + srv->nunloaded + 1, sizeof(*ptrs));

	if (!infos || !ptrs) {
		free(infos);
		free(ptrs);
		return srv_reply_error(r, seq, ENOMEM, "out of memory");
	}
	for (size_t i = 0; i < srv->nmodels; i++) {
		if (!srv->models[i].lm)
			continue; /* a generation gone */
		model_info(srv, (uint32_t)i, &infos[ml.n_models]);
		ptrs[ml.n_models] = &infos[ml.n_models];
		ml.n_models++;
	}
	for (size_t i = 0; i < srv->nunloaded; i++) { /* failed before they were laid out */
		Wsrv__ModelInfo *mi = &infos[ml.n_models];
		wsrv__model_info__init(mi);
		mi->name = (char *)srv->unloaded[i].name;
		mi->path = (char *)srv->unloaded[i].path;
		mi->reload = (char *)srv->unloaded[i].why;
		mi->failed = true;
		ptrs[ml.n_models++] = mi;
	}
	ml.models = ptrs;
	resp.seq = seq;
	resp.body_case = WSRV__RESPONSE__BODY_MODELS;
	resp.models = &ml;
	srv_pack(r, &resp);
	for (size_t i = 0; i < ml.n_models; i++)
		free(infos[i].holder_pids);
	free(infos);
	free(ptrs);
	return 0;
}

/* An attach to a model named on the command line that failed to load:
 * EIO saying why. */
static int failed_model(struct reply *r, uint64_t seq, const char *name, const char *why)
{
	return srv_reply_error(r, seq, EIO, "model '%s' failed to load (%s); the other models are served", name, why);
}

/* No model of that name is served: ENOENT, or failed_model for one that
 * could not be laid out at the start. */
static int unknown_model(const struct server *srv, const char *name, uint64_t seq, struct reply *r)
{
	for (size_t i = 0; i < srv->nunloaded; i++)
		if (strcmp(srv->unloaded[i].name, name) == 0)
			return failed_model(r, seq, srv->unloaded[i].name, srv->unloaded[i].why);
	return srv_reply_error(r, seq, ENOENT, "no model named '%.*s'", UTF8_CUT(name, 64));
}

static int do_attach(struct server *srv, struct session *s, const Wsrv__Attach *a,
		     uint64_t seq, struct reply *r)
{
	int mi = srv_find_current(srv, a->model);
	const struct loaded_model *lm;
	uint32_t id;
	int ret;

	if (mi < 0)
		return unknown_model(srv, a->model ? a->model : "", seq, r);
	lm = srv->models[mi].lm;
	if (srv_model_failed(&srv->models[mi]))
		return failed_model(r, seq, lm->model->name, srv->models[mi].reload);
	if (srv_model_loading(&srv->models[mi]) && !a->while_loading)
		return srv_reply_error(r, seq, EAGAIN,
				       "model '%s' is still loading (%llu of %llu bytes); this client cannot attach before it is loaded: ask again",
				       lm->model->name, (unsigned long long)__atomic_load_n(&lm->ready.h->placed_bytes, __ATOMIC_RELAXED),
				       (unsigned long long)lm->model->data_bytes);
	if (lm->tier && !a->while_loading)
		return srv_reply_error(r, seq, EOPNOTSUPP,
				       "model '%s' has a disk tier (--memory-budget): this client cannot take segments as it needs them",
				       lm->model->name);
	/* The only door to a disk tier's pieces: a client that cannot take
	 * them never gets an attachment to ask for them with. */
	if (lm->tier && s->disk_tier < WSRV_DISK_TIER)
		return srv_reply_error(r, seq, EPROTONOSUPPORT,
				       "model '%s' has a disk tier, which this client's libwsrv is too old to take (it lays out and seals its pieces otherwise): upgrade it",
				       lm->model->name);
	if ((srv_model_loading(&srv->models[mi]) || lm->tier ? 2 : arena_nseg(lm->arena) + 1) > r->fd_room)
		return srv_reply_error(r, seq, EAGAIN,
				       "%u file descriptors sent to this client are still unread; read the replies first",
				       s->fds_unread);
	if (arena_nseg(lm->arena) + 1 > WSRV_MAX_FDS)
		return srv_reply_error(r, seq, E2BIG, "model '%s' has more segments than one reply carries",
				       lm->model->name);
	if ((ret = attach_add(srv, s, (uint32_t)mi, &id)) < 0)
		return ret == -EMFILE ? srv_reply_error(r, seq, EMFILE, "attachment limit of %u reached; detach first",
							srv->cfg.max_attach)
				      : srv_reply_error(r, seq, ENOMEM, "out of memory");
	log_info("client %llu (pid %d, uid %d) attached model %s%s", (unsigned long long)s->id,
		 (int)s->cred.pid, (int)s->cred.uid, esc(lm->model->name),
		 srv_model_loading(&srv->models[mi]) ? " while it loads" : "");
	return srv_attach_reply(srv, (uint32_t)mi, id, seq, r);
}

static int layer_cmp(const void *key, const void *elem)
{
	return sorted_cmp_i32(*(const int32_t *)key, ((const struct model_layer *)elem)->index);
}

static const struct model_layer *find_layer(const struct model *m, int32_t index)
{
	long i = sorted_index(&index, m->layers, m->nlayers, sizeof(*m->layers), layer_cmp);

	return i < 0 ? NULL : &m->layers[i];
}

static int do_fetch(struct server *srv, struct session *s, const Wsrv__FetchLayer *f,
		    uint64_t seq, struct reply *r)
{
	Wsrv__Response resp = WSRV__RESPONSE__INIT;
	Wsrv__FetchReply fr = WSRV__FETCH_REPLY__INIT;
	Wsrv__Extent ext = WSRV__EXTENT__INIT, *pext = &ext;
	struct srv_model *sm = srv_attached_model(srv, s, f->attach_id, seq, r);
	const struct model_layer *l;
	uint64_t lease;
	int ret;

	if (!sm)
		return -EBADF;
	l = find_layer(sm->lm->model, f->layer);
	if (!l)
		return srv_reply_error(r, seq, ENOENT, "model '%s' has no layer %d", sm->lm->model->name,
				       f->layer);
	if ((ret = lease_add(srv, s, (uint32_t)attach_model(s, f->attach_id), f->attach_id, f->layer, &lease)) < 0)
		return ret == -ENOSPC ? srv_reply_error(r, seq, ENOSPC, "lease limit of %u reached; release some first",
							srv->cfg.max_leases)
				      : srv_reply_error(r, seq, ENOMEM, "out of memory");
	sm->fetches++;
	ext.segment = l->segment;
	ext.offset = l->offset;
	ext.length = l->length;
	fr.lease = lease;
	fr.n_extents = 1;
	fr.extents = &pext;
	resp.seq = seq;
	resp.body_case = WSRV__RESPONSE__BODY_FETCH;
	resp.fetch = &fr;
	srv_pack(r, &resp);
	return 0;
}

static int do_release(struct server *srv, struct session *s, const Wsrv__Release *rl,
		      uint64_t seq, struct reply *r)
{
	if (lease_release(srv, s, rl->lease) < 0)
		return srv_reply_error(r, seq, ENOENT, "lease %llu is not one of this client's",
				       (unsigned long long)rl->lease);
	srv_reply_ok(r, seq);
	return 0;
}

static int do_detach(struct server *srv, struct session *s, const Wsrv__Detach *d,
		     uint64_t seq, struct reply *r)
{
	struct srv_model *sm = srv_attached_model(srv, s, d->attach_id, seq, r);

	if (!sm)
		return -EBADF;
	log_info("client %llu detached model %s (generation %llu)", (unsigned long long)s->id,
		 esc(sm->lm->model->name), (unsigned long long)sm->generation);
	lease_drop_attachment(srv, s, d->attach_id);
	attach_drop(srv, s, d->attach_id);
	srv_reply_ok(r, seq);
	return 0;
}

/* A report's counters into x. */
static void report_fill(struct stream_report *x, const Wsrv__StreamReport *rp)
{
	utf8_copy(x->model, sizeof(x->model), rp->model ? rp->model : "");
	x->stream_id = rp->stream_id;
	x->slots = rp->slots;
	x->bytes_copied = rp->bytes_copied;
	x->acquires = rp->acquires;
	x->passes = rp->passes;
	x->device_bytes = rp->device_bytes;
	x->copy_seconds = rp->copy_seconds;
	x->wait_seconds = rp->wait_seconds;
	x->hidden_fraction = rp->hidden_fraction;
	x->shared_bytes = rp->shared_bytes;
	x->share_role = rp->share_role == WSRV__REGION_ROLE__REGION_WRITER ||
			rp->share_role == WSRV__REGION_ROLE__REGION_READER ? (int)rp->share_role : 0;
	x->expert_slots = rp->expert_slots;
	x->expert_hits = rp->expert_hits;
	x->expert_misses = rp->expert_misses;
	x->service_bytes = rp->service_bytes;
	x->register_bytes = rp->register_bytes;
	x->service_fallbacks = rp->service_fallbacks;
}

/* Keeps a stream's counters (replacing its previous report) for Stats;
 * a closed one's last report goes into its model's totals: the closing
 * report's own counters, also for a stream that never reported before
 * (only an earlier report used to be folded: a stream's bytes since it,
 * or all of them when it had sent none, were lost). */
static int do_report(struct server *srv, struct session *s, const Wsrv__StreamReport *rp, uint64_t seq,
		     struct reply *r)
{
	struct stream_report *x = NULL, last;

	for (uint32_t i = 0; i < s->nstreams; i++)
		if (s->streams[i].stream_id == rp->stream_id)
			x = &s->streams[i];
	if (rp->closed) {
		report_fill(&last, rp);
		srv_stream_fold(srv, &last);
		if (x)
			*x = s->streams[--s->nstreams];
		srv_reply_ok(r, seq);
		return 0;
	}
	if (!x && s->nstreams >= SRV_MAX_STREAMS)
		return srv_reply_error(r, seq, ENOSPC, "at most %d open streams reported per client", SRV_MAX_STREAMS);
	if (!x)
		x = &s->streams[s->nstreams++];
	report_fill(x, rp);
	srv_reply_ok(r, seq);
	return 0;
}

/* A fetch, its time counted in the latency histogram. */
static int timed_fetch(struct server *srv, struct session *s, const Wsrv__FetchLayer *f,
		       uint64_t seq, struct reply *r)
{
	double t0 = mono_now();
	int rc = do_fetch(srv, s, f, seq, r);

	srv_count_fetch(&srv->count, mono_now() - t0);
	return rc;
}

static int handle(struct server *srv, struct session *s, const Wsrv__Request *q, int *fd,
		  struct reply *r)
{
	if (q->body_case != WSRV__REQUEST__BODY_HELLO && !session_greeted(s)) {
		srv_reply_error(r, q->seq, EPROTO, "the first request must be Hello");
		session_close(s);
		return -EPROTO;
	}
	switch (q->body_case) {
	case WSRV__REQUEST__BODY_HELLO:
		if (session_greeted(s))
			return srv_reply_error(r, q->seq, EPROTO, "Hello was already received");
		return do_hello(srv, s, q->hello, q->seq, r);
	case WSRV__REQUEST__BODY_LIST_MODELS: return do_list(srv, q->seq, r);
	case WSRV__REQUEST__BODY_ATTACH: return do_attach(srv, s, q->attach, q->seq, r);
	case WSRV__REQUEST__BODY_ATTACH_SEGMENTS: return pieces_handle(srv, s, q->attach_segments, q->seq, r);
	case WSRV__REQUEST__BODY_FETCH_LAYER: return timed_fetch(srv, s, q->fetch_layer, q->seq, r);
	case WSRV__REQUEST__BODY_RELEASE: return do_release(srv, s, q->release, q->seq, r);
	case WSRV__REQUEST__BODY_DETACH: return do_detach(srv, s, q->detach, q->seq, r);
	case WSRV__REQUEST__BODY_STATS: return srv_stats_reply(srv, q->seq, r);
	case WSRV__REQUEST__BODY_REPORT_STREAM: return do_report(srv, s, q->report_stream, q->seq, r);
	case WSRV__REQUEST__BODY_REGION_OPEN: return region_open(srv, s, q->region_open, q->seq, r);
	case WSRV__REQUEST__BODY_REGION_COMMIT:
		return region_commit(srv, s, q->region_commit, fd, q->seq, r);
	case WSRV__REQUEST__BODY_REGION_CLOSE: return region_close(srv, s, q->region_close, q->seq, r);
	case WSRV__REQUEST__BODY_TAKE_OVER: return takeover_offer(srv, s, q->seq, r);
	case WSRV__REQUEST__BODY_TAKE_OVER_DONE: return takeover_done(srv, s, q->seq, r);
	case WSRV__REQUEST__BODY_RELOAD: return reload_start(srv, s, q->reload, q->seq, r);
	case WSRV__REQUEST__BODY_PUBLISH_BEGIN: return publish_begin(srv, s, q->publish_begin, q->seq, r);
	case WSRV__REQUEST__BODY_PUBLISH_COMMIT: return publish_commit(srv, s, q->publish_commit, q->seq, r);
	case WSRV__REQUEST__BODY_PUBLISH_ABORT: return publish_abort(srv, s, q->publish_abort, q->seq, r);
	default:
		return srv_reply_error(r, q->seq, ENOSYS, "unknown or empty request");
	}
}

/* The tests' seam $WSRV_TEST_DROP_REPLY=K (a Request body number): the
 * first request of kind K is done, and its connection closed instead of
 * answered, as when a server goes between acting and replying. */
static bool drop_seam(int kind)
{
	static bool dropped;
	const char *v = test_seam("WSRV_TEST_DROP_REPLY");

	if (!v || dropped || atoi(v) != kind)
		return false;
	dropped = true;
	return true;
}

void srv_dispatch(struct server *srv, struct session *s, const uint8_t *pkt,
		  size_t len, int fd, struct reply *r)
{
	Wsrv__Request *q = wsrv__request__unpack(&pb_sized_allocator, len, pkt);
	int kind = q ? (int)q->body_case : 0;
	char why[160];
	int rc;

	r->nfds = 0;
	r->len = 0;
	r->owned_fd = -1;
	r->drop = false;
	r->fd_room = srv_fd_room(srv, s);
	srv->requests++;
	if (!q && !session_greeted(s)) {
		srv_reply_error(r, 0, EPROTO, "the first packet must be a Hello request");
		session_close(s);
		rc = -EPROTO;
	} else if (!q) {
		srv_reply_error(r, 0, EBADMSG, "the packet is not a wsrv Request");
		rc = -EBADMSG;
	} else if (pb_text_check_sized(&q->base, why, sizeof(why)) < 0) {
		srv_reply_error(r, q->seq, EBADMSG, "%s", why);
		if (!session_greeted(s))
			session_close(s);
		wsrv__request__free_unpacked(q, &pb_sized_allocator);
		rc = -EBADMSG;
	} else if (fd >= 0 && q->body_case != WSRV__REQUEST__BODY_REGION_COMMIT) {
		srv_reply_error(r, q->seq, EBADMSG, "only RegionCommit comes with a file descriptor (closed)");
		wsrv__request__free_unpacked(q, &pb_sized_allocator);
		rc = -EBADMSG;
	} else {
		rc = handle(srv, s, q, &fd, r);
		r->drop = drop_seam(kind);
		wsrv__request__free_unpacked(q, &pb_sized_allocator);
	}
	if (fd >= 0)
		close(fd);
	srv_count_request(&srv->count, kind, rc >= 0 ? SRV_REQ_OK : srv_declined(rc) ? SRV_REQ_DECLINED : SRV_REQ_ERROR);
	if (rc < 0 && srv_declined(rc)) {
		srv->declined++;
		if (++s->declined == 1)
			log_info("client %llu (pid %d, uid %d) turned away for now: %s (asked again is not an error; "
				 "further ones are logged at debug level)",
				 (unsigned long long)s->id, (int)s->cred.pid, (int)s->cred.uid, esc(r->msg));
		else
			log_debug("client %llu turned away for now: %s", (unsigned long long)s->id, esc(r->msg));
	} else if (rc < 0) {
		srv->errors++;
		if (++s->errors == 1)
			log_warn("client %llu (pid %d, uid %d): %s (further errors of this client are logged at debug level)",
				 (unsigned long long)s->id, (int)s->cred.pid, (int)s->cred.uid, esc(r->msg));
		else
			log_debug("client %llu: %s", (unsigned long long)s->id, esc(r->msg));
		if (s->errors > srv->cfg.max_errors) {
			log_warn("client %llu: more than %u protocol errors; closing it",
				 (unsigned long long)s->id, srv->cfg.max_errors);
			session_close(s);
		}
	}
}
