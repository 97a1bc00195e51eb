// SPDX-License-Identifier: MIT
/* srv_reload.h - new generations of a model while workers run (srv_reload.c). */
#ifndef WSRV_SRV_RELOAD_H
#define WSRV_SRV_RELOAD_H

#include "core_door.h"

struct reload_job;

/* Reload: checks the caller (root or the server's user), that no reload
 * is under way and that memory allows a second copy, then loads on a
 * thread; replies Ok at once (or an Error). */
int reload_start(struct server *srv, struct session *s, const Wsrv__Reload *q, uint64_t seq,
		 struct reply *r);
/* The reload thread signalled srv->reload_efd: joins it and publishes the
 * new generation (or records why not). Returns the index of the generation
 * it replaced, whose clients are to be told; -1: nothing published. */
int reload_finish(struct server *srv);
/* How a job makes a new generation, and what follows it. reload_start's
 * loads from files; srv_publish.c's takes a producer's sealed segments. */
struct gen_job_ops {
	const char *what;           /* "reload", "publish": logs and metrics */
	const char *made;           /* "loaded", "published": the model list's note */
	enum srv_outcome ok, failed;
	/* On the job's thread: makes *out (the job's from then on), or sets
	 * e; arg is the job's, path what it says it comes from. */
	int (*work)(void *arg, const char *name, const char *path, const struct load_opts *o,
		    struct loaded_model **out, struct errinfo *e);
	/* On the loop once the thread is joined, with work's result or
	 * -ECANCELED; may be NULL. */
	void (*done)(struct server *srv, void *arg, int rc);
	/* When the generation began (mono_now), for "made in" and the
	 * model list's note: a publish's PublishBegin, so that the producer
	 * and the server say one figure; NULL: the job's start. */
	double (*began)(const void *arg);
};

/* Starts a job making the next generation of entry mi on a thread; what
 * (the note the model list shows meanwhile) and path are copied. 0,
 * -EBUSY while one runs, or -ENOMEM/-EAGAIN. */
int gen_job_start(struct server *srv, uint32_t mi, const struct gen_job_ops *ops, void *arg,
		  const char *path);

/* Stops a reload under way (the server is stopping) and frees it. */
void reload_cancel(struct server *srv);

/* The new generation being made now, if any: its model's name (the job's,
 * valid until the loop's next reload_finish), its job's what,
 * the loader's bytes placed of its total (0 until the files are open; a
 * publish places nothing), and the seconds since it began. */
struct reload_progress {
	const char *name, *what;
	uint64_t total, placed;
	double seconds;
};
bool reload_progress(const struct server *srv, struct reload_progress *out);

#endif
