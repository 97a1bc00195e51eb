// SPDX-License-Identifier: MIT
/* ctl_server.c - wsrvctl's commands that talk to a running wsrvd through
 * libwsrv: status, models, tensors, layers, stats, verify, dump. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include "ctl.h"
#include "cliarg.h"
#include "escape.h"
#include "cliarg.h"
#include "units.h"
#include "wsrv.h"

static int connect_or_fail(const struct ctl_ctx *c, struct wsrv_client **cl)
{
	struct wsrv_connect_opts o = { .client_name = "wsrvctl", .numa_node = -1 };

	if (wsrv_connect(c->socket, &o, cl) < 0) {
		fprintf(stderr, "wsrvctl: %s\n", wsrv_last_error());
		return 1;
	}
	return 0;
}

static void print_json(json_t *j)
{
	json_dumpf(j, stdout, JSON_INDENT(2));
	putchar('\n');
	json_decref(j);
}

/* A string a peer chose, for JSON: as it is when it is UTF-8, else escaped
 * (jansson refuses it, and the entry would vanish without a word). */
static json_t *peer_str(const char *s)
{
	char buf[1024];

	return json_string(s) ?: json_string(str_escape(s, buf, sizeof(buf)));
}

static json_t *stats_json(const struct wsrv_stats *s)
{
	json_t *models = json_array(), *streams = json_array();

	for (size_t i = 0; i < s->nstreams; i++)
		json_array_append_new(streams, json_pack("{s:I, s:i, s:o, s:o, s:I, s:I, s:f, s:f, s:f, s:i}",
			"client_id", (json_int_t)s->streams[i].client_id, "pid", (int)s->streams[i].pid,
			"client", peer_str(s->streams[i].client), "model", peer_str(s->streams[i].model),
			"passes", (json_int_t)s->streams[i].passes,
			"bytes_copied", (json_int_t)s->streams[i].bytes_copied,
			"copy_seconds", s->streams[i].copy_seconds, "wait_seconds", s->streams[i].wait_seconds,
			"hidden_fraction", s->streams[i].hidden_fraction, "slots", (int)s->streams[i].slots));

	for (size_t i = 0; i < s->nmodels; i++)
		json_array_append_new(models, json_pack("{s:o, s:i, s:I, s:I, s:I}",
			"name", peer_str(s->models[i].name), "attached", (int)s->models[i].attached,
			"fetches", (json_int_t)s->models[i].fetches, "leases", (json_int_t)s->models[i].leases,
			"arena_bytes", (json_int_t)s->models[i].arena_bytes));
	return json_pack("{s:s, s:f, s:i, s:i, s:I, s:I, s:I, s:I, s:I, s:I, s:i, s:o, s:o}",
		"server_version", s->server_version, "uptime_seconds", s->uptime_seconds,
		"clients", (int)s->clients, "attachments", (int)s->attachments,
		"leases", (json_int_t)s->leases, "requests", (json_int_t)s->requests,
		"errors", (json_int_t)s->errors, "clients_total", (json_int_t)s->clients_total,
		"arena_bytes", (json_int_t)s->arena_bytes, "rss_bytes", (json_int_t)s->rss_bytes,
		"open_fds", (int)s->open_fds, "models", models, "streams", streams);
}

/* status and stats: the same counters, status adds the models' details. */
static int stats_cmd(const struct ctl_ctx *c, bool status)
{
	struct wsrv_model_info mi[WSRV_STATS_MAX_MODELS];
	struct wsrv_client *cl;
	struct wsrv_stats s;
	size_t n = 0;
	char b1[32], b2[32];

	if (connect_or_fail(c, &cl))
		return 1;
	if (wsrv_stats(cl, &s) < 0 || (status && wsrv_list_models(cl, mi, WSRV_STATS_MAX_MODELS, &n) < 0)) {
		fprintf(stderr, "wsrvctl: %s\n", wsrv_last_error());
		wsrv_disconnect(cl);
		return 1;
	}
	wsrv_disconnect(cl);
	if (c->json) {
		print_json(stats_json(&s));
		return 0;
	}
	printf("server     wsrvd %s, up %.1f s\n", s.server_version, s.uptime_seconds);
	printf("clients    %u now (one is this wsrvctl), %" PRIu64 " since start\n", s.clients, s.clients_total);
	printf("memory     %s of arenas, %s resident in the server\n",
	       fmt_bytes(s.arena_bytes, b1, sizeof(b1)), fmt_bytes(s.rss_bytes, b2, sizeof(b2)));
	printf("requests   %" PRIu64 " (%" PRIu64 " errors); %u attachments, %" PRIu64 " leases, %u open fds\n",
	       s.requests, s.errors, s.attachments, s.leases, s.open_fds);
	for (size_t i = 0; i < s.nmodels; i++)
		printf("model      %-20s %u attached, %" PRIu64 " fetches, %" PRIu64 " leases%s%s\n",
		       esc(s.models[i].name), s.models[i].attached, s.models[i].fetches, s.models[i].leases,
		       status && i < n ? ", " : "", status && i < n ? mi[i].numa : "");
	for (size_t i = 0; i < s.nstreams; i++)
		printf("stream     client %" PRIu64 " (pid %u, %s) on %s: %" PRIu64 " passes, %s copied in %.3f s, waited %.3f s, %.1f%% hidden, %u slots\n",
		       s.streams[i].client_id, s.streams[i].pid, esc(s.streams[i].client), esc(s.streams[i].model),
		       s.streams[i].passes, fmt_bytes(s.streams[i].bytes_copied, b1, sizeof(b1)),
		       s.streams[i].copy_seconds, s.streams[i].wait_seconds,
		       100 * s.streams[i].hidden_fraction, s.streams[i].slots);
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

static int cmd_status(const struct ctl_ctx *c, int argc, char **argv)
{
	return no_args("status", argc, argv) ?: stats_cmd(c, true);
}

static int cmd_stats(const struct ctl_ctx *c, int argc, char **argv)
{
	return no_args("stats", argc, argv) ?: stats_cmd(c, false);
}

static int cmd_models(const struct ctl_ctx *c, int argc, char **argv)
{
	struct wsrv_model_info mi[WSRV_STATS_MAX_MODELS];
	struct wsrv_client *cl;
	size_t n = 0;
	char b[32];

	if (no_args("models", argc, argv))
		return 2;

	if (connect_or_fail(c, &cl))
		return 1;
	if (wsrv_list_models(cl, mi, WSRV_STATS_MAX_MODELS, &n) < 0) {
		fprintf(stderr, "wsrvctl: %s\n", wsrv_last_error());
		wsrv_disconnect(cl);
		return 1;
	}
	wsrv_disconnect(cl);
	if (c->json) {
		json_t *a = json_array();
		for (size_t i = 0; i < n && i < WSRV_STATS_MAX_MODELS; i++)
			json_array_append_new(a, json_pack("{s:o, s:o, s:I, s:I, s:i, s:i, s:i, s:I, s:s, s:f, s:i}",
				"name", peer_str(mi[i].name), "path", peer_str(mi[i].path), "tensor_bytes", (json_int_t)mi[i].tensor_bytes,
				"arena_bytes", (json_int_t)mi[i].arena_bytes, "tensors", (int)mi[i].tensors,
				"layers", (int)mi[i].layers, "segments", (int)mi[i].segments,
				"page_size", (json_int_t)mi[i].page_size, "numa", mi[i].numa,
				"load_seconds", mi[i].load_seconds, "attached", (int)mi[i].attached));
		print_json(a);
		return 0;
	}
	printf("%-20s %8s %7s %12s %9s %8s  %s\n", "MODEL", "TENSORS", "LAYERS", "BYTES", "PAGE", "ATTACHED", "NUMA");
	for (size_t i = 0; i < n && i < WSRV_STATS_MAX_MODELS; i++)
		printf("%-20s %8u %7u %12s %9" PRIu64 " %8u  %s\n", esc(mi[i].name), mi[i].tensors, mi[i].layers,
		       fmt_bytes(mi[i].tensor_bytes, b, sizeof(b)), mi[i].page_size, mi[i].attached, mi[i].numa);
	return 0;
}

/* Connects and attaches to argv[1]; prints the reason and returns 1 on
 * failure. */
static int open_model(const struct ctl_ctx *c, const char *name, struct wsrv_client **cl,
		      struct wsrv_model **m)
{
	if (connect_or_fail(c, cl))
		return 1;
	if (wsrv_attach(*cl, name, m) < 0) {
		fprintf(stderr, "wsrvctl: %s\n", wsrv_last_error());
		wsrv_disconnect(*cl);
		return 1;
	}
	return 0;
}

static int cmd_tensors(const struct ctl_ctx *c, int argc, char **argv)
{
	struct wsrv_client *cl;
	struct wsrv_model *m;
	bool filter = false;
	long layer = 0;
	json_t *a = json_array();
	char shape[96];

	if (argc == 4 && strcmp(argv[2], "--layer") == 0) {
		filter = true;
		layer = cliarg_long("wsrvctl", "--layer", argv[3], -1, INT32_MAX);
	} else if (argc != 2) {
		fprintf(stderr, "usage: wsrvctl tensors MODEL [--layer N]\n");
		json_decref(a);
		return 2;
	}
	if (open_model(c, argv[1], &cl, &m)) {
		json_decref(a);
		return 1;
	}
	if (!c->json)
		printf("%-60s %-8s %-20s %6s %12s\n", "TENSOR", "DTYPE", "SHAPE", "LAYER", "BYTES");
	for (size_t i = 0; i < wsrv_model_tensor_count(m); i++) {
		struct wsrv_tensor t;
		wsrv_model_tensor(m, i, &t);
		if (filter && t.layer != layer)
			continue;
		fmt_shape(t.shape, t.rank, shape, sizeof(shape));
		if (c->json) {
			json_t *dims = json_array();
			char sum[17];
			for (uint32_t d = 0; d < t.rank; d++)
				json_array_append_new(dims, json_integer((json_int_t)t.shape[d]));
			snprintf(sum, sizeof(sum), "%016" PRIx64, t.xxh3);
			json_array_append_new(a, json_pack("{s:o, s:s, s:o, s:i, s:I, s:s}", "name", peer_str(t.name),
				"dtype", wsrv_dtype_name(t.dtype), "shape", dims, "layer", t.layer,
				"bytes", (json_int_t)t.size, "xxh3", sum));
		} else
			printf("%-60s %-8s %-20s %6d %12" PRIu64 "\n", esc(t.name), wsrv_dtype_name(t.dtype), shape,
			       t.layer, t.size);
	}
	if (c->json)
		print_json(a);
	else
		json_decref(a);
	wsrv_detach(m);
	wsrv_disconnect(cl);
	return 0;
}

static int cmd_layers(const struct ctl_ctx *c, int argc, char **argv)
{
	struct wsrv_client *cl;
	struct wsrv_model *m;
	json_t *a = json_array();

	if (argc != 2) {
		fprintf(stderr, "usage: wsrvctl layers MODEL\n");
		json_decref(a);
		return 2;
	}
	if (open_model(c, argv[1], &cl, &m)) {
		json_decref(a);
		return 1;
	}
	if (!c->json)
		printf("%-8s %8s %14s %8s %14s %14s\n", "LAYER", "TENSORS", "BYTES", "SEGMENT", "OFFSET", "LENGTH");
	for (size_t i = 0; i < wsrv_model_layer_count(m); i++) {
		struct wsrv_layer l;
		wsrv_model_layer_at(m, i, &l);
		if (c->json)
			json_array_append_new(a, json_pack("{s:i, s:i, s:I, s:i, s:I, s:I}", "layer", l.index,
				"tensors", (int)l.count, "bytes", (json_int_t)l.bytes, "segment", (int)l.segment,
				"offset", (json_int_t)l.offset, "length", (json_int_t)l.length));
		else if (l.index == WSRV_LAYER_GLOBAL)
			printf("%-8s %8u %14" PRIu64 " %8u %14" PRIu64 " %14" PRIu64 "\n", "global", l.count,
			       l.bytes, l.segment, l.offset, l.length);
		else
			printf("%-8d %8u %14" PRIu64 " %8u %14" PRIu64 " %14" PRIu64 "\n", l.index, l.count,
			       l.bytes, l.segment, l.offset, l.length);
	}
	if (c->json)
		print_json(a);
	else
		json_decref(a);
	wsrv_detach(m);
	wsrv_disconnect(cl);
	return 0;
}

static int cmd_verify(const struct ctl_ctx *c, int argc, char **argv)
{
	struct wsrv_client *cl;
	struct wsrv_model *m;
	size_t bad = 0, n;
	uint64_t bytes = 0;
	long hold = 0;
	char b[32];

	if (argc == 4 && strcmp(argv[2], "--hold") == 0)
		hold = cliarg_long("wsrvctl", "--hold", argv[3], 0, 86400 * 365);
	else if (argc != 2) {
		fprintf(stderr, "usage: wsrvctl verify MODEL [--hold SECONDS]\n");
		return 2;
	}
	if (open_model(c, argv[1], &cl, &m))
		return 1;
	n = wsrv_model_tensor_count(m);
	for (size_t i = 0; i < n; i++) {
		struct wsrv_tensor t;
		wsrv_model_tensor(m, i, &t);
		bytes += t.size;
		if (XXH3_64bits(t.data, t.size) != t.xxh3) {
			if (bad++ < 10)
				fprintf(stderr, "wsrvctl: tensor %s: checksum mismatch\n", t.name);
		}
	}
	if (c->json)
		print_json(json_pack("{s:s, s:I, s:I, s:I, s:b}", "model", argv[1], "tensors", (json_int_t)n,
				     "bytes", (json_int_t)bytes, "mismatches", (json_int_t)bad, "ok", bad == 0));
	else
		printf("%s: %zu tensors, %s checked in the shared mapping: %s\n", argv[1], n,
		       fmt_bytes(bytes, b, sizeof(b)), bad ? "MISMATCH" : "all checksums match");
	fflush(stdout);
	if (hold > 0)
		sleep((unsigned)hold);
	wsrv_detach(m);
	wsrv_disconnect(cl);
	return bad ? 1 : 0;
}

/* The bytes of tensor name as rank of world sees them under plan_path:
 * through a stream on the host device, as a worker would have them. */
static int dump_view(struct wsrv_model *m, const char *name, const char *plan_path, int rank,
		     int world, const char *outp)
{
	struct wsrv_stream_opts so = { .slots = 1, .rank = rank, .world = world };
	struct wsrv_plan *p = NULL;
	struct wsrv_device *d = NULL;
	struct wsrv_stream *s = NULL;
	struct wsrv_tensor t;
	struct wsrv_view v;
	void *dev;
	int fd, r = 1;

	if (wsrv_model_find(m, name, &t) < 0 || wsrv_plan_load(plan_path, &p) < 0 ||
	    wsrv_device_host(NULL, &d) < 0 || wsrv_stream_open(m, d, p, &so, &s) < 0 ||
	    wsrv_stream_acquire(s, t.layer) < 0 || wsrv_stream_tensor(s, name, &dev) < 0) {
		fprintf(stderr, "wsrvctl: %s\n", wsrv_last_error());
	} else {
		/* By name: an empty tensor can share its address with the next. */
		for (size_t i = 0; i < wsrv_model_tensor_count(m); i++) {
			struct wsrv_tensor x;
			wsrv_model_tensor(m, i, &x);
			if (strcmp(x.name, name) == 0) {
				wsrv_stream_view(s, i, &v);
				break;
			}
		}
		fd = open(outp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
		if (fd < 0 || write(fd, dev, v.bytes) != (ssize_t)v.bytes || close(fd) < 0)
			fprintf(stderr, "wsrvctl: %s: %s\n", outp, strerror(errno));
		else
			r = 0;
	}
	wsrv_stream_close(s);
	wsrv_device_destroy(d);
	wsrv_plan_free(p);
	return r;
}

static int cmd_dump(const struct ctl_ctx *c, int argc, char **argv)
{
	const char *outp = NULL, *plan = NULL;
	struct wsrv_client *cl;
	struct wsrv_model *m;
	struct wsrv_tensor t;
	int fd, r = 0, rank = 0, world = 1;
	bool tp = false;

	for (int i = 3; i + 1 < argc; i += 2) {
		if (strcmp(argv[i], "-o") == 0)
			outp = argv[i + 1];
		else if (strcmp(argv[i], "--plan") == 0)
			plan = argv[i + 1];
		else if (strcmp(argv[i], "--rank") == 0)
			rank = (int)cliarg_long("wsrvctl", "--rank", argv[i + 1], 0, 4095), tp = true;
		else if (strcmp(argv[i], "--world") == 0)
			world = (int)cliarg_long("wsrvctl", "--world", argv[i + 1], 1, 4096), tp = true;
		else
			outp = NULL, i = argc;
	}
	if (argc < 5 || argc % 2 == 0 || !outp || world < 1 || rank < 0 || rank >= world) {
		fprintf(stderr, "usage: wsrvctl dump MODEL TENSOR [--plan FILE --rank R --world W] -o FILE\n");
		return 2;
	}
	if (tp && !plan) {
		fprintf(stderr, "wsrvctl: dump: --rank and --world need --plan (without it the whole tensor is dumped)\n");
		return 2;
	}
	if (open_model(c, argv[1], &cl, &m))
		return 1;
	if (plan) {
		r = dump_view(m, argv[2], plan, rank, world, outp);
	} else if (wsrv_model_find(m, argv[2], &t) < 0) {
		fprintf(stderr, "wsrvctl: %s\n", wsrv_last_error());
		r = 1;
	} else if ((fd = open(outp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)) < 0 ||
		   write(fd, t.data, t.size) != (ssize_t)t.size || close(fd) < 0) {
		fprintf(stderr, "wsrvctl: %s: %s\n", outp, strerror(errno));
		r = 1;
	}
	wsrv_detach(m);
	wsrv_disconnect(cl);
	return r;
}

const struct ctl_command ctl_server_commands[] = {
	{ "status", cmd_status, "status                server version, uptime, clients, models, memory" },
	{ "models", cmd_models, "models                the models served" },
	{ "tensors", cmd_tensors, "tensors MODEL [--layer N]  a model's tensors" },
	{ "layers", cmd_layers, "layers MODEL          a model's layers and their extents" },
	{ "stats", cmd_stats, "stats                 the server's counters" },
	{ "verify", cmd_verify, "verify MODEL [--hold S]  check every checksum in the shared mapping" },
	{ "dump", cmd_dump, "dump MODEL TENSOR [--plan F --rank R --world W] -o FILE  the bytes as a worker (rank) sees them" },
	{ "plan", ctl_plan, "plan MODEL --plan FILE [--rank R --world W]  where each tensor lives, device memory" },
	{ NULL, NULL, NULL },
};
