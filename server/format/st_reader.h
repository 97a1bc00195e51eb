// SPDX-License-Identifier: MIT
/* st_reader.h - a strict reader of one .safetensors file's header.
 *
 * Enforces the reference implementation's rules, in its order, and accepts
 * what it accepts (docs/formats.md). Only the header is read; tensor bytes
 * are left to the loader.
 */
#ifndef WSRV_ST_READER_H
#define WSRV_ST_READER_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#include "dtype.h"
#include "errinfo.h"

/* The reference's limit on the header length N. */
#define ST_MAX_HEADER 100000000ULL

/* Reasons a file is rejected, named as the reference names them. */
enum st_rule {
	ST_RULE_NONE = 0,
	ST_HEADER_TOO_SMALL,
	ST_HEADER_TOO_LARGE,
	ST_INVALID_HEADER_LENGTH,
	ST_INVALID_HEADER,
	ST_INVALID_HEADER_DESERIALIZATION,
	ST_INVALID_OFFSET,
	ST_VALIDATION_OVERFLOW,
	ST_MISALIGNED_SLICE,
	ST_TENSOR_INVALID_INFO,
	ST_METADATA_INCOMPLETE_BUFFER,
	ST_RULE_COUNT
};

/* "InvalidOffset", ... ; "?" for an unknown value. */
const char *st_rule_name(enum st_rule r);

struct st_tensor {
	const char *name;       /* NUL-terminated, in st_file's name pool */
	enum dtype dtype;
	uint32_t rank;
	const uint64_t *shape;  /* rank entries, in st_file's dims pool */
	uint64_t begin, end;    /* data_offsets: relative to data_start */
};

struct st_file {
	char *path;             /* as opened */
	const char *label;      /* basename of path, for messages */
	uint64_t file_size;
	uint64_t header_len;    /* N */
	uint64_t data_start;    /* 8 + N */
	size_t ntensors;
	struct st_tensor *tensors; /* sorted by data_offsets */
	json_t *metadata;       /* __metadata__ object, or NULL */
	/* Identity at parse time, so the loader can tell a file changed. */
	dev_t dev;
	ino_t ino;
	struct timespec mtime;
	struct timespec ctime;       /* no user can set it: a rewrite with its mtime put back still shows */
	uint64_t header_xxh3;   /* of the header's bytes (st_file_open; 0 for buffers) */
	/* Pools the tensors point into. */
	char *names;
	uint64_t *dims;
};

/* Opens and parses path. On success *out is a new st_file owned by the
 * caller (st_file_free). On failure returns a negative errno (-EINVAL for a
 * rule broken, with e->rule set; the I/O errno otherwise) and leaves *out
 * untouched. No fd stays open either way. */
int st_file_open(const char *path, struct st_file **out, struct errinfo *e);

/* Parses a whole file held in memory (used by tests and the fuzzer); label
 * names it in messages. Same contract as st_file_open. */
int st_file_parse_buffer(const char *label, const uint8_t *buf, size_t len,
			 struct st_file **out, struct errinfo *e);

/* Frees f and everything it owns; NULL is fine. */
void st_file_free(struct st_file *f);

/* Bytes a tensor's data takes (end - begin). */
static inline uint64_t st_tensor_size(const struct st_tensor *t)
{
	return t->end - t->begin;
}

#endif
