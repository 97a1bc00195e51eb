// SPDX-License-Identifier: MIT
/* stats.c - the server's counters, as an object with counted accessors.
 * The object owns the server's decoded reply; the strings point into it. */
#include <errno.h>
#include <stdlib.h>

#include "wire.h"

struct wsrv_stats {
	Wsrv__Response *r;           /* owned; r->stats is not NULL */
	const Wsrv__ClientStream **streams; /* those with a report */
	size_t nstreams;
};

static int index_streams(struct wsrv_stats *s)
{
	const Wsrv__StatsReply *st = s->r->stats;

	s->streams = calloc(st->n_streams + 1, sizeof(*s->streams));
	if (!s->streams)
		return cl_err(-ENOMEM, "out of memory");
	for (size_t i = 0; i < st->n_streams; i++)
		if (st->streams[i]->report)
			s->streams[s->nstreams++] = st->streams[i];
	return 0;
}

WSRV_EXPORT int wsrv_stats(struct wsrv_client *c, struct wsrv_stats **out)
{
	Wsrv__Request q = WSRV__REQUEST__INIT;
	Wsrv__Stats st = WSRV__STATS__INIT;
	struct wsrv_stats *s;
	Wsrv__Response *r;
	int ret;

	CL_NEED(c);
	CL_NEED(out);
	q.body_case = WSRV__REQUEST__BODY_STATS;
	q.stats = &st;
	ret = cl_query(c, &q, WSRV__RESPONSE__BODY_STATS, &r, "Stats");
	if (ret < 0)
		return ret;
	if (!r->stats) {
		wsrv__response__free_unpacked(r, NULL);
		return cl_err(-EBADMSG, "the server sent an empty reply to Stats");
	}
	s = calloc(1, sizeof(*s));
	if (!s) {
		wsrv__response__free_unpacked(r, NULL);
		return cl_err(-ENOMEM, "out of memory");
	}
	s->r = r;
	if ((ret = index_streams(s)) < 0) {
		wsrv_stats_free(s);
		return ret;
	}
	*out = s;
	return 0;
}

WSRV_EXPORT int wsrv_stats_server(const struct wsrv_stats *s, struct wsrv_server_stats *out)
{
	const Wsrv__StatsReply *st;

	CL_NEED(s);
	CL_NEED(out);
	st = s->r->stats;
	CL_RESULT(out);
	out->server_version = cl_str(st->server_version);
	out->uptime_seconds = st->uptime_seconds;
	out->clients = st->clients;
	out->attachments = st->attachments;
	out->open_fds = st->open_fds;
	out->leases = st->leases;
	out->requests = st->requests;
	out->errors = st->errors;
	out->clients_total = st->clients_total;
	out->arena_bytes = st->arena_bytes;
	out->rss_bytes = st->rss_bytes;
	out->started_unix = st->started_unix;
	out->first_started_unix = st->first_started_unix;
	out->max_clients = st->max_clients;
	out->max_clients_fitted = st->max_clients_fitted;
	out->declined = st->declined;
	return 0;
}

WSRV_EXPORT size_t wsrv_stats_model_count(const struct wsrv_stats *s)
{
	return s ? s->r->stats->n_models : 0;
}

WSRV_EXPORT int wsrv_stats_model(const struct wsrv_stats *s, size_t i, struct wsrv_model_stats *out)
{
	const Wsrv__ModelStats *m;

	CL_NEED(s);
	CL_NEED(out);
	if (i >= s->r->stats->n_models)
		return cl_err(-ERANGE, "model %zu: the stats have %zu", i, s->r->stats->n_models);
	m = s->r->stats->models[i];
	CL_RESULT(out);
	out->name = cl_str(m->name);
	out->attached = m->attached;
	out->fetches = m->fetches;
	out->leases = m->leases;
	out->arena_bytes = m->arena_bytes;
	out->generation = m->generation;
	out->adopted = m->adopted;
	out->disk_bytes = m->disk_bytes;
	return 0;
}

WSRV_EXPORT size_t wsrv_stats_model_source_count(const struct wsrv_stats *s, size_t model)
{
	return s && model < s->r->stats->n_models ? s->r->stats->models[model]->n_sources : 0;
}

WSRV_EXPORT int wsrv_stats_model_source(const struct wsrv_stats *s, size_t model, size_t i,
					struct wsrv_fill_source *out)
{
	const Wsrv__PeerSource *src;

	CL_NEED(s);
	CL_NEED(out);
	if (model >= s->r->stats->n_models || i >= s->r->stats->models[model]->n_sources)
		return cl_err(-ERANGE, "model %zu, source %zu: not in the stats", model, i);
	src = s->r->stats->models[model]->sources[i];
	CL_RESULT(out);
	out->peer = cl_str(src->peer);
	out->bytes = src->bytes;
	out->checksum_failures = src->checksum_failures;
	out->failures = src->failures;
	return 0;
}

WSRV_EXPORT int wsrv_stats_peers(const struct wsrv_stats *s, struct wsrv_peer_stats *out)
{
	CL_NEED(s);
	CL_NEED(out);
	CL_RESULT(out);
	out->connections = s->r->stats->peer_connections;
	out->bytes_served = s->r->stats->peer_bytes_served;
	out->refused = s->r->stats->peer_refused;
	return 0;
}

WSRV_EXPORT size_t wsrv_stats_stream_count(const struct wsrv_stats *s)
{
	return s ? s->nstreams : 0;
}

WSRV_EXPORT int wsrv_stats_stream(const struct wsrv_stats *s, size_t i,
				  struct wsrv_stream_record *out)
{
	const Wsrv__ClientStream *cs;
	const Wsrv__StreamReport *rp;

	CL_NEED(s);
	CL_NEED(out);
	if (i >= s->nstreams)
		return cl_err(-ERANGE, "stream %zu: the stats have %zu", i, s->nstreams);
	cs = s->streams[i];
	rp = cs->report;
	CL_RESULT(out);
	out->client_id = cs->client_id;
	out->pid = cs->pid;
	out->client = cl_str(cs->client_name);
	out->model = cl_str(rp->model);
	out->stream_id = rp->stream_id;
	out->slots = rp->slots;
	out->bytes_copied = rp->bytes_copied;
	out->acquires = rp->acquires;
	out->passes = rp->passes;
	out->device_bytes = rp->device_bytes;
	out->copy_seconds = rp->copy_seconds;
	out->wait_seconds = rp->wait_seconds;
	out->hidden_fraction = rp->hidden_fraction;
	out->shared_bytes = rp->shared_bytes;
	out->share_role = rp->share_role;
	out->expert_slots = rp->expert_slots;
	out->expert_hits = rp->expert_hits;
	out->expert_misses = rp->expert_misses;
	return 0;
}

WSRV_EXPORT size_t wsrv_stats_region_count(const struct wsrv_stats *s)
{
	return s ? s->r->stats->n_regions : 0;
}

WSRV_EXPORT int wsrv_stats_region(const struct wsrv_stats *s, size_t i, struct wsrv_region_info *out)
{
	const Wsrv__RegionInfo *g;

	CL_NEED(s);
	CL_NEED(out);
	if (i >= s->r->stats->n_regions)
		return cl_err(-ERANGE, "region %zu: the stats have %zu", i, s->r->stats->n_regions);
	g = s->r->stats->regions[i];
	CL_RESULT(out);
	out->id = g->id;
	out->holders = g->holders;
	out->writer_pid = g->writer_pid;
	out->model = cl_str(g->model);
	out->device = cl_str(g->device);
	out->committed = g->state == WSRV__REGION_STATE__REGION_COMMITTED;
	out->kind = g->kind;
	out->bytes = g->bytes;
	out->fingerprint = g->fingerprint;
	out->generation = g->generation;
	out->age_seconds = g->age_seconds;
	out->waits = g->waits;
	return 0;
}

WSRV_EXPORT void wsrv_stats_free(struct wsrv_stats *s)
{
	if (!s)
		return;
	free(s->streams);
	wsrv__response__free_unpacked(s->r, NULL);
	free(s);
}
