// SPDX-License-Identifier: MIT
/* srv_metrics_text.c - the server's state in Prometheus' text exposition
 * format (version 0.0.4), rendered on the loop's thread from what it owns.
 * Names follow Prometheus' conventions: the wsrv_ prefix, base units,
 * _total for counters, process_* for the process. */
#include "srv_metrics.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "peer_serve.h"
#include "srv_reload.h"
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
	family(f, "wsrv_clients", "gauge", "Client sessions now.");
	fprintf(f, "wsrv_clients %u\n", srv->nsessions);
	family(f, "wsrv_clients_max", "gauge", "The most client sessions at once (--max-clients, or fitted to RLIMIT_NOFILE).");
	fprintf(f, "wsrv_clients_max %u\n", srv->cfg.max_clients);
	family(f, "wsrv_clients_total", "counter", "Client sessions accepted.");
	fprintf(f, "wsrv_clients_total %llu\n", (unsigned long long)srv->clients_total);
	family(f, "wsrv_attachments", "gauge", "Models attached by clients now.");
	fprintf(f, "wsrv_attachments %llu\n", (unsigned long long)attachments);
	family(f, "wsrv_leases", "gauge", "Layer leases held by clients now.");
	fprintf(f, "wsrv_leases %llu\n", (unsigned long long)leases);
}

static void requests(FILE *f, const struct srv_counters *c)
{
	family(f, "wsrv_requests_total", "counter", "Requests by type (the protocol's Request field; invalid: not a Request) and result.");
	for (int k = 0; k < SRV_REQ_KINDS; k++) {
		const ProtobufCFieldDescriptor *d = k ? protobuf_c_message_descriptor_get_field(
			&wsrv__request__descriptor, (unsigned)k) : NULL;
		const char *type = k == 0 ? "invalid" : d ? d->name : "unknown";
		if (c->req_ok[k])
			fprintf(f, "wsrv_requests_total{type=\"%s\",result=\"ok\"} %llu\n", type,
				(unsigned long long)c->req_ok[k]);
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

/* One gauge per model generation (its labels: model, generation). */
static void model_gauge(FILE *f, const struct server *srv, const char *name, const char *type,
			const char *help, double (*value)(const struct srv_model *m))
{
	family(f, name, type, help);
	for (size_t i = 0; i < srv->nmodels; i++) {
		const struct srv_model *m = &srv->models[i];
		if (!m->lm)
			continue;
		fprintf(f, "%s{model=\"", name);
		label(f, m->lm->model->name);
		fprintf(f, "\",generation=\"%llu\"} %.17g\n", (unsigned long long)m->generation, value(m));
	}
}

static double v_arena(const struct srv_model *m) { return (double)arena_bytes(m->lm->arena); }
static double v_tensor(const struct srv_model *m) { return (double)m->lm->model->data_bytes; }
static double v_attached(const struct srv_model *m) { return m->attached; }
static double v_leases(const struct srv_model *m) { return (double)m->leases; }
static double v_fetches(const struct srv_model *m) { return (double)m->fetches; }
/* While a model loads (serving while loading), the seconds so far. */
static double v_load(const struct srv_model *m)
{
	return m->loading ? mono_now() - m->load_t0 : m->lm->total_seconds;
}
static double v_serving(const struct srv_model *m) { return srv_model_current(m); }
static double v_adopted(const struct srv_model *m) { return m->lm->adopted; }

static void models(FILE *f, const struct server *srv)
{
	model_gauge(f, srv, "wsrv_model_arena_bytes", "gauge", "Shared memory a model generation holds.", v_arena);
	model_gauge(f, srv, "wsrv_model_tensor_bytes", "gauge", "Tensor bytes of a model generation.", v_tensor);
	model_gauge(f, srv, "wsrv_model_attached", "gauge", "Clients attached to a model generation now.", v_attached);
	model_gauge(f, srv, "wsrv_model_leases", "gauge", "Layer leases on a model generation now.", v_leases);
	model_gauge(f, srv, "wsrv_model_fetches_total", "counter", "FetchLayer requests answered for a model generation.", v_fetches);
	model_gauge(f, srv, "wsrv_model_load_duration_seconds", "gauge", "How long loading (or adopting) a model generation took.", v_load);
	model_gauge(f, srv, "wsrv_model_serving", "gauge", "1 while a generation serves new attaches, 0 once a newer one replaced it.", v_serving);
	model_gauge(f, srv, "wsrv_model_adopted", "gauge", "1 when the generation was adopted from a predecessor (no load).", v_adopted);
	family(f, "wsrv_model_filled_bytes", "gauge", "Bytes a model generation was filled with, by source (files, or a peer host).");
	for (size_t i = 0; i < srv->nmodels; i++) {
		const struct srv_model *m = &srv->models[i];
		if (!m->lm)
			continue;
		for (uint32_t j = 0; j <= m->lm->nsources; j++) {
			fprintf(f, "wsrv_model_filled_bytes{model=\"");
			label(f, m->lm->model->name);
			fprintf(f, "\",generation=\"%llu\",source=\"%s\",peer=\"", (unsigned long long)m->generation,
				j < m->lm->nsources ? "peer" : "files");
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
		if (!lm || !m->loading)
			continue;
		p[n++] = (struct reload_progress){ .name = lm->model->name, .what = "load",
			.total = lm->model->data_bytes, .seconds = mono_now() - m->load_t0,
			.placed = lm->ready.h ? __atomic_load_n(&lm->ready.h->placed_bytes, __ATOMIC_RELAXED) : 0 };
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

static void regions(FILE *f, const struct server *srv)
{
	family(f, "wsrv_device_regions", "gauge", "Shared device regions now (filling or committed).");
	fprintf(f, "wsrv_device_regions %u\n", srv->regions.n);
	family(f, "wsrv_device_region_bytes", "gauge", "Bytes of a shared device region.");
	family(f, "wsrv_device_region_holders", "gauge", "Workers holding a shared device region.");
	for (int g = 0; g < 2; g++)
		for (uint32_t i = 0; i < srv->regions.n; i++) {
			const struct srv_region *r = &srv->regions.v[i];
			fprintf(f, "%s{region=\"%u\",model=\"", g ? "wsrv_device_region_holders" : "wsrv_device_region_bytes",
				r->id);
			label(f, r->model_name);
			fprintf(f, "\",device=\"");
			label(f, r->device);
			fprintf(f, "\",state=\"%s\"} %llu\n", r->committed ? "committed" : "filling",
				(unsigned long long)(g ? r->holders : r->bytes));
		}
}

/* The streams workers reported (wsrv_stream_report), by client and stream. */
static void streams(FILE *f, const struct server *srv)
{
	static const char *const names[] = { "wsrv_stream_copy_bytes_per_second", "wsrv_stream_hidden_ratio",
					     "wsrv_stream_copied_bytes" };
	static const char *const helps[] = {
		"A worker's stream: bytes copied per second of copy time, as it last reported.",
		"A worker's stream: the fraction of copy time hidden behind compute, as it last reported.",
		"A worker's stream: bytes copied to its device, as it last reported." };

	for (int g = 0; g < 3; g++) {
		family(f, names[g], "gauge", helps[g]);
		for (const struct session *s = srv->sessions; s; s = s->next)
			for (uint32_t i = 0; i < s->nstreams; i++) {
				const struct stream_report *x = &s->streams[i];
				double v = g == 0 ? (x->copy_seconds > 0 ? (double)x->bytes_copied / x->copy_seconds : 0)
					 : g == 1 ? x->hidden_fraction : (double)x->bytes_copied;
				fprintf(f, "%s{client=\"%llu\",pid=\"%d\",name=\"", names[g], (unsigned long long)s->id,
					(int)s->cred.pid);
				label(f, s->name);
				fprintf(f, "\",model=\"");
				label(f, x->model);
				fprintf(f, "\",stream=\"%u\"} %.17g\n", x->stream_id, v);
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
