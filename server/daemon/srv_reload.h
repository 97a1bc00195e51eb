// SPDX-License-Identifier: MIT
/* srv_reload.h - new generations of a model while workers run (srv_reload.c). */
#ifndef WSRV_SRV_RELOAD_H
#define WSRV_SRV_RELOAD_H

#include "srv.h"

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
/* A publish's new generation (srv_publish.c), made on the reload thread:
 * publish_finish_work runs there, publish_done after. 0, or -EBUSY while a
 * reload runs. */
int reload_publish(struct server *srv, uint32_t mi, void *pub);

/* Stops a reload under way (the server is stopping) and frees it. */
void reload_cancel(struct server *srv);
/* Frees a replaced generation nobody is attached to any more. */
void srv_retired_check(struct server *srv, struct srv_model *sm);

/* The new generation being made now, if any: its model's name (the job's,
 * valid until the loop's next reload_finish), whether a publish makes it,
 * the loader's bytes placed of its total (0 until the files are open; a
 * publish places nothing), and the seconds since it began. */
struct reload_progress {
	const char *name;
	bool publish;
	uint64_t total, placed;
	double seconds;
};
bool reload_progress(const struct server *srv, struct reload_progress *out);

#endif
