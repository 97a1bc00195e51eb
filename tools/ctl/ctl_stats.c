// SPDX-License-Identifier: MIT
/* ctl_stats.c - wsrvctl status, stats and models: the server's counters
 * and its models, as tables or --json. Every string a peer chose is
 * escaped in tables and kept (escaped if not UTF-8) in JSON. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "ctl.h"
#include "escape.h"
#include "units.h"
#include "wsrv.h"

static const char *role_name(int role)
{
	return role == WSRV_SHARE_WRITER ? "writer" : role == WSRV_SHARE_READER ? "reader" : "private";
}

static json_t *streams_json(const struct wsrv_stats *s)
{
	json_t *a = json_array();
	struct wsrv_stream_record r;

	for (size_t i = 0; wsrv_stats_stream(s, i, &r) == 0; i++)
		json_array_append_new(a, json_pack("{s:I, s:i, s:o, s:o, s:I, s:I, s:f, s:f, s:f, s:i}",
			"client_id", (json_int_t)r.client_id, "pid", (int)r.pid,
			"client", ctl_peer_str(r.client), "model", ctl_peer_str(r.model),
			"passes", (json_int_t)r.passes, "bytes_copied", (json_int_t)r.bytes_copied,
			"copy_seconds", r.copy_seconds, "wait_seconds", r.wait_seconds,
			"hidden_fraction", r.hidden_fraction, "slots", (int)r.slots));
	for (size_t i = 0; wsrv_stats_stream(s, i, &r) == 0; i++) {
		json_t *o = json_array_get(a, i);
		json_object_set_new(o, "device_bytes", json_integer((json_int_t)r.device_bytes));
		json_object_set_new(o, "shared_bytes", json_integer((json_int_t)r.shared_bytes));
		json_object_set_new(o, "share", json_string(role_name(r.share_role)));
		if (r.expert_slots)
			json_object_set_new(o, "experts", json_pack("{s:i, s:I, s:I}", "slots", (int)r.expert_slots,
				"hits", (json_int_t)r.expert_hits, "misses", (json_int_t)r.expert_misses));
	}
	return a;
}

static const char *region_kind(int kind)
{
	return kind == 1 ? "host" : kind == 2 ? "cuda" : "?";
}

/* The device regions the server brokers. */
static json_t *regions_json(const struct wsrv_stats *s)
{
	json_t *a = json_array();
	struct wsrv_region_info g;

	for (size_t i = 0; wsrv_stats_region(s, i, &g) == 0; i++)
		json_array_append_new(a, json_pack("{s:i, s:o, s:o, s:s, s:I, s:i, s:s, s:i, s:I, s:f, s:I}",
			"id", (int)g.id, "model", ctl_peer_str(g.model), "device", ctl_peer_str(g.device),
			"kind", region_kind(g.kind), "bytes", (json_int_t)g.bytes, "holders", (int)g.holders,
			"state", g.committed ? "committed" : "filling", "writer_pid", (int)g.writer_pid,
			"generation", (json_int_t)g.generation, "age_seconds", g.age_seconds,
			"waits", (json_int_t)g.waits));
	return a;
}

/* The peers model i was filled from. */
static json_t *sources_json(const struct wsrv_stats *s, size_t i)
{
	struct wsrv_fill_source f;
	json_t *a = json_array();

	for (size_t j = 0; wsrv_stats_model_source(s, i, j, &f) == 0; j++)
		json_array_append_new(a, json_pack("{s:o, s:I, s:i, s:i}", "peer", ctl_peer_str(f.peer),
			"bytes", (json_int_t)f.bytes, "checksum_failures", (int)f.checksum_failures,
			"failures", (int)f.failures));
	return a;
}

/* The newest generation of model name in l: its info and its index. */
static bool info_of(const struct wsrv_model_list *l, const char *name, struct wsrv_model_info *mi,
		    size_t *idx)
{
	for (size_t i = 0; l && wsrv_model_list_at(l, i, mi) == 0; i++)
		if (strcmp(mi->name, name) == 0) {
			*idx = i;
			return true;
		}
	return false;
}

static json_t *tier_json(const struct wsrv_model_list *l, size_t i)
{
	struct wsrv_tier_info t;

	if (wsrv_model_list_tier(l, i, &t) < 0 || !t.budget)
		return json_null();
	return json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:i}", "budget", (json_int_t)t.budget,
			 "peak_bytes", (json_int_t)t.peak_bytes,
			 "resident_bytes", (json_int_t)t.resident_bytes, "cached_bytes", (json_int_t)t.cached_bytes,
			 "held_bytes", (json_int_t)t.held_bytes, "disk_bytes", (json_int_t)t.disk_bytes,
			 "hits", (json_int_t)t.hits, "misses", (json_int_t)t.misses, "read_bytes", (json_int_t)t.read_bytes,
			 "evictions", (json_int_t)t.evictions, "failures", (json_int_t)t.failures,
			 "reads_in_flight", (int)t.reads_in_flight);
}

/* What status's text says of model idx of l beside its counters: where
 * its memory is, how far its load is, its disk tier (issue 61 item 7: the
 * text said "loading: ... (65%)", the JSON nothing of it). */
static void where_json(json_t *o, const struct wsrv_model_list *l, size_t idx, const struct wsrv_model_info *mi)
{
	struct wsrv_generation g = { 0 };

	(void)wsrv_model_list_generation(l, idx, &g);
	json_object_set_new(o, "numa", ctl_peer_str(mi->numa));
	json_object_set_new(o, "pages", ctl_peer_str(mi->pages));
	json_object_set_new(o, "loading", json_boolean(mi->loading));
	json_object_set_new(o, "failed", json_boolean(g.failed));
	json_object_set_new(o, "placed_bytes", json_integer((json_int_t)g.placed_bytes));
	json_object_set_new(o, "tensor_bytes", json_integer((json_int_t)mi->tensor_bytes));
	json_object_set_new(o, "load_seconds", json_real(mi->load_seconds));
	json_object_set_new(o, "tier", tier_json(l, idx));
}

/* status (l set) adds where each model is, as models --json has it. */
static json_t *stats_json(const struct wsrv_stats *s, const struct wsrv_model_list *l)
{
	json_t *models = json_array();
	struct wsrv_server_stats v;
	struct wsrv_model_stats m;
	struct wsrv_peer_stats ps;

	for (size_t i = 0; wsrv_stats_model(s, i, &m) == 0; i++)
		json_array_append_new(models, json_pack("{s:o, s:i, s:I, s:I, s:I, s:I, s:b, s:I, s:o}",
			"name", ctl_peer_str(m.name), "attached", (int)m.attached,
			"fetches", (json_int_t)m.fetches, "leases", (json_int_t)m.leases,
			"arena_bytes", (json_int_t)m.arena_bytes, "generation", (json_int_t)m.generation,
			"adopted", m.adopted, "disk_bytes", (json_int_t)m.disk_bytes,
			"sources", sources_json(s, i)));
	for (size_t i = 0; l && wsrv_stats_model(s, i, &m) == 0; i++) {
		struct wsrv_model_info mi;
		size_t idx = 0;
		if (info_of(l, m.name, &mi, &idx))
			where_json(json_array_get(models, i), l, idx, &mi);
	}
	wsrv_stats_server(s, &v);
	wsrv_stats_peers(s, &ps);
	return json_pack("{s:o, s:f, s:f, s:f, s:i, s:i, s:b, s:i, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:i, s:o, s:o, s:o, s:{s:i, s:I, s:I}}",
		"server_version", ctl_peer_str(v.server_version), "uptime_seconds", v.uptime_seconds,
		"started_unix", v.started_unix, "first_started_unix", v.first_started_unix,
		"clients", (int)v.clients, "max_clients", (int)v.max_clients,
		"max_clients_fitted", (int)v.max_clients_fitted, "attachments", (int)v.attachments,
		"leases", (json_int_t)v.leases, "requests", (json_int_t)v.requests,
		"errors", (json_int_t)v.errors, "declined", (json_int_t)v.declined,
		"clients_total", (json_int_t)v.clients_total,
		"arena_bytes", (json_int_t)v.arena_bytes, "rss_bytes", (json_int_t)v.rss_bytes,
		"open_fds", (int)v.open_fds, "models", models, "streams", streams_json(s),
		"regions", regions_json(s), "peers", "connections", (int)ps.connections,
		"bytes_served", (json_int_t)ps.bytes_served, "refused", (json_int_t)ps.refused);
}

/* Where each model's bytes came from, when peers gave any; and what this
 * server gave other hosts. */
static void print_sources(const struct wsrv_stats *s)
{
	struct wsrv_model_stats m;
	struct wsrv_fill_source f;
	struct wsrv_peer_stats ps;
	char b1[32];

	for (size_t i = 0; wsrv_stats_model(s, i, &m) == 0; i++) {
		if (!wsrv_stats_model_source_count(s, i))
			continue;
		printf("filled     %-20s %s from its files\n", esc(m.name), fmt_bytes(m.disk_bytes, b1, sizeof(b1)));
		for (size_t j = 0; wsrv_stats_model_source(s, i, j, &f) == 0; j++)
			printf("             from peer %s: %s, %u checksum failure%s, %u failure%s\n", esc(f.peer),
			       fmt_bytes(f.bytes, b1, sizeof(b1)), f.checksum_failures,
			       f.checksum_failures == 1 ? "" : "s", f.failures, f.failures == 1 ? "" : "s");
	}
	wsrv_stats_peers(s, &ps);
	if (ps.connections || ps.bytes_served || ps.refused)
		printf("peers      %s served to other hosts, %u connected now, %" PRIu64 " refused\n",
		       fmt_bytes(ps.bytes_served, b1, sizeof(b1)), ps.connections, ps.refused);
}

/* Where model name's memory is, from the list; "" when it is not there. */
/* Model name's entry in l, or NULL. */

/* How much of a loading model is in place, in percent. */
static double placed_pct(const struct wsrv_model_info *mi, const struct wsrv_generation *g)
{
	return mi->tensor_bytes ? 100.0 * (double)g->placed_bytes / (double)mi->tensor_bytes : 0.0;
}

/* "loading: 120.00 MiB of 247.04 MiB placed (48%)", or "loaded in 4.95 s". */
static const char *load_state(const struct wsrv_model_info *mi, const struct wsrv_generation *g,
			      char *buf, size_t len)
{
	char p[32], t[32];

	if (!mi->loading)
		snprintf(buf, len, "loaded in %.2f s", mi->load_seconds);
	else
		snprintf(buf, len, "loading: %s of %s placed (%.0f%%)", fmt_bytes(g->placed_bytes, p, sizeof(p)),
			 fmt_bytes(mi->tensor_bytes, t, sizeof(t)), placed_pct(mi, g));
	return buf;
}

/* A wall-clock time, local, to the second. */
static const char *when(double unix_s, char *buf, size_t len)
{
	time_t t = (time_t)unix_s;
	struct tm tm;

	if (!localtime_r(&t, &tm) || !strftime(buf, len, "%Y-%m-%d %H:%M:%S", &tm))
		snprintf(buf, len, "%.0f", unix_s);
	return buf;
}

static void print_regions(const struct wsrv_stats *s)
{
	struct wsrv_region_info g;
	char b[32];

	for (size_t i = 0; wsrv_stats_region(s, i, &g) == 0; i++)
		printf("region     %u: model %s on %s (%s), %s, %u holder%s, %s, written by pid %u, %" PRIu64 " waited\n",
		       g.id, esc(g.model), esc(g.device), region_kind(g.kind), fmt_bytes(g.bytes, b, sizeof(b)),
		       g.holders, g.holders == 1 ? "" : "s", g.committed ? "committed" : "filling",
		       g.writer_pid, g.waits);
}

/* A model's disk tier (wsrvd --memory-budget), when it has one. */
static void print_tier(const struct wsrv_model_list *l, size_t i)
{
	struct wsrv_tier_info t;
	char b[7][32];

	if (wsrv_model_list_tier(l, i, &t) < 0 || !t.budget)
		return;
	printf("  tier     budget %s (peak %s): %s resident, %s cached (%s held), %s on disk only\n",
	       fmt_bytes(t.budget, b[0], 32), fmt_bytes(t.peak_bytes, b[6], 32), fmt_bytes(t.resident_bytes, b[1], 32),
	       fmt_bytes(t.cached_bytes, b[2], 32), fmt_bytes(t.held_bytes, b[3], 32), fmt_bytes(t.disk_bytes, b[4], 32));
	printf("           %" PRIu64 " hits, %" PRIu64 " misses, %s read from disk, %" PRIu64 " evictions, %" PRIu64
	       " failed reads, %u in flight\n", t.hits, t.misses, fmt_bytes(t.read_bytes, b[5], 32), t.evictions,
	       t.failures, t.reads_in_flight);
}


static void print_stats(const struct wsrv_stats *s, const struct wsrv_model_list *l)
{
	struct wsrv_server_stats v;
	struct wsrv_model_stats m;
	struct wsrv_stream_record r;
	char b1[32], b2[32];

	wsrv_stats_server(s, &v);
	printf("server     wsrvd %s, started %s, up %.1f s", esc(v.server_version),
	       when(v.started_unix, b1, sizeof(b1)), v.uptime_seconds);
	if (v.first_started_unix > 0 && v.first_started_unix < v.started_unix - 0.5)
		printf(" (models served since %s)", when(v.first_started_unix, b2, sizeof(b2)));
	putchar('\n');
	printf("clients    %u now (one is this wsrvctl), %" PRIu64 " since start", v.clients, v.clients_total);
	if (v.max_clients)
		printf(", at most %u%s", v.max_clients,
		       v.max_clients_fitted ? " (fitted to RLIMIT_NOFILE; --max-clients or LimitNOFILE= to change)" : "");
	putchar('\n');
	printf("memory     %s of arenas, %s resident in the server\n",
	       fmt_bytes(v.arena_bytes, b1, sizeof(b1)), fmt_bytes(v.rss_bytes, b2, sizeof(b2)));
	printf("requests   %" PRIu64 " (%" PRIu64 " errors", v.requests, v.errors);
	if (v.declined) /* a quota or a wait, asked again: not an error */
		printf(", %" PRIu64 " turned away for now and asked again", v.declined);
	printf("); %u attachments, %" PRIu64 " leases, %u open fds\n", v.attachments, v.leases, v.open_fds);
	for (size_t i = 0; wsrv_stats_model(s, i, &m) == 0; i++) {
		struct wsrv_model_info mi;
		struct wsrv_generation g;
		size_t idx = 0;
		bool known = info_of(l, m.name, &mi, &idx) && wsrv_model_list_generation(l, idx, &g) == 0;
		char st[128];
		printf("model      %-20s generation %" PRIu64 "%s, %u attached, %" PRIu64 " fetches, %" PRIu64 " leases%s%s\n",
		       esc(m.name), m.generation, m.adopted ? " (adopted)" : "", m.attached, m.fetches,
		       m.leases, known ? ", " : "", known ? esc(mi.numa) : "");
		if (known)
			printf("  load     %s\n", load_state(&mi, &g, st, sizeof(st)));
		if (known && mi.pages[0])
			printf("  pages    %s\n", esc(mi.pages));
		if (known)
			print_tier(l, idx);
	}
	print_sources(s);
	for (size_t i = 0; wsrv_stats_stream(s, i, &r) == 0; i++) {
		printf("stream     client %" PRIu64 " (pid %u, %s) on %s: %" PRIu64 " passes, %s copied in %.3f s, waited %.3f s, %.1f%% hidden, %u slots\n",
		       r.client_id, r.pid, esc(r.client), esc(r.model), r.passes,
		       fmt_bytes(r.bytes_copied, b1, sizeof(b1)), r.copy_seconds, r.wait_seconds,
		       100 * r.hidden_fraction, r.slots);
		printf("             device %s, of which %s shared (%s)\n", fmt_bytes(r.device_bytes, b1, sizeof(b1)),
		       fmt_bytes(r.shared_bytes, b2, sizeof(b2)), role_name(r.share_role));
		if (r.expert_slots)
			printf("             experts on demand: %u slots, %" PRIu64 " hits, %" PRIu64 " misses (%.1f%% hit)\n",
			       r.expert_slots, r.expert_hits, r.expert_misses,
			       r.expert_hits + r.expert_misses ? 100.0 * (double)r.expert_hits / (double)(r.expert_hits + r.expert_misses) : 0.0);
	}
	print_regions(s);
}

/* status and stats: the same counters, status adds where each model is. */
static int stats_cmd(const struct ctl_ctx *c, bool status)
{
	struct wsrv_model_list *l = NULL;
	struct wsrv_stats *s;
	struct wsrv_client *cl;

	if (ctl_connect(c, &cl))
		return 1;
	if (wsrv_stats(cl, &s) < 0) {
		fprintf(stderr, "wsrvctl: %s\n", wsrv_last_error());
		wsrv_disconnect(cl);
		return 1;
	}
	if (status && wsrv_list_models(cl, &l) < 0) { /* (issue 60 item 9: s leaked here) */
		fprintf(stderr, "wsrvctl: %s\n", wsrv_last_error());
		wsrv_stats_free(s);
		wsrv_disconnect(cl);
		return 1;
	}
	wsrv_disconnect(cl);
	if (c->json)
		ctl_print_json(stats_json(s, l));
	else
		print_stats(s, l);
	wsrv_stats_free(s);
	wsrv_model_list_free(l);
	return 0;
}

/* Commands that take no arguments refuse extra ones. */
static int no_args(const char *cmd, int argc, char **argv)
{
	if (argc == 1)
		return 0;
	fprintf(stderr, "wsrvctl: %s takes no arguments (got '%s')\n", cmd, argv[1]);
	return 2;
}

int ctl_status(const struct ctl_ctx *c, int argc, char **argv)
{
	return no_args("status", argc, argv) ?: stats_cmd(c, true);
}

int ctl_stats(const struct ctl_ctx *c, int argc, char **argv)
{
	return no_args("stats", argc, argv) ?: stats_cmd(c, false);
}

static json_t *models_json(const struct wsrv_model_list *l)
{
	json_t *a = json_array();
	struct wsrv_model_info mi;

	for (size_t i = 0; wsrv_model_list_at(l, i, &mi) == 0; i++) {
		struct wsrv_generation g;
		json_t *pids = json_array();
		wsrv_model_list_generation(l, i, &g);
		for (uint32_t k = 0; k < g.nholders; k++)
			json_array_append_new(pids, json_integer(g.holder_pids[k]));
		json_array_append_new(a, json_pack("{s:o, s:o, s:I, s:I, s:i, s:i, s:i, s:I, s:o, s:o, s:f, s:i, s:I, s:b, s:o, s:o}",
			"name", ctl_peer_str(mi.name), "path", ctl_peer_str(mi.path),
			"tensor_bytes", (json_int_t)mi.tensor_bytes, "arena_bytes", (json_int_t)mi.arena_bytes,
			"tensors", (int)mi.tensors, "layers", (int)mi.layers, "segments", (int)mi.segments,
			"page_size", (json_int_t)mi.page_size, "pages", ctl_peer_str(mi.pages),
			"numa", ctl_peer_str(mi.numa),
			"load_seconds", mi.load_seconds, "attached", (int)mi.attached,
			"generation", (json_int_t)g.generation, "retired", g.retired, "holder_pids", pids,
			"reload", ctl_peer_str(g.reload)));
		json_object_set_new(json_array_get(a, json_array_size(a) - 1), "loading", json_boolean(mi.loading));
		json_object_set_new(json_array_get(a, json_array_size(a) - 1), "failed", json_boolean(g.failed));
		json_object_set_new(json_array_get(a, json_array_size(a) - 1), "tier", tier_json(l, i));
		json_object_set_new(json_array_get(a, json_array_size(a) - 1), "placed_bytes",
				    json_integer((json_int_t)g.placed_bytes));
		if (mi.held_world)
			json_object_set_new(json_array_get(a, json_array_size(a) - 1), "held",
					    json_pack("{s:[i,i], s:i, s:I}", "ranks", (int)mi.held_first,
						      (int)mi.held_last, "world", (int)mi.held_world,
						      "bytes", (json_int_t)mi.held_bytes));
	}
	return a;
}

int ctl_models(const struct ctl_ctx *c, int argc, char **argv)
{
	struct wsrv_model_list *l;
	struct wsrv_model_info mi;
	struct wsrv_client *cl;
	char b[32];

	if (no_args("models", argc, argv))
		return 2;
	if (ctl_connect(c, &cl))
		return 1;
	if (wsrv_list_models(cl, &l) < 0) {
		fprintf(stderr, "wsrvctl: %s\n", wsrv_last_error());
		wsrv_disconnect(cl);
		return 1;
	}
	wsrv_disconnect(cl);
	if (c->json) {
		ctl_print_json(models_json(l));
		wsrv_model_list_free(l);
		return 0;
	}
	printf("%-20s %4s %-12s %8s %7s %12s %8s %8s  %s\n", "MODEL", "GEN", "STATE", "TENSORS", "LAYERS", "BYTES",
	       "PAGE", "ATTACHED", "NUMA");
	for (size_t i = 0; wsrv_model_list_at(l, i, &mi) == 0; i++) {
		struct wsrv_generation g;
		char st[24], pg[32];
		wsrv_model_list_generation(l, i, &g);
		if (g.failed)
			snprintf(st, sizeof(st), "FAILED");
		else if (mi.loading)
			snprintf(st, sizeof(st), "loading %.0f%%", placed_pct(&mi, &g));
		else
			snprintf(st, sizeof(st), "%s", g.retired ? "replaced" : "ready");
		printf("%-20s %4" PRIu64 " %-12s %8u %7u %12s %8s %8u  %s%s\n", esc(mi.name), g.generation, st,
		       mi.tensors, mi.layers, fmt_bytes(mi.tensor_bytes, b, sizeof(b)),
		       fmt_bytes(mi.page_size, pg, sizeof(pg)), mi.attached, esc(mi.numa),
		       g.retired ? "  (kept while attached)" : "");
		if (mi.held_world)
			printf("%-20s ranks %u-%u of %u: %s held\n", "", mi.held_first, mi.held_last, mi.held_world,
			       fmt_bytes(mi.held_bytes, b, sizeof(b)));
		if (g.nholders) {
			printf("%-20s held by pid", "");
			for (uint32_t k = 0; k < g.nholders; k++)
				printf(" %u", g.holder_pids[k]);
			putchar('\n');
		}
		if (*g.reload)
			printf("%-20s load: %s\n", "", esc(g.reload));
	}
	wsrv_model_list_free(l);
	return 0;
}
