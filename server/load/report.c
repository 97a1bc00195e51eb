// SPDX-License-Identifier: MIT
/* report.c - describing a loaded model. */
#include "report.h"

#include "layer_name.h"
#include "units.h"

static size_t numbered_layers(const struct model *m)
{
	size_t n = 0;

	for (size_t i = 0; i < m->nlayers; i++)
		n += m->layers[i].index != LAYER_GLOBAL;
	return n;
}

void report_loaded(FILE *out, const struct loaded_model *lm)
{
	const struct model *m = lm->model;
	const struct arena *a = lm->arena;
	const struct loader_stats *s = &lm->stats;
	char b1[32], b2[32], place[256];

	loaded_model_placement(lm, place, sizeof(place));
	fprintf(out, "model %s (%s)\n", m->name, m->path);
	fprintf(out, "  files      %zu\n", m->nfiles);
	fprintf(out, "  tensors    %zu\n", m->ntensors);
	fprintf(out, "  layers     %zu numbered%s\n", numbered_layers(m),
		m->nlayers > numbered_layers(m) ? " + the global group" : "");
	fprintf(out, "  bytes      %s of tensors in %s of arena (%u segment%s)\n",
		fmt_bytes(m->data_bytes, b1, sizeof(b1)),
		fmt_bytes(arena_bytes(a), b2, sizeof(b2)), a->nseg, a->nseg == 1 ? "" : "s");
	fprintf(out, "  numa       %s; measured: %s\n", a->numa.desc, place);
	fprintf(out, "  pages      %s, %s\n", a->hugepage_note, a->lock_note);
	fprintf(out, "  sealed     %s\n", a->sealed ? "yes (shrink, grow, write, seal)" : "no");
	fprintf(out, "  load       %.3f s, %.2f GB/s from disk%s\n", s->seconds,
		s->seconds > 0 ? (double)s->tensor_bytes / s->seconds / 1e9 : 0.0,
		s->buffered_files ? " (some files read buffered)" : " (O_DIRECT)");
}

json_t *report_loaded_json(const struct loaded_model *lm)
{
	const struct model *m = lm->model;
	const struct arena *a = lm->arena;
	json_t *nodes = json_object();
	char key[16];

	for (int i = 0; i < NUMA_MAX_NODES; i++) {
		if (!lm->node_pages[i])
			continue;
		snprintf(key, sizeof(key), "%d", i);
		json_object_set_new(nodes, key, json_integer((json_int_t)lm->node_pages[i]));
	}
	return json_pack("{s:s, s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:s, s:o, s:I, s:b, s:b, s:f, s:f, s:I}",
		"name", m->name, "path", m->path,
		"files", (json_int_t)m->nfiles, "tensors", (json_int_t)m->ntensors,
		"layers", (json_int_t)numbered_layers(m),
		"tensor_bytes", (json_int_t)m->data_bytes,
		"arena_bytes", (json_int_t)arena_bytes(a), "segments", (json_int_t)a->nseg,
		"numa_policy", a->numa.desc, "numa_pages_sampled", nodes,
		"page_size", (json_int_t)a->page_size, "locked", a->locked, "sealed", a->sealed,
		"load_seconds", lm->stats.seconds,
		"load_gbps", lm->stats.seconds > 0 ? (double)lm->stats.tensor_bytes / lm->stats.seconds / 1e9 : 0.0,
		"buffered_files", (json_int_t)lm->stats.buffered_files);
}
