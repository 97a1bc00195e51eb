// SPDX-License-Identifier: MIT
/* srv_early.c - serving while loading: the load thread, publishing what
 * it finished, and the replies that hand a loading model out. */
#include "srv_early.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "escape.h"
#include "log.h"
#include "report.h"
#include "srv_handover.h"
#include "srv_models.h"
#include "srv_reply.h"
#include "tier.h"
#include "wsrv.pb-c.h"
#include "utf8.h"
#include "test_seam.h"

struct early_load {
	pthread_t th;
	struct load_opts o;         /* the server's, without progress bar */
	size_t n;
	struct loaded_model **lm;   /* the entries' (not owned) */
	uint32_t *entry;            /* their indexes in srv->models */
	int *rc;
	struct errinfo *e;
	uint32_t done;              /* atomic: finished so far, in order */
	uint32_t published;         /* the loop's: published so far */
	int efd;
	bool joined;
	bool require_all;           /* one failure stops them all (--require-all-models) */
};

static bool cancel;

static bool early_cancelled(void)
{
	return __atomic_load_n(&cancel, __ATOMIC_RELAXED);
}

static void *early_main(void *arg)
{
	struct early_load *E = arg;
	const char *v = test_seam("WSRV_TEST_EARLY_SIGNAL_DELAY_MS");
	unsigned delay_ms = v ? (unsigned)atoi(v) : 0; /* tests: a loop that hears late */
	uint64_t one = 1;

	for (size_t i = 0; i < E->n; i++) {
		E->rc[i] = model_load_finish(E->lm[i], &E->o, &E->e[i]);
		__atomic_store_n(&E->done, (uint32_t)i + 1, __ATOMIC_RELEASE);
		if (delay_ms)
			usleep(delay_ms * 1000);
		if (write(E->efd, &one, sizeof(one)) != sizeof(one))
			log_warn("serving while loading: cannot signal the loop");
		if (E->rc[i] < 0 && (E->require_all || E->rc[i] == -ECANCELED))
			break; /* the server stops: the rest stays unread */
	}
	return NULL;
}

static void early_free(struct early_load *E)
{
	free(E->lm);
	free(E->entry);
	free(E->rc);
	free(E->e);
	free(E);
}

int early_start(struct server *srv)
{
	struct early_load *E = calloc(1, sizeof(*E));
	size_t n = srv->nmodels;

	if (!E)
		return -ENOMEM;
	E->lm = calloc(n + 1, sizeof(*E->lm));
	E->entry = calloc(n + 1, sizeof(*E->entry));
	E->rc = calloc(n + 1, sizeof(*E->rc));
	E->e = calloc(n + 1, sizeof(*E->e));
	if (!E->lm || !E->entry || !E->rc || !E->e) {
		early_free(E);
		return -ENOMEM;
	}
	for (size_t i = 0; i < n; i++)
		if (srv->models[i].loading) {
			E->entry[E->n] = (uint32_t)i;
			E->lm[E->n++] = srv->models[i].lm;
		}
	E->o = *srv->load;
	E->o.loader.progress = PROGRESS_LINES;
	E->o.loader.stop = early_cancelled;
	E->efd = srv->reload_efd;
	E->require_all = srv->cfg.require_all;
	__atomic_store_n(&cancel, false, __ATOMIC_RELAXED);
	if (E->n == 0 || pthread_create(&E->th, NULL, early_main, E) != 0) {
		int r = E->n ? -EAGAIN : 0;
		early_free(E);
		return r;
	}
	srv->early = E;
	return 0;
}

static void publish_one(struct server *srv, struct early_load *E, size_t i)
{
	struct srv_model *sm = &srv->models[E->entry[i]];

	if (E->rc[i] < 0) {
		snprintf(sm->reload, sizeof(sm->reload), "the load failed: %.*s", UTF8_CUT(E->e[i].msg, 120));
		if (E->rc[i] == -ECANCELED && srv->stopping) {
			log_info("model %s: stopped by a signal while loading", esc(E->lm[i]->model->name));
		} else if (!srv->cfg.require_all && srv_models_serving(srv) > 1) {
			/* One bad model does not take the others down: it is
			 * listed as failed, and attaches say why. */
			log_err("model %s: %s; serving the other models (--require-all-models stops instead)",
				esc(E->lm[i]->model->name), E->e[i].msg);
			sm->failed = true;
			sm->loading = false;
			return;
		} else {
			log_err("model %s: %s", esc(E->lm[i]->model->name), E->e[i].msg);
			srv->failed = true;
		}
		srv->stop_asked = true;
		return;
	}
	sm->loading = false;
	snprintf(sm->reload, sizeof(sm->reload), "loaded in %.2f s while serving",
		 E->lm[i]->total_seconds);
	report_log_loaded(E->lm[i]);
	handover_store(srv, NULL); /* systemd's store: this model too now */
}

void early_poll(struct server *srv)
{
	struct early_load *E = srv->early;
	uint32_t done;

	if (!E)
		return;
	done = __atomic_load_n(&E->done, __ATOMIC_ACQUIRE);
	while (E->published < done)
		publish_one(srv, E, E->published++);
	if (E->published == E->n || (done && E->rc[done - 1] < 0 && (E->require_all || srv->stop_asked))) {
		pthread_join(E->th, NULL);
		early_free(E);
		srv->early = NULL;
	}
}

void early_stop(struct server *srv)
{
	struct early_load *E = srv->early;

	if (!E)
		return;
	__atomic_store_n(&cancel, true, __ATOMIC_RELAXED);
	pthread_join(E->th, NULL);
	/* A load that failed before the loop heard of it is still a failure:
	 * a stop that raced it must not turn exit status 1 into 0. */
	for (; E->published < E->done && E->rc[E->published] != -ECANCELED; E->published++) {
		size_t i = E->published;
		if (E->rc[i] < 0) {
			log_err("model %s: %s", esc(E->lm[i]->model->name), E->e[i].msg);
			srv->failed = true;
		}
	}
	for (size_t i = E->published; i < E->n; i++)
		log_info("model %s: stopped %s while loading", esc(E->lm[i]->model->name),
			 srv->failed ? "(another model failed)" : "by a signal");
	early_free(E);
	srv->early = NULL;
}

bool early_any(const struct server *srv)
{
	for (size_t i = 0; i < srv->nmodels; i++)
		if (srv->models[i].loading)
			return true;
	return false;
}

static bool seg_ready(const struct srv_model *sm, uint32_t seg)
{
	return !sm->loading || ready_page_segment_ready(&sm->lm->ready, seg);
}

/* A disk tier's segments: each taken (held for this attachment, its fd
 * into r, its id into given[*ngiven]), or, with release, let go. A
 * segment still to be read answers EAGAIN (replied, 1: not counted as the
 * client's error) and the holds taken before it are let go again; with
 * partial, it is left out. 0, 1, or the error replied. */
static int tier_segments(const struct loaded_model *lm, struct session *s, const Wsrv__AttachSegments *q,
			 uint64_t seq, struct reply *r, uint32_t *given, size_t *ngiven)
{
	uint64_t holder = srv_tier_holder(s, q->attach_id);
	char msg[1024] = "";

	if (q->release) {
		size_t missing = SIZE_MAX;
		/* Every one held goes, whatever comes after one that is not. */
		for (size_t i = 0; i < q->n_segments; i++)
			if (tier_on_disk(lm->tier, q->segments[i]) &&
			    tier_release(lm->tier, holder, q->segments[i]) < 0 && missing == SIZE_MAX)
				missing = i;
		if (missing != SIZE_MAX)
			return srv_reply_error(r, seq, ENOENT, "segment %u of '%s' is not held by this attachment",
					       q->segments[missing], lm->model->name);
		return 0;
	}
	/* Partial: as many as this client may have unread, the others
	 * left for its next request. */
	if (q->partial) {
		int rc = tier_take_some(lm->tier, holder, q->segments, q->n_segments, r->fd_room, r->fds, given,
					ngiven, msg, sizeof(msg));
		return rc < 0 ? srv_reply_error(r, seq, -rc, "model %s: %s", lm->model->name, msg) : 0;
	}
	for (size_t i = 0; i < q->n_segments; i++) {
		int rc = tier_take(lm->tier, holder, q->segments[i], &r->fds[*ngiven], msg, sizeof(msg));
		if (rc == 0) {
			given[(*ngiven)++] = q->segments[i];
			continue;
		}
		for (size_t k = 0; k < *ngiven; k++)
			tier_release(lm->tier, holder, given[k]);
		if (rc != -EAGAIN)
			return srv_reply_error(r, seq, -rc, "model %s: %s", lm->model->name, msg);
		/* Being read: the answer a client waits on, not its error. */
		srv_reply_error(r, seq, EAGAIN, "segment %u of '%s' is being read from disk", q->segments[i],
				lm->model->name);
		return 1;
	}
	return 0;
}

int early_segments(struct server *srv, struct session *s, const Wsrv__AttachSegments *q,
		   uint64_t seq, struct reply *r)
{
	Wsrv__Response resp = WSRV__RESPONSE__INIT;
	Wsrv__SegmentsReply sr = WSRV__SEGMENTS_REPLY__INIT;
	const struct srv_model *sm;
	const struct loaded_model *lm;
	uint32_t given[WSRV_MAX_FDS];
	size_t ngiven = 0;
	int rc;

	if (!(sm = srv_attached_model(srv, s, q->attach_id, seq, r)))
		return -EBADF;
	lm = sm->lm;
	if (q->n_segments == 0 || q->n_segments > WSRV_MAX_FDS - 2)
		return srv_reply_error(r, seq, EINVAL, "ask for 1 to %u segments at a time",
				       WSRV_MAX_FDS - 2);
	/* More than the client may ever have unread: asking again never
	 * helps, so not EAGAIN. */
	if (!q->release && !q->partial && q->n_segments > srv->fd_budget)
		return srv_reply_error(r, seq, E2BIG, "%zu segments asked for at once, and this client may have at most "
				       "%u file descriptors unread: ask for fewer at a time, or with partial",
				       q->n_segments, srv->fd_budget);
	if (!q->release && (q->partial ? r->fd_room == 0 : q->n_segments > r->fd_room))
		return srv_reply_error(r, seq, EAGAIN,
				       "%u file descriptors sent to this client are still unread; read the replies first",
				       s->fds_unread);
	for (size_t i = 0; i < q->n_segments; i++) {
		uint32_t g = q->segments[i];
		/* A disk tier's units are numbered on from the segments. */
		if (g >= (lm->tier ? tier_count(lm->tier) : lm->arena->nseg))
			return srv_reply_error(r, seq, EINVAL, "model '%s' has no segment %u",
					       lm->model->name, g);
		for (size_t k = 0; k < i; k++)
			if (q->segments[k] == g)
				return srv_reply_error(r, seq, EINVAL, "segment %u asked for twice", g);
		/* Letting go needs nothing loaded: a client of the server
		 * before this one lets go of what that one held (ENOENT). */
		if (!q->release && !seg_ready(sm, lm->tier ? tier_segment_of(lm->tier, g) : g))
			return srv_reply_error(r, seq, EAGAIN, "segment %u of '%s' is not loaded yet",
					       g, lm->model->name);
	}
	if (lm->tier && (rc = tier_segments(lm, s, q, seq, r, given, &ngiven)) != 0)
		return rc < 0 ? rc : 0;
	/* A release carries no fds back, whatever the model. */
	for (size_t i = 0; !lm->tier && !q->release && i < q->n_segments; i++) {
		r->fds[i] = lm->arena->seg[q->segments[i]].fd;
		given[ngiven++] = q->segments[i];
	}
	r->nfds = q->release ? 0 : (int)ngiven;
	sr.n_segments = q->release ? q->n_segments : ngiven;
	sr.segments = q->release ? q->segments : given;
	resp.seq = seq;
	resp.body_case = WSRV__RESPONSE__BODY_SEGMENTS;
	resp.segments = &sr;
	srv_pack(r, &resp);
	return 0;
}
