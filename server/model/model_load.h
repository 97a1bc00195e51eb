// SPDX-License-Identifier: MIT
/* model_load.h - the whole path from files to a sealed arena: open and check
 * the model, create the arena, load it, seal it, and report what it got. */
#ifndef WSRV_MODEL_LOAD_H
#define WSRV_MODEL_LOAD_H

#include "load_door.h"
#include "format_door.h"

struct loaded_model;
struct load_opts;

/* Fills lm->arena (laid out by lm->model) in place of the loader, from
 * wherever it likes (peers, then the files: server/peer), setting every
 * tensor's xxh3 and lm->stats and lm->sources. */
typedef int (*load_fill_fn)(void *arg, struct loaded_model *lm, const struct load_opts *o,
			    struct errinfo *e);

struct tier;

struct load_opts {
	struct model_opts model;
	struct arena_opts arena;
	struct loader_opts loader;
	load_fill_fn fill;           /* NULL: the loader reads every byte */
	void *fill_arg;
	/* Serving while loading (model_load_begin): segments per run of
	 * layers (at most this many; 0: off), layer-order reads, a readiness
	 * page. Needs fill NULL. */
	uint32_t loading_segments;
	/* A host memory budget in bytes (tier.h), serving while loading
	 * only; 0: none, every byte stays in memory. */
	uint64_t memory_budget;
	/* The most of its cache one worker may hold, in percent (0: the
	 * default, TIER_SHARE_PCT; never less than a layer's pieces). */
	uint32_t memory_share;
};

#define LOAD_MAX_SOURCES 64

/* Segments of a model served while it loads (model_opts.layer_segments):
 * one Attach reply carries the manifest and every segment
 * (WSRV_MAX_FDS), with room to spare. */
#define LOAD_EARLY_SEGMENTS 48u

/* Where a model's bytes came from, other than its files. */
struct load_source {
	char name[64];               /* a peer's ADDR:PORT */
	uint64_t bytes;              /* tensor bytes taken from it */
	uint32_t checksum_failures;  /* tensors whose bytes did not match */
	uint32_t failures;           /* connections lost, refusals */
};

/* Where the load's time went, in seconds of wall time. */
struct load_phases {
	double open_s;               /* opening the files, parsing their headers */
	double arena_s;              /* allocating the arena, placing tensors */
	double read_s;               /* reading and placing (loader_stats) */
	double seal_s;               /* mapping, locking, sealing, the manifest */
};

struct loaded_model {
	struct model *model;         /* owned */
	struct arena *arena;         /* owned, sealed */
	struct loader_stats stats;
	double total_seconds;        /* headers parsed through manifest published */
	struct load_phases phases;
	uint64_t node_pages[NUMA_MAX_NODES]; /* sampled placement */
	int pages_sampled;
	int manifest_fd;             /* sealed memfd, owned */
	uint64_t manifest_size;
	uint64_t manifest_hash;      /* xxh3 of the manifest: the generation's identity */
	bool adopted;                /* from an earlier wsrvd's memfds (model_adopt) */
	uint64_t disk_bytes;         /* tensor bytes read from the files */
	struct load_source sources[LOAD_MAX_SOURCES];
	uint32_t nsources;
	/* Serving while loading (model_load_begin): the readiness page, and
	 * the manifest as laid out before any byte is read (checksums 0),
	 * owned; fd -1 otherwise. */
	struct ready_page ready;
	int layout_fd;
	uint64_t layout_size;
	struct tier *tier;           /* with a memory budget, owned; else NULL */
};

/* The shared memory lm's weights hold now: its arena's bytes, or under a
 * disk tier what stays and what is cached (tier_stats), not the model's
 * whole size. */
uint64_t loaded_model_memory(const struct loaded_model *lm);

/* Loads model `name` from path. On success *out is owned by the caller
 * (loaded_model_free) and its arena is sealed; on failure nothing is left. */
int model_load(const char *name, const char *path, const struct load_opts *o,
	       struct loaded_model **out, struct errinfo *e);
/* An empty loaded model with every fd -1 (caller owns; loaded_model_free).
 * Every loaded_model is made here: a zeroed one would close fd 0. */
struct loaded_model *loaded_model_new(void);
void loaded_model_free(struct loaded_model *lm);

/* Serving while loading, in two steps. Begin opens and checks the model,
 * lays it out (o->loading_segments), creates its arena, its layout manifest
 * and its readiness page: nothing is read. On success *out is the
 * caller's. Finish (on any thread) reads it in layer order, sealing each
 * segment and marking it ready as its last tensor is placed, then seals
 * the rest, writes the manifest and marks the model ready; on failure it
 * marks the readiness page failed, naming the first tensor not placed,
 * and lm stays the caller's to free. */
int model_load_begin(const char *name, const char *path, const struct load_opts *o,
		     struct loaded_model **out, struct errinfo *e);
int model_load_finish(struct loaded_model *lm, const struct load_opts *o, struct errinfo *e);

/* "node 0: 100%" style summary of the sampled placement. */
void loaded_model_placement(const struct loaded_model *lm, char *buf, size_t len);
/* Tensor bytes in place: the readiness page's count while lm has one
 * (served while it loads; another thread's load writes it), else all. */
uint64_t loaded_model_placed(const struct loaded_model *lm);

#endif
