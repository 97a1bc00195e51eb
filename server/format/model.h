// SPDX-License-Identifier: MIT
/* model.h - a model: its files, its tensors with their layers, and where each
 * tensor goes in the arena (the layer-major layout).
 *
 * model_open() reads and checks the headers only. The loader fills the
 * tensors' bytes and checksums into an arena laid out as the model says.
 */
#ifndef WSRV_MODEL_H
#define WSRV_MODEL_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "errinfo.h"
#include "st_reader.h"

#define MODEL_MIN_ALIGN 256u
#define MODEL_LAYER_ALIGN 4096u

struct model_opts {
	const char *const *layer_patterns; /* extra "{N}" patterns, may be NULL */
	size_t n_layer_patterns;
	uint64_t tensor_align;  /* power of two >= 256; 0 means 256 */
	uint64_t max_segment;   /* split the arena at layer boundaries; 0: one segment */
	/* Serving while loading: the global group in a segment of its own,
	 * then runs of layers, as many layers per segment as keep the count
	 * within this (at least 2); 0: max_segment alone decides. */
	uint32_t layer_segments;
	/* A partial load (model_hold): only what ranks [rank_first, rank_last]
	 * of world see under plan's "tp_plan" and "stages" (plan may be NULL:
	 * every rank sees everything). world 0: the whole model. */
	const json_t *plan;
	uint32_t rank_first, rank_last, world;
	bool ranks_given;       /* --ranks was on the command line */
	/* A disk tier (--memory-budget): each routed expert's tensors start
	 * on a page and the tensor after them does too, so that an expert
	 * can be read and mapped alone (tier.h). */
	bool expert_pages;
};

struct model_tensor {
	const char *name;       /* in the owning st_file's pool */
	enum dtype dtype;
	uint32_t rank;
	const uint64_t *shape;
	int32_t layer;          /* LAYER_GLOBAL for the global group */
	uint32_t file;          /* index into model.files */
	uint64_t file_off;      /* absolute offset of the bytes in that file */
	uint64_t size;
	uint32_t segment;       /* arena position, from the layout */
	uint64_t offset;
	uint64_t xxh3;          /* xxh3-64 of the held bytes, set by the loader */
	uint64_t part_off;      /* the bytes held (model_hold): all of them, */
	uint64_t part_len;      /* unless only some ranks are loaded */
};

/* A partial load: which ranks of which world the held parts serve. */
struct model_held {
	uint32_t first, last, world, stages;
	uint64_t bytes;         /* sum of the held parts */
};

/* A layer, or the global group: one contiguous extent of the arena. */
struct model_layer {
	int32_t index;          /* LAYER_GLOBAL first, then ascending */
	uint32_t segment;
	uint64_t offset, length;
	uint32_t first, count;  /* its tensors: model.tensors[first..first+count) */
	uint64_t bytes;         /* sum of its tensors' sizes (no padding) */
};

struct model {
	char *name;
	char *path;
	size_t nfiles;
	struct st_file **files;
	size_t ntensors;
	struct model_tensor *tensors;   /* in arena order */
	size_t nlayers;
	struct model_layer *layers;
	json_t *config;                 /* config.json, or NULL */
	uint32_t nsegments;
	uint64_t *seg_size;             /* bytes used in each segment */
	uint64_t data_bytes;            /* sum of all tensor sizes */
	uint64_t tensor_align;
	uint32_t *by_name;              /* tensor indices sorted by name */
	struct model_held *held;        /* owned; NULL: every tensor whole */
	/* What the bytes are, as far as can be known before reading them:
	 * content_id is an xxh3 of each file's header and size (equal on
	 * every host with the same files; peers exchange it), or, for a
	 * published generation, of its tensors' checksums. source_id adds
	 * each file's device, inode, mtime and ctime: these files on this
	 * host, as they are now (a restarted server over other files
	 * differs, and so does one over a file rewritten with its mtime put
	 * back: no user can set the ctime). */
	uint64_t content_id, source_id;
};

/* Opens a .safetensors file or a Hugging Face model directory at path, checks
 * every header and the index against the shards, and lays the tensors out.
 * On success *out is owned by the caller (model_free). */
int model_open(const char *name, const char *path, const struct model_opts *o,
	       struct model **out, struct errinfo *e);
void model_free(struct model *m);

/* Sets each tensor's held part and m->held for the ranks o names (after
 * the layout; model_open calls it). -EINVAL, with a sentence, for ranks
 * outside the world, a malformed plan, or shapes the plan cannot split. */
int model_hold(struct model *m, const struct model_opts *o, struct errinfo *e);
/* The part of model_hold's checks that needs no model: the plan needs a
 * world, and the ranks must be ranks of it. */
int model_hold_check(const struct model_opts *o, struct errinfo *e);
/* {"ranks": [first, last], "world", "stages", "bytes"}, for reports. */
json_t *model_held_json(const struct model_held *h);

/* model_names.c: binary search by name over the name-sorted index
 * model_open builds; NULL when absent. */
const struct model_tensor *model_find(const struct model *m, const char *name);
/* Builds that index (after the layout, which reorders the tensors); a
 * name given twice (across single files) is -EINVAL. */
int model_name_index(struct model *m, struct errinfo *e);

/* Internal steps of model_open, exposed for tests. */
int model_dir_files(const char *dir, struct model *m, struct errinfo *e);
int model_layout(struct model *m, const struct model_opts *o, struct errinfo *e);

#endif
