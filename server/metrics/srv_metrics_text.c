// SPDX-License-Identifier: MIT
/* srv_metrics_text.c - the server's state in Prometheus' text exposition
 * format (version 0.0.4), rendered on the loop's thread from what it owns.
 * Names follow Prometheus' conventions: the wsrv_ prefix, base units,
 * _total for counters, process_* for the process. */
#include "srv_metrics.h"
#include "tier_door.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "peer_door.h"
#include "core_door.h"
#include "generations_door.h"
#include "srv_stats.h"
#include "wsrv.pb-c.h"

/* A label value as the format wants it: \, " and newline escaped. */
static void label(FILE *f, const char *v)
{
	for (; v && *v; v++) {
		if (*v == '\\' || *v == '"')
			fputc('\\', f);
		if (*v == '\n')
			fputs("\\n", f);
		else
			fputc(*v, f);
	}
}

static void family(FILE *f, const char *name, const char *type, const char *help)
{
	fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void process(FILE *f, const struct server *srv)
{
	struct rusage ru;
	struct rlimit rl;
	struct timespec now;

	getrusage(RUSAGE_SELF, &ru);
	clock_gettime(CLOCK_REALTIME, &now);
	family(f, "process_cpu_seconds_total", "counter", "User and system CPU time wsrvd spent.");
	fprintf(f, "process_cpu_seconds_total %.6f\n",
		(double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 +
		(double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6);
	family(f, "process_resident_memory_bytes", "gauge", "wsrvd's resident memory (its own, not the arenas' shared pages unless mapped).");
	fprintf(f, "process_resident_memory_bytes %llu\n", (unsigned long long)srv_rss_bytes());
	family(f, "process_open_fds", "gauge", "Open file descriptors.");
	fprintf(f, "process_open_fds %d\n", srv_count_fds());
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
		family(f, "process_max_fds", "gauge", "The file descriptor limit (RLIMIT_NOFILE).");
		fprintf(f, "process_max_fds %llu\n", (unsigned long long)rl.rlim_cur);
	}
	family(f, "process_start_time_seconds", "gauge", "When this wsrvd process started, in Unix seconds.");
	fprintf(f, "process_start_time_seconds %.3f\n",
		(double)now.tv_sec + now.tv_nsec / 1e9 - (mono_now() - srv->started));
	family(f, "wsrv_first_start_time_seconds", "gauge", "When the first wsrvd of this service started (adoption and take-over keep it).");
	fprintf(f, "wsrv_first_start_time_seconds %.3f\n", srv->started_wall);
	family(f, "wsrv_build_info", "gauge", "wsrvd's version.");
	fprintf(f, "wsrv_build_info{version=\"%s\"} 1\n", WSRV_VERSION_STRING);
}

static void sessions(FILE *f, const struct server *srv)
{
	uint64_t leases = 0, attachments = 0;

	/* The models' live counts, summed as the Stats reply sums them. */
	for (size_t i = 0; i < srv->nmodels; i++) {
		attachments += srv->models[i].attached;
		leases += srv->models[i].leases;
	}
	/* Not wsrv_clients beside wsrv_clients_total: OpenMetrics names a
	 * counter's family without _total, and the two would clash. */
	family(f, "wsrv_clients_connected", "gauge", "Client sessions now.");
	fprintf(f, "wsrv_clients_connected %u\n", srv->nsessions);
	family(f, "wsrv_clients_max", "gauge", "The most client sessions at once (--max-clients, or fitted to RLIMIT_NOFILE).");
	fprintf(f, "wsrv_clients_max %u\n", srv->cfg.max_clients);
	family(f, "wsrv_clients_accepted_total", "counter", "Client sessions accepted.");
	fprintf(f, "wsrv_clients_accepted_total %llu\n", (unsigned long long)srv->clients_total);
	family(f, "wsrv_attachments", "gauge", "Models attached by clients now.");
	fprintf(f, "wsrv_attachments %llu\n", (unsigned long long)attachments);
	family(f, "wsrv_leases", "gauge", "Layer leases held by clients now.");
	fprintf(f, "wsrv_leases %llu\n", (unsigned long long)leases);
}

static void requests(FILE *f, const struct srv_counters *c)
{
	family(f, "wsrv_requests_total", "counter", "Requests by type (the protocol's Request field; invalid: not a Request) and result (declined: turned away for now, to be asked again: a quota, a model still loading, a wait that ran out).");
	for (int k = 0; k < SRV_REQ_KINDS; k++) {
		const ProtobufCFieldDescriptor *d = k ? protobuf_c_message_descriptor_get_field(
			&wsrv__request__descriptor, (unsigned)k) : NULL;
		const char *type = k == 0 ? "invalid" : d ? d->name : "unknown";
		if (c->req_ok[k])
			fprintf(f, "wsrv_requests_total{type=\"%s\",result=\"ok\"} %llu\n", type,
				(unsigned long long)c->req_ok[k]);
		if (c->req_declined[k])
			fprintf(f, "wsrv_requests_total{type=\"%s\",result=\"declined\"} %llu\n", type,
				(unsigned long long)c->req_declined[k]);
		if (c->req_err[k])
			fprintf(f, "wsrv_requests_total{type=\"%s\",result=\"error\"} %llu\n", type,
				(unsigned long long)c->req_err[k]);
	}
	static const char *const reasons[SRV_REFUSALS] = { "not_allowed", "max_clients", "out_of_fds" };
	family(f, "wsrv_refusals_total", "counter", "Connections turned away before a session, by reason.");
	for (int i = 0; i < SRV_REFUSALS; i++)
		fprintf(f, "wsrv_refusals_total{reason=\"%s\"} %llu\n", reasons[i], (unsigned long long)c->refused[i]);
	uint64_t cum = 0;
	family(f, "wsrv_fetch_duration_seconds", "histogram", "Time wsrvd took to answer a FetchLayer.");
	for (int i = 0; i <= SRV_FETCH_BUCKETS; i++) {
		cum += c->fetch_bucket[i];
		if (i < SRV_FETCH_BUCKETS)
			fprintf(f, "wsrv_fetch_duration_seconds_bucket{le=\"%g\"} %llu\n", srv_fetch_bounds[i],
				(unsigned long long)cum);
		else
			fprintf(f, "wsrv_fetch_duration_seconds_bucket{le=\"+Inf\"} %llu\n", (unsigned long long)cum);
	}
	fprintf(f, "wsrv_fetch_duration_seconds_sum %.9f\nwsrv_fetch_duration_seconds_count %llu\n",
		c->fetch_sum, (unsigned long long)c->fetch_count);
	static const char *const what[SRV_OUTCOMES][2] = {
		{ "wsrv_reloads_total", "ok" }, { "wsrv_reloads_total", "failed" },
		{ "wsrv_publishes_total", "ok" }, { "wsrv_publishes_total", "failed" },
		{ "wsrv_publishes_total", "aborted" } };
	for (int i = 0; i < SRV_OUTCOMES; i++) {
		if (i == SRV_RELOAD_OK)
			family(f, "wsrv_reloads_total", "counter", "New generations loaded from files (wsrvctl reload), by result.");
		if (i == SRV_PUBLISH_OK)
			family(f, "wsrv_publishes_total", "counter", "Generations published by a producer, by result.");
		fprintf(f, "%s{result=\"%s\"} %llu\n", what[i][0], what[i][1], (unsigned long long)c->outcomes[i]);
	}
}

/* Per model name, whatever its generations: labels stay bounded by the
 * models served (a reload or a publish makes no new series; the
 * generation is a value, wsrv_model_generation). The first entry of each
 * name stands for it. */
struct model_sum {
	const struct srv_model *cur;   /* the generation serving, or NULL */
	uint64_t generation, attached, leases, fetches, retired, retired_bytes;
	double load_seconds;
	struct tier_stats tier;        /* its disk tier's, or zeros */
};

static void model_sum(const struct server *srv, const char *name, struct model_sum *m)
{
	*m = (struct model_sum){ 0 };
	for (size_t i = 0; i < srv->nmodels; i++) {
		const struct srv_model *g = &srv->models[i];
		if (!g->name || strcmp(g->name, name) != 0)
			continue;
		m->attached += g->attached;
		m->leases += g->leases;
		m->fetches += g->fetches;
		if (srv_model_current(g)) {
			m->cur = g;
			m->generation = g->generation;
			m->load_seconds = srv_model_loading(g) ? mono_now() - g->load_t0 : g->lm->total_seconds;
			if (g->lm->tier)
				tier_stats(g->lm->tier, &m->tier);
		} else if (g->lm) {
			m->retired++;
			m->retired_bytes += loaded_model_memory(g->lm);
		}
	}
}

/* Whether entry i is the first of its name (the one each name is listed by). */
static bool first_of_name(const struct server *srv, size_t i)
{
	return srv->models[i].name && srv_model_first(srv, srv->models[i].name) == (int)i;
}

static double v_generation(const struct model_sum *m) { return (double)m->generation; }
static double v_arena(const struct model_sum *m) { return m->cur ? (double)loaded_model_memory(m->cur->lm) : 0; }
static double v_tensor(const struct model_sum *m) { return m->cur ? (double)m->cur->lm->model->data_bytes : 0; }
static double v_attached(const struct model_sum *m) { return (double)m->attached; }
static double v_leases(const struct model_sum *m) { return (double)m->leases; }
static double v_fetches(const struct model_sum *m) { return (double)m->fetches; }
static double v_load(const struct model_sum *m) { return m->load_seconds; }
static double v_adopted(const struct model_sum *m) { return m->cur && m->cur->lm->adopted; }
static double v_retired(const struct model_sum *m) { return (double)m->retired; }
static double v_failed(const struct model_sum *m) { return m->cur && srv_model_failed(m->cur); }
static double v_retired_bytes(const struct model_sum *m) { return (double)m->retired_bytes; }

static double v_t_budget(const struct model_sum *m) { return (double)m->tier.budget; }
static double v_t_resident(const struct model_sum *m) { return (double)m->tier.resident_bytes; }
static double v_t_cached(const struct model_sum *m) { return (double)m->tier.cached_bytes; }
static double v_t_peak(const struct model_sum *m) { return (double)m->tier.peak_bytes; }
static double v_t_held(const struct model_sum *m) { return (double)m->tier.held_bytes; }
static double v_t_disk(const struct model_sum *m) { return (double)m->tier.disk_bytes; }
static double v_t_hits(const struct model_sum *m) { return (double)m->tier.hits; }
static double v_t_misses(const struct model_sum *m) { return (double)m->tier.misses; }
static double v_t_read(const struct model_sum *m) { return (double)m->tier.read_bytes; }
static double v_t_evictions(const struct model_sum *m) { return (double)m->tier.evictions; }
static double v_t_failures(const struct model_sum *m) { return (double)m->tier.failures; }
static double v_t_inflight(const struct model_sum *m) { return (double)m->tier.reads_in_flight; }

/* One sample per model name. */
static void model_gauge(FILE *f, const struct server *srv, const char *name, const char *type,
			const char *help, double (*value)(const struct model_sum *m))
{
	struct model_sum m;

	family(f, name, type, help);
	for (size_t i = 0; i < srv->nmodels; i++) {
		if (!first_of_name(srv, i))
			continue;
		model_sum(srv, srv->models[i].name, &m);
		fprintf(f, "%s{model=\"", name);
		label(f, srv->models[i].name);
		fprintf(f, "\"} %.17g\n", value(&m));
	}
}

/* Disk tiers (wsrvd --memory-budget): only when the server has one. */
static void tiers(FILE *f, const struct server *srv)
{
	static const struct {
		const char *name, *type, *help;
		double (*value)(const struct model_sum *m);
	} g[] = {
		{ "wsrv_model_tier_budget_bytes", "gauge", "The memory budget (0: no disk tier).", v_t_budget },
		{ "wsrv_model_tier_resident_bytes", "gauge", "Bytes that always stay in memory.", v_t_resident },
		{ "wsrv_model_tier_cached_bytes", "gauge", "Tiered segments in memory now.", v_t_cached },
		{ "wsrv_model_tier_peak_bytes", "gauge", "The most the tier held at once: what stays, is cached, is read or filled (at most the budget unless workers held the rest).", v_t_peak },
		{ "wsrv_model_tier_held_bytes", "gauge", "Of the cached, held by workers now.", v_t_held },
		{ "wsrv_model_tier_disk_bytes", "gauge", "Tiered segments only on disk now.", v_t_disk },
		{ "wsrv_model_tier_hits_total", "counter", "Takes of a segment served from memory (nothing read for them).", v_t_hits },
		{ "wsrv_model_tier_misses_total", "counter", "Takes of a segment read from disk for them (on demand or ahead).", v_t_misses },
		{ "wsrv_model_tier_read_bytes_total", "counter", "Bytes read from disk on demand.", v_t_read },
		{ "wsrv_model_tier_evictions_total", "counter", "Segments evicted from memory.", v_t_evictions },
		{ "wsrv_model_tier_failures_total", "counter", "Reads that failed (I/O, checksum).", v_t_failures },
		{ "wsrv_model_tier_reads_in_flight", "gauge", "Reads from disk under way.", v_t_inflight },
	};

	if (!srv_tiered_model(srv))
		return;
	for (size_t i = 0; i < sizeof(g) / sizeof(g[0]); i++)
		model_gauge(f, srv, g[i].name, g[i].type, g[i].help, g[i].value);
}

static void models(FILE *f, const struct server *srv)
{
	tiers(f, srv);
	model_gauge(f, srv, "wsrv_model_generation", "gauge", "The generation that serves new attaches.", v_generation);
	model_gauge(f, srv, "wsrv_model_arena_bytes", "gauge", "Shared memory the serving generation holds (under a disk tier: what stays and what is cached now).", v_arena);
	model_gauge(f, srv, "wsrv_model_tensor_bytes", "gauge", "Tensor bytes of the serving generation.", v_tensor);
	model_gauge(f, srv, "wsrv_model_attached", "gauge", "Clients attached to the model now, any generation.", v_attached);
	model_gauge(f, srv, "wsrv_model_leases", "gauge", "Layer leases on the model now, any generation.", v_leases);
	model_gauge(f, srv, "wsrv_model_fetches_total", "counter", "FetchLayer requests answered for the model.", v_fetches);
	model_gauge(f, srv, "wsrv_model_load_duration_seconds", "gauge",
		    "How long loading (or adopting) the serving generation took; while it loads, the time so far.", v_load);
	model_gauge(f, srv, "wsrv_model_adopted", "gauge", "1 when the serving generation was adopted from a predecessor (no load).", v_adopted);
	model_gauge(f, srv, "wsrv_model_retired_generations", "gauge",
		    "Replaced generations still held by clients (their memory stays until the last lets go).", v_retired);
	model_gauge(f, srv, "wsrv_model_retired_arena_bytes", "gauge", "Shared memory the replaced generations still hold.",
		    v_retired_bytes);
	model_gauge(f, srv, "wsrv_model_failed", "gauge",
		    "1 when the model failed to load and is not served; the server serves the others "
		    "(without --require-all-models).", v_failed);
	for (size_t i = 0; i < srv->nunloaded; i++) { /* failed before they were laid out */
		fprintf(f, "wsrv_model_failed{model=\"");
		label(f, srv->unloaded[i].name);
		fprintf(f, "\"} 1\n");
	}
	family(f, "wsrv_model_filled_bytes", "gauge",
	       "Bytes the serving generation was filled with, by source (files, or a peer host).");
	for (size_t i = 0; i < srv->nmodels; i++) {
		const struct srv_model *m = &srv->models[i];
		if (!srv_model_current(m))
			continue;
		for (uint32_t j = 0; j <= m->lm->nsources; j++) {
			fprintf(f, "wsrv_model_filled_bytes{model=\"");
			label(f, m->lm->model->name);
			fprintf(f, "\",source=\"%s\",peer=\"", j < m->lm->nsources ? "peer" : "files");
			label(f, j < m->lm->nsources ? m->lm->sources[j].name : "");
			fprintf(f, "\"} %llu\n", (unsigned long long)(j < m->lm->nsources ? m->lm->sources[j].bytes
									 : m->lm->disk_bytes));
		}
	}
}

/* The loads going on: a reload's or a publish's job, and the first load
 * of each model served while it loads (kind "load"). At most 1 + the
 * models. */
static size_t loads_now(const struct server *srv, struct reload_progress *p, size_t cap)
{
	size_t n = reload_progress(srv, &p[0]) ? 1 : 0;

	for (size_t i = 0; i < srv->nmodels && n < cap; i++) {
		const struct srv_model *m = &srv->models[i];
		const struct loaded_model *lm = m->lm;
		if (!lm || !srv_model_loading(m))
			continue;
		p[n++] = (struct reload_progress){ .name = lm->model->name, .what = "load",
			.total = lm->model->data_bytes, .seconds = mono_now() - m->load_t0,
			.placed = loaded_model_placed(lm) };
	}
	return n;
}

static void loading(FILE *f, const struct server *srv)
{
	static const char *const names[] = { "wsrv_loading_placed_bytes", "wsrv_loading_total_bytes",
					     "wsrv_loading_seconds" };
	static const char *const help[] = { "Bytes of the generation being loaded placed so far.",
		"Bytes of the generation being loaded in all (0 until its files are open).",
		"Seconds since the load or publish began." };
	struct reload_progress *p = calloc(srv->nmodels + 1, sizeof(*p));
	size_t n = p ? loads_now(srv, p, srv->nmodels + 1) : 0;

	family(f, "wsrv_loading", "gauge", "1 while a model generation is being loaded (its first load included) or published.");
	fprintf(f, "wsrv_loading %d\n", n > 0);
	for (int i = 0; i < 3 && n; i++) {
		family(f, names[i], "gauge", help[i]);
		for (size_t k = 0; k < n; k++) {
			double v[] = { (double)p[k].placed, (double)p[k].total, p[k].seconds };
			fprintf(f, "%s{model=\"", names[i]);
			label(f, p[k].name);
			fprintf(f, "\",kind=\"%s\"} %.17g\n", p[k].what, v[i]);
		}
	}
	free(p);
}

/* Device regions by model and device (at most --max-regions of them; a
 * region's id and state would make a new series each time). */
static void regions(FILE *f, const struct server *srv)
{
	uint32_t committed = 0;

	for (uint32_t i = 0; i < srv->regions.n; i++)
		committed += srv->regions.v[i].committed;
	family(f, "wsrv_device_regions", "gauge", "Shared device regions now, by state.");
	fprintf(f, "wsrv_device_regions{state=\"committed\"} %u\n", committed);
	fprintf(f, "wsrv_device_regions{state=\"filling\"} %u\n", srv->regions.n - committed);
	family(f, "wsrv_device_region_bytes", "gauge", "Bytes of shared device regions, by model and device.");
	family(f, "wsrv_device_region_holders", "gauge", "Workers holding shared device regions, by model and device.");
	for (int g = 0; g < 2; g++)
		for (uint32_t i = 0; i < srv->regions.n; i++) {
			const struct srv_region *r = &srv->regions.v[i];
			uint64_t v = 0;
			bool first = true;
			for (uint32_t k = 0; k < srv->regions.n; k++) {
				const struct srv_region *o = &srv->regions.v[k];
				if (strcmp(o->model_name, r->model_name) || strcmp(o->device, r->device))
					continue;
				first = first && k >= i;
				v += g ? o->holders : o->bytes;
			}
			if (!first)
				continue; /* summed with an earlier one of the same pair */
			fprintf(f, "%s{model=\"", g ? "wsrv_device_region_holders" : "wsrv_device_region_bytes");
			label(f, r->model_name);
			fprintf(f, "\",device=\"");
			label(f, r->device);
			fprintf(f, "\"} %llu\n", (unsigned long long)v);
		}
}

/* The streams workers reported, summed by model (a name served here, or
 * "other"): one series per model, however many workers come and go.
 * Counters: what the open streams last reported, plus what closed ones
 * and gone workers did (srv_stream_fold). */
static void stream_totals(const struct server *srv, const char *name, struct stream_sum *t, uint32_t *open)
{
	int first = name ? srv_model_first(srv, name) : -1;

	*t = first >= 0 ? srv->models[first].streams_gone : name ? (struct stream_sum){ 0 } : srv->other_gone;
	*open = 0;
	for (const struct session *s = srv->sessions; s; s = s->next)
		for (uint32_t i = 0; i < s->nstreams; i++) {
			const struct stream_report *x = &s->streams[i];
			bool mine = name ? strcmp(x->model, name) == 0 : srv_model_first(srv, x->model) < 0;
			if (!mine)
				continue;
			t->bytes += x->bytes_copied;
			t->copy_seconds += x->copy_seconds;
			t->wait_seconds += x->wait_seconds;
			t->service_bytes += x->service_bytes;
			t->register_bytes += x->register_bytes;
			t->service_fallbacks += x->service_fallbacks;
			(*open)++;
		}
}

static void streams(FILE *f, const struct server *srv)
{
	static const char *const names[] = { "wsrv_streams", "wsrv_stream_copied_bytes_total",
					     "wsrv_stream_copy_seconds_total", "wsrv_stream_wait_seconds_total",
					     "wsrv_stream_service_copied_bytes_total", "wsrv_stream_locked_bytes_total",
					     "wsrv_stream_service_fallbacks_total" };
	static const char *const helps[] = { "Workers' streams open now (as they reported), by model.",
		"Bytes workers' streams copied to their devices, by model.",
		"Seconds workers' streams spent copying, by model (rate of bytes over rate of this: the copy speed).",
		"Seconds workers waited for a layer's copies, by model (what streaming did not hide).",
		"Resident bytes the copy service (wsrv-copyd) copied into workers' devices, by model.",
		"Bytes workers page-locked themselves to copy from (0 for what the copy service copied), by model.",
		"Stream opens where the copy service was asked and did not copy (the worker copied by itself), by model." };
	struct stream_sum t;
	uint32_t open;

	for (int g = 0; g < 7; g++) {
		family(f, names[g], g ? "counter" : "gauge", helps[g]);
		for (size_t i = 0; i <= srv->nmodels; i++) {
			const char *name = i < srv->nmodels ? srv->models[i].name : NULL;
			if (i < srv->nmodels && !first_of_name(srv, i))
				continue;
			stream_totals(srv, name, &t, &open);
			double v[] = { open, (double)t.bytes, t.copy_seconds, t.wait_seconds, (double)t.service_bytes,
				       (double)t.register_bytes, (double)t.service_fallbacks };
			fprintf(f, "%s{model=\"", names[g]);
			label(f, name ? name : "other");
			fprintf(f, "\"} %.17g\n", v[g]);
		}
	}
}

static void peers(FILE *f, const struct server *srv)
{
	struct peer_serve_counters c;

	if (!srv->peers)
		return;
	peer_serve_counters(srv->peers, &c);
	family(f, "wsrv_peer_served_bytes_total", "counter", "Tensor bytes sent to peer hosts.");
	fprintf(f, "wsrv_peer_served_bytes_total %llu\n", (unsigned long long)c.bytes_served);
	family(f, "wsrv_peer_refused_total", "counter", "Peer connections refused (address, token, model, limits).");
	fprintf(f, "wsrv_peer_refused_total %llu\n", (unsigned long long)c.refused);
	family(f, "wsrv_peer_connections", "gauge", "Peer hosts connected now.");
	fprintf(f, "wsrv_peer_connections %u\n", c.conns);
	family(f, "wsrv_peer_process_restarts_total", "counter",
	       "Times the peer process (UCX, apart from wsrvd) was started again after it ended.");
	fprintf(f, "wsrv_peer_process_restarts_total %u\n", c.restarts);
}

int srv_metrics_render(const struct server *srv, char **out, size_t *len)
{
	FILE *f = open_memstream(out, len);

	if (!f)
		return -errno;
	process(f, srv);
	sessions(f, srv);
	requests(f, &srv->count);
	models(f, srv);
	loading(f, srv);
	regions(f, srv);
	streams(f, srv);
	peers(f, srv);
	if (fclose(f) != 0) {
		free(*out);
		*out = NULL;
		return -ENOMEM;
	}
	return 0;
}
