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
#include "loaded_door.h"
#include "srv_handover.h"
#include "core_door.h"
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
		if (srv_model_loading(&srv->models[i])) {
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
		if (E->rc[i] == -ECANCELED && srv_stopping(srv)) {
			log_info("model %s: stopped by a signal while loading", esc(E->lm[i]->model->name));
		} else if (!srv->cfg.require_all && srv_models_serving(srv) > 1) {
			/* One bad model does not take the others down: it is
			 * listed as failed, and attaches say why. */
			log_err("model %s: %s; serving the other models (--require-all-models stops instead)",
				esc(E->lm[i]->model->name), E->e[i].msg);
			srv_model_to(sm, SM_FAILED);
			return;
		} else {
			log_err("model %s: %s", esc(E->lm[i]->model->name), E->e[i].msg);
			srv->failed = true;
		}
		srv_ask_stop(srv);
		return;
	}
	srv_model_to(sm, SM_READY);
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
	if (E->published == E->n || (done && E->rc[done - 1] < 0 && (E->require_all || srv_stop_asked(srv)))) {
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
		if (srv_model_loading(&srv->models[i]))
			return true;
	return false;
}
