// SPDX-License-Identifier: MIT
/* model_adopt.h - a model served again from an earlier wsrvd's memfds (a
 * restart without a reload): its files' headers are parsed again, and the
 * adopted manifest and segments must be exactly that layout. */
#ifndef WSRV_MODEL_ADOPT_H
#define WSRV_MODEL_ADOPT_H

#include <stdbool.h>
#include <stdint.h>

#include "model_load.h"

/* The memfds one model was served from, and its files' identity then. */
struct adopt_fds {
	int manifest;
	const int *seg;
	uint32_t nseg;
	uint64_t files;             /* model_files_identity when they were loaded */
};

/* An xxh3 of each file's path, size, device, inode and modification time:
 * files that changed (rewritten, replaced) give another value. */
uint64_t model_files_identity(const struct model *m);

/* Opens the model at path laid out as a generation of nseg segments was:
 * with mo's layer_segments, or, when that gives another count, the other
 * way (LOAD_EARLY_SEGMENTS runs of layers, or none), so that a server
 * serving while loading and one serving once loaded adopt and publish
 * each other's generations. *out is the caller's; 0 or a negative errno
 * with e set. */
int model_open_like(const char *name, const char *path, const struct model_opts *mo, uint32_t nseg,
		    struct model **out, struct errinfo *e);

/* Is manifest_fd (with segments of seg_sizes) exactly m's layout? Its
 * checksums become m's. 0, or -ESTALE / -EBADMSG with a sentence. */
int model_match_manifest(struct model *m, int manifest_fd, uint32_t nseg, const uint64_t *seg_sizes,
			 struct errinfo *e);

/* An adopted model's 2 MiB folios, made (or kept) by a sweep of its own
 * (arena_sweep_adopted): a take-over's and a publish's generations map
 * as a load's do. A model with a disk tier keeps 4 KiB pages, as does
 * one under --hugepages off. when: for the note (static). */
void model_adopted_folios(struct loaded_model *lm, const struct load_opts *o, const char *when);

/* Builds *out around f: takes f's fds on success (they are the caller's on
 * failure). check_bytes: every tensor's xxh3 is computed again and compared
 * (O(size); otherwise only sizes, seals and the layout are checked, O(1) in
 * the bytes). -ESTALE when the files no longer have the adopted layout. */
int model_adopt(const char *name, const char *path, const struct load_opts *o,
		const struct adopt_fds *f, bool check_bytes, struct loaded_model **out,
		struct errinfo *e);

#endif
