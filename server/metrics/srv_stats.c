// SPDX-License-Identifier: MIT
/* srv_stats.c - counting what the server holds. */
#include "holds_door.h"
#include "core_door.h"
#include "srv_stats.h"

#include "peer_door.h"

#include <dirent.h>
#include <errno.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "wsrv.pb-c.h"

int srv_count_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *de;
	int n = 0;

	if (!d)
		return -1;
	while ((de = readdir(d)))
		n += de->d_name[0] != '.';
	closedir(d);
	return n - 1;
}

uint64_t srv_rss_bytes(void)
{
	FILE *f = fopen("/proc/self/statm", "re");
	unsigned long size = 0, res = 0;

	if (f) {
		if (fscanf(f, "%lu %lu", &size, &res) != 2)
			res = 0;
		fclose(f);
	}
	return (uint64_t)res * (uint64_t)sysconf(_SC_PAGESIZE);
}

/* Every client's stream reports, for the Stats reply; freed by the caller
 * (one allocation holding the arrays). */
static void *stream_reports(const struct server *srv, Wsrv__ClientStream ***out, size_t *n)
{
	size_t total = 0, k = 0;
	uint8_t *mem;
	Wsrv__ClientStream **ptrs, *cs;
	Wsrv__StreamReport *rp;

	for (const struct session *s = srv->sessions; s; s = s->next)
		total += s->nstreams;
	mem = calloc(total + 1, sizeof(*ptrs) + sizeof(*cs) + sizeof(*rp));
	if (!mem)
		return NULL;
	ptrs = (void *)mem;
	cs = (void *)(mem + (total + 1) * sizeof(*ptrs));
	rp = (void *)((uint8_t *)cs + (total + 1) * sizeof(*cs));
	for (const struct session *s = srv->sessions; s; s = s->next)
		for (uint32_t i = 0; i < s->nstreams; i++, k++) {
			const struct stream_report *x = &s->streams[i];
			wsrv__client_stream__init(&cs[k]);
			wsrv__stream_report__init(&rp[k]);
			cs[k].client_id = s->id;
			cs[k].pid = (uint32_t)s->cred.pid;
			cs[k].client_name = (char *)s->name;
			cs[k].report = &rp[k];
			rp[k].model = (char *)x->model;
			rp[k].stream_id = x->stream_id;
			rp[k].bytes_copied = x->bytes_copied;
			rp[k].copy_seconds = x->copy_seconds;
			rp[k].wait_seconds = x->wait_seconds;
			rp[k].hidden_fraction = x->hidden_fraction;
			rp[k].acquires = x->acquires;
			rp[k].passes = x->passes;
			rp[k].slots = x->slots;
			rp[k].device_bytes = x->device_bytes;
			rp[k].shared_bytes = x->shared_bytes;
			rp[k].share_role = x->share_role;
			rp[k].expert_slots = x->expert_slots;
			rp[k].expert_hits = x->expert_hits;
			rp[k].expert_misses = x->expert_misses;
			rp[k].service_bytes = x->service_bytes;
			rp[k].register_bytes = x->register_bytes;
			rp[k].service_fallbacks = x->service_fallbacks;
			ptrs[k] = &cs[k];
		}
	*out = ptrs;
	*n = total;
	return mem;
}

/* Each model's peer sources into ms[0..n) (whose lm they describe: lms);
 * returns the memory to free after packing, or NULL (none, or out of
 * memory: the rest of the stats still go). */
static void *peer_sources(struct loaded_model *const *lms, Wsrv__ModelStats *ms, size_t n)
{
	size_t total = 0, k = 0;
	Wsrv__PeerSource *ps, **pp;
	void *mem;

	for (size_t i = 0; i < n; i++)
		total += lms[i]->nsources;
	if (!total || !(mem = calloc(total, sizeof(*ps) + sizeof(*pp))))
		return NULL;
	ps = mem;
	pp = (Wsrv__PeerSource **)(ps + total);
	for (size_t i = 0; i < n; i++) {
		ms[i].sources = pp + k;
		ms[i].n_sources = lms[i]->nsources;
		for (uint32_t j = 0; j < lms[i]->nsources; j++, k++) {
			const struct load_source *src = &lms[i]->sources[j];
			wsrv__peer_source__init(&ps[k]);
			ps[k].peer = (char *)src->name;
			ps[k].bytes = src->bytes;
			ps[k].checksum_failures = src->checksum_failures;
			ps[k].failures = src->failures;
			pp[k] = &ps[k];
		}
	}
	return mem;
}

static void peer_counters(const struct server *srv, Wsrv__StatsReply *st)
{
	struct peer_serve_counters c;

	if (!srv->peers)
		return;
	peer_serve_counters(srv->peers, &c);
	st->peer_bytes_served = c.bytes_served;
	st->peer_refused = c.refused;
	st->peer_connections = c.conns;
}

int srv_stats_reply(struct server *srv, uint64_t seq, struct reply *r)
{
	Wsrv__Response resp = WSRV__RESPONSE__INIT;
	Wsrv__StatsReply st = WSRV__STATS_REPLY__INIT;
	Wsrv__ModelStats *ms = calloc(srv->nmodels + 1, sizeof(*ms));
	Wsrv__ModelStats **mp = calloc(srv->nmodels + 1, sizeof(*mp));
	struct loaded_model **lms = calloc(srv->nmodels + 1, sizeof(*lms));
	uint32_t attachments = 0;
	uint64_t leases = 0;

	if (!ms || !mp || !lms) {
		free(ms);
		free(mp);
		free(lms);
		return srv_reply_error(r, seq, ENOMEM, "out of memory");
	}
	size_t k = 0;
	for (size_t i = 0; i < srv->nmodels; i++) {
		const struct srv_model *m = &srv->models[i];
		if (!m->lm)
			continue; /* a generation gone */
		wsrv__model_stats__init(&ms[k]);
		ms[k].name = m->lm->model->name;
		ms[k].attached = m->attached;
		ms[k].fetches = m->fetches;
		ms[k].leases = m->leases;
		ms[k].arena_bytes = loaded_model_memory(m->lm);
		ms[k].generation = m->generation;
		ms[k].adopted = m->lm->adopted;
		ms[k].disk_bytes = m->lm->disk_bytes;
		lms[k] = m->lm;
		mp[k] = &ms[k];
		attachments += m->attached;
		leases += m->leases;
		st.arena_bytes += ms[k++].arena_bytes;
	}
	st.server_version = WSRV_VERSION_STRING;
	st.uptime_seconds = mono_now() - srv->started;
	struct timespec now;
	clock_gettime(CLOCK_REALTIME, &now);
	st.started_unix = (double)now.tv_sec + now.tv_nsec / 1e9 - st.uptime_seconds;
	st.first_started_unix = srv->started_wall;
	st.max_clients = srv->cfg.max_clients;
	st.max_clients_fitted = srv->clients_fitted;
	st.clients = srv->nsessions;
	st.attachments = attachments;
	st.leases = leases;
	st.requests = srv->requests;
	st.errors = srv->errors;
	st.declined = srv->declined;
	st.clients_total = srv->clients_total;
	st.rss_bytes = srv_rss_bytes();
	st.open_fds = (uint32_t)srv_count_fds();
	st.n_models = k;
	st.models = mp;
	void *streams = stream_reports(srv, &st.streams, &st.n_streams);
	void *sources = peer_sources(lms, ms, k);
	peer_counters(srv, &st);
	if (region_stats(srv, &st) < 0)
		st.n_regions = 0;   /* out of memory: the rest of the stats still go */
	resp.seq = seq;
	resp.body_case = WSRV__RESPONSE__BODY_STATS;
	resp.stats = &st;
	srv_pack(r, &resp);
	region_stats_free(&st);
	free(streams);
	free(sources);
	free(ms);
	free(mp);
	free(lms);
	return 0;
}
