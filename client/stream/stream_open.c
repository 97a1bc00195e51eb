// SPDX-License-Identifier: MIT
/* stream_open.c - opening a stream (placement, slots, the resident upload)
 * and closing it. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "stream_internal.h"

static int alloc_layers(struct wsrv_stream *s)
{
	s->nlayers = (uint32_t)cl_nlayers(s->m);
	s->layers = calloc(s->nlayers + 1, sizeof(*s->layers));
	s->seq = calloc(s->nlayers + 1, sizeof(*s->seq));
	if (!s->layers || !s->seq)
		return cl_err(-ENOMEM, "out of memory");
	for (uint32_t i = 0; i < s->nlayers; i++) {
		struct wsrv_layer l;
		cl_layer_at_nowait(s->m, i, &l);
		s->layers[i].index = l.index;
		s->layers[i].slot = -1;
		s->layers[i].streamed = calloc(l.count + 1, sizeof(uint32_t));
		s->layers[i].slot_off = calloc(l.count + 1, sizeof(uint64_t));
		if (!s->layers[i].streamed || !s->layers[i].slot_off)
			return cl_err(-ENOMEM, "out of memory");
	}
	return 0;
}

/* Where each resident tensor goes in resident memory. */
static void layout_resident(struct wsrv_stream *s)
{
	size_t n = cl_ntensors(s->m);

	for (size_t i = 0; i < n; i++) {
		if (s->where[i] != WHERE_RESIDENT)
			continue;
		s->res_off[i] = s->resident_bytes;
		s->resident_bytes += (tp_view_bytes(s->m, s->views, i) + 255) & ~255ULL;
	}
	s->st.resident_bytes = s->resident_bytes;
}

/* Decides where the resident tensors live (a shared region or private),
 * then page-locks what the stream will copy. */
static int share_and_register(struct wsrv_stream *s)
{
	layout_resident(s);
	stream_share_begin(s);
	return stream_register(s);
}

/* Resident tensors go to the device once, now: into the shared region
 * (its writer fills it; a reader has it mapped already), or a private
 * copy. The stream waits for them. */
static int upload_resident(struct wsrv_stream *s)
{
	int r;

	if (!s->d || !s->resident_bytes || s->sh.role == WSRV_SHARE_READER)
		return 0;
	if (s->sh.role == WSRV_SHARE_WRITER && stream_share_fill(s) == 0)
		return 0;
	if (stream_copyd_private(s) == 0)
		return 0;
	if ((r = s->d->ops->alloc(s->d, s->resident_bytes, &s->resident)) < 0)
		return r;
	return stream_upload_into(s, s->resident);
}

static int alloc_slots(struct wsrv_stream *s, unsigned n)
{
	s->slot_size = stream_layout(s);
	for (uint32_t i = 0; i < s->nlayers; i++) {
		if (s->layers[i].nstreamed)
			s->seq[s->nseq++] = i;
		s->st.pass_copy_bytes += s->layers[i].slot_bytes;
	}
	s->nslots = n;
	s->st.slots = n;
	s->st.slot_bytes = s->slot_size;
	s->st.device_bytes = s->resident_bytes + (uint64_t)n * s->slot_size;
	if (s->peer.k && (unsigned)s->rank < s->peer.k) /* this rank's layer shard */
		s->st.device_bytes += s->peer.map[s->rank].len;
	s->st.shared_bytes = s->sh.role ? s->resident_bytes : 0;
	s->st.private_bytes = s->st.device_bytes - s->st.shared_bytes;
	s->slots = calloc(n, sizeof(*s->slots));
	if (!s->slots)
		return cl_err(-ENOMEM, "out of memory");
	for (unsigned k = 0; k < n; k++) {
		s->slots[k].layer = -1;
		if (s->d && s->slot_size) {
			int r = s->d->ops->alloc(s->d, s->slot_size, &s->slots[k].mem);
			if (r < 0)
				return r;
		}
	}
	return 0;
}

WSRV_EXPORT int wsrv_stream_open(struct wsrv_model *m, struct wsrv_device *d,
				 const struct wsrv_plan *p, const struct wsrv_stream_opts *o,
				 struct wsrv_stream **out)
{
	static uint32_t next_id;
	struct wsrv_stream_opts so;
	struct wsrv_stream *s;
	size_t n;
	unsigned slots;
	const char *trace;
	int r;

	CL_NEED(m);
	CL_NEED(out);
	if ((r = CL_OPTS(o, &so)) < 0)
		return r;
	if (so.share > WSRV_SHARE_ON)
		return cl_err(-EINVAL, "share %u: WSRV_SHARE_DEFAULT, _OFF or _ON", so.share);
	if (so.world < 0 || so.rank < 0 || (so.world > 1 && so.rank >= so.world))
		return cl_err(-EINVAL, "rank %d of world %d: a rank is 0 to world-1", so.rank, so.world);
	/* A model still loading: the stream opens at once; its resident
	 * tensors' upload and each layer's copies wait for their bytes. */
	n = cl_ntensors(m);
	slots = so.slots ? so.slots : 2;
	trace = so.trace_path ? so.trace_path : getenv("WSRV_TRACE");
	if (!(s = calloc(1, sizeof(*s))))
		return cl_err(-ENOMEM, "out of memory");

	s->m = m;
	cl_model_hold(m); /* dropped by wsrv_stream_close */
	s->d = d;
	s->last = -1;
	s->id = __atomic_add_fetch(&next_id, 1, __ATOMIC_RELAXED);
	s->opened = mono_now();
	s->where = calloc(n + 1, 1);
	s->res_off = calloc(n + 1, sizeof(uint64_t));
	s->rank = so.rank;
	s->world = so.world > 1 ? so.world : 1;
	s->sh.mem.fd = -1;
	s->svc_mem.fd = -1;
	s->sh.timeout_ms = so.share_timeout_ms; /* 0: what the fill can take (stream_share.c) */
	s->sh.wanted = so.share == WSRV_SHARE_ON || (so.share == WSRV_SHARE_DEFAULT && !(p && p->no_share));
	if (!s->sh.wanted)
		snprintf(s->sh.note, sizeof(s->sh.note), "sharing is off (%s)",
			 so.share == WSRV_SHARE_OFF ? "the stream's options" : "the plan's share_resident");
	if (trace && *trace)
		s->trace_path = strdup(trace);
	if (!s->where || !s->res_off)
		r = cl_err(-ENOMEM, "out of memory");
	else if (slots > 64)
		r = cl_err(-EINVAL, "a stream has 1 to 64 slots, not %u", slots);
	else if ((r = alloc_layers(s)) == 0 &&
		 (r = tp_resolve(m, p, s->rank, s->world, &s->views)) == 0 &&
		 (r = stream_place(s, p, s->rank, slots)) == 0 &&
		 (r = stream_peer_layout(s, p)) == 0 &&
		 (r = share_and_register(s)) == 0 &&
		 (r = upload_resident(s)) == 0 &&
		 (r = stream_peer_open(s)) == 0 &&
		 (r = alloc_slots(s, slots)) == 0)
		r = xp_alloc(s);
	if (r < 0) {
		wsrv_stream_close(s);
		return r;
	}
	/* The first layers start copying now, before anyone asks. */
	if (s->d && s->nseq)
		stream_prefetch(s, (int)s->nseq - 1);
	*out = s;
	return 0;
}

WSRV_EXPORT void wsrv_stream_close(struct wsrv_stream *s)
{
	if (!s)
		return;
	/* Copies still running write into the slots: let them land first
	 * (and take their times). Every fence a slot holds has its record
	 * (load), so waiting for the records waits for every slot. */
	stream_harvest(s, true);
	if (s->d && s->slots && cl_connected(cl_model_client(s->m)))
		stream_send_report(s, true); /* a server that is gone does not mind */
	else
		cl_debug("stream %u: closed without a last report (%s)", s->id,
			 !s->d ? "no device" : !s->slots ? "no slots" : "the server is gone");
	if (s->trace_path && s->d) {
		struct wsrv_stream_stats st;
		stream_stats_fill(s, &st);
		stream_trace_write(s, s->trace_path);
	}
	for (unsigned k = 0; s->d && s->slots && k < s->nslots; k++)
		s->d->ops->free(s->d, s->slots[k].mem, s->slot_size);
	xp_free(s);
	stream_peer_close(s);
	if (s->sh.mem.ptr || s->sh.region_id)
		stream_share_close(s);
	else if (s->svc_mem.ptr)
		s->d->ops->share_free(s->d, &s->svc_mem);
	else if (s->d && s->resident)
		s->d->ops->free(s->d, s->resident, s->resident_bytes);
	stream_unregister(s);
	for (uint32_t i = 0; s->layers && i < s->nlayers; i++) {
		free(s->layers[i].streamed);
		free(s->layers[i].slot_off);
	}
	free(s->layers);
	free(s->seq);
	free(s->slots);
	free(s->where);
	free(s->res_off);
	free(s->views);
	free(s->trace);
	free(s->trace_path);
	cl_model_drop(s->m); /* may detach it: its caller's wsrv_detach came first */
	free(s);
}
