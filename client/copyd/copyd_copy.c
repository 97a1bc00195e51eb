// SPDX-License-Identifier: MIT
/* copyd_copy.c - a worker's buffers mapped in the copy service, and the
 * runs it asks for checked, every one, before any is queued: the source
 * inside a loaded segment of the generation named, the destination inside
 * the buffer. Copies come from the service's page-locked mapping, on the
 * buffer's device, and are waited for before the answer. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "clock.h"
#include "copy_client.h"
#include "copyd.h"
#include "dev_serve.h"
#include "escape.h"
#include "log.h"
#include "peer_allow.h"
#include "wire.h"

#define CD_MODEL_NAME_MAX 255

/* Buffers of who's account, and of its user, now: its process while it
 * lives (a reused pid makes no new one), else its user's orphans, one
 * account (a child that connected and left makes no new process). Asked
 * when needed, as wsrvd asks. */
static void count_buffers(const struct copyd *cd, const struct cd_conn *who, unsigned *proc, unsigned *user)
{
	uint64_t mine = peer_account(who->pidfd, who->process, who->cred.uid);

	*proc = *user = 0;
	for (const struct cd_conn *c = cd->conns; c; c = c->next) {
		if (c->cred.uid != who->cred.uid)
			continue;
		*user += c->nbufs;
		*proc += peer_account(c->pidfd, c->process, c->cred.uid) == mine ? c->nbufs : 0;
	}
}

static int device_named(const struct copyd *cd, const char *id)
{
	for (int k = 0; k < cd->ndev; k++)
		if (id && strcmp(cd->dev[k].info.id, id) == 0)
			return k;
	return -1;
}

/* The request's shape and the limits: 0, or <0 with a sentence. */
static int map_allowed(const struct copyd *cd, const struct cd_conn *c, const Wsrv__CopyMap *m, int fd, int k,
		       struct errinfo *err)
{
	unsigned proc, user;

	if (m->protocol != WSRV_COPY_PROTOCOL)
		return err_set(err, -EPROTO, "copy protocol %u: this service speaks %u", m->protocol, WSRV_COPY_PROTOCOL);
	if (fd < 0)
		return err_set(err, -EBADF, "a CopyMap comes with its buffer's fd");
	if (k < 0)
		return err_set(err, -ENODEV, "device %s is not one this service serves", esc(m->device ? m->device : "(none)"));
	if (!m->len || m->len % cd->dev[k].info.granule)
		return err_set(err, -EINVAL, "a buffer of %llu bytes: a multiple of %zu (the device's granularity)",
			      (unsigned long long)m->len, cd->dev[k].info.granule);
	count_buffers(cd, c, &proc, &user);
	if (proc >= cd->cfg.max_buffers_per_process)
		return err_set(err, -EMFILE, "process %d holds %u buffers here (--max-buffers-per-process)", (int)c->cred.pid,
			      proc);
	if (user >= cd->cfg.max_buffers_per_uid)
		return err_set(err, -EDQUOT, "user %u holds %u buffers here (--max-buffers-per-uid)", (unsigned)c->cred.uid,
			      user);
	return 0;
}

int cd_map(struct copyd *cd, struct cd_conn *c, const Wsrv__CopyMap *m, int fd, uint32_t *id, struct errinfo *err)
{
	int k = device_named(cd, m->device);
	struct cd_buffer *b;
	double t0;
	int r;

	if ((r = map_allowed(cd, c, m, fd, k, err)) < 0)
		return r;
	if (!(b = calloc(1, sizeof(*b))))
		return err_set(err, -ENOMEM, "out of memory");
	t0 = mono_now();
	if ((r = dev_serve_import(cd->dev[k].d, fd, m->len, &b->mem)) < 0) {
		free(b);
		return err_set(err, r, "%s", wsrv_last_error()); /* the device room says why */
	}
	cd->import_seconds += mono_now() - t0;
	cd->imports++;
	b->id = ++cd->next_buffer ? cd->next_buffer : ++cd->next_buffer;
	b->device = k;
	b->next = c->bufs;
	c->bufs = b;
	c->nbufs++;
	*id = b->id;
	return 0;
}

static struct cd_buffer **buffer_slot(struct cd_conn *c, uint32_t id)
{
	for (struct cd_buffer **p = &c->bufs; *p; p = &(*p)->next)
		if ((*p)->id == id)
			return p;
	return NULL;
}

static void buffer_free(struct copyd *cd, struct cd_conn *c, struct cd_buffer **p)
{
	struct cd_buffer *b = *p;

	*p = b->next;
	dev_serve_free(cd->dev[b->device].d, &b->mem);
	c->nbufs--;
	free(b);
}

int cd_unmap(struct copyd *cd, struct cd_conn *c, uint32_t id, struct errinfo *err)
{
	struct cd_buffer **p = buffer_slot(c, id);

	if (!p)
		return err_set(err, -ENOENT, "buffer %u is not mapped on this connection", id);
	if (cd_job_uses(c, *p))
		return err_set(err, -EBUSY, "buffer %u has copies queued: wait for their answers", id);
	buffer_free(cd, c, p);
	return 0;
}

void cd_buffers_free(struct copyd *cd, struct cd_conn *c)
{
	while (c->bufs)
		buffer_free(cd, c, &c->bufs);
}

/* end = off + len, unless it passes limit (or overflows): false. */
static bool fits(uint64_t off, uint64_t len, uint64_t limit)
{
	return len <= limit && off <= limit - len;
}

/* Run i checked against the generation (its segment loaded, locked) and
 * the buffer; *src its first byte. 0 or <0 with a sentence. */
static int check_run(struct copyd *cd, struct cd_model *e, const struct cd_buffer *b, size_t i,
		     const Wsrv__CopyRun *x, const uint8_t **src, struct errinfo *err)
{
	const uint8_t *base;
	size_t seglen;
	uint64_t span;
	int r;

	if (!x->width || !x->height || (x->height > 1 && x->pitch < x->width) ||
	    x->height > UINT64_MAX / (x->pitch ? x->pitch : 1) || x->width > UINT64_MAX / x->height)
		return err_set(err, -EINVAL, "run %zu: %llu rows of %llu bytes, %llu apart: not a copy", i,
			      (unsigned long long)x->height, (unsigned long long)x->width, (unsigned long long)x->pitch);
	if ((r = cd_model_segment(cd, e, x->segment, &base, &seglen, err)) < 0) {
		char run[32];
		snprintf(run, sizeof(run), "run %zu", i);
		err_prefix(err, run);
		return r;
	}
	span = (x->height - 1) * x->pitch + x->width;
	if (!fits(x->src_off, span, seglen))
		return err_set(err, -ERANGE, "run %zu: bytes %llu to %llu of segment %u, which has %zu", i,
			      (unsigned long long)x->src_off, (unsigned long long)(x->src_off + span), x->segment, seglen);
	if (!fits(x->dst_off, x->width * x->height, b->mem.len))
		return err_set(err, -ERANGE, "run %zu: %llu bytes at %llu of a buffer of %zu", i,
			      (unsigned long long)(x->width * x->height), (unsigned long long)x->dst_off, b->mem.len);
	*src = base + x->src_off;
	return 0;
}

int cd_copy(struct copyd *cd, struct cd_conn *c, const Wsrv__CopyRuns *rq, uint64_t seq, struct errinfo *err)
{
	struct cd_buffer **p = buffer_slot(c, rq->buffer);
	struct cd_model *e;
	struct cd_job *job;
	int r;

	if (!p)
		return err_set(err, -ENOENT, "buffer %u is not mapped on this connection", rq->buffer);
	if (!rq->model || !*rq->model || strlen(rq->model) > CD_MODEL_NAME_MAX)
		return err_set(err, -EINVAL, "a model name of 1 to %d bytes", CD_MODEL_NAME_MAX);
	if (rq->n_runs > WSRV_COPY_RUNS_MAX)
		return err_set(err, -E2BIG, "%zu runs in one request: %u at most", rq->n_runs, WSRV_COPY_RUNS_MAX);
	if (c->njobs >= CD_JOBS_PER_CONN)
		return err_set(err, -EBUSY, "%u copies are queued on this connection already: wait for one", c->njobs);
	if ((r = cd_model_get(cd, rq->model, rq->generation, rq->identity, &e, err)) < 0)
		return r;
	cd_model_use(cd, &c->model, e);
	if (!(job = calloc(1, sizeof(*job))) || !(job->run = calloc(rq->n_runs + 1, sizeof(*job->run)))) {
		free(job);
		return err_set(err, -ENOMEM, "out of memory");
	}
	for (size_t i = 0; i < rq->n_runs && r == 0; i++) {
		const Wsrv__CopyRun *x = rq->runs[i];
		struct cd_run *run = &job->run[i];
		r = check_run(cd, e, *p, i, x, &run->src, err);
		run->width = x->width, run->height = x->height, run->dst_off = x->dst_off;
		run->pitch = x->height > 1 ? x->pitch : x->width;
	}
	if (r < 0) {
		free(job->run);
		free(job);
		return r;
	}
	log_debug("process %d: copying %zu runs of %s generation %llu (queued)", (int)c->cred.pid, rq->n_runs, e->name,
		  (unsigned long long)e->generation);
	job->seq = seq;
	job->buf = *p;
	job->nrun = rq->n_runs;
	job->t0 = mono_now();
	cd_model_use(cd, &job->model, e);
	cd_job_add(cd, c, job);
	return 0;
}
