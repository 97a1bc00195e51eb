// SPDX-License-Identifier: MIT
/* srv_reload.c - a new generation of a model, made while the current one
 * serves: loaded from files (wsrvctl reload), or by a job another unit
 * gives its ops (a producer's publish, srv_publish.c). The job runs on a
 * thread of its own (the loop keeps serving) and signals an eventfd; the
 * loop then adds the generation (srv_models.c): the new
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
#include "peer_door.h"
#include "core_door.h"
#include "tier_door.h"
#include "units.h"
#include "wsrv.pb-c.h"
#include "utf8.h"

/* Room kept free beyond the new generation's bytes. */
#define RELOAD_MARGIN (256ull << 20)

struct reload_job {
	pthread_t th;
	const struct gen_job_ops *ops;
	void *arg;                  /* the ops' */
	char name[256], path[4096];
	struct load_opts opts;
	uint32_t model;             /* the generation it replaces */
	struct loaded_model *lm;    /* the new one, when rc is 0 */
	struct errinfo e;
	int rc, efd;
	bool finished;              /* atomic: rc and lm are set */
	double t0;
	uint64_t total, placed;     /* the loader's progress (atomic) */
};

static atomic_bool cancel;

static bool reload_cancelled(void)
{
	return atomic_load(&cancel);
}

/* A model with a disk tier is loaded as at a start, under the same
 * budget: laid out, then read once (every checksum taken), its tiered
 * segments dropped as they pass. */
static int load_work(void *arg, const char *name, const char *path, const struct load_opts *o,
		     struct loaded_model **out, struct errinfo *e)
{
	int r;

	(void)arg;
	if (!o->memory_budget)
		return model_load(name, path, o, out, e);
	if ((r = model_load_begin(name, path, o, out, e)) < 0)
		return r;
	if ((r = model_load_finish(*out, o, e)) < 0) {
		loaded_model_free(*out);
		*out = NULL;
	}
	return r;
}

static const struct gen_job_ops reload_ops = {
	.what = "reload", .made = "loaded", .ok = SRV_RELOAD_OK, .failed = SRV_RELOAD_FAILED,
	.work = load_work,
};

static void *run(void *arg)
{
	struct reload_job *j = arg;
	uint64_t one = 1;

	j->rc = j->ops->work(j->arg, j->name, j->path, &j->opts, &j->lm, &j->e);
	__atomic_store_n(&j->finished, true, __ATOMIC_RELEASE);
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

/* Peers are offered the generation new attaches get, and only that one:
 * the table replaces the one of the same name (a peer filling from files
 * would otherwise get the bytes of a generation this host no longer
 * serves). When the offer fails, the old one is withdrawn. */
static void offer_to_peers(struct server *srv, const struct srv_model *sm)
{
	struct errinfo e;

	if (!srv->peers)
		return;
	if (peer_serve_offer_loaded(srv->peers, sm->lm->model, sm->lm->arena, &e) < 0) {
		log_warn("model %s: peers are not offered generation %llu: %s", esc(sm->lm->model->name),
			 (unsigned long long)sm->generation, e.msg);
		peer_serve_withdraw(srv->peers, sm->lm->model->name);
	}
}

/* How many of a's tensors b lacks by name, and the first of them. */
static size_t lacking(const struct model *a, const struct model *b, const char **first)
{
	size_t n = 0;

	*first = NULL;
	for (size_t i = 0; i < a->ntensors; i++)
		if (!model_find(b, a->tensors[i].name) && n++ == 0)
			*first = a->tensors[i].name;
	return n;
}

/* Says in the log when the reload's files hold other tensors than the
 * generation served: workers taking the new generation will see them. */
static void say_other_tensors(const struct srv_model *sm, const struct model *next)
{
	const struct model *cur = sm->lm->model;
	const char *added, *gone;
	size_t na = lacking(next, cur, &added), ng = lacking(cur, next, &gone);

	if (!na && !ng)
		return;
	log_warn("model %s: the reload's files at %s hold %zu tensors where generation %llu holds %zu: %zu of "
		 "theirs it lacks%s%s%s, %zu of its own they lack%s%s%s; workers that take the new generation "
		 "see other tensors", esc(cur->name), esc(next->path), next->ntensors, (unsigned long long)sm->generation,
		 cur->ntensors, na, na ? " (" : "", na ? esc(added) : "", na ? "...)" : "", ng, ng ? " (" : "",
		 ng ? esc(gone) : "", ng ? "...)" : "");
}

/* Does memory allow a second copy of name at path next to the first
 * (with a disk tier, its budget)? */
static int check_room(struct server *srv, uint32_t mi, const char *name, const char *path, uint64_t budget,
		      uint64_t seq, struct reply *r)
{
	struct model *m = NULL;
	struct errinfo e;
	char need[32], have[32];
	uint64_t avail;

	if (model_open(name, path, &srv->load->model, &m, &e) < 0)
		return srv_reply_error(r, seq, EINVAL, "cannot reload %.*s from %.*s: %s", UTF8_CUT(name, 64), UTF8_CUT(path, 200), e.msg);
	say_other_tensors(&srv->models[mi], m);
	avail = mem_available();
	uint64_t bytes = budget && budget < m->data_bytes ? budget : m->data_bytes;
	fmt_bytes(bytes, need, sizeof(need));
	fmt_bytes(avail, have, sizeof(have));
	if (avail && bytes + RELOAD_MARGIN > avail) {
		srv_reply_error(r, seq, ENOMEM, "reloading %.*s needs %s for the new generation next to the current one, and MemAvailable is %s: detach workers of an old generation, or add memory",
				UTF8_CUT(name, 64), need, have);
		model_free(m);
		return -ENOMEM;
	}
	model_free(m);
	return 0;
}

int gen_job_start(struct server *srv, uint32_t mi, const struct gen_job_ops *ops, void *arg,
		  const char *path)
{
	struct reload_job *j;

	if (srv->reload || srv->reload_efd < 0 || !srv->load)
		return -EBUSY;
	if (!(j = calloc(1, sizeof(*j))))
		return -ENOMEM;
	snprintf(j->name, sizeof(j->name), "%s", srv->models[mi].lm->model->name);
	snprintf(j->path, sizeof(j->path), "%s", path);
	j->opts = *srv->load;
	j->opts.loader.progress = PROGRESS_LINES;
	j->opts.loader.stop = reload_cancelled;
	j->opts.loader.total_bytes = &j->total;
	j->opts.loader.placed_bytes = &j->placed;
	j->opts.memory_budget = srv->models[mi].budget;
	j->model = mi;
	j->efd = srv->reload_efd;
	j->ops = ops;
	j->arg = arg;
	j->t0 = ops->began ? ops->began(arg) : mono_now();
	if (pthread_create(&j->th, NULL, run, j) != 0) {
		free(j);
		return -EAGAIN;
	}
	srv->reload = j;
	return 0;
}

int reload_start(struct server *srv, struct session *s, const Wsrv__Reload *q, uint64_t seq,
		 struct reply *r)
{
	int mi = srv_find_current(srv, q->model), ret;

	if (s->cred.uid != 0 && s->cred.uid != geteuid())
		return srv_reply_error(r, seq, EPERM, "only root or the server's own user can reload a model");
	if (mi < 0)
		return srv_reply_error(r, seq, ENOENT, "no model named '%.*s'", UTF8_CUT(q->model ? q->model : "", 64));
	if (srv->reload || srv->reload_efd < 0 || !srv->load)
		return srv_reply_error(r, seq, EBUSY, "a reload is under way already");
	/* Its new generation would not be handed over: ask the successor. */
	if (srv->takeover)
		return srv_reply_error(r, seq, EAGAIN, "a take-over of this server is under way; reload once it is done");
	if (srv_model_loading(&srv->models[mi]))
		return srv_reply_error(r, seq, EBUSY, "model '%.*s' is still loading; reload it once it is loaded",
				       UTF8_CUT(q->model, 64));
	const char *path = q->path && *q->path ? q->path : srv->models[mi].lm->model->path;
	/* From here on a reload that does not start failed, as one that
	 * fails while it loads does (wsrv_reloads_total{result="failed"}). */
	if (strlen(path) >= sizeof(((struct reload_job *)0)->path)) {
		srv->count.outcomes[SRV_RELOAD_FAILED]++;
		return srv_reply_error(r, seq, ENAMETOOLONG, "a reload path is at most %zu bytes",
				       sizeof(((struct reload_job *)0)->path) - 1);
	}
	if ((ret = check_room(srv, (uint32_t)mi, q->model, path, srv->models[mi].budget, seq, r)) < 0) {
		srv->count.outcomes[SRV_RELOAD_FAILED]++;
		log_warn("model %s: the reload from %s failed: %s", esc(q->model), esc(path), r->msg);
		return ret;
	}
	if ((ret = gen_job_start(srv, (uint32_t)mi, &reload_ops, NULL, path)) < 0) {
		srv->count.outcomes[SRV_RELOAD_FAILED]++;
		srv_reply_error(r, seq, -ret, "cannot start the reload: %s", strerror(-ret));
		return ret;
	}
	snprintf(srv->models[mi].reload, sizeof(srv->models[mi].reload),
		 "loading generation %llu from %.*s", (unsigned long long)srv->models[mi].generation + 1,
		 UTF8_CUT(path, 100));
	char b[32] = "";
	if (srv->models[mi].budget)
		fmt_bytes(srv->models[mi].budget, b, sizeof(b));
	log_info("client %llu (pid %d): reloading model %s from %s%s%s", (unsigned long long)s->id,
		 (int)s->cred.pid, esc(q->model), esc(path), *b ? ", under its memory budget of " : "", b);
	srv_reply_ok(r, seq);
	return 0;
}

int reload_finish(struct server *srv)
{
	struct reload_job *j = srv->reload;
	struct srv_model *old;
	int k;

	/* The eventfd also wakes the loop for srv_early.c's loads. */
	if (!j || !__atomic_load_n(&j->finished, __ATOMIC_ACQUIRE))
		return -1;
	pthread_join(j->th, NULL);
	srv->reload = NULL;
	if (j->ops->done)
		j->ops->done(srv, j->arg, j->rc);
	old = &srv->models[j->model];
	if (j->rc < 0 || (k = srv_models_add(srv, j->model, j->lm)) < 0) {
		srv->count.outcomes[j->ops->failed]++;
		snprintf(old->reload, sizeof(old->reload), "generation %llu failed: %.*s",
			 (unsigned long long)old->generation + 1, UTF8_CUT(j->rc < 0 ? j->e.msg : "out of memory", 120));
		log_warn("model %s: the %s failed: %s", esc(j->name), j->ops->what,
			 j->rc < 0 ? j->e.msg : "out of memory");
		if (j->rc == 0)
			loaded_model_free(j->lm);
		free(j);
		return -1;
	}
	old = &srv->models[j->model]; /* srv_models_add moved the array */
	srv->count.outcomes[j->ops->ok]++;
	snprintf(srv->models[k].reload, sizeof(srv->models[k].reload), "%s in %.2f s", j->ops->made,
		 mono_now() - j->t0);
	snprintf(old->reload, sizeof(old->reload), "replaced by generation %llu",
		 (unsigned long long)srv->models[k].generation);
	log_info("model %s: generation %llu serves new attaches (made in %.2f s); %u clients keep generation %llu",
		 esc(j->name), (unsigned long long)srv->models[k].generation, mono_now() - j->t0,
		 old->attached, (unsigned long long)old->generation);
	/* A take-over (or systemd's store) keeps it; a plain restart loads
	 * what the command line names. */
	if (old->lm && srv->models[k].lm && strcmp(old->lm->model->path, srv->models[k].lm->model->path) != 0)
		log_warn("model %s: now served from %s; a take-over keeps it, but a restart without one loads %s "
			 "again: put the new path on the command line (the unit's drop-in) to keep it",
			 esc(j->name), esc(srv->models[k].lm->model->path), esc(old->lm->model->path));
	free(j);
	offer_to_peers(srv, &srv->models[k]);
	handover_store(srv, NULL); /* systemd's store: the new generation */
	k = (int)(old - srv->models);
	srv_retired_check(srv, old);
	return k;
}

void reload_cancel(struct server *srv)
{
	if (!srv->reload)
		return;
	atomic_store(&cancel, true);
	pthread_join(srv->reload->th, NULL);
	if (srv->reload->ops->done)
		srv->reload->ops->done(srv, srv->reload->arg, -ECANCELED);
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
	out->what = j->ops->what;
	out->total = __atomic_load_n(&j->total, __ATOMIC_RELAXED);
	out->placed = __atomic_load_n(&j->placed, __ATOMIC_RELAXED);
	out->seconds = mono_now() - j->t0;
	return true;
}
