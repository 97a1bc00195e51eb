// SPDX-License-Identifier: MIT
/* stream_copyd.c - a stream's resident tensors copied by the copy service
 * (docs/design/copy-service.md, "The copy service"): the worker allocates device
 * memory it can export, hands it to wsrv-copyd with the runs to copy, and
 * waits for the answer. The service copies from the model's pages, which
 * it page-locked once for every worker: this process locks nothing for
 * the upload. Whatever goes wrong (no service, refused, gone mid-copy),
 * the caller copies by itself, as before the service; one line in the
 * log says why, once per process. Layers streamed during compute keep
 * the worker's own copies (docs/design/copy-service.md says what decides it). */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "copy_client.h"
#include "stream_internal.h"

/* The most one run covers (as stream_upload.c's): a model still loading
 * has its first bytes copied before its last arrive. */
#define RUN_MAX ((uint64_t)64 << 20)

/* The runs of one fill, sent in batches of WSRV_COPY_RUNS_MAX. */
struct batch {
	struct wsrv_stream *s;
	struct copy_conn *c;
	uint32_t buffer;
	struct copy_run runs[WSRV_COPY_RUNS_MAX];
	size_t n;
	uint64_t batch_bytes;       /* the runs' bytes not sent yet */
	uint64_t bytes, requests, nruns;
	double asked;               /* seconds waiting for the service's answers */
};

/* A batch goes once it holds this many bytes (or WSRV_COPY_RUNS_MAX
 * runs): the service's copies start while the worker still walks its
 * tensors. */
#define BATCH_BYTES ((uint64_t)512 << 20)

/* Says, once per process, why the service did not copy. */
static void fell_back(struct wsrv_stream *s, const char *why)
{
	static atomic_bool said;

	s->st.service_fallbacks++;
	if (!atomic_exchange(&said, true))
		fprintf(stderr, "libwsrv: the copy service did not copy (%s): this process page-locks and copies"
			" the weights itself (WSRV_COPYD=off says nothing)\n", why);
	cl_debug("stream %u: the copy service did not copy: %s", s->id, why);
}

/* Waits for the oldest request's answer. */
static int wait_one(struct batch *b)
{
	uint64_t got = 0;
	double t0 = mono_now();
	int r = copy_runs_wait(b->c, &got);

	b->asked += mono_now() - t0;
	b->bytes += got;
	return r;
}

/* Sends the batch's runs (when COPY_IN_FLIGHT are unanswered, the oldest
 * answer first): the service copies them while the next batch is made. */
static int send_batch(struct batch *b)
{
	int r;

	if (!b->n)
		return 0;
	if (copy_runs_pending(b->c) == COPY_IN_FLIGHT && (r = wait_one(b)) < 0)
		return r;
	r = copy_runs_send(b->c, b->buffer, wsrv_model_name(b->s->m), cl_model_generation(b->s->m), cl_model_identity(b->s->m),
			   b->runs, b->n);
	b->requests++;
	b->nruns += b->n;
	b->n = 0;
	b->batch_bytes = 0;
	return r;
}

/* Every request answered. */
static int wait_all(struct batch *b)
{
	int r = 0;

	while (r == 0 && copy_runs_pending(b->c))
		r = wait_one(b);
	return r;
}

/* Tensor i's view into the batch: added to the last run when it follows
 * it in the same segment as it does in resident memory, else a run of
 * its own. 0 or <0 (a batch sent and refused). */
static int add_tensor(struct batch *b, uint32_t i)
{
	struct wsrv_stream *s = b->s;
	struct tp_view tmp;
	const struct tp_view *v = tp_view_at(s->m, s->views, i, &tmp);
	struct wsrv_tensor t;
	struct copy_run *l = b->n ? &b->runs[b->n - 1] : NULL;
	uint64_t src, dst = s->res_off[i];
	int r;

	cl_tensor_nowait(s->m, i, &t);
	src = t.offset + v->src_off;
	if (l && v->height == 1 && l->height == 1 && l->segment == t.segment && dst >= l->dst_off + l->width &&
	    src - l->src_off == dst - l->dst_off && dst + v->width - l->dst_off <= RUN_MAX) {
		b->batch_bytes += dst + v->width - l->dst_off - l->width;
		l->width = dst + v->width - l->dst_off;
		l->pitch = l->width;
		return 0;
	}
	if ((b->n == WSRV_COPY_RUNS_MAX || b->batch_bytes >= BATCH_BYTES) && (r = send_batch(b)) < 0)
		return r;
	b->runs[b->n++] = (struct copy_run){ t.segment, src, v->width, v->height,
					     v->height > 1 ? v->pitch : v->width, dst };
	b->batch_bytes += v->width * v->height;
	return 0;
}

/* Every resident tensor's runs, each waiting for its bytes (a model
 * still loading), with nothing page-locked here. */
static int copy_all(struct batch *b)
{
	struct wsrv_stream *s = b->s;
	size_t n = cl_ntensors(s->m);
	int r = 0;

	s->no_lock = true;
	for (size_t i = 0; i < n && r == 0; i++) {
		struct tp_view tmp;
		if (s->where[i] != WHERE_RESIDENT || !tp_view_at(s->m, s->views, i, &tmp)->bytes)
			continue;
		if ((r = stream_need_tensor(s, (uint32_t)i, true)) >= 0)
			r = add_tensor(b, (uint32_t)i);
	}
	s->no_lock = false;
	if (r == 0)
		r = send_batch(b);
	return r < 0 ? r : wait_all(b);
}

/* Why the service cannot serve this stream at all, or NULL. */
static const char *unusable(const struct wsrv_stream *s, const struct dev_share_info *info)
{
	if (info->kind != WSRV__REGION_KIND__REGION_CUDA)
		return "the device is not a GPU";
	if (cl_model_tiered(s->m))
		return "the model has a disk tier, whose pieces come and go";
	return NULL;
}

/* Whether the service may serve this stream, and its device's id in
 * info: false when it cannot (a host device, a disk tier: nothing said). */
static bool wanted(struct wsrv_stream *s, struct dev_share_info *info)
{
	const struct device_ops *o = s->d->ops;

	return copy_service_path() && o->share_info && o->share_create && o->share_info(s->d, info) == 0 &&
	       !unusable(s, info);
}

/* A connection to the service: 0, or <0 with the reason said. */
static int reach(struct wsrv_stream *s, struct copy_conn **c)
{
	int r = copy_connect(copy_service_path(), c);

	if (r < 0)
		fell_back(s, wsrv_last_error());
	return r;
}

/* mem (mem->fd its export) filled by the service over c: 0, or <0 with
 * the reason said. */
static int fill_by(struct wsrv_stream *s, struct copy_conn *c, const struct dev_share_info *info,
		   struct dev_share *mem)
{
	struct batch *b = calloc(1, sizeof(*b));
	double t0 = mono_now(), t1 = 0;
	int r;

	if (!b)
		return cl_err(-ENOMEM, "out of memory");
	b->s = s;
	b->c = c;
	if ((r = copy_map(c, info->id, mem->fd, mem->len, &b->buffer)) == 0 && ((t1 = mono_now()), (r = copy_all(b)) == 0))
		r = copy_unmap(c, b->buffer);
	if (r == 0) {
		s->st.service_bytes += b->bytes;
		cl_debug("stream %u: the copy service copied %llu bytes in %llu runs, %llu requests: mapped in %.4f s,"
			 " %.4f s waiting for its answers, %.4f s in all", s->id, (unsigned long long)b->bytes,
			 (unsigned long long)b->nruns, (unsigned long long)b->requests, t1 - t0, b->asked,
			 mono_now() - t0);
	} else {
		fell_back(s, wsrv_last_error());
	}
	free(b);
	return r;
}

int stream_fill(struct wsrv_stream *s, struct dev_share *mem)
{
	struct dev_share_info info;
	struct copy_conn *c = NULL;
	int r = -EOPNOTSUPP;

	if (mem->fd >= 0 && wanted(s, &info) && (r = reach(s, &c)) == 0)
		r = fill_by(s, c, &info, mem);
	copy_close(c);
	return r == 0 ? 0 : stream_upload_into(s, mem->ptr);
}

int stream_copyd_private(struct wsrv_stream *s)
{
	const struct device_ops *o = s->d->ops;
	struct dev_share_info info;
	struct copy_conn *c = NULL;
	size_t g;
	int r;

	/* Asked before anything is allocated: without a service, the
	 * stream's memory is what it was. */
	if (!wanted(s, &info))
		return -EOPNOTSUPP;
	if ((r = reach(s, &c)) < 0)
		return r;
	g = info.granule ? info.granule : 4096;
	if ((r = o->share_create(s->d, (s->resident_bytes + g - 1) / g * g, &s->svc_mem)) < 0)
		fell_back(s, wsrv_last_error());
	else if ((r = fill_by(s, c, &info, &s->svc_mem)) < 0)
		o->share_free(s->d, &s->svc_mem);
	copy_close(c);
	if (r < 0)
		return r;
	close(s->svc_mem.fd);       /* nobody else maps it */
	s->svc_mem.fd = -1;
	s->resident = s->svc_mem.ptr;
	return 0;
}
