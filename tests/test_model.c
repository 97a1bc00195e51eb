// SPDX-License-Identifier: MIT
/* test_model.c - model directories and their index, layer names, and the
 * layer-major layout. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fixture.h"
#include "layer_name.h"
#include "model.h"

static struct fixture F = { .tag = "model" };

/* Two shards: a holds x (4 bytes) and y, b holds z. */
static char *two_shards(const char *tag)
{
	char *d = test_tmpdir(tag);

	assert_non_null(d);
	assert_int_equal(st_write(pjoin(d, "a.safetensors"),
		"{\"x\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
		"\"y\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[4,6]}}", 6, NULL), 0);
	assert_int_equal(st_write(pjoin(d, "b.safetensors"),
		"{\"z\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[0,3]}}", 3, NULL), 0);
	return d;
}

static void write_index(const char *d, const char *weight_map)
{
	FILE *f = fopen(pjoin(d, "model.safetensors.index.json"), "we");

	assert_non_null(f);
	fprintf(f, "{\"metadata\":{},\"weight_map\":%s}", weight_map);
	fclose(f);
}

static void expect_open_error(const char *d, int err, const char *needle)
{
	struct model *m = NULL;
	struct errinfo e = { 0 };
	int r = model_open("m", d, NULL, &m, &e);

	if (r == 0)
		fail_msg("accepted; expected: %s", needle);
	assert_int_equal(r, err);
	if (!strstr(e.msg, needle))
		fail_msg("'%s' not in: %s", needle, e.msg);
	assert_null(m);
}

static void index_consistent(void **s)
{
	char *d = two_shards("idx-ok");
	struct model *m;
	struct errinfo e;

	write_index(d, "{\"x\":\"a.safetensors\",\"y\":\"a.safetensors\",\"z\":\"b.safetensors\"}");
	if (model_open("m", d, NULL, &m, &e) < 0)
		fail_msg("%s", e.msg);
	assert_int_equal(m->nfiles, 2);
	assert_int_equal(m->ntensors, 3);
	assert_non_null(model_find(m, "z"));
	assert_int_equal(model_find(m, "z")->size, 3);
	assert_string_equal(m->files[model_find(m, "z")->file]->label, "b.safetensors");
	assert_null(model_find(m, "w"));
	assert_null(m->config);
	model_free(m);
	rm_rf(d);
	free(d);
}

/* read() calls this process has made (/proc/self/io's syscr). */
static unsigned long long reads_so_far(void)
{
	unsigned long long v = 0;
	char line[128];
	FILE *f = fopen("/proc/self/io", "re");

	assert_non_null(f);
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "syscr: %llu", &v) == 1)
			break;
	fclose(f);
	return v;
}

/* jansson's json_loadfd reads a byte per system call: a 9 MB index took
 * 9 million reads. The index and config.json are read whole, then parsed. */
static void index_read_whole(void **s)
{
	char *d = two_shards("idx-reads");
	char pad[200];
	FILE *f = fopen(pjoin(d, "model.safetensors.index.json"), "we");
	unsigned long long before;
	struct model *m;
	struct errinfo e;

	assert_non_null(f);
	memset(pad, ' ', sizeof(pad) - 1);
	pad[sizeof(pad) - 1] = 0;
	fprintf(f, "{\"metadata\":{");
	for (int i = 0; i < 500; i++) /* 100 KiB of metadata */
		fprintf(f, "%s\"k%d\":\"%s\"", i ? "," : "", i, pad);
	fprintf(f, "},\"weight_map\":{\"x\":\"a.safetensors\",\"y\":\"a.safetensors\",\"z\":\"b.safetensors\"}}");
	fclose(f);
	before = reads_so_far();
	if (model_open("m", d, NULL, &m, &e) < 0)
		fail_msg("%s", e.msg);
	assert_true(reads_so_far() - before < 100);
	assert_int_equal(m->ntensors, 3);
	model_free(m);
	rm_rf(d);
	free(d);
}

static void index_inconsistencies(void **s)
{
	char *d = two_shards("idx-bad");

	/* Listed in the index, absent from its shard. */
	write_index(d, "{\"x\":\"a.safetensors\",\"y\":\"a.safetensors\",\"z\":\"b.safetensors\",\"w\":\"b.safetensors\"}");
	expect_open_error(d, -EINVAL, "tensor 'w' is listed under b.safetensors, which does not contain it");
	/* In a shard, not in the index. */
	write_index(d, "{\"x\":\"a.safetensors\",\"z\":\"b.safetensors\"}");
	expect_open_error(d, -EINVAL, "tensor 'y' is not listed");
	/* Placed in the wrong shard. */
	write_index(d, "{\"x\":\"a.safetensors\",\"y\":\"b.safetensors\",\"z\":\"b.safetensors\"}");
	expect_open_error(d, -EINVAL, "tensor 'y' is in a.safetensors but the index places it in b.safetensors");
	/* A shard that does not exist. */
	write_index(d, "{\"x\":\"a.safetensors\",\"y\":\"a.safetensors\",\"z\":\"c.safetensors\"}");
	expect_open_error(d, -ENOENT, "shard c.safetensors is missing");
	/* A shard name that leaves the directory. */
	write_index(d, "{\"x\":\"../a.safetensors\"}");
	expect_open_error(d, -EINVAL, "not a file name in the model directory");
	/* Broken index files. */
	write_index(d, "{}");
	expect_open_error(d, -EINVAL, "weight_map");
	write_index(d, "[");
	expect_open_error(d, -EINVAL, "not valid JSON");
	/* The same tensor in two shards. */
	assert_int_equal(st_write(pjoin(d, "b.safetensors"),
		"{\"z\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[0,3]},"
		"\"y\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[3,5]}}", 5, NULL), 0);
	write_index(d, "{\"x\":\"a.safetensors\",\"y\":\"a.safetensors\",\"z\":\"b.safetensors\"}");
	expect_open_error(d, -EINVAL, "tensor 'y' appears in two shards: a.safetensors and b.safetensors");
	rm_rf(d);
	free(d);
}

static void bad_directories(void **s)
{
	char *d = test_tmpdir("dirs");

	expect_open_error(d, -ENOENT, "no .safetensors file");
	expect_open_error(pjoin(d, "missing"), -ENOENT, "missing");
	/* Two single files and no index: ambiguous. */
	assert_int_equal(st_write(pjoin(d, "p.safetensors"), "{}", 0, NULL), 0);
	assert_int_equal(st_write(pjoin(d, "q.safetensors"), "{}", 0, NULL), 0);
	expect_open_error(d, -EINVAL, "several");
	/* model.safetensors settles it. */
	assert_int_equal(st_write(pjoin(d, "model.safetensors"),
		"{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1, NULL), 0);
	struct model *m;
	struct errinfo e;
	assert_int_equal(model_open("m", d, NULL, &m, &e), 0);
	assert_int_equal(m->ntensors, 1);
	model_free(m);
	/* A truncated shard names its rule and file. */
	assert_int_equal(truncate(pjoin(d, "model.safetensors"), 20), 0);
	expect_open_error(d, -EINVAL, "model.safetensors");
	/* An unreadable "file": a directory where a shard should be. */
	unlink(pjoin(d, "model.safetensors"));
	unlink(pjoin(d, "q.safetensors"));
	assert_int_equal(mkdir(pjoin(d, "model.safetensors"), 0755), 0);
	expect_open_error(d, -EINVAL, "not a regular file");
	/* A bad config.json is an error, not ignored. */
	rmdir(pjoin(d, "model.safetensors"));
	FILE *f = fopen(pjoin(d, "config.json"), "we");
	fputs("{broken", f);
	fclose(f);
	expect_open_error(d, -EINVAL, "config.json");
	rm_rf(d);
	free(d);
}

static void layer_names(void **s)
{
	static const char *const extra[] = { "encoder.block.{N}." };

	assert_int_equal(layer_from_name("model.layers.12.mlp.up_proj.weight", NULL, 0), 12);
	assert_int_equal(layer_from_name("layers.3.attention.wq.weight", NULL, 0), 3);
	assert_int_equal(layer_from_name("transformer.h.0.attn.c_attn.weight", NULL, 0), 0);
	assert_int_equal(layer_from_name("blk.7.ffn_up.weight", NULL, 0), 7);
	assert_int_equal(layer_from_name("model.language_model.layers.5.x.weight", NULL, 0), 5);
	assert_int_equal(layer_from_name("model.embed_tokens.weight", NULL, 0), LAYER_GLOBAL);
	assert_int_equal(layer_from_name("lm_head.weight", NULL, 0), LAYER_GLOBAL);
	assert_int_equal(layer_from_name("model.norm.weight", NULL, 0), LAYER_GLOBAL);
	assert_int_equal(layer_from_name("model.layers.x.weight", NULL, 0), LAYER_GLOBAL);
	assert_int_equal(layer_from_name("model.layers.01.w", NULL, 0), LAYER_GLOBAL);
	assert_int_equal(layer_from_name("model.layers.3", NULL, 0), LAYER_GLOBAL);
	assert_int_equal(layer_from_name("model.layers.1234567.w", NULL, 0), LAYER_GLOBAL);
	assert_int_equal(layer_from_name("encoder.block.4.w", extra, 1), 4);
	assert_int_equal(layer_from_name("encoder.block.4.w", NULL, 0), LAYER_GLOBAL);
	assert_int_equal(layer_pattern_check("a.{N}."), 0);
	assert_int_equal(layer_pattern_check("a.N."), -EINVAL);
	assert_int_equal(layer_pattern_check("{N}.{N}"), -EINVAL);
}

/* Every layer one contiguous extent, global first, layers ascending, each
 * tensor aligned and inside its layer, nothing overlapping. */
static void model_check_layout(const struct model *m, uint64_t align)
{
	for (size_t i = 0; i < m->nlayers; i++) {
		const struct model_layer *l = &m->layers[i];
		uint64_t prev_end = l->offset;
		if (i > 0)
			assert_true(l->index > m->layers[i - 1].index);
		assert_int_equal(l->offset % MODEL_LAYER_ALIGN, 0);
		for (uint32_t k = l->first; k < l->first + l->count; k++) {
			const struct model_tensor *t = &m->tensors[k];
			assert_int_equal(t->layer, l->index);
			assert_int_equal(t->segment, l->segment);
			assert_int_equal(t->offset % align, 0);
			assert_true(t->offset >= prev_end);
			assert_true(t->offset - prev_end < align);
			prev_end = t->offset + t->size;
		}
		assert_int_equal(prev_end, l->offset + l->length);
		assert_true(l->offset + l->length <= m->seg_size[l->segment]);
		if (i + 1 < m->nlayers && m->layers[i + 1].segment == l->segment)
			assert_true(l->offset + l->length <= m->layers[i + 1].offset);
	}
}

static void layout_layer_major(void **s)
{
	char *d = test_tmpdir("layout");
	struct model_opts o = { .tensor_align = 1024 };
	struct model *m;
	struct errinfo e;

	assert_int_equal(make_model(d, "tiny", 4 << 20, 4, 3, 1), 0);
	assert_int_equal(model_open("m", d, NULL, &m, &e), 0);
	assert_int_equal(m->nlayers, 5);
	assert_int_equal(m->layers[0].index, LAYER_GLOBAL);
	assert_int_equal(m->layers[0].count, 3); /* embed_tokens, norm, lm_head */
	for (int i = 1; i < 5; i++) {
		assert_int_equal(m->layers[i].index, i - 1);
		assert_int_equal(m->layers[i].count, 9);
	}
	assert_int_equal(m->nsegments, 1);
	model_check_layout(m, MODEL_MIN_ALIGN);
	assert_non_null(m->config);
	model_free(m);
	assert_int_equal(model_open("m", d, &o, &m, &e), 0);
	model_check_layout(m, 1024);
	model_free(m);
	o.tensor_align = 100;
	assert_int_equal(model_open("m", d, &o, &m, &e), -EINVAL);
	assert_non_null(strstr(e.msg, "power of two"));
	rm_rf(d);
	free(d);
}

static void layout_segments(void **s)
{
	char *d = test_tmpdir("segments");
	struct model_opts o = { .max_segment = 1 << 20 };
	struct model *m;
	struct errinfo e;

	assert_int_equal(make_model(d, "tiny", 4 << 20, 4, 1, 1), 0);
	assert_int_equal(model_open("m", d, &o, &m, &e), 0);
	assert_true(m->nsegments > 1);
	model_check_layout(m, MODEL_MIN_ALIGN);
	for (uint32_t i = 0; i < m->nsegments; i++)
		assert_true(m->seg_size[i] > 0);
	model_free(m);
	rm_rf(d);
	free(d);
}

FIXTURE_MAIN(F,
	cmocka_unit_test(index_consistent),
	cmocka_unit_test(index_read_whole),
	cmocka_unit_test(index_inconsistencies),
	cmocka_unit_test(bad_directories),
	cmocka_unit_test(layer_names),
	cmocka_unit_test(layout_layer_major),
	cmocka_unit_test(layout_segments),
)
