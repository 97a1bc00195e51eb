// SPDX-License-Identifier: MIT
/* model_load.h - the whole path from files to a sealed arena: open and check
 * the model, create the arena, load it, seal it, and report what it got. */
#ifndef WSRV_MODEL_LOAD_H
#define WSRV_MODEL_LOAD_H

#include "arena.h"
#include "loader.h"
#include "model.h"

struct load_opts {
	struct model_opts model;
	struct arena_opts arena;
	struct loader_opts loader;
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
};

/* Loads model `name` from path. On success *out is owned by the caller
 * (loaded_model_free) and its arena is sealed; on failure nothing is left. */
int model_load(const char *name, const char *path, const struct load_opts *o,
	       struct loaded_model **out, struct errinfo *e);
void loaded_model_free(struct loaded_model *lm);

/* "node 0: 100%" style summary of the sampled placement. */
void loaded_model_placement(const struct loaded_model *lm, char *buf, size_t len);

#endif
