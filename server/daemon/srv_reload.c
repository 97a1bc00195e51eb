// SPDX-License-Identifier: MIT
/* srv_reload.c - a new generation of a model, loaded while the current one
 * serves (wsrvctl reload). The load runs on a thread of its own (the loop
 * keeps serving) and signals an eventfd; the loop then publishes: the new
 * generation is a new model entry that new attaches get, the old one is
 * retired and stays until its last client detaches, and its clients are
 * told (an Event). A generation's bytes never change, so a worker never
 * sees a mix of two. */
#include "srv_reload.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "escape.h"
#include "log.h"
#include "srv_handover.h"
#include "srv_publish.h"
#include "srv_reply.h"
#include "units.h"
#include "wsrv.pb-c.h"

/* Room kept free beyond the new generation's bytes. */
#define RELOAD_MARGIN (256ull << 20)

struct reload_job {
	pthread_t th;
	int (*work)(struct reload_job *j); /* on the thread: sets lm, or e */
	void *arg;                  /* work's: a publish (srv_publish.c) */
	char name[256], path[4096];
	struct load_opts opts;
	uint32_t model;             /* the generation it replaces */
	struct loaded_model *lm;    /* the new one, when rc is 0 */
	struct errinfo e;
	int rc, efd;
	double t0;
	uint64_t total, placed;     /* the loader's progress (atomic) */
};

static atomic_bool cancel;

static bool cancelled(void)
{
	return atomic_load(&cancel);
}

static int load_work(struct reload_job *j)
{
	return model_load(j->name, j->path, &j->opts, &j->lm, &j->e);
}

static void *run(void *arg)
{
	struct reload_job *j = arg;
	uint64_t one = 1;

	j->rc = j->work(j);
	if (write(j->efd, &one, sizeof(one)) != sizeof(one))
		log_warn("reload: cannot signal the loop");
	return NULL;
}

static uint64_t mem_available(void)
{
	unsigned long long kb = 0;
	char line[128];
	FILE *f = fopen("/proc/meminfo", "re");

	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1)
			break;
	if (f)
		fclose(f);
	return (uint64_t)kb << 10;
}

/* Does memory allow a second copy of name at path next to the first? */
static int check_room(struct server *srv, const char *name, const char *path, uint64_t seq,
		      struct reply *r)
{
	struct model *m = NULL;
	struct errinfo e;
	char need[32], have[32];
	uint64_t avail;

	if (model_open(name, path, &srv->load->model, &m, &e) < 0)
		return srv_reply_error(r, seq, EINVAL, "cannot reload %.64s from %.200s: %s", name, path, e.msg);
	avail = mem_available();
	fmt_bytes(m->data_bytes, need, sizeof(need));
	fmt_bytes(avail, have, sizeof(have));
	if (avail && m->data_bytes + RELOAD_MARGIN > avail) {
		srv_reply_error(r, seq, ENOMEM, "reloading %.64s needs %s for the new generation next to the current one, and MemAvailable is %s: detach workers of an old generation, or add memory",
				name, need, have);
		model_free(m);
		return -ENOMEM;
	}
	model_free(m);
	return 0;
}

/* Runs work on the thread for a new generation of model entry mi. */
static int start(struct server *srv, struct reload_job *j, uint32_t mi,
		 int (*work)(struct reload_job *), void *arg)
{
	j->opts = *srv->load;
	j->opts.loader.progress = false;
	j->opts.loader.stop = cancelled;
	j->opts.loader.total_bytes = &j->total;
	j->opts.loader.placed_bytes = &j->placed;
	j->model = mi;
	j->efd = srv->reload_efd;
	j->work = work;
	j->arg = arg;
	j->t0 = mono_now();
	if (pthread_create(&j->th, NULL, run, j) != 0) {
		free(j);
		return -EAGAIN;
	}
	srv->reload = j;
	return 0;
}

static int publish_work(struct reload_job *j)
{
	return publish_finish_work(j->arg, j->opts.arena.lock, &j->lm, &j->e);
}

int reload_publish(struct server *srv, uint32_t mi, void *pub)
{
	struct reload_job *j;

	if (srv->reload || srv->reload_efd < 0 || !srv->load)
		return -EBUSY;
	if (!(j = calloc(1, sizeof(*j))))
		return -ENOMEM;
	snprintf(j->name, sizeof(j->name), "%s", srv->models[mi].lm->model->name);
	snprintf(j->path, sizeof(j->path), "a producer's bytes");
	snprintf(srv->models[mi].reload, sizeof(srv->models[mi].reload),
		 "publishing generation %llu", (unsigned long long)srv->models[mi].generation + 1);
	return start(srv, j, mi, publish_work, pub);
}

int reload_start(struct server *srv, struct session *s, const Wsrv__Reload *q, uint64_t seq,
		 struct reply *r)
{
	int mi = srv_find_current(srv, q->model), ret;
	struct reload_job *j;

	if (s->cred.uid != 0 && s->cred.uid != geteuid())
		return srv_reply_error(r, seq, EPERM, "only root or the server's own user can reload a model");
	if (mi < 0)
		return srv_reply_error(r, seq, ENOENT, "no model named '%.64s'", q->model ? q->model : "");
	if (srv->reload || srv->reload_efd < 0 || !srv->load)
		return srv_reply_error(r, seq, EBUSY, "a reload is under way already");
	const char *path = q->path && *q->path ? q->path : srv->models[mi].lm->model->path;
	if (strlen(path) >= sizeof(((struct reload_job *)0)->path))
		return srv_reply_error(r, seq, ENAMETOOLONG, "a reload path is at most %zu bytes",
				       sizeof(((struct reload_job *)0)->path) - 1);
	if ((ret = check_room(srv, q->model, path, seq, r)) < 0)
		return ret;
	if (!(j = calloc(1, sizeof(*j))))
		return srv_reply_error(r, seq, ENOMEM, "out of memory");
	snprintf(j->name, sizeof(j->name), "%s", q->model);
	snprintf(j->path, sizeof(j->path), "%s", path);
	if ((ret = start(srv, j, (uint32_t)mi, load_work, NULL)) < 0) {
		srv_reply_error(r, seq, EAGAIN, "cannot start the reload");
		return ret;
	}
	snprintf(srv->models[mi].reload, sizeof(srv->models[mi].reload),
		 "loading generation %llu from %.100s", (unsigned long long)srv->models[mi].generation + 1,
		 j->path);
	log_info("client %llu (pid %d): reloading model %s from %s", (unsigned long long)s->id,
		 (int)s->cred.pid, esc(j->name), esc(j->path));
	srv_reply_ok(r, seq);
	return 0;
}

/* Adds lm as the newest generation after entry old; its index, or -1. */
static int publish(struct server *srv, uint32_t old, struct loaded_model *lm)
{
	struct srv_model *v = realloc(srv->models, (srv->nmodels + 1) * sizeof(*v));
	size_t k = srv->nmodels;

	if (!v)
		return -1;
	srv->models = v;
	v[k] = (struct srv_model){ .lm = lm, .generation = v[old].generation + 1 };
	v[old].retired = true;
	srv->nmodels++;
	return (int)k;
}

int reload_finish(struct server *srv)
{
	struct reload_job *j = srv->reload;
	struct srv_model *old;
	int k;

	if (!j)
		return -1;
	pthread_join(j->th, NULL);
	srv->reload = NULL;
	if (j->work == publish_work)
		publish_done(srv, j->arg, j->rc);
	old = &srv->models[j->model];
	if (j->rc < 0 || (k = publish(srv, j->model, j->lm)) < 0) {
		srv->count.outcomes[j->work == publish_work ? SRV_PUBLISH_FAILED : SRV_RELOAD_FAILED]++;
		snprintf(old->reload, sizeof(old->reload), "generation %llu failed: %.120s",
			 (unsigned long long)old->generation + 1, j->rc < 0 ? j->e.msg : "out of memory");
		log_warn("model %s: the reload failed: %s", esc(j->name), j->rc < 0 ? j->e.msg : "out of memory");
		if (j->rc == 0)
			loaded_model_free(j->lm);
		free(j);
		return -1;
	}
	old = &srv->models[j->model]; /* publish moved the array */
	srv->count.outcomes[j->work == publish_work ? SRV_PUBLISH_OK : SRV_RELOAD_OK]++;
	snprintf(srv->models[k].reload, sizeof(srv->models[k].reload), "%s in %.2f s",
		 j->work == publish_work ? "published" : "loaded", mono_now() - j->t0);
	snprintf(old->reload, sizeof(old->reload), "replaced by generation %llu",
		 (unsigned long long)srv->models[k].generation);
	log_info("model %s: generation %llu serves new attaches (made in %.2f s); %u clients keep generation %llu",
		 esc(j->name), (unsigned long long)srv->models[k].generation, mono_now() - j->t0,
		 old->attached, (unsigned long long)old->generation);
	free(j);
	handover_store(srv, NULL); /* systemd's store: the new generation */
	k = (int)(old - srv->models);
	srv_retired_check(srv, old);
	return k;
}

void srv_retired_check(struct server *srv, struct srv_model *sm)
{
	if (!sm->retired || sm->attached || !sm->lm)
		return;
	log_info("model %s: generation %llu has no client left; its memory goes with the last mapping",
		 esc(sm->lm->model->name), (unsigned long long)sm->generation);
	loaded_model_free(sm->lm);
	sm->lm = NULL;
}

void reload_cancel(struct server *srv)
{
	if (!srv->reload)
		return;
	atomic_store(&cancel, true);
	pthread_join(srv->reload->th, NULL);
	if (srv->reload->work == publish_work)
		publish_done(srv, srv->reload->arg, -ECANCELED);
	if (srv->reload->rc == 0)
		loaded_model_free(srv->reload->lm);
	free(srv->reload);
	srv->reload = NULL;
}

bool reload_progress(const struct server *srv, struct reload_progress *out)
{
	const struct reload_job *j = srv->reload;

	if (!j)
		return false;
	out->name = j->name;
	out->publish = j->work == publish_work;
	out->total = __atomic_load_n(&j->total, __ATOMIC_RELAXED);
	out->placed = __atomic_load_n(&j->placed, __ATOMIC_RELAXED);
	out->seconds = mono_now() - j->t0;
	return true;
}
