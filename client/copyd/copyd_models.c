// SPDX-License-Identifier: MIT
/* copyd_models.c - the models the copy service holds: attached through
 * libwsrv by the name a worker asks for, each ready segment page-locked
 * once (on the first device, portable; the others borrow it), a new
 * generation attached and locked as soon as wsrvd announces it, and an
 * older one let go once no connection copies from it. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "model_door.h"
#include "copyd.h"
#include "escape.h"
#include "lifecycle.h"
#include "log.h"
#include "piece_door.h"
#include "wire.h"

int cd_wsrvd_fd(struct copyd *cd)
{
	/* A session that lost wsrvd is revived by the next call (a request
	 * that needs it): until then its fd is not watched. */
	return cd->wsrvd && cl_connected(cd->wsrvd) ? wsrv_client_fd(cd->wsrvd) : -1;
}

/* wsrvd, connected when it was not: 0 or -EHOSTDOWN with a sentence. */
static int need_wsrvd(struct copyd *cd, struct errinfo *err)
{
	struct wsrv_connect_opts o = { .struct_size = sizeof(o), .timeout_ms = 30000,
				       .client_name = "wsrv-copyd" };

	if (cd->wsrvd)
		return 0;
	if (wsrv_connect(cd->cfg.wsrvd, &o, &cd->wsrvd) < 0) {
		cd->wsrvd = NULL;
		return err_set(err, -EHOSTDOWN, "wsrvd is not reachable: %s", wsrv_last_error());
	}
	log_info("connected to wsrvd at %s", cd->cfg.wsrvd ? cd->cfg.wsrvd : wsrv_default_socket());
	return 0;
}

/* Locks segment g of e on every device (the first locks, portable; the
 * others borrow), once. 0 or <0 (nothing left locked). */
static int lock_segment(struct copyd *cd, struct cd_model *e, uint32_t g, struct errinfo *err)
{
	const uint8_t *p = cl_segment_base(e->m, g);
	size_t len = cl_segment_len(e->m, g);
	uint64_t added = 0, a;
	int k, r = 0;

	if (e->registered[g] || !len)
		return 0;
	for (k = 0; k < cd->ndev && r == 0; k++) {
		a = 0;
		r = cd->dev[k].d->ops->register_host(cd->dev[k].d, p, len, &a);
		added += a;
	}
	if (r < 0) {
		err_set(err, r, "%s", wsrv_last_error()); /* the device room says why */
		while (--k > 0)
			cd->dev[k - 1].d->ops->unregister_host(cd->dev[k - 1].d, p, len);
		return r;
	}
	e->registered[g] = true;
	e->registered_bytes += added;
	log_debug("model %s generation %llu: segment %u locked (%zu bytes)", e->name,
		  (unsigned long long)e->generation, g, len);
	return 0;
}

/* Every segment of e that is loaded now, locked. */
static void lock_ready(struct copyd *cd, struct cd_model *e)
{
	struct errinfo err;

	for (uint32_t g = 0; g < e->nseg; g++)
		if (!e->registered[g] && cl_piece_kept_now(e->m, g) == 1 && lock_segment(cd, e, g, &err) < 0)
			log_warn("model %s: segment %u could not be page-locked: %s", e->name, g, err.msg);
}

static void unlock_all(struct copyd *cd, struct cd_model *e)
{
	/* The borrowers first: the first device's registration is the lock. */
	for (uint32_t g = 0; g < e->nseg; g++)
		for (int k = cd->ndev; g < e->nseg && e->registered[g] && k-- > 0;)
			cd->dev[k].d->ops->unregister_host(cd->dev[k].d, cl_segment_base(e->m, g), cl_segment_len(e->m, g));
}

static void model_free(struct copyd *cd, struct cd_model *e)
{
	log_info("model %s generation %llu let go (%llu bytes unlocked)", e->name, (unsigned long long)e->generation,
		 (unsigned long long)e->registered_bytes);
	unlock_all(cd, e);
	wsrv_detach(e->m);
	free(e->registered);
	free(e->name);
	free(e);
}

static const char *const cdm_names[CDM_STATE_MAX] = { "current", "retired" };
static const unsigned cdm_moves[CDM_STATE_MAX] = {
	[CDM_CURRENT] = LIFE_BIT(CDM_RETIRED),
	[CDM_RETIRED] = 0,
};
static const struct lifecycle cdm_life = { "held generation", CDM_STATE_MAX, cdm_names, cdm_moves };

/* The one setter of a held generation's state. */
static void cd_model_to(struct cd_model *e, enum cd_model_state to)
{
	if (life_check(&cdm_life, e->generation, e->state, to) == 0)
		e->state = to;
}

/* Unlinks and frees the retired models nobody copies from. */
static void reap(struct copyd *cd)
{
	for (struct cd_model **p = &cd->models; *p;) {
		struct cd_model *e = *p;
		if (e->state == CDM_RETIRED && !e->users) {
			*p = e->next;
			model_free(cd, e);
		} else {
			p = &e->next;
		}
	}
}

static struct cd_model *held(struct copyd *cd, const char *name, bool current_only)
{
	for (struct cd_model *e = cd->models; e; e = e->next)
		if (strcmp(e->name, name) == 0 && (!current_only || e->state == CDM_CURRENT))
			return e;
	return NULL;
}

/* Attaches name's current generation and locks what is loaded of it; the
 * one held before is retired. 0 and *out, or <0. */
static int attach(struct copyd *cd, const char *name, struct cd_model **out, struct errinfo *err)
{
	struct cd_model *e, *old;
	uint64_t mapped = 0, latest = 0;
	int r;

	if ((r = need_wsrvd(cd, err)) < 0)
		return r;
	if (!(e = calloc(1, sizeof(*e))) || !(e->name = strdup(name))) {
		free(e);
		return err_set(err, -ENOMEM, "out of memory");
	}
	if ((r = wsrv_attach(cd->wsrvd, name, &e->m)) < 0) {
		free(e->name);
		free(e);
		return err_set(err, r, "%s", wsrv_last_error()); /* libwsrv says why */
	}
	wsrv_model_generation(e->m, &mapped, &latest);
	e->generation = mapped;
	e->identity = cl_model_identity(e->m);
	/* What is held already (a request that named other bytes): kept,
	 * its locks and all, the new attachment let go. */
	if ((old = held(cd, name, true)) && old->generation == e->generation && old->identity == e->identity) {
		wsrv_detach(e->m);
		free(e->name);
		free(e);
		*out = old;
		return 0;
	}
	e->nseg = cl_nsegments(e->m);
	for (uint32_t g = 0; g < e->nseg; g++)
		e->bytes += cl_segment_len(e->m, g);
	if (!(e->registered = calloc(e->nseg + 1, sizeof(bool)))) {
		wsrv_detach(e->m);
		free(e->name);
		free(e);
		return err_set(err, -ENOMEM, "out of memory");
	}
	if ((old = held(cd, name, true)))
		cd_model_to(old, CDM_RETIRED);
	e->next = cd->models;
	cd->models = e;
	lock_ready(cd, e);
	log_info("model %s generation %llu held (%llu bytes, %llu locked now)", name, (unsigned long long)e->generation,
		 (unsigned long long)e->bytes, (unsigned long long)e->registered_bytes);
	reap(cd);
	*out = e;
	return 0;
}

int cd_model_get(struct copyd *cd, const char *name, uint64_t gen, uint64_t id, struct cd_model **out,
		 struct errinfo *err)
{
	struct cd_model *e;
	int r;

	/* 0 names no bytes (a worker of an older library, or a manifest
	 * from a server that names no source): nothing matches it. */
	if (!id)
		return err_set(err, -ESTALE, "model %s: the request names generation %llu by no identity; "
			      "the service copies only bytes it can name", esc(name), (unsigned long long)gen);
	for (e = cd->models; e; e = e->next)
		if (strcmp(e->name, name) == 0 && e->generation == gen && e->identity == id) {
			*out = e;
			return 0;
		}
	/* Another generation, or the same number with other bytes (a wsrvd
	 * started again): what wsrvd serves now, attached. */
	if ((r = attach(cd, name, &e, err)) < 0)
		return r;
	if (e->generation != gen || e->identity != id)
		return err_set(err, -ESTALE, "model %s: wsrvd serves generation %llu (identity %016llx), not %llu (%016llx): "
			      "attach again", esc(name), (unsigned long long)e->generation, (unsigned long long)e->identity,
			      (unsigned long long)gen, (unsigned long long)id);
	*out = e;
	return 0;
}

int cd_model_hold(struct copyd *cd, const char *name, struct errinfo *err)
{
	struct cd_model *e;

	return attach(cd, name, &e, err);
}

int cd_model_segment(struct copyd *cd, struct cd_model *e, uint32_t seg, const uint8_t **base, size_t *len,
		     struct errinfo *err)
{
	int r;

	if (seg >= e->nseg)
		return err_set(err, -ERANGE, "segment %u: model %s has %u", seg, e->name, e->nseg);
	if (cl_model_tiered(e->m))
		return err_set(err, -EOPNOTSUPP, "model %s has a disk tier: its workers copy by themselves", e->name);
	if (!e->registered[seg]) {
		if ((r = cl_piece_kept_now(e->m, seg)) < 0)
			return err_set(err, r, "model %s: segment %u: %s", e->name, seg, wsrv_last_error());
		if (r == 0)
			return err_set(err, -EAGAIN, "model %s: segment %u is not loaded yet", e->name, seg);
		if ((r = lock_segment(cd, e, seg, err)) < 0)
			return r;
	}
	*base = cl_segment_base(e->m, seg);
	*len = cl_segment_len(e->m, seg);
	return 0;
}

void cd_model_use(struct copyd *cd, struct cd_model **slot, struct cd_model *e)
{
	if (*slot == e)
		return;
	if (*slot)
		(*slot)->users--;
	if (e)
		e->users++;
	*slot = e;
	reap(cd);
}

/* A model whose wsrvd announced a newer generation: that one attached
 * (locked as it loads), this one retired. */
static void follow(struct copyd *cd)
{
	struct cd_model *e, *n;
	uint64_t mapped, latest;
	struct errinfo err;

	for (e = cd->models; e; e = e->next) {
		if (e->state != CDM_CURRENT || wsrv_model_generation(e->m, &mapped, &latest) < 0 || latest <= mapped)
			continue;
		if (attach(cd, e->name, &n, &err) < 0)
			log_warn("model %s: generation %llu could not be held: %s", e->name, (unsigned long long)latest,
				 err.msg);
		return; /* the list changed: the next tick goes on */
	}
}

void cd_models_tick(struct copyd *cd)
{
	/* Whatever wsrvd sent: announcements of new generations. The models
	 * held stay mapped while it is gone (a restart, a take-over). */
	if (cd->wsrvd && cl_connected(cd->wsrvd))
		wsrv_client_poll_events(cd->wsrvd);
	follow(cd);
	for (struct cd_model *e = cd->models; e; e = e->next)
		if (e->state == CDM_CURRENT)
			lock_ready(cd, e);
}

void cd_models_free(struct copyd *cd)
{
	while (cd->models) {
		struct cd_model *e = cd->models;
		cd->models = e->next;
		model_free(cd, e);
	}
	if (cd->wsrvd)
		wsrv_disconnect(cd->wsrvd);
	cd->wsrvd = NULL;
}
