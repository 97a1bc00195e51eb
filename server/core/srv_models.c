// SPDX-License-Identifier: MIT
/* srv_models.c - the server's model generations (srv_models.h). */
#include "srv_models.h"

#include "tier_door.h"
#include "srv_reply.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "escape.h"
#include "log.h"

int srv_find_current(const struct server *srv, const char *name)
{
	for (size_t i = 0; i < srv->nmodels; i++)
		if (name && srv_model_current(&srv->models[i]) &&
		    strcmp(srv->models[i].lm->model->name, name) == 0)
			return (int)i;
	return -1;
}

size_t srv_models_serving(const struct server *srv)
{
	size_t n = 0;

	for (size_t i = 0; i < srv->nmodels; i++)
		n += srv_model_serves(&srv->models[i]);
	return n;
}

int srv_models_add(struct server *srv, uint32_t old, struct loaded_model *lm)
{
	struct srv_model *v = realloc(srv->models, (srv->nmodels + 1) * sizeof(*v));
	size_t k = srv->nmodels;
	char *name = strdup(lm->model->name);

	if (!v || !name) {
		free(name);
		if (v)
			srv->models = v;
		return -ENOMEM;
	}
	srv->models = v;
	v[k] = (struct srv_model){ .lm = lm, .name = name, .generation = v[old].generation + 1,
				   .budget = v[old].budget, .state = SM_READY };
	srv_model_to(&v[old], SM_RETIRED);
	if (v[old].lm)
		tier_retire(v[old].lm->tier); /* its cache nobody holds goes now */
	srv->nmodels++;
	return (int)k;
}

static void *free_main(void *lm)
{
	loaded_model_free(lm);
	return NULL;
}

/* Frees lm (the caller's, no longer the server's) on a thread of its own:
 * giving a generation's pages back takes time in proportion to its size,
 * and on the loop that would stall every client for it. Inline when no thread
 * can be made, and for a disk tier (its pieces count against limits the
 * loop keeps). */
static void free_off_loop(struct loaded_model *lm)
{
	pthread_attr_t at;
	pthread_t th;
	int r = lm->tier ? -1 : pthread_attr_init(&at);

	if (r == 0) {
		pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
		r = pthread_create(&th, &at, free_main, lm);
		pthread_attr_destroy(&at);
	}
	if (r != 0)
		loaded_model_free(lm);
}

void srv_retired_check(struct server *srv, struct srv_model *sm)
{
	if (sm->state != SM_RETIRED || sm->attached)
		return;
	log_info("model %s: generation %llu has no client left; its memory goes with the last mapping",
		 esc(sm->lm->model->name), (unsigned long long)sm->generation);
	free_off_loop(sm->lm);
	sm->lm = NULL;
	srv_model_to(sm, SM_FREED);
}

int srv_model_first(const struct server *srv, const char *name)
{
	for (size_t i = 0; i < srv->nmodels; i++)
		if (srv->models[i].name && strcmp(srv->models[i].name, name) == 0)
			return (int)i;
	return -1;
}

void srv_stream_fold(struct server *srv, const struct stream_report *x)
{
	int first = srv_model_first(srv, x->model);
	struct stream_sum *sum = first >= 0 ? &srv->models[first].streams_gone : &srv->other_gone;

	sum->bytes += x->bytes_copied;
	sum->copy_seconds += x->copy_seconds;
	sum->wait_seconds += x->wait_seconds;
	sum->service_bytes += x->service_bytes;
	sum->register_bytes += x->register_bytes;
	sum->service_fallbacks += x->service_fallbacks;
}


const char *srv_tiered_model(const struct server *srv)
{
	for (size_t i = 0; i < srv->nmodels; i++)
		if (srv->models[i].lm && srv->models[i].lm->tier)
			return srv->models[i].lm->model->name;
	return NULL;
}
