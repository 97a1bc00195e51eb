// SPDX-License-Identifier: MIT
/* ctl_inspect.c - `wsrvctl inspect PATH`: validate a file or model directory
 * offline and list its tensors and layers. */
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctl.h"
#include "ctl_budget.h"
#include "escape.h"
#include "format_door.h"
#include "loaded_door.h"
#include "units.h"

static void layer_str(int32_t l, char *buf, size_t len)
{
	if (l == LAYER_GLOBAL)
		snprintf(buf, len, "global");
	else
		snprintf(buf, len, "%d", l);
}

static void print_table(const struct model *m)
{
	char shape[96], layer[16], b[32];
	size_t numbered = 0;

	for (size_t i = 0; i < m->nlayers; i++)
		numbered += m->layers[i].index != LAYER_GLOBAL;
	printf("%-60s %-8s %-20s %-6s %12s %12s  %s\n", "TENSOR", "DTYPE", "SHAPE", "LAYER", "BYTES",
	       m->held ? "HELD" : "", "FILE");
	for (size_t i = 0; i < m->ntensors; i++) {
		const struct model_tensor *t = &m->tensors[i];
		char held[24] = "";
		fmt_shape(t->shape, t->rank, shape, sizeof(shape));
		layer_str(t->layer, layer, sizeof(layer));
		if (m->held)
			snprintf(held, sizeof(held), "%" PRIu64, t->part_len);
		printf("%-60s %-8s %-20s %-6s %12" PRIu64 " %12s  %s\n", esc(t->name), dtype_name(t->dtype),
		       shape, layer, t->size, held, m->files[t->file]->label);
	}
	printf("\n%-8s %8s %14s %8s %14s\n", "LAYER", "TENSORS", "BYTES", "SEGMENT", "OFFSET");
	for (size_t i = 0; i < m->nlayers; i++) {
		const struct model_layer *l = &m->layers[i];
		layer_str(l->index, layer, sizeof(layer));
		printf("%-8s %8u %14" PRIu64 " %8u %14" PRIu64 "\n", layer, l->count, l->bytes,
		       l->segment, l->offset);
	}
	printf("\n%zu tensors, %zu layers%s, %s in %zu file%s, %u segment%s: valid\n", m->ntensors, numbered,
	       m->nlayers > numbered ? " + the global group" : "", fmt_bytes(m->data_bytes, b, sizeof(b)),
	       m->nfiles, m->nfiles == 1 ? "" : "s", m->nsegments, m->nsegments == 1 ? "" : "s");
	if (m->held) {
		char h[32];
		printf("ranks %u-%u of %u (%u stage%s) load %s of the model's %s (%.1f%%)\n", m->held->first,
		       m->held->last, m->held->world, m->held->stages, m->held->stages == 1 ? "" : "s",
		       fmt_bytes(m->held->bytes, h, sizeof(h)), b,
		       m->data_bytes ? 100.0 * (double)m->held->bytes / (double)m->data_bytes : 100.0);
	}
}

static json_t *tensor_json(const struct model *m, const struct model_tensor *t)
{
	json_t *shape = json_array(), *o;

	for (uint32_t d = 0; d < t->rank; d++)
		json_array_append_new(shape, json_integer((json_int_t)t->shape[d]));
	o = json_pack("{s:s, s:s, s:o, s:i, s:I, s:s, s:I, s:i, s:I}", "name", t->name,
			 "dtype", dtype_name(t->dtype), "shape", shape, "layer", t->layer,
			 "bytes", (json_int_t)t->size, "file", m->files[t->file]->label,
			 "file_offset", (json_int_t)t->file_off, "segment", (int)t->segment,
			 "offset", (json_int_t)t->offset);
	if (o && m->held)
		json_object_set_new(o, "held", json_pack("{s:I, s:I}", "offset", (json_int_t)t->part_off,
								  "bytes", (json_int_t)t->part_len));
	return o;
}

static json_t *inspect_json(const struct model *m)
{
	json_t *ts = json_array(), *ls = json_array(), *root;

	for (size_t i = 0; i < m->ntensors; i++)
		json_array_append_new(ts, tensor_json(m, &m->tensors[i]));
	for (size_t i = 0; i < m->nlayers; i++) {
		const struct model_layer *l = &m->layers[i];
		json_array_append_new(ls, json_pack("{s:i, s:i, s:I, s:i, s:I, s:I}",
			"layer", l->index, "tensors", (int)l->count, "bytes", (json_int_t)l->bytes,
			"segment", (int)l->segment, "offset", (json_int_t)l->offset,
			"length", (json_int_t)l->length));
	}
	root = json_pack("{s:s, s:b, s:I, s:I, s:i, s:o, s:o}", "path", m->path, "valid", 1,
			 "files", (json_int_t)m->nfiles, "tensor_bytes", (json_int_t)m->data_bytes,
			 "segments", (int)m->nsegments, "tensors", ts, "layers", ls);
	if (m->held)
		json_object_set_new(root, "held", model_held_json(m->held));
	if (m->config)
		json_object_set(root, "config", m->config);
	return root;
}

/* Whether the load option called name changes the layout inspect shows;
 * the others (reading, memory) are refused, not ignored. */
static bool lays_out(const char *name)
{
	static const char *const ok[] = { "layer-pattern", "plan", "ranks", "world", "align", "max-segment",
					  "memory-budget", NULL };

	for (size_t i = 0; ok[i]; i++)
		if (strcmp(name, ok[i]) == 0)
			return true;
	return false;
}

/* wsrvd's load options and inspect's own: --serve-when-loaded. */
#define OPT_SERVE_LATE 0x1001
static struct option inspect_options[LOAD_OPTIONS_COUNT + 2];

static const struct option *options(void)
{
	memcpy(inspect_options, load_long_options, sizeof(struct option) * LOAD_OPTIONS_COUNT);
	inspect_options[LOAD_OPTIONS_COUNT] = (struct option){ "serve-when-loaded", no_argument, NULL, OPT_SERVE_LATE };
	return inspect_options;
}

int ctl_inspect(const struct ctl_ctx *c, int argc, char **argv)
{
	const struct option *opts = options();
	struct load_opts lo = { 0 };
	struct model *m;
	struct errinfo e;
	bool whole = false;
	int opt, r, li = 0;

	optind = 1;
	while ((opt = getopt_long(argc, argv, "", opts, &li)) != -1) {
		if (opt == '?' || opt == ':') { /* getopt said why (a missing argument too) */
			fprintf(stderr, "see wsrvctl inspect --help\n");
			load_args_free(&lo);
			return 2;
		}
		if (opt == OPT_SERVE_LATE) {
			whole = true;
			continue;
		}
		if (!lays_out(opts[li].name)) {
			fprintf(stderr, "wsrvctl inspect: --%s does not change what inspect shows (it takes "
				"--layer-pattern, --plan, --ranks, --world, --align, --max-segment, --memory-budget, "
				"--serve-when-loaded)\n", opts[li].name);
			load_args_free(&lo);
			return 2;
		}
		r = load_args_handle(opt, optarg, &lo, &e);
		if (r <= 0) {
			fprintf(stderr, "wsrvctl inspect: %s\n", r < 0 ? e.msg : "unknown option");
			load_args_free(&lo);
			return 2;
		}
	}
	if (optind + 1 != argc || load_args_check(&lo, &e) < 0) {
		if (optind + 1 == argc)
			fprintf(stderr, "wsrvctl inspect: %s\n", e.msg);
		fprintf(stderr, "usage: wsrvctl inspect PATH [--json] [--layer-pattern PAT] [--plan P --ranks A-B --world W]\n"
				"                       [--align SIZE] [--max-segment SIZE] [--memory-budget SIZE]\n");
		load_args_free(&lo);
		return 2;
	}
	/* As wsrvd lays it out: by default it serves while loading, in
	 * LOAD_EARLY_SEGMENTS runs of layers (fewer only for an unprivileged
	 * wsrvd whose RLIMIT_NOFILE is low: it says so); with
	 * --serve-when-loaded (or peers) whole. A budget lays out each routed
	 * expert on pages of its own, and always serves while loading. */
	uint64_t budget = lo.memory_budget;
	lo.model.expert_pages = budget != 0;
	if (whole && budget) {
		fprintf(stderr, "wsrvctl inspect: --memory-budget serves while loading: not with --serve-when-loaded "
			"(as wsrvd refuses it)\n");
		load_args_free(&lo);
		return 2;
	}
	if (!whole)
		lo.model.layer_segments = LOAD_EARLY_SEGMENTS;
	r = model_open("inspect", argv[optind], &lo.model, &m, &e);
	load_args_free(&lo);
	if (r < 0) {
		fprintf(stderr, "wsrvctl inspect: invalid: %s\n", e.msg);
		return 1;
	}
	json_t *root = c->json ? inspect_json(m) : NULL;
	if (!c->json)
		print_table(m);
	r = budget ? ctl_budget(m, budget, root) : 0;
	if (root) {
		json_dumpf(root, stdout, JSON_INDENT(2));
		putchar('\n');
		json_decref(root);
	}
	model_free(m);
	return r;
}
