// SPDX-License-Identifier: MIT
/* manifest.h - the manifest: a model's catalog as the server writes it into
 * a sealed memfd and every client maps it.
 *
 * Fixed-size little-endian records at 8-byte aligned offsets, and a string
 * table. The client validates all of it (manifest_check) before it uses a
 * single field: sizes against the memfd, every offset and index in range,
 * every tensor inside its segment and its layer, sizes consistent with shape
 * and dtype. Version 2 (a partial load, wsrvd --ranks) adds each tensor's
 * held part and the ranks held; version 1 readers refuse it by its number.
 */
#ifndef WSRV_MANIFEST_H
#define WSRV_MANIFEST_H

#include <stddef.h>
#include <stdint.h>

#define MF_MAGIC "WSRVMAN"        /* 8 bytes with the NUL */
#define MF_VERSION 1u              /* every tensor whole */
#define MF_VERSION_PARTIAL 2u      /* some ranks only: parts_off and held_* */
#define MF_MAX_RANK 16u
#define MF_MAX_SEGMENTS 1024u

struct mf_header {
	char magic[8];
	uint32_t version;
	uint32_t header_size;       /* sizeof(struct mf_header) */
	uint64_t total_size;        /* bytes of the manifest */
	uint32_t ntensors, nlayers, nsegments, flags;
	uint64_t tensors_off;       /* struct mf_tensor[ntensors], arena order */
	uint64_t layers_off;        /* struct mf_layer[nlayers], global first */
	uint64_t segments_off;      /* struct mf_segment[nsegments] */
	uint64_t dims_off, ndims;   /* uint64_t[ndims] */
	uint64_t strings_off, strings_size; /* NUL-terminated names */
	uint64_t config_off, config_size;   /* config.json text, or 0, 0 */
	uint64_t name_off;          /* the model's name, in the strings */
	uint64_t tensor_bytes;
	uint64_t parts_off;         /* version 2: struct mf_part[ntensors]; else 0 */
	uint32_t held_first, held_last; /* version 2: the ranks loaded, */
	uint32_t held_world, held_stages; /* of this world, in these stages */
	uint64_t source_id;         /* where the bytes came from (server/format/model.h):
				     * two manifests with other source_ids are other
				     * models, whatever their layout; 0 from older servers */
};

/* Version 2: which bytes of a tensor the server loaded (the rest of its
 * place in the arena reads as zeros): one run, or none (length 0). */
struct mf_part {
	uint64_t offset, length;
};

struct mf_tensor {
	uint64_t name_off;          /* into the strings */
	uint32_t name_len;
	uint32_t dtype;             /* enum dtype */
	uint32_t rank;
	int32_t layer;              /* -1: the global group */
	uint32_t segment;
	uint32_t reserved;
	uint64_t dims_index;        /* first of rank entries in dims */
	uint64_t offset;            /* in the segment */
	uint64_t size;
	uint64_t xxh3;
};

struct mf_layer {
	int32_t index;
	uint32_t segment;
	uint64_t offset, length;
	uint32_t first, count;      /* tensors[first .. first+count) */
	uint64_t bytes;
};

struct mf_segment {
	uint64_t size;
	uint64_t page_size;
};

/* The records are the wire format between wsrvd and every client, read in
 * place: their sizes and key offsets must never change by accident (a new
 * compiler, a new field). A change is a new MF_VERSION. */
_Static_assert(sizeof(struct mf_header) == 160, "mf_header is 160 bytes");
_Static_assert(offsetof(struct mf_header, parts_off) == 128, "mf_header.parts_off at 128");
_Static_assert(sizeof(struct mf_part) == 16, "mf_part is 16 bytes");
_Static_assert(sizeof(struct mf_tensor) == 64, "mf_tensor is 64 bytes");
_Static_assert(offsetof(struct mf_tensor, size) == 48, "mf_tensor.size at 48");
_Static_assert(sizeof(struct mf_layer) == 40, "mf_layer is 40 bytes");
_Static_assert(offsetof(struct mf_layer, bytes) == 32, "mf_layer.bytes at 32");
_Static_assert(sizeof(struct mf_segment) == 16, "mf_segment is 16 bytes");

/* A validated view of a manifest. Pointers are into the mapping. */
struct mf_view {
	const struct mf_header *h;
	const struct mf_tensor *tensors;
	const struct mf_layer *layers;
	const struct mf_segment *segments;
	const uint64_t *dims;
	const char *strings;
	const char *config;         /* not NUL-terminated: config_size bytes */
	const struct mf_part *parts; /* version 2; NULL: every tensor whole */
};

/* Checks the manifest at buf (len bytes) against the segment sizes the
 * receiver measured (fstat) and fills v. Returns 0, or -EBADMSG with a
 * sentence in err that names the first problem. */
int manifest_check(const void *buf, size_t len, const uint64_t *seg_sizes,
		   uint32_t nseg, struct mf_view *v, char *err, size_t errlen);

/* The identity of the generation a validated manifest describes: an xxh3
 * of every byte of it but the tensors' checksums, which a manifest sent
 * while the model loads leaves 0. The same value from the attach on,
 * loading or loaded, on every side that maps it; two loads that give it
 * read the same files (source_id: their device, inode and times) or
 * publish the same checksums into the same layout and held ranks. Never
 * 0; 0 only when the manifest names no source (an older server's), which
 * no identity matches. */
uint64_t manifest_identity(const struct mf_view *v);

/* Bytes a tensor of this dtype and shape takes; -1 on overflow or a size
 * that is not whole bytes. */
int64_t manifest_tensor_bytes(uint32_t dtype, const uint64_t *shape, uint32_t rank);

#endif
