// SPDX-License-Identifier: MIT
/* copyd_sched.c - the copy jobs, a slice at a time (copyd.h). No request
 * holds a device's link for longer than one slice (CD_SLICE_BYTES): each
 * turn goes to the user served longest ago, then to that user's
 * connection served longest ago, so another user's small copy waits at
 * most one slice per other active user, however many connections and
 * runs one user queues. Each device with work takes a slice in the same
 * step, and they run side by side. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "copyd.h"
#include "log.h"
#include "wire.h"

void cd_job_add(struct copyd *cd, struct cd_conn *c, struct cd_job *job)
{
	struct cd_job **p = &c->jobs;

	while (*p)
		p = &(*p)->next;
	*p = job;
	c->njobs++;
	cd->njobs++;
}

static void job_free(struct copyd *cd, struct cd_job *job)
{
	cd_model_use(cd, &job->model, NULL);
	free(job->run);
	free(job);
}

/* c's oldest job, done (answered by the caller) or failed, taken off. */
static void job_pop(struct copyd *cd, struct cd_conn *c)
{
	struct cd_job *job = c->jobs;

	c->jobs = job->next;
	c->njobs--;
	cd->njobs--;
	job_free(cd, job);
}

void cd_jobs_free(struct copyd *cd, struct cd_conn *c)
{
	while (c->jobs)
		job_pop(cd, c);
}

bool cd_job_uses(const struct cd_conn *c, const struct cd_buffer *b)
{
	for (const struct cd_job *j = c->jobs; j; j = j->next)
		if (j->buf == b)
			return true;
	return false;
}

/* Whether a connection of uid is open now. */
static bool connected(const struct copyd *cd, uid_t uid)
{
	for (const struct cd_conn *c = cd->conns; c; c = c->next)
		if (c->cred.uid == uid)
			return true;
	return false;
}

/* The user's entry, made on first sight with the current tick (a user
 * new, or back after its connections went, comes after those waiting
 * since, never before them). The table holds connected users only: the
 * others' entries go when it is full, so it stays within --max-clients.
 * NULL only when out of memory. */
static struct cd_user *user_of(struct copyd *cd, uid_t uid)
{
	size_t kept = 0;

	for (size_t i = 0; i < cd->nusers; i++)
		if (cd->users[i].uid == uid)
			return &cd->users[i];
	if (cd->nusers == cd->users_cap) {
		for (size_t i = 0; i < cd->nusers; i++)
			if (connected(cd, cd->users[i].uid))
				cd->users[kept++] = cd->users[i];
		cd->nusers = kept;
	}
	if (cd->nusers == cd->users_cap) {
		size_t cap = cd->users_cap ? cd->users_cap * 2 : 16;
		struct cd_user *u = realloc(cd->users, cap * sizeof(*u));
		if (!u)
			return NULL;
		cd->users = u;
		cd->users_cap = cap;
	}
	cd->users[cd->nusers] = (struct cd_user){ uid, cd->tick };
	return &cd->users[cd->nusers++];
}

/* The connection whose oldest job copies to device k and whose turn comes
 * first (its user's last turn, then its own, the oldest first), not one
 * of taken; NULL when none. */
static struct cd_conn *next_turn(struct copyd *cd, int k, struct cd_conn *const *taken, int ntaken)
{
	struct cd_conn *best = NULL;
	uint64_t best_user = 0;

	for (struct cd_conn *c = cd->conns; c; c = c->next) {
		struct cd_user *u;
		bool skip = !c->jobs || c->jobs->buf->device != k;
		for (int t = 0; !skip && t < ntaken; t++)
			skip = taken[t] == c;
		if (skip || !(u = user_of(cd, c->cred.uid)))
			continue;
		if (!best || u->turn < best_user || (u->turn == best_user && c->turn < best->turn)) {
			best = c;
			best_user = u->turn;
		}
	}
	return best;
}

/* Queues up to CD_SLICE_BYTES of job (rows of a run, or a part of one
 * row wider than a slice): 0 or <0; *last the fence of its last copy
 * queued (0: none), which is waited for even after a failure. */
static int queue_slice(struct copyd *cd, struct cd_job *job, uint64_t *queued, int64_t *last)
{
	struct wsrv_device *d = cd->dev[job->buf->device].d;
	uint8_t *dst = job->buf->mem.ptr;
	int64_t f;

	*queued = 0;
	*last = 0;
	while (job->at < job->nrun && *queued < CD_SLICE_BYTES) {
		const struct cd_run *x = &job->run[job->at];
		uint64_t room = CD_SLICE_BYTES - *queued, rows = 1, len = x->width - job->col;
		if (job->col == 0 && x->width <= room) {
			rows = room / x->width < x->height - job->row ? room / x->width : x->height - job->row;
			f = d->ops->copy2d(d, dst + x->dst_off + job->row * x->width, x->src + job->row * x->pitch,
					   x->width, rows, x->pitch, NULL);
			len = rows * x->width;
			job->row += rows;
		} else {
			len = len < room ? len : room;
			f = d->ops->copy(d, dst + x->dst_off + job->row * x->width + job->col,
					 x->src + job->row * x->pitch + job->col, len, NULL);
			job->col += len;
			if (job->col == x->width)
				job->col = 0, job->row++;
		}
		if (f < 0)
			return (int)f;
		*last = f > 0 ? f : *last;
		*queued += len;
		if (job->row == x->height)
			job->row = 0, job->at++;
	}
	return 0;
}

struct turn {
	struct cd_conn *c;
	int r;                           /* queue_slice's */
	int64_t fence;
	uint64_t bytes;
};

/* Answers and drops c's oldest job, done (r 0) or failed (r < 0, the
 * device's errno: said as a copy's failure). */
static void finish(struct copyd *cd, struct cd_conn *c, int r)
{
	struct cd_job *job = c->jobs;
	struct errinfo err;

	if (r < 0) {
		err_set(&err, r, "copying: %s", strerror(-r));
		cd_reply_error(cd, c, job->seq, r, &err);
	} else {
		cd->copies += job->nrun;
		cd->copied_bytes += job->bytes;
		cd_reply_done(c, job->seq, job->bytes, mono_now() - job->t0, job->waited);
	}
	job_pop(cd, c);
}

/* Every job queued before this step and not in it waited one slice for
 * each connection served in it. */
static void count_waits(struct copyd *cd, const struct turn *t, int n)
{
	for (struct cd_conn *c = cd->conns; c; c = c->next) {
		unsigned others = 0;
		for (int i = 0; i < n; i++)
			others += t[i].c != c;
		for (struct cd_job *j = c->jobs; j; j = j->next)
			j->waited += others;
	}
}

void cd_schedule(struct copyd *cd)
{
	struct cd_conn *taken[CD_MAX_DEVICES];
	struct turn t[CD_MAX_DEVICES];
	int n = 0;

	if (!cd->njobs)
		return;
	cd->tick++;
	for (int k = 0; k < cd->ndev; k++) {
		struct cd_conn *c = next_turn(cd, k, taken, n);
		struct cd_user *u;
		if (!c)
			continue;
		t[n] = (struct turn){ c, 0, 0, 0 };
		t[n].r = queue_slice(cd, c->jobs, &t[n].bytes, &t[n].fence);
		c->turn = cd->tick;
		if ((u = user_of(cd, c->cred.uid)))
			u->turn = cd->tick;
		taken[n++] = c;
	}
	cd->slices += (uint64_t)n;
	cd->side_by_side += n > 1;
	count_waits(cd, t, n);
	/* Every device's slice queued first, then each waited for: copies to
	 * two GPUs run side by side. Waited for even after a failure: nothing
	 * of it may land later. */
	for (int i = 0; i < n; i++) {
		struct cd_job *job = t[i].c->jobs;
		struct wsrv_device *d = cd->dev[job->buf->device].d;
		int w = t[i].fence > 0 ? d->ops->wait(d, t[i].fence) : 0, r = t[i].r < 0 ? t[i].r : w;
		job->bytes += t[i].bytes;
		if (r < 0 || job->at == job->nrun)
			finish(cd, t[i].c, r);
	}
}
