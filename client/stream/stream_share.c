// SPDX-License-Identifier: MIT
/* stream_share.c - a stream's resident tensors in a device region shared
 * by the workers on one device (docs/design/streams.md, "Device regions"). The
 * server brokers: the first worker to ask is the region's writer, fills it
 * and commits its handle; the others wait for the commit and map it
 * read-only. Whatever goes wrong, the stream keeps a private copy and says
 * why: sharing saves memory, it never fails a worker. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#define XXH_STATIC_LINKING_ONLY  /* XXH3_state_t on the stack */
#include <xxhash.h>

#include "region_calls.h"
#include "stream_internal.h"

static void note(struct wsrv_stream *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void note(struct wsrv_stream *s, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(s->sh.note, sizeof(s->sh.note), fmt, ap);
	va_end(ap);
	cl_debug("stream %u: private resident copy: %s", s->id, s->sh.note);
}

/* The resident layout as this rank sees it: which tensors, which part of
 * each, and where in the region; with rank and world. Two streams with the
 * same fingerprint hold the same bytes at the same offsets. */
static uint64_t fingerprint(const struct wsrv_stream *s)
{
	size_t n = cl_ntensors(s->m);
	XXH3_state_t st;
	int64_t rw[2] = { s->rank, s->world };

	XXH3_64bits_reset(&st);
	XXH3_64bits_update(&st, rw, sizeof(rw));
	for (size_t i = 0; i < n; i++) {
		struct tp_view tmp;
		const struct tp_view *v = tp_view_at(s->m, s->views, i, &tmp);
		uint64_t rec[6] = { i, v->src_off, v->width, v->height, v->pitch, s->res_off[i] };
		if (s->where[i] != WHERE_RESIDENT || !v->bytes)
			continue;
		XXH3_64bits_update(&st, rec, sizeof(rec));
	}
	return XXH3_64bits_digest(&st);
}

static size_t region_len(const struct wsrv_stream *s)
{
	size_t g = s->sh.info.granule ? s->sh.info.granule : 4096;

	return (s->resident_bytes + g - 1) / g * g;
}

static void nap(unsigned ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

	nanosleep(&ts, NULL);
}

/* A reader's handle: mapped read-only, then closed. */
static void take_reader(struct wsrv_stream *s, const struct region_answer *a)
{
	int r = s->d->ops->share_import(s->d, a->fd, region_len(s), &s->sh.mem);

	close(a->fd);
	s->sh.region_id = a->id;
	s->sh.writer_pid = a->writer_pid;
	if (r < 0) {
		note(s, "the shared region could not be mapped: %s", wsrv_last_error());
		stream_share_close(s);
		return;
	}
	s->sh.role = WSRV_SHARE_READER;
	s->resident = s->sh.mem.ptr;
}

/* How long a reader waits for the writer's fill: the stream's
 * share_timeout_ms, else what the fill can take (SHARE_BASE_S). */
static double wait_limit_s(const struct wsrv_stream *s)
{
	if (s->sh.timeout_ms)
		return s->sh.timeout_ms / 1e3;
	return SHARE_BASE_S + (double)region_len(s) / SHARE_FLOOR_RATE;
}

/* Asks until it is the writer, a reader, or out of time; says once on
 * stderr, past SHARE_NOTE_S, whom it waits for. */
static void negotiate(struct wsrv_stream *s, uint64_t fp)
{
	double t0 = mono_now(), limit = wait_limit_s(s);
	unsigned pause = 1;
	bool said = false;
	struct region_answer a;

	for (;;) {
		if (region_call_open(s->m, s->sh.info.id, s->sh.info.kind, fp, region_len(s), false, &a) < 0) {
			note(s, "the server does not share this region: %s", wsrv_last_error());
			break;
		}
		if (a.role == WSRV__REGION_ROLE__REGION_READER) {
			take_reader(s, &a);
			break;
		}
		if (a.role == WSRV__REGION_ROLE__REGION_WRITER) {
			s->sh.region_id = a.id;
			s->sh.writer_pid = (uint32_t)getpid();
			s->sh.role = WSRV_SHARE_WRITER;
			break;
		}
		if (mono_now() - t0 > limit) {
			note(s, "gave up after %.1f s waiting for process %u to fill the shared region",
			     mono_now() - t0, a.writer_pid);
			break;
		}
		if (!said && mono_now() - t0 > SHARE_NOTE_S) {
			fprintf(stderr, "libwsrv: stream %u waits for process %u to fill the shared device region "
				"(%.1f MB), %.0f s at most, then copies by itself\n",
				s->id, a.writer_pid, region_len(s) / 1e6, limit);
			said = true;
		}
		nap(pause);
		pause = pause < 32 ? pause * 2 : 50;
	}
	s->sh.wait = mono_now() - t0;
}

void stream_share_begin(struct wsrv_stream *s)
{
	const struct device_ops *o = s->d ? s->d->ops : NULL;

	if (!o || !s->resident_bytes || !s->sh.wanted)
		return;
	if (!o->share_info || !o->share_create) {
		note(s, "the %s backend cannot share device memory", o->name);
		return;
	}
	if (o->share_info(s->d, &s->sh.info) < 0) {
		note(s, "%s", wsrv_last_error());
		return;
	}
	negotiate(s, fingerprint(s));
}

int stream_share_fill(struct wsrv_stream *s)
{
	const struct device_ops *o = s->d->ops;
	int r;

	if ((r = o->share_create(s->d, region_len(s), &s->sh.mem)) < 0) {
		note(s, "the shared region could not be allocated: %s", wsrv_last_error());
	} else if ((r = stream_fill(s, &s->sh.mem)) < 0) {
		note(s, "the shared region could not be filled: %s", wsrv_last_error());
	} else if ((r = o->share_seal(s->d, &s->sh.mem)) < 0) {
		note(s, "the shared region could not be sealed: %s", wsrv_last_error());
	} else if ((r = region_call_commit(s->m, s->sh.region_id, s->sh.mem.fd)) < 0) {
		note(s, "the server refused the shared region: %s", wsrv_last_error());
	} else {
		close(s->sh.mem.fd);    /* the server has its own */
		s->sh.mem.fd = -1;
		s->resident = s->sh.mem.ptr;
		return 0;
	}
	/* Giving up lets the next worker that asks fill it. */
	stream_share_close(s);
	return r;
}

void stream_share_close(struct wsrv_stream *s)
{
	void *p = s->sh.mem.ptr;

	if (p || s->sh.mem.fd >= 0)
		s->d->ops->share_free(s->d, &s->sh.mem);
	if (p && s->resident == p)
		s->resident = NULL;
	s->sh.mem = (struct dev_share){ .fd = -1 };
	if (s->sh.region_id && cl_connected(cl_model_client(s->m)))
		region_call_close(s->m, s->sh.region_id); /* a server that is gone does not mind */
	s->sh.region_id = 0;
	s->sh.role = WSRV_SHARE_PRIVATE;
}

WSRV_EXPORT int wsrv_stream_sharing(const struct wsrv_stream *s, struct wsrv_sharing *out)
{
	CL_NEED(s);
	CL_NEED(out);
	CL_RESULT(out);
	out->role = s->sh.role;
	out->region_id = s->sh.region_id;
	out->writer_pid = s->sh.role ? s->sh.writer_pid : 0;
	out->device = s->sh.info.id;
	out->note = s->sh.note;
	out->region_bytes = s->sh.role ? s->sh.mem.len : 0;
	out->wait_seconds = s->sh.wait;
	return 0;
}
