// SPDX-License-Identifier: MIT
/* fake_stream.c - streams, events and host functions of the test driver. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fake.h"

static void merge(uint64_t *into, const uint64_t *from)
{
	for (int i = 0; i < FK_STREAMS; i++)
		if (from[i] > into[i])
			into[i] = from[i];
}

/* The host waited for something that is ordered after vc. */
void fk_host_learns(const uint64_t *vc)
{
	merge(fk.host_vc, vc);
}

/* A copy that started at t0 ends no sooner than its bytes at the rate:
 * the link between devices' for a peer copy, the host's otherwise. */
static void pace(double t0, size_t bytes, bool d2d, bool peer)
{
	if (d2d) {
		if (peer && fk.p2p_gbps > 0)
			fk_sleep(t0 + (double)bytes / ((double)fk.p2p_gbps * 1e9) - fk_now());
		return;
	}
	if (fk.gbps > 0 || fk.mbps > 0) {
		double s = (double)bytes / (fk.gbps > 0 ? (double)fk.gbps * 1e9 : (double)fk.mbps * 1e6);
		fk_sleep(t0 + s - fk_now());
	}
}

static void run(struct fk_job *j)
{
	double t0 = fk_now();

	switch (j->op) {
	case OP_COPY:
		fk_copy_rows(j->dst, j->src, j->width, j->height, j->spitch, j->dpitch, j->base);
		pace(t0, j->width * j->height, j->d2d, j->peer);
		break;
	case OP_HOSTFN:
		j->fn(j->arg);
		break;
	default:
		break;
	}
}

static void *runner(void *arg)
{
	struct CUstream_st *s = arg;

	pthread_mutex_lock(&fk.lock);
	for (;;) {
		struct fk_job *j = s->head;
		if (!j) {
			if (s->stop)
				break;
			pthread_cond_wait(&fk.cond, &fk.lock);
			continue;
		}
		if (j->op == OP_WAIT && j->ev->done_gen < j->gen) {
			pthread_cond_wait(&fk.cond, &fk.lock);
			continue;
		}
		s->busy = true;
		if (j->op == OP_COPY || j->op == OP_HOSTFN) {
			pthread_mutex_unlock(&fk.lock);
			run(j);
			pthread_mutex_lock(&fk.lock);
		} else if (j->op == OP_RECORD) {
			j->ev->done_gen = j->gen;
			j->ev->t = fk_now();
		}
		s->head = j->next;
		if (!s->head)
			s->tail = NULL;
		s->busy = false;
		free(j);
		pthread_cond_broadcast(&fk.cond);
	}
	pthread_mutex_unlock(&fk.lock);
	return NULL;
}

/* Under fk.lock. */
void fk_enqueue(struct CUstream_st *s, struct fk_job *j)
{
	j->next = NULL;
	if (s->tail)
		s->tail->next = j;
	else
		s->head = j;
	s->tail = j;
	pthread_cond_broadcast(&fk.cond);
}

static struct CUstream_st *new_stream(void)
{
	struct CUstream_st *s;
	int idx = 1;

	while (idx < FK_STREAMS && fk.streams[idx])
		idx++;
	if (idx == FK_STREAMS || !(s = calloc(1, sizeof(*s))))
		return NULL;
	s->idx = idx;
	memcpy(s->vc, fk.host_vc, sizeof(s->vc));
	if (pthread_create(&s->thread, NULL, runner, s) != 0) {
		free(s);
		return NULL;
	}
	fk.streams[idx] = s;
	return s;
}

static struct CUstream_st *legacy;

/* Under fk.lock: the stream a handle names (NULL: the legacy stream),
 * having learnt what the host knows: work queued after a host wait is
 * ordered after what the host waited for. */
struct CUstream_st *fk_stream(CUstream h)
{
	struct CUstream_st *s = h;

	if (!s && !legacy)
		legacy = new_stream();
	if (!s)
		s = legacy;
	if (s)
		merge(s->vc, fk.host_vc);
	return s;
}

static bool idle(const struct CUstream_st *s)
{
	return !s->head && !s->busy;
}

/* Under fk.lock: every stream drained (cuMemFree's implicit sync). */
void fk_sync_all(void)
{
	for (int i = 1; i < FK_STREAMS; i++) {
		struct CUstream_st *s = fk.streams[i];
		if (!s)
			continue;
		while (!idle(s))
			pthread_cond_wait(&fk.cond, &fk.lock);
		fk_host_learns(s->vc);
	}
}

CUresult cuStreamCreate(CUstream *out, unsigned flags)
{
	CUresult e;

	if ((e = fk_need_ctx()) != CUDA_SUCCESS)
		return e;
	pthread_mutex_lock(&fk.lock);
	*out = new_stream();
	pthread_mutex_unlock(&fk.lock);
	return *out ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

CUresult cuStreamSynchronize(CUstream h)
{
	struct CUstream_st *s;

	pthread_mutex_lock(&fk.lock);
	s = fk_stream(h);
	while (s && !idle(s))
		pthread_cond_wait(&fk.cond, &fk.lock);
	if (s)
		fk_host_learns(s->vc);
	pthread_mutex_unlock(&fk.lock);
	return s ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

CUresult cuStreamDestroy_v2(CUstream h)
{
	struct CUstream_st *s = h;

	if (!s)
		return CUDA_ERROR_INVALID_HANDLE;
	pthread_mutex_lock(&fk.lock);
	s->stop = true;
	pthread_cond_broadcast(&fk.cond);
	pthread_mutex_unlock(&fk.lock);
	pthread_join(s->thread, NULL); /* it drains its queue first */
	pthread_mutex_lock(&fk.lock);
	fk.streams[s->idx] = NULL;
	pthread_mutex_unlock(&fk.lock);
	free(s);
	return CUDA_SUCCESS;
}

static CUresult queue(CUstream h, struct fk_job *j)
{
	struct CUstream_st *s;

	pthread_mutex_lock(&fk.lock);
	if (!(s = fk_stream(h))) {
		pthread_mutex_unlock(&fk.lock);
		free(j);
		return CUDA_ERROR_INVALID_HANDLE;
	}
	s->vc[s->idx]++;
	if (j->op == OP_RECORD) {
		j->gen = ++j->ev->gen;
		memcpy(j->ev->vc, s->vc, sizeof(s->vc));
	} else if (j->op == OP_WAIT) {
		j->gen = j->ev->gen;
		merge(s->vc, j->ev->vc);
	}
	fk_enqueue(s, j);
	pthread_mutex_unlock(&fk.lock);
	return CUDA_SUCCESS;
}

static struct fk_job *job(enum fk_op op, struct fk_event *ev)
{
	struct fk_job *j = calloc(1, sizeof(*j));

	if (j) {
		j->op = op;
		j->ev = ev;
	}
	return j;
}

CUresult cuLaunchHostFunc(CUstream h, CUhostFn fn, void *arg)
{
	struct fk_job *j = job(OP_HOSTFN, NULL);

	if (!j)
		return CUDA_ERROR_OUT_OF_MEMORY;
	j->fn = fn;
	j->arg = arg;
	return queue(h, j);
}

CUresult cuEventCreate(CUevent *out, unsigned flags)
{
	struct fk_event *e;
	CUresult r;

	if ((r = fk_need_ctx()) != CUDA_SUCCESS)
		return r;
	if (!(e = calloc(1, sizeof(*e))))
		return CUDA_ERROR_OUT_OF_MEMORY;
	e->flags = flags;
	pthread_mutex_lock(&fk.lock);
	fk.live_events++;
	pthread_mutex_unlock(&fk.lock);
	*out = (CUevent)e;
	return CUDA_SUCCESS;
}

CUresult cuEventDestroy_v2(CUevent h)
{
	struct fk_event *e = (struct fk_event *)h;

	if (!e)
		return CUDA_ERROR_INVALID_HANDLE;
	pthread_mutex_lock(&fk.lock);
	/* A record or wait still queued would use freed memory: wait it out
	 * (the driver defers the destruction likewise). */
	fk_sync_all();
	fk.live_events--;
	pthread_mutex_unlock(&fk.lock);
	free(e);
	return CUDA_SUCCESS;
}

CUresult cuEventRecord(CUevent h, CUstream s)
{
	struct fk_job *j;

	if (!h)
		return CUDA_ERROR_INVALID_HANDLE;
	if (fk_fail_now(&fk.fail_record))
		return CUDA_ERROR_UNKNOWN;
	if (!(j = job(OP_RECORD, (struct fk_event *)h)))
		return CUDA_ERROR_OUT_OF_MEMORY;
	return queue(s, j);
}

CUresult cuStreamWaitEvent(CUstream s, CUevent h, unsigned flags)
{
	struct fk_job *j;

	if (!h)
		return CUDA_ERROR_INVALID_HANDLE;
	if (!(j = job(OP_WAIT, (struct fk_event *)h)))
		return CUDA_ERROR_OUT_OF_MEMORY;
	return queue(s, j);
}

CUresult cuEventQuery(CUevent h)
{
	struct fk_event *e = (struct fk_event *)h;
	bool done;

	if (!e)
		return CUDA_ERROR_INVALID_HANDLE;
	pthread_mutex_lock(&fk.lock);
	done = e->done_gen >= e->gen;
	if (done)
		fk_host_learns(e->vc);
	pthread_mutex_unlock(&fk.lock);
	return done ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

CUresult cuEventSynchronize(CUevent h)
{
	struct fk_event *e = (struct fk_event *)h;

	if (!e)
		return CUDA_ERROR_INVALID_HANDLE;
	pthread_mutex_lock(&fk.lock);
	while (e->done_gen < e->gen)
		pthread_cond_wait(&fk.cond, &fk.lock);
	fk_host_learns(e->vc);
	pthread_mutex_unlock(&fk.lock);
	return CUDA_SUCCESS;
}

static CUresult elapsed(float *ms, CUevent a, CUevent b)
{
	struct fk_event *s = (struct fk_event *)a, *e = (struct fk_event *)b;
	CUresult r = CUDA_SUCCESS;

	if (!s || !e || !ms)
		return CUDA_ERROR_INVALID_HANDLE;
	pthread_mutex_lock(&fk.lock);
	if ((s->flags | e->flags) & CU_EVENT_DISABLE_TIMING)
		r = CUDA_ERROR_INVALID_HANDLE;
	else if (!s->gen || !e->gen)
		r = CUDA_ERROR_INVALID_HANDLE; /* never recorded */
	else if (s->done_gen < s->gen || e->done_gen < e->gen)
		r = CUDA_ERROR_NOT_READY;
	else
		*ms = (float)((e->t - s->t) * 1e3);
	pthread_mutex_unlock(&fk.lock);
	return r;
}

CUresult cuEventElapsedTime(float *ms, CUevent a, CUevent b)
{
	return elapsed(ms, a, b);
}

CUresult cuEventElapsedTime_v2(float *ms, CUevent a, CUevent b)
{
	return elapsed(ms, a, b);
}
