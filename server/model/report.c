// SPDX-License-Identifier: MIT
/* report.c - describing a loaded model. */
#include "report.h"

#include "format_door.h"
#include "log.h"
#include "load_door.h"
#include "units.h"

static size_t numbered_layers(const struct model *m)
{
	size_t n = 0;

	for (size_t i = 0; i < m->nlayers; i++)
		n += m->layers[i].index != LAYER_GLOBAL;
	return n;
}

static double gbps(const struct loaded_model *lm)
{
	return lm->total_seconds > 0 ? (double)lm->model->data_bytes / lm->total_seconds / 1e9 : 0.0;
}

/* How the files were read, for the report: into buf. */
static const char *read_how(const struct loader_stats *s, char *buf, size_t len)
{
	if (s->cached_files)
		snprintf(buf, len, "(%u file%s from the page cache)", s->cached_files, s->cached_files == 1 ? "" : "s");
	else
		snprintf(buf, len, "%s", s->buffered_files ? "(some files read buffered)" : "(O_DIRECT)");
	return buf;
}

void report_loaded(FILE *out, const struct loaded_model *lm)
{
	const struct model *m = lm->model;
	const struct arena *a = lm->arena;
	const struct loader_stats *s = &lm->stats;
	char b1[32], b2[32], how[64], place[256];

	loaded_model_placement(lm, place, sizeof(place));
	fprintf(out, "model %s (%s)\n", m->name, m->path);
	fprintf(out, "  files      %zu\n", m->nfiles);
	fprintf(out, "  tensors    %zu\n", m->ntensors);
	fprintf(out, "  layers     %zu numbered%s\n", numbered_layers(m),
		m->nlayers > numbered_layers(m) ? " + the global group" : "");
	fprintf(out, "  bytes      %s of tensors in %s of arena (%u segment%s)\n",
		fmt_bytes(m->data_bytes, b1, sizeof(b1)),
		fmt_bytes(arena_bytes(a), b2, sizeof(b2)), arena_nseg(a), arena_nseg(a) == 1 ? "" : "s");
	fprintf(out, "  numa       %s; measured: %s\n", arena_numa_desc(a), place);
	fprintf(out, "  pages      %s, %s\n", arena_pages_note(a), arena_lock_note(a));
	fprintf(out, "  sealed     %s\n", arena_sealed(a) ? "yes (shrink, grow, write, seal)" : "no");
	fprintf(out, "  load       %.3f s, %s/s, headers through the published manifest\n",
		lm->total_seconds, fmt_bytes((uint64_t)(gbps(lm) * 1e9), b1, sizeof(b1)));
	fprintf(out, "    open     %.3f s (open, parse headers)\n", lm->phases.open_s);
	fprintf(out, "    arena    %.3f s (allocate, place)\n", lm->phases.arena_s);
	fprintf(out, "    read     %.3f s %s; of which checksum %.3f s (xxh3, %s), copy %.3f s\n",
		lm->phases.read_s, read_how(s, how, sizeof(how)), s->hash_seconds, xxh3_stream_impl(),
		s->copy_seconds);
	fprintf(out, "    seal     %.3f s (map, lock, seal, manifest)\n", lm->phases.seal_s);
	if (lm->nsources)
		fprintf(out, "  sources    %s from its files\n", fmt_bytes(lm->disk_bytes, b1, sizeof(b1)));
	for (uint32_t i = 0; i < lm->nsources; i++)
		fprintf(out, "    peer     %s: %s, %u checksum failures, %u failures\n",
			lm->sources[i].name, fmt_bytes(lm->sources[i].bytes, b1, sizeof(b1)),
			lm->sources[i].checksum_failures, lm->sources[i].failures);
}

static json_t *sources_json(const struct loaded_model *lm)
{
	json_t *a = json_array();

	for (uint32_t i = 0; i < lm->nsources; i++)
		json_array_append_new(a, json_pack("{s:s, s:I, s:i, s:i}", "peer", lm->sources[i].name,
			"bytes", (json_int_t)lm->sources[i].bytes,
			"checksum_failures", (int)lm->sources[i].checksum_failures,
			"failures", (int)lm->sources[i].failures));
	return a;
}

void report_log_loaded(const struct loaded_model *lm)
{
	const struct load_phases *p = &lm->phases;

	char b[32], r[32], h[32];

	log_info("model %s loaded: %zu tensors, %s in %.3f s (%s/s), %s, %s, %s",
		 lm->model->name, lm->model->ntensors, fmt_bytes(lm->model->data_bytes, b, sizeof(b)),
		 lm->total_seconds, fmt_bytes((uint64_t)(gbps(lm) * 1e9), r, sizeof(r)), arena_numa_desc(lm->arena),
		 arena_pages_note(lm->arena), arena_lock_note(lm->arena));
	if (lm->stats.cached_files)
		log_info("model %s: %u of its %zu files were in the page cache and were read from it, not from the disk",
			 lm->model->name, lm->stats.cached_files, lm->model->nfiles);
	if (lm->model->held)
		log_info("model %s: ranks %u-%u of %u (%u stage%s) hold %s of its %s", lm->model->name,
			 lm->model->held->first, lm->model->held->last, lm->model->held->world,
			 lm->model->held->stages, lm->model->held->stages == 1 ? "" : "s",
			 fmt_bytes(lm->model->held->bytes, h, sizeof(h)), b);
	log_debug("model %s: open %.3f s, arena %.3f s, read %.3f s (checksum %.3f s, copy %.3f s, %.2f GB/s), seal %.3f s",
		  lm->model->name, p->open_s, p->arena_s, p->read_s, lm->stats.hash_seconds,
		  lm->stats.copy_seconds,
		  p->read_s > 0 ? (double)lm->stats.tensor_bytes / p->read_s / 1e9 : 0.0, p->seal_s);
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
	json_t *phases = json_pack("{s:f, s:f, s:f, s:f, s:f, s:f}",
		"open_parse_s", lm->phases.open_s, "allocate_place_s", lm->phases.arena_s,
		"read_s", lm->phases.read_s, "checksum_s", lm->stats.hash_seconds,
		"copy_s", lm->stats.copy_seconds, "seal_s", lm->phases.seal_s);
	json_t *o = json_pack("{s:s, s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:s, s:o, s:I, s:s, s:I, s:I, s:b, s:s, s:b, s:f, s:f, s:o, s:I, s:I, s:I, s:I, s:s, s:I, s:o}",
		"name", m->name, "path", m->path,
		"files", (json_int_t)m->nfiles, "tensors", (json_int_t)m->ntensors,
		"layers", (json_int_t)numbered_layers(m),
		"tensor_bytes", (json_int_t)m->data_bytes,
		"arena_bytes", (json_int_t)arena_bytes(a), "segments", (json_int_t)arena_nseg(a),
		"numa_policy", arena_numa_desc(a), "numa_pages_sampled", nodes,
		"page_size", (json_int_t)arena_page_size(a), "pages", arena_pages_note(a),
		"folios", (json_int_t)arena_folios_made(a), "folios_failed", (json_int_t)arena_folios_failed(a),
		"locked", arena_locked(a), "lock", arena_lock_note(a),
		"sealed", arena_sealed(a), "load_seconds", lm->total_seconds, "load_gbps", gbps(lm),
		"phases", phases, "buffered_files", (json_int_t)lm->stats.buffered_files,
		"cached_files", (json_int_t)lm->stats.cached_files,
		"read_pool_bytes", (json_int_t)lm->stats.pool_bytes,
		"read_pinned_bytes", (json_int_t)lm->stats.pinned_bytes, "checksum", xxh3_stream_impl(),
		"disk_bytes", (json_int_t)lm->disk_bytes, "sources", sources_json(lm));

	if (o && m->held)
		json_object_set_new(o, "held", model_held_json(m->held));
	return o;
}
